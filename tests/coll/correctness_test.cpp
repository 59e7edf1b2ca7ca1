// SPDX-License-Identifier: MIT
// The correctness suite: every operation x algorithm x type x reduction x
// size x in-place/out-of-place, on every transport and rank count, against
// an independent reference. Floating results must also be the same bits on
// every rank (all_reduce) and on a second run.
//
// The default matrix (make test) runs every placement, rank count and
// algorithm at sizes 0, 1, 7 and 1023 elements, and a chosen few at 1 MiB + 3
// elements; every type and reduction on shm and tcp at 3 ranks, a sample of
// them elsewhere. RDMX_COLL_MATRIX=full (make test-coll-full) runs every
// combination at every size, 64 MiB included.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "coll/algo_registry.hpp"
#include "coll/coll_support.hpp"
#include "coll/cuda/kernels.hpp"
#include "support/cuda_device.hpp"

namespace rdmx::test {
namespace {

struct Sizes {
  std::vector<std::size_t> counts;  // elements
  std::size_t large_bytes;          // "1 MiB + 3 elements" and "64 MiB" rows
};

// The few type and reduction pairs that also run at 1 MiB in the default matrix.
bool chosen_case(DataType type, ReduceOp op, bool reducing) {
  return (type == DataType::Float32 && (op == ReduceOp::Sum || op == ReduceOp::Avg || !reducing)) ||
         (type == DataType::BFloat16 && op == ReduceOp::Sum) || (type == DataType::Int64 && op == ReduceOp::Max) ||
         (type == DataType::Int8 && !reducing);
}

// The chosen pairs and one more of each element width they lack (1-byte
// reductions, 8-byte movement): moving and splitting blocks depends on an
// element's width, not its kind, and every kind's arithmetic runs at the
// placements that take every pair (and in rdmx_reduce_tests).
bool sampled_case(DataType type, ReduceOp op, bool reducing) {
  return chosen_case(type, op, reducing) ||
         (reducing ? type == DataType::Int8 && op == ReduceOp::Sum : type == DataType::Float64);
}

// Where the default matrix runs every type and reduction: shm and tcp at 3
// ranks (odd, so rd and hd fold) on host buffers; on device buffers, whose
// reductions run in the GPU kernels whatever the transport, shm at 3 ranks.
bool every_pair_at(const CollParam& p) {
  if (full_matrix()) return true;
  return p.n == 3 && (p.device ? p.provider == "shm" : !mixed(p.provider));
}

// The hierarchical algorithms move blocks whatever their type, through the
// same reduction kernels as the flat ones: the default matrix runs them on
// the chosen pairs only (odd sizes, 1- and 2-byte elements, avg's division
// included); the full matrix on every pair.
bool skipped_for(bool every_pair, const std::string& algo, DataType type, ReduceOp op, bool reducing) {
  if (full_matrix()) return false;
  if (algo.rfind("hier", 0) == 0) return !chosen_case(type, op, reducing);
  return !every_pair && !sampled_case(type, op, reducing);
}

// Sizes past the pipelines' chunks (1 MiB + 3 elements) take most of a
// case's time: the default matrix runs them for three pairs (2-, 4- and
// 8-byte elements) where it runs every pair, for float32 elsewhere.
std::vector<std::size_t> counts_for(bool every_pair, DataType type, ReduceOp op, bool reducing) {
  std::vector<std::size_t> counts{0, 1, 7, 1023};
  const std::size_t mib_plus_3 = (std::size_t{1} << 20) / rdmx::size_of(type) + 3;
  const bool float32 = type == DataType::Float32 && (op == ReduceOp::Sum || !reducing);
  const bool chosen = float32 || (type == DataType::BFloat16 && op == ReduceOp::Sum) ||
                      (type == DataType::Int64 && op == ReduceOp::Max);
  if (full_matrix()) {
    counts.push_back(mib_plus_3);
    if (chosen || !reducing) counts.push_back((std::size_t{64} << 20) / rdmx::size_of(type));
  } else if (every_pair ? chosen : float32) {
    counts.push_back(mib_plus_3);
  }
  return counts;
}

std::vector<ReduceOp> ops_for(DataType type) {
  std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  if (is_floating(type)) ops.push_back(ReduceOp::Avg);
  return ops;
}

std::vector<std::string> algos_for(CollOp op) {
  std::vector<std::string> out{""};  // the model's choice
  // Every algorithm of the registry that implements the operation.
  // hier-wide: hier on two hosts with every other rank (2 x n/2, ranks
  // interleaved), where `hier` has hosts of two consecutive ranks.
  std::vector<std::string> supported;
  for (const coll::AlgoRow& row : coll::algo_rows()) {
    if (row.implements(op) && op != CollOp::AllToAll && op != CollOp::AllToAllv && op != CollOp::Gather &&
        op != CollOp::Scatter)
      supported.push_back(row.name);
  }
  out.insert(out.end(), supported.begin(), supported.end());
  if (std::find(out.begin(), out.end(), "hier") != out.end()) out.push_back("hier-wide");
  // RDMX_COLL_ALGOS=hier,hier-wide runs only those (`table` for the
  // table's choice): a part of the full matrix in hours it can take.
  if (const char* only = std::getenv("RDMX_COLL_ALGOS"); only != nullptr && *only != '\0') {
    const std::string list = "," + std::string(only) + ",";
    std::erase_if(out, [&](const std::string& a) {
      return list.find("," + (a.empty() ? std::string("table") : a) + ",") == std::string::npos;
    });
  }
  return out;
}

// The operations' view of a case's host buffers: the buffers themselves,
// or on device runs copies on the GPU, filled from them before each call
// (upload) and read back after it (download).
class Mirrors {
 public:
  Mirrors(bool device, std::initializer_list<std::vector<char>*> hosts) {
    for (std::vector<char>* host : hosts) {
      pairs_.emplace_back(host, device ? std::make_unique<DeviceBuffer>(host->size()) : nullptr);
    }
  }
  // Where the operation finds the host byte at `p`. A pointer just past one
  // buffer may also be the start of the next one (TSan's allocator places
  // them end to end): a buffer holding the byte wins over one it ends.
  void* map(const void* p) const {
    const auto* at = static_cast<const char*>(p);
    if (p == nullptr) return nullptr;
    for (const bool past_end : {false, true}) {
      for (const auto& [host, gpu] : pairs_) {
        if (gpu == nullptr) continue;
        const char* end = host->data() + host->size();
        if (past_end ? at == end : (at >= host->data() && at < end)) {
          return static_cast<char*>(gpu->get()) + (at - host->data());
        }
      }
    }
    return const_cast<void*>(p);
  }
  void upload() const {
    for (const auto& [host, gpu] : pairs_) {
      if (gpu != nullptr) cuda_copy(gpu->get(), host->data(), host->size());
    }
  }
  void download() const {
    for (const auto& [host, gpu] : pairs_) {
      if (gpu != nullptr) cuda_copy(host->data(), gpu->get(), host->size());
    }
  }

