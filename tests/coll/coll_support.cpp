#include "coll/coll_support.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sched.h>

namespace rdmx::test {

const char* to_string(Transport transport) noexcept {
  switch (transport) {
    case Transport::Shm: return "shm";
    case Transport::Tcp: return "tcp";
    case Transport::Mix: return "mix";
  }
  return "?";
}

std::string param_name(const CollParam& param) { return std::string(to_string(param.transport)) + "_np" + std::to_string(param.n); }

bool full_matrix() {
  const char* v = std::getenv("RDMX_COLL_MATRIX");
  return v != nullptr && std::string(v) == "full";
}

::testing::AssertionResult run_coll_ranks(const CollParam& param, const RankBody& body,
                                          std::chrono::milliseconds timeout, std::vector<int> may_be_killed) {
  Options options;
  options.timeout = full_matrix() ? std::max(timeout, std::chrono::milliseconds(3'000'000)) : timeout;
  options.may_be_killed = std::move(may_be_killed);
  options.provider = param.transport == Transport::Shm ? "shm" : param.transport == Transport::Tcp ? "tcp" : "auto";
  const Placement placement = param.transport == Transport::Mix ? Placement::NetNsIPv4 : Placement::Local;
  const std::string provider = options.provider;
  const Transport transport = param.transport;
  return run_ranks(
      param.n, placement,
      [&, provider, transport](RankEnv& env) {
        ::setenv("RDMX_PROVIDER", provider.c_str(), 1);
        const std::string dir = env.dir() + "/shm";
        ::mkdir(dir.c_str(), 0700);
        ::setenv("RDMX_SHM_DIR", dir.c_str(), 1);
        if (transport == Transport::Mix && env.rank() == 0) {
          // Host A: its shm sockets are invisible to host B and the other way round.
          CHECK_EQ(::unshare(CLONE_NEWNS), 0) << "unshare(CLONE_NEWNS) needs root";
          CHECK_EQ(::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr), 0);
          CHECK_EQ(::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=1m"), 0) << "mounting host A's socket directory";
        }
        body(env);
      },
      options);
}

std::unique_ptr<Communicator> make_comm(RankEnv& env, const std::string& tag, const std::string& algo) {
  CommOptions options;
  options.provider = env.provider();
  options.algo = algo;
  options.tag = tag;
  return Communicator::create(env.store_ptr(), env.rank(), env.world_size(), options);
}

// --- values -------------------------------------------------------------------
namespace {

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Exact encoders for values k * 2^-shift that fit the format's significand.
std::uint64_t encode_f32(long double v) {
  const float f = static_cast<float>(v);
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
std::uint64_t encode_f64(long double v) {
  const double d = static_cast<double>(v);
  std::uint64_t b;
  std::memcpy(&b, &d, 8);
  return b;
}
std::uint64_t encode_bf16(long double v) { return encode_f32(v) >> 16; }  // exact: the low half is zero
std::uint64_t encode_f16(long double v) {  // normal numbers and zero only
  if (v == 0) return 0;
  const std::uint64_t sign = v < 0 ? 0x8000 : 0;
  long double a = std::fabs(v);
  int e = 0;
  while (a >= 2) { a /= 2; ++e; }
  while (a < 1) { a *= 2; --e; }
  const auto mant = static_cast<std::uint64_t>((a - 1) * 1024);
  return sign | (static_cast<std::uint64_t>(e + 15) << 10) | mant;
}

std::size_t bytes_of(DataType t) { return rdmx::size_of(t); }

bool is_signed_int(DataType t) { return t == DataType::Int8 || t == DataType::Int32 || t == DataType::Int64; }

std::uint64_t mask_of(DataType t) {
  const std::size_t b = bytes_of(t);
  return b == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * b)) - 1;
}

std::int64_t as_signed(DataType t, std::uint64_t bits) {
  const unsigned width = static_cast<unsigned>(8 * bytes_of(t));
  if (width == 64) return static_cast<std::int64_t>(bits);
  const std::uint64_t sign = std::uint64_t{1} << (width - 1);
  return static_cast<std::int64_t>((bits ^ sign) - sign);
}

long double unit(DataType t) {  // relative rounding bound of one step, with margin
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0L, -10);
    case DataType::BFloat16: return std::ldexp(1.0L, -7);
    case DataType::Float32: return std::ldexp(1.0L, -23);
    default: return std::ldexp(1.0L, -52);
  }
}

}  // namespace

