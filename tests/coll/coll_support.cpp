// SPDX-License-Identifier: MIT
#include "coll/coll_support.hpp"

#include <sys/mount.h>
#include <sys/stat.h>

#include <sched.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace rdmx::test {

bool mixed(const std::string& provider) { return provider == "auto"; }
std::string transport_label(const std::string& provider) { return mixed(provider) ? "mix" : provider; }

std::string param_name(const CollParam& param) {
  return transport_label(param.provider) + "_np" + std::to_string(param.n) + (param.device ? "_cuda" : "");
}

bool full_matrix() {
  const char* v = std::getenv("RDMX_COLL_MATRIX");
  return v != nullptr && std::string(v) == "full";
}

::testing::AssertionResult run_coll_ranks(const CollParam& param, const RankBody& body,
                                          std::chrono::milliseconds timeout, std::vector<int> may_be_killed) {
  Options options;
  options.timeout = full_matrix() ? std::max(timeout, std::chrono::milliseconds(3'000'000)) : timeout;
  options.may_be_killed = std::move(may_be_killed);
  options.provider = param.provider;
  const bool two_hosts = mixed(param.provider);
  const Placement placement = two_hosts ? Placement::NetNsIPv4 : Placement::Local;
  const std::string provider = options.provider;
  return run_ranks(
      param.n, placement,
      [&, provider, two_hosts](RankEnv& env) {
        ::setenv("RDMX_PROVIDER", provider.c_str(), 1);
        const std::string dir = env.dir() + "/shm";
        ::mkdir(dir.c_str(), 0700);
        ::setenv("RDMX_SHM_DIR", dir.c_str(), 1);
        if (two_hosts && env.rank() == 0) {
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

ServedStore serve_tcp_store(RankEnv& env, int server_rank, const std::string& port_key) {
  ServedStore served;
  if (env.rank() == server_rank) {
    served.server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
    env.store().set(port_key, std::to_string(served.server->port()));
  }
  const auto port = static_cast<std::uint16_t>(std::stoi(env.store().get_string(port_key)));
  served.store = connect_tcp_store("127.0.0.1", port, std::chrono::milliseconds(30'000));
  return served;
}

// --- values -------------------------------------------------------------------
// Typed loops throughout: the full matrix checks billions of elements, so the
// type is dispatched once per block, never per element.
namespace {

std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

// Distinct (rank, i) give distinct hashes within a case: mix64 is a bijection.
std::uint64_t hash_of(int rank, std::size_t i, std::uint64_t seed) {
  return mix64(seed * 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(rank) << 48 ^ i);
}

std::uint32_t float_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float float_of(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// fp16 bits of a float that is zero or a normal fp16 number exactly.
std::uint16_t half_bits_exact(float f) {
  const std::uint32_t b = float_bits(f);
  const std::uint32_t sign = (b >> 16) & 0x8000;
  if ((b & 0x7fffffff) == 0) return static_cast<std::uint16_t>(sign);
  const std::uint32_t exp = ((b >> 23) & 0xff) - 127 + 15;
  return static_cast<std::uint16_t>(sign | exp << 10 | (b & 0x7fffff) >> 13);
}

// Any fp16 bits (subnormals, infinities, NaN included) as a float, exactly.
float half_value(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant == 0 ? INFINITY : NAN;
  else
    return float_of(sign | (exp - 15 + 127) << 23 | mant << 13);
  return sign ? -v : v;
}

// Floating inputs are k / 2^s with |k| small enough to be exact in the type;
// products stay near 1. The value is computed in float or double, exactly.
struct F16 {
  using Bits = std::uint16_t;
  using Acc = double;
  static double value(bool prod, std::uint64_t h) {
    return prod ? (1024.0 + static_cast<double>(h % 1536) - 512) / 1024 : (static_cast<double>(h % 4095) - 2047) / 1024;
  }
  static Bits encode(double v) { return half_bits_exact(static_cast<float>(v)); }
  static double decode(Bits b) { return half_value(b); }
  static constexpr int kMantissa = 10;
};
struct BF16 {
  using Bits = std::uint16_t;
  using Acc = double;
  static double value(bool prod, std::uint64_t h) {
    return prod ? (128.0 + static_cast<double>(h % 192) - 64) / 128 : (static_cast<double>(h % 511) - 255) / 128;
  }
  static Bits encode(double v) {
    return static_cast<Bits>(float_bits(static_cast<float>(v)) >> 16);
  }  // low half is zero
  static double decode(Bits b) { return float_of(static_cast<std::uint32_t>(b) << 16); }
  static constexpr int kMantissa = 7;
};
struct F32 {
  using Bits = std::uint32_t;
  using Acc = double;
  static double value(bool prod, std::uint64_t h) {
    return prod ? 1 + (static_cast<double>(h % (1u << 21)) - (1u << 20)) / (1u << 21)
                : (static_cast<double>(h % (1u << 24)) - (1u << 23)) / (1u << 20);
  }
  static Bits encode(double v) { return float_bits(static_cast<float>(v)); }
  static double decode(Bits b) { return float_of(b); }
  static constexpr int kMantissa = 23;
};
struct F64 {
  using Bits = std::uint64_t;
  using Acc = long double;  // sums of fp64 inputs need more than fp64 to be a reference
  static double value(bool prod, std::uint64_t h) {
    return prod ? 1 + (static_cast<double>(h % (1ull << 40)) - static_cast<double>(1ull << 39)) /
                          static_cast<double>(1ull << 40)
                : (static_cast<double>(h % (1ull << 52)) - static_cast<double>(1ull << 51)) /
                      static_cast<double>(1ull << 44);
  }
  static Bits encode(double v) {
    Bits b;
    std::memcpy(&b, &v, 8);
    return b;
  }
  static double decode(Bits b) {
    double d;
    std::memcpy(&d, &b, 8);
    return d;
  }
  static constexpr int kMantissa = 52;
};
template <typename F>
void fill_floating(bool prod, int rank, void* out, std::size_t first, std::size_t count, std::uint64_t seed) {
  auto* p = static_cast<typename F::Bits*>(out);
  for (std::size_t i = 0; i < count; ++i) {
    const typename F::Bits b = F::encode(F::value(prod, hash_of(rank, first + i, seed)));
    std::memcpy(p + i, &b, sizeof b);  // `out` may be unaligned
  }
}

template <typename T>
void fill_integer(int rank, void* out, std::size_t first, std::size_t count, std::uint64_t seed) {
  auto* p = static_cast<char*>(out);
  for (std::size_t i = 0; i < count; ++i) {
    const T v = static_cast<T>(hash_of(rank, first + i, seed));  // modular: the low bits
    std::memcpy(p + i * sizeof(T), &v, sizeof(T));
  }
}

template <typename T>
T load(const void* base, std::size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
std::string check_integer(ReduceOp op, int n, const void* got, std::size_t first, std::size_t count, std::uint64_t seed,
                          DataType type) {
  for (std::size_t i = 0; i < count; ++i) {
    // Unsigned arithmetic wraps as the library's integers do; min/max compare in T.
    using U = std::make_unsigned_t<T>;
    T acc = static_cast<T>(hash_of(0, first + i, seed));
    for (int r = 1; r < n; ++r) {
      const T x = static_cast<T>(hash_of(r, first + i, seed));
      switch (op) {
        case ReduceOp::Sum: acc = static_cast<T>(static_cast<U>(acc) + static_cast<U>(x)); break;
        case ReduceOp::Prod: acc = static_cast<T>(static_cast<U>(acc) * static_cast<U>(x)); break;
        case ReduceOp::Min: acc = std::min(acc, x); break;
        default: acc = std::max(acc, x); break;
      }
    }
    const T g = load<T>(got, i);
    if (g != acc) {
      return "element " + std::to_string(first + i) + ": got " + std::to_string(+g) + " want " + std::to_string(+acc) +
             " (" + rdmx::to_string(type) + " " + rdmx::to_string(op) + ")";
    }
  }
  return "";
}

template <typename F>
std::string check_floating(ReduceOp op, int n, const void* got, std::size_t first, std::size_t count,
                           std::uint64_t seed, DataType type) {
  using Acc = typename F::Acc;
  const bool prod = op == ReduceOp::Prod;
  const Acc unit = std::ldexp(Acc{1}, -F::kMantissa);  // relative rounding bound of one step, with margin
  for (std::size_t i = 0; i < count; ++i) {
    Acc ref = F::value(prod, hash_of(0, first + i, seed));
    Acc magnitude = std::fabs(ref);
    for (int r = 1; r < n; ++r) {
      const Acc x = F::value(prod, hash_of(r, first + i, seed));
      magnitude += std::fabs(x);
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: ref += x; break;
        case ReduceOp::Prod: ref *= x; break;
        case ReduceOp::Min: ref = std::min(ref, x); break;
        default: ref = std::max(ref, x); break;
      }
    }
    Acc tol = 0;
    if (op == ReduceOp::Sum) tol = (n + 1) * unit * magnitude;
    if (op == ReduceOp::Avg) {
      ref /= n;
      tol = (n + 1) * unit * magnitude / n + unit * std::fabs(ref);
    }
    if (prod) tol = 2 * (n + 1) * unit * std::fabs(ref);
    const Acc v = F::decode(load<typename F::Bits>(got, i));
    if (!(std::fabs(v - ref) <= tol)) {
      char text[256];
      std::snprintf(text, sizeof(text), "element %zu: got %.17Lg want %.17Lg (tolerance %.3Lg, %s %s over %d ranks)",
                    first + i, static_cast<long double>(v), static_cast<long double>(ref),
                    static_cast<long double>(tol), rdmx::to_string(type), rdmx::to_string(op), n);
      return text;
    }
  }
  return "";
}

}  // namespace

void fill_input(DataType type, ReduceOp op, int rank, void* out, std::size_t first, std::size_t count,
                std::uint64_t seed) {
  const bool prod = op == ReduceOp::Prod;
  switch (type) {
    case DataType::Int8: return fill_integer<std::int8_t>(rank, out, first, count, seed);
    case DataType::Uint8: return fill_integer<std::uint8_t>(rank, out, first, count, seed);
    case DataType::Int32: return fill_integer<std::int32_t>(rank, out, first, count, seed);
    case DataType::Uint32: return fill_integer<std::uint32_t>(rank, out, first, count, seed);
    case DataType::Int64: return fill_integer<std::int64_t>(rank, out, first, count, seed);
    case DataType::Uint64: return fill_integer<std::uint64_t>(rank, out, first, count, seed);
    case DataType::Float16: return fill_floating<F16>(prod, rank, out, first, count, seed);
    case DataType::BFloat16: return fill_floating<BF16>(prod, rank, out, first, count, seed);
    case DataType::Float32: return fill_floating<F32>(prod, rank, out, first, count, seed);
    case DataType::Float64: return fill_floating<F64>(prod, rank, out, first, count, seed);
  }
}

std::string check_block(DataType type, int rank, const void* got, std::size_t first, std::size_t count,
                        std::uint64_t seed) {
  const std::size_t e = rdmx::size_of(type);
  // Expected values in pieces, compared with memcmp; the first difference is located only on failure.
  constexpr std::size_t kPiece = 1 << 14;
  std::vector<char> want(std::min(count, kPiece) * e);
  for (std::size_t done = 0; done < count; done += kPiece) {
    const std::size_t n = std::min(kPiece, count - done);
    fill_input(type, ReduceOp::Sum, rank, want.data(), first + done, n, seed);
    const char* g = static_cast<const char*>(got) + done * e;
    if (std::memcmp(g, want.data(), n * e) == 0) continue;
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t gb = 0, wb = 0;
      std::memcpy(&gb, g + i * e, e);
      std::memcpy(&wb, want.data() + i * e, e);
      if (gb != wb) {
        return "element " + std::to_string(done + i) + " of rank " + std::to_string(rank) + "'s block (input index " +
               std::to_string(first + done + i) + ") has bits " + std::to_string(gb) + ", want " + std::to_string(wb);
      }
    }
  }
  return "";
}

std::string check_reduced(DataType type, ReduceOp op, int n, const void* got, std::size_t first, std::size_t count,
                          std::uint64_t seed) {
  switch (type) {
    case DataType::Int8: return check_integer<std::int8_t>(op, n, got, first, count, seed, type);
    case DataType::Uint8: return check_integer<std::uint8_t>(op, n, got, first, count, seed, type);
    case DataType::Int32: return check_integer<std::int32_t>(op, n, got, first, count, seed, type);
    case DataType::Uint32: return check_integer<std::uint32_t>(op, n, got, first, count, seed, type);
    case DataType::Int64: return check_integer<std::int64_t>(op, n, got, first, count, seed, type);
    case DataType::Uint64: return check_integer<std::uint64_t>(op, n, got, first, count, seed, type);
    case DataType::Float16: return check_floating<F16>(op, n, got, first, count, seed, type);
    case DataType::BFloat16: return check_floating<BF16>(op, n, got, first, count, seed, type);
    case DataType::Float32: return check_floating<F32>(op, n, got, first, count, seed, type);
    case DataType::Float64: return check_floating<F64>(op, n, got, first, count, seed, type);
  }
  return "unknown type";
}

std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  // FNV-1a over 8-byte words, then the tail bytes.
  std::uint64_t h = 1469598103934665603ULL;
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ULL;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace rdmx::test