 private:
  std::vector<std::pair<std::vector<char>*, std::unique_ptr<DeviceBuffer>>> pairs_;
};

struct Runner {
  RankEnv& env;
  int n;
  int r;
  bool device = false;     // the operations run on device buffers
  bool every_pair = true;  // every type and reduction (every_pair_at), else a sample
  std::uint64_t cases = 0;

  // One communicator per algorithm, created on first use. The hierarchical
  // ones see the ranks as hosts (RDMX_HOSTID): `hier` as hosts of two
  // consecutive ranks (four ranks 2x2, eight 4x2), odd counts as hosts of
  // one; `hier-wide` as two hosts of every other rank (eight ranks 2x4),
  // which only eight ranks run.
  std::vector<std::pair<std::string, std::unique_ptr<Communicator>>> comms;
  bool runs(const std::string& algo) const { return algo != "hier-wide" || n == 8; }
  Communicator& comm(CollOp op, const std::string& algo) {
    const bool wide = algo == "hier-wide";
    const std::string spec = algo.empty() ? "" : std::string(rdmx::to_string(op)) + ":" + (wide ? "hier" : algo);
    const std::string key = spec + (wide ? "/wide" : "");
    for (auto& [s, c] : comms) {
      if (s == key) return *c;
    }
    const int per_host = n % 2 == 0 && n > 2 ? 2 : 1;
    const int host = wide ? r % 2 : r / per_host;
    if (algo.rfind("hier", 0) == 0) ::setenv("RDMX_HOSTID", ("test-host-" + std::to_string(host)).c_str(), 1);
    comms.emplace_back(key, make_comm(env, "c" + std::to_string(comms.size()), spec));
    ::unsetenv("RDMX_HOSTID");
    return *comms.back().second;
  }