std::uint64_t input_bits(DataType type, ReduceOp op, int rank, std::size_t i, std::uint64_t seed) {
  const std::uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ULL ^ mix64(static_cast<std::uint64_t>(rank) << 40 ^ i));
  if (!is_floating(type)) return h & mask_of(type);
  // Floating: k / 2^s with |k| small enough to be exact; products stay near 1.
  long double v;
  const bool prod = op == ReduceOp::Prod;
  switch (type) {
    case DataType::Float16:
      v = prod ? (1024 + static_cast<long double>(h % 1536) - 512) / 1024 : (static_cast<long double>(h % 4095) - 2047) / 1024;
      return encode_f16(v);
    case DataType::BFloat16:
      v = prod ? (128 + static_cast<long double>(h % 192) - 64) / 128 : (static_cast<long double>(h % 511) - 255) / 128;
      return encode_bf16(v);
    case DataType::Float32:
      v = prod ? 1 + (static_cast<long double>(h % (1u << 21)) - (1u << 20)) / (1u << 21)
               : (static_cast<long double>(h % (1u << 24)) - (1u << 23)) / (1u << 20);
      return encode_f32(v);
    default:
      v = prod ? 1 + (static_cast<long double>(h % (1ull << 40)) - (1ull << 39)) / (1ull << 40)
               : (static_cast<long double>(h % (1ull << 52)) - (1ull << 51)) / (1ull << 44);
      return encode_f64(v);
  }
}

void store_bits(DataType type, void* base, std::size_t i, std::uint64_t bits) {
  const std::size_t b = bytes_of(type);
  std::memcpy(static_cast<char*>(base) + i * b, &bits, b);  // little endian
}

std::uint64_t load_bits(DataType type, const void* base, std::size_t i) {
  const std::size_t b = bytes_of(type);
  std::uint64_t bits = 0;
  std::memcpy(&bits, static_cast<const char*>(base) + i * b, b);
  return bits;
}

void fill_input(DataType type, ReduceOp op, int rank, void* out, std::size_t first, std::size_t count,
                std::uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i) store_bits(type, out, i, input_bits(type, op, rank, first + i, seed));
}

long double decode(DataType type, std::uint64_t bits) {
  switch (type) {
    case DataType::Float16: {
      const int sign = (bits >> 15) & 1, exp = (bits >> 10) & 0x1f;
      const auto mant = static_cast<long double>(bits & 0x3ff);
      long double v;
      if (exp == 0) v = std::ldexp(mant, -24);
      else if (exp == 31) v = mant == 0 ? INFINITY : NAN;
      else v = std::ldexp(1024 + mant, exp - 25);
      return sign ? -v : v;
    }
    case DataType::BFloat16: {
      const std::uint32_t b = static_cast<std::uint32_t>(bits) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case DataType::Float32: {
      const auto b = static_cast<std::uint32_t>(bits);
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, &bits, 8);
      return d;
    }
  }
}

std::string check_reduced(DataType type, ReduceOp op, int n, const void* got, std::size_t first, std::size_t count,
                          std::uint64_t seed) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t g = load_bits(type, got, i);
    if (!is_floating(type)) {
      std::uint64_t acc = input_bits(type, op, 0, first + i, seed);
      for (int r = 1; r < n; ++r) {
        const std::uint64_t x = input_bits(type, op, r, first + i, seed);
        switch (op) {
          case ReduceOp::Sum: acc = acc + x; break;
          case ReduceOp::Prod: acc = acc * x; break;
          case ReduceOp::Min:
            acc = is_signed_int(type) ? (as_signed(type, x) < as_signed(type, acc) ? x : acc) : std::min(acc, x);
            break;
          default:
            acc = is_signed_int(type) ? (as_signed(type, x) > as_signed(type, acc) ? x : acc) : std::max(acc, x);
            break;
        }
        acc &= mask_of(type);
      }
      if (acc != g) {
        return "element " + std::to_string(first + i) + ": got bits " + std::to_string(g) + " want " +
               std::to_string(acc) + " (" + rdmx::to_string(type) + " " + rdmx::to_string(op) + ")";
      }
      continue;
    }
    long double ref = decode(type, input_bits(type, op, 0, first + i, seed));
    long double magnitude = std::fabs(ref);
    for (int r = 1; r < n; ++r) {
      const long double x = decode(type, input_bits(type, op, r, first + i, seed));
      magnitude += std::fabs(x);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: ref += x; break;
        case ReduceOp::Prod: ref *= x; break;
        case ReduceOp::Min: ref = std::min(ref, x); break;
        default: ref = std::max(ref, x); break;
      }
    }
    long double tol = 0;
    if (op == ReduceOp::Sum) tol = (n + 1) * unit(type) * magnitude;
    if (op == ReduceOp::Avg) {
      ref /= n;
      tol = (n + 1) * unit(type) * magnitude / n + unit(type) * std::fabs(ref);
    }
    if (op == ReduceOp::Prod) tol = 2 * (n + 1) * unit(type) * std::fabs(ref);
    const long double v = decode(type, g);
    if (!(std::fabs(v - ref) <= tol)) {
      char text[256];
      std::snprintf(text, sizeof(text), "element %zu: got %.17Lg want %.17Lg (tolerance %.3Lg, %s %s over %d ranks)",
                    first + i, v, ref, tol, rdmx::to_string(type), rdmx::to_string(op), n);
      return text;
    }
  }
  return "";
}

std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace rdmx::test