  // Same bits on every rank: gather every rank's fingerprint.
  void check_same_everywhere(Communicator& c, std::uint64_t fp, const std::string& what) {
    std::vector<std::uint64_t> all(static_cast<std::size_t>(n));
    c.all_gather(&fp, all.data(), 1, DataType::Uint64);
    for (int p = 0; p < n; ++p) {
      CHECK_EQ(all[static_cast<std::size_t>(p)], fp) << what << ": rank " << p << " got different bits";
    }
  }

  // Large results that every rank holds alike (all_reduce, all_gather,
  // broadcast) are checked in shares: each rank compares its n-th with the
  // reference, and the fingerprints of the whole results, exchanged through
  // the store rather than the library under test, must agree. Together that
  // covers every element of every rank's result, at 1/n of the reference work.
  static constexpr std::size_t kShareBytes = std::size_t{1} << 20;
  bool shared_check(std::size_t bytes) const { return n > 1 && bytes >= kShareBytes; }
  std::size_t share_begin(std::size_t count) const {
    return count * static_cast<std::size_t>(r) / static_cast<std::size_t>(n);
  }
  std::size_t share_end(std::size_t count) const {
    return count * static_cast<std::size_t>(r + 1) / static_cast<std::size_t>(n);
  }
  void check_same_via_store(std::uint64_t fp, std::uint64_t seed, int round, const std::string& what) {
    const std::string key = "fp/" + std::to_string(seed) + "/" + std::to_string(round) + "/";
    Bytes value(sizeof fp);
    std::memcpy(value.data(), &fp, sizeof fp);
    env.store().set(key + std::to_string(r), value);
    for (int p = 0; p < n; ++p) {
      const Bytes other = env.store().get(key + std::to_string(p));
      CHECK(other == value) << what << ": rank " << p << "'s result differs from rank " << r << "'s";
    }
  }
};

using Body = std::function<void(Runner&)>;

bool in_default_matrix(const CollParam& p) {
  if (mixed(p.provider)) return p.n <= 4;
  if (p.provider == "tcp") return p.n == 2 || p.n == 3 || p.n == 5 || p.n == 8;
  return true;
}

class Correctness : public ::testing::TestWithParam<CollParam> {
 protected:
  static void TearDownTestSuite() { NetNsPair::destroy(); }
  // `reduces`: the body reduces (on device buffers, in the GPU kernels).
  void run(const Body& body, bool reduces = false) {
    if (!full_matrix() && !in_default_matrix(GetParam())) GTEST_SKIP() << "full matrix only (make test-coll-full)";
    const bool device = GetParam().device;
    if (device) RDMX_REQUIRE_GPU_BEFORE_FORK();
    if (device && reduces && !coll::cuda_kernels_built()) GTEST_SKIP() << "GPU kernels " << coll::cuda_kernels_note();
    ASSERT_TRUE(run_coll_ranks(GetParam(), [&](RankEnv& env) {
      if (device) {
        std::string why;
        CHECK(cuda_for_test(&why) != nullptr) << why;
      }
      Runner runner{env, env.world_size(), env.rank(), device, every_pair_at(GetParam())};
      body(runner);
    }));
  }
};

std::string label(CollOp op, const std::string& algo, DataType t, ReduceOp o, std::size_t count, bool in_place,
                  int root = -1) {
  std::string s = std::string(rdmx::to_string(op)) + " algo=" + (algo.empty() ? "table" : algo) + " " +
                  rdmx::to_string(t) + " " + rdmx::to_string(o) + " count=" + std::to_string(count) +
                  (in_place ? " in-place" : " out-of-place");
  if (root >= 0) s += " root=" + std::to_string(root);
  return s;
}

// all_reduce, reduce and reduce_scatter share the shape of their check.
void reducing_suite(Runner& R, CollOp op) {
  for (const std::string& algo : algos_for(op)) {
    if (!R.runs(algo)) continue;
    Communicator& c = R.comm(op, algo);
    for (DataType t : kAllTypes) {
      const std::size_t e = rdmx::size_of(t);
      for (ReduceOp o : ops_for(t)) {
        if (skipped_for(R.every_pair, algo, t, o, true)) continue;
        for (std::size_t count : counts_for(R.every_pair, t, o, true)) {
          for (bool in_place : {false, true}) {
            const std::uint64_t seed = ++R.cases;
            const int root = static_cast<int>(seed % static_cast<std::uint64_t>(R.n));
            const std::string what = label(op, algo, t, o, count, in_place, op == CollOp::Reduce ? root : -1);
            const std::size_t in_count = op == CollOp::ReduceScatter ? count * static_cast<std::size_t>(R.n) : count;
            std::vector<char> in(in_count * e + 1), out(in_count * e + 1, 0x5a);
            const Mirrors m(R.device, {&in, &out});
            std::uint64_t first_fp = 0;
            for (int round = 0; round < 2; ++round) {
              fill_input(t, o, R.r, in.data(), 0, in_count, seed);
              void* dst = out.data();
              const void* src = in.data();
              if (in_place) {
                std::memcpy(out.data(), in.data(), in_count * e);
                src = out.data();
                if (op == CollOp::ReduceScatter) dst = out.data() + static_cast<std::size_t>(R.r) * count * e;
              }
              m.upload();
              if (op == CollOp::AllReduce) c.all_reduce(m.map(src), m.map(dst), count, t, o);
              if (op == CollOp::Reduce) c.reduce(m.map(src), m.map(dst), count, t, o, root);
              if (op == CollOp::ReduceScatter) c.reduce_scatter(m.map(src), m.map(dst), count, t, o);
              m.download();
              const std::size_t first = op == CollOp::ReduceScatter ? static_cast<std::size_t>(R.r) * count : 0;
              const bool has_result = op != CollOp::Reduce || R.r == root;
              const std::uint64_t fp = has_result ? fingerprint(dst, count * e) : 0;
              if (op == CollOp::AllReduce && R.shared_check(count * e)) {
                const std::size_t lo = R.share_begin(count), hi = R.share_end(count);
                const std::string bad = check_reduced(t, o, R.n, static_cast<char*>(dst) + lo * e, lo, hi - lo, seed);
                if (!bad.empty()) FAIL_RANK() << what << ": " << bad;
                R.check_same_via_store(fp, seed, round, what);
              } else if (has_result) {
                const std::string bad = check_reduced(t, o, R.n, dst, first, count, seed);
                if (!bad.empty()) FAIL_RANK() << what << ": " << bad;
              }
              if (round == 0) {
                first_fp = fp;
              } else {
                CHECK_EQ(fp, first_fp) << what << ": a second run gave different bits";
              }
              if (op == CollOp::AllReduce && is_floating(t) && round == 0) R.check_same_everywhere(c, fp, what);
              if (count > 100000) break;  // large rows: one run (the small rows check repeatability)
            }
          }
        }
      }
    }
  }
}

TEST_P(Correctness, AllReduce) {
  run([](Runner& R) { reducing_suite(R, CollOp::AllReduce); }, true);
}
TEST_P(Correctness, Reduce) {
  run([](Runner& R) { reducing_suite(R, CollOp::Reduce); }, true);
}
TEST_P(Correctness, ReduceScatter) {
  run([](Runner& R) { reducing_suite(R, CollOp::ReduceScatter); }, true);
}

// Data movement: values are the input bits of (source rank, index), compared exactly.
void expect_block(const Runner& R, const std::string& what, DataType t, const void* got, int src_rank,
                  std::size_t first, std::size_t count, std::uint64_t seed) {
  const std::string bad = check_block(t, src_rank, got, first, count, seed);
  if (!bad.empty()) FAIL_RANK() << what << ": " << bad << " (rank " << R.r << ")";
}

void movement_suite(Runner& R, CollOp op) {
  const std::size_t n = static_cast<std::size_t>(R.n);
  for (const std::string& algo : algos_for(op)) {
    if (!R.runs(algo)) continue;
    Communicator& c = R.comm(op, algo);
    for (DataType t : kAllTypes) {
      const std::size_t e = rdmx::size_of(t);
      if (skipped_for(R.every_pair, algo, t, ReduceOp::Sum, false)) continue;
      for (std::size_t count : counts_for(R.every_pair, t, ReduceOp::Sum, false)) {
        if (count * e * n > (std::size_t{256} << 20)) continue;  // 64 MiB per rank block is enough
        for (bool in_place : {false, true}) {
          const std::uint64_t seed = ++R.cases;
          const int root = static_cast<int>(seed % n);
          const std::string what = label(op, algo, t, ReduceOp::Sum, count, in_place, root);
          const std::size_t big = count * n;
          std::vector<char> in(big * e + 1), out(big * e + 1, 0x5a);
          const Mirrors m(R.device, {&in, &out});
          // Runs the operation on the mirrors of its buffers.
          auto call = [&](auto&& operation) {
            m.upload();
            operation();
            m.download();
          };
          switch (op) {
            case CollOp::AllGather: {
              fill_input(t, ReduceOp::Sum, R.r, in.data(), 0, count, seed);
              const void* src = in.data();
              if (in_place) {
                std::memcpy(out.data() + static_cast<std::size_t>(R.r) * count * e, in.data(), count * e);
                src = out.data() + static_cast<std::size_t>(R.r) * count * e;
              }
              call([&] { c.all_gather(m.map(src), m.map(out.data()), count, t); });
              if (R.shared_check(big * e)) {
                const int j = (R.r + 1) % R.n;  // a block that came from elsewhere
                expect_block(R, what, t, out.data() + static_cast<std::size_t>(j) * count * e, j, 0, count, seed);
                R.check_same_via_store(fingerprint(out.data(), big * e), seed, 0, what);
              } else {
                for (int j = 0; j < R.n; ++j) {
                  expect_block(R, what, t, out.data() + static_cast<std::size_t>(j) * count * e, j, 0, count, seed);
                }
              }
              break;
            }
            case CollOp::Broadcast: {
              if (R.r == root) fill_input(t, ReduceOp::Sum, root, out.data(), 0, count, seed);
              call([&] { c.broadcast(m.map(out.data()), count, t, root); });
              if (R.shared_check(count * e)) {
                const std::size_t lo = R.share_begin(count), hi = R.share_end(count);
                expect_block(R, what, t, out.data() + lo * e, root, lo, hi - lo, seed);
                R.check_same_via_store(fingerprint(out.data(), count * e), seed, 0, what);
              } else {
                expect_block(R, what, t, out.data(), root, 0, count, seed);
              }
              break;
            }
            case CollOp::Gather: {
              fill_input(t, ReduceOp::Sum, R.r, in.data(), 0, count, seed);
              const void* src = in.data();
              if (in_place && R.r == root) {
                std::memcpy(out.data() + static_cast<std::size_t>(R.r) * count * e, in.data(), count * e);
                src = out.data() + static_cast<std::size_t>(R.r) * count * e;
              }
              call([&] { c.gather(m.map(src), m.map(out.data()), count, t, root); });
              if (R.r == root) {
                for (int j = 0; j < R.n; ++j) {
                  expect_block(R, what, t, out.data() + static_cast<std::size_t>(j) * count * e, j, 0, count, seed);
                }
              }
              break;
            }
            case CollOp::Scatter: {
              if (R.r == root) fill_input(t, ReduceOp::Sum, root, in.data(), 0, big, seed);
              void* dst = out.data();
              if (in_place && R.r == root) dst = in.data() + static_cast<std::size_t>(R.r) * count * e;
              call([&] { c.scatter(m.map(in.data()), m.map(dst), count, t, root); });
              expect_block(R, what, t, dst, root, static_cast<std::size_t>(R.r) * count, count, seed);
              break;
            }
            case CollOp::AllToAll: {
              fill_input(t, ReduceOp::Sum, R.r, in.data(), 0, big, seed);
              const void* src = in.data();
              if (in_place) {
                std::memcpy(out.data(), in.data(), big * e);
                src = out.data();
              }
              call([&] { c.all_to_all(m.map(src), m.map(out.data()), count, t); });
              for (int j = 0; j < R.n; ++j) {
                expect_block(R, what, t, out.data() + static_cast<std::size_t>(j) * count * e, j,
                             static_cast<std::size_t>(R.r) * count, count, seed);
              }
              break;
            }
            case CollOp::AllToAllv: {
              // Rank j sends rank k (count + j + 2k) % (count + 1) elements, packed in rank order.
              auto amount = [&](int j, int k) { return (count + static_cast<std::size_t>(j + 2 * k)) % (count + 1); };
              std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
              std::size_t so = 0, ro = 0;
              for (int k = 0; k < R.n; ++k) {
                sc[static_cast<std::size_t>(k)] = amount(R.r, k);
                sd[static_cast<std::size_t>(k)] = so;
                so += sc[static_cast<std::size_t>(k)];
                rc[static_cast<std::size_t>(k)] = amount(k, R.r);
                rd[static_cast<std::size_t>(k)] = ro;
                ro += rc[static_cast<std::size_t>(k)];
              }
              std::vector<char> vin(so * e + 1), vout(ro * e + 1, 0x5a);
              // Rank j's elements for rank k are its input indices k * (count + 1) + [0, amount).
              for (int k = 0; k < R.n; ++k) {
                fill_input(t, ReduceOp::Sum, R.r, vin.data() + sd[static_cast<std::size_t>(k)] * e,
                           static_cast<std::size_t>(k) * (count + 1), sc[static_cast<std::size_t>(k)], seed);
              }
              const Mirrors mv(R.device, {&vin, &vout});
              mv.upload();
              c.all_to_allv(mv.map(vin.data()), sc, sd, mv.map(vout.data()), rc, rd, t);
              mv.download();
              for (int j = 0; j < R.n; ++j) {
                expect_block(R, what, t, vout.data() + rd[static_cast<std::size_t>(j)] * e, j,
                             static_cast<std::size_t>(R.r) * (count + 1), rc[static_cast<std::size_t>(j)], seed);
              }
              break;
            }
            default: FAIL_RANK() << "no movement check for " << rdmx::to_string(op);
          }
          if (op == CollOp::AllToAllv && in_place) break;  // no in-place form
        }
      }
    }
  }
}

// Direct transfers (RDMX_COLL_DIRECT_MIN): the ring's all-gather phase, the
// ring all_gather and broadcast write straight into receivers' buffers.
TEST_P(Correctness, DirectTransfers) {
  if (!full_matrix() && GetParam().n > 3) GTEST_SKIP() << "full matrix only (make test-coll-full)";
  run(
      [](Runner& R) {
        ::setenv("RDMX_COLL_DIRECT_MIN", "1", 1);
        reducing_suite(R, CollOp::AllReduce);
        movement_suite(R, CollOp::AllGather);
        movement_suite(R, CollOp::Broadcast);
      },
      true);
}

TEST_P(Correctness, AllGather) {
  run([](Runner& R) { movement_suite(R, CollOp::AllGather); });
}
TEST_P(Correctness, Broadcast) {
  run([](Runner& R) { movement_suite(R, CollOp::Broadcast); });
}
TEST_P(Correctness, Gather) {
  run([](Runner& R) { movement_suite(R, CollOp::Gather); });
}
TEST_P(Correctness, Scatter) {
  run([](Runner& R) { movement_suite(R, CollOp::Scatter); });
}
TEST_P(Correctness, AllToAll) {
  run([](Runner& R) { movement_suite(R, CollOp::AllToAll); });
}
TEST_P(Correctness, AllToAllv) {
  run([](Runner& R) { movement_suite(R, CollOp::AllToAllv); });
}

// Point to point: a ring of send_recv, then pairs of send and recv.
TEST_P(Correctness, SendRecv) {
  run([](Runner& R) {
    Communicator& c = R.comm(CollOp::SendRecv, "");
    if (R.n == 1) return;
    for (DataType t : kAllTypes) {
      const std::size_t e = rdmx::size_of(t);
      for (std::size_t count : counts_for(R.every_pair, t, ReduceOp::Sum, false)) {
        const std::uint64_t seed = ++R.cases;
        const std::string what = label(CollOp::SendRecv, "", t, ReduceOp::Sum, count, false);
        std::vector<char> in(count * e + 1), out(count * e + 1, 0x5a);
        const Mirrors m(R.device, {&in, &out});
        fill_input(t, ReduceOp::Sum, R.r, in.data(), 0, count, seed);
        const int right = (R.r + 1) % R.n, left = (R.r + R.n - 1) % R.n;
        m.upload();
        c.send_recv(m.map(in.data()), count, right, m.map(out.data()), count, left, t);
        m.download();
        expect_block(R, what, t, out.data(), left, 0, count, seed);
        // Pairs (0,1), (2,3), ...: the even rank sends, the odd receives.
        const int partner = R.r ^ 1;
        if (partner < R.n) {
          std::fill(out.begin(), out.end(), 0x5a);
          m.upload();
          if (R.r % 2 == 0) {
            c.send(m.map(in.data()), count, t, partner);
          } else {
            c.recv(m.map(out.data()), count, t, partner);
            m.download();
            expect_block(R, what + " (send/recv)", t, out.data(), partner, 0, count, seed);
          }
        }
      }
    }
  });
}

TEST_P(Correctness, Barrier) {
  run([](Runner& R) {
    for (const std::string& algo : algos_for(CollOp::Barrier)) {
      Communicator& c = R.comm(CollOp::Barrier, algo);
      // Each rank publishes a counter before the barrier; after it, everyone's must be there.
      for (int round = 0; round < 5; ++round) {
        const std::string key = "barrier/" + algo + "/" + std::to_string(round) + "/";
        R.env.store().set(key + std::to_string(R.r), std::string_view("x"));
        c.barrier();
        for (int p = 0; p < R.n; ++p)
          CHECK(R.env.store().check(key + std::to_string(p))) << "rank " << p << " passed the barrier late";
      }
    }
  });
}

// Every case is registered in both matrices (CTest lists them once); the
// full matrix's extra placements skip in the default one.
std::vector<CollParam> params() {
  std::vector<CollParam> out;
  for (const std::string& provider : tested_providers()) {
    for (int n : {1, 2, 3, 4, 5, 8}) {
      if (n > 1 || !mixed(provider)) out.push_back({provider, n});  // two hosts need two ranks
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Coll, Correctness, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<CollParam>& p) { return param_name(p.param); });

// The same matrix on device buffers: on the device machine's GPU, which its
// ranks share, and in CI on the simulated driver (tests/CMakeLists.txt).
std::vector<CollParam> device_params() {
  std::vector<CollParam> out;
  for (const std::string& provider : tested_providers()) {
    if (provider == "verbs") continue;  // serves no device memory yet (docs/GPU.md)
    for (int n : {1, 2, 3}) {           // n = 3 folds for rd and hd; larger counts add nothing GPU-specific
      if (n == 1 && mixed(provider)) continue;
      out.push_back({provider, n, true});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(CollCuda, Correctness, ::testing::ValuesIn(device_params()),
                         [](const ::testing::TestParamInfo<CollParam>& p) { return param_name(p.param); });

}  // namespace
}  // namespace rdmx::test
