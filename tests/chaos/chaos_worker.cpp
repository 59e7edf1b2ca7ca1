// SPDX-License-Identifier: MIT
// One rank of a fault campaign or soak (scripts/chaos.py): random
// collectives on the public API, every result checked bit-exactly, until
// a time or iteration bound, or until an error, which it reports and exits
// on, or with --recover goes on from: shrink(), the next collectives on the
// survivors and, with --grow, a grow() that processes started with --join
// take part in. All ranks draw the same sequence from the seed.
//
// Inputs are small integers (-7..7), exact in every type used and in every
// sum, min and max of up to 64 ranks, so any algorithm's reduction order
// gives the same bits.
//
// Each event is one JSON line on stdout (R: the rank in the first
// communicator, -1 for a process that joined):
//   {"event":"ready","rank":R,"pid":P,"mono_ns":T}      ("started" for --join)
//   {"event":"error","rank":R,"code":"peer failure","peer_rank":Q,"failed_ranks":[...],
//    "iteration":I,"op":"all_reduce","op_start_ns":T0,"mono_ns":T,"message":"..."}
//   {"event":"agreeing","rank":R,"mono_ns":T}            (shrink() called)
//   {"event":"refused","rank":R,"code":"...","mono_ns":T,"message":"..."}
//   {"event":"shrunk","rank":R,"new_rank":N,"size":S,"failed":[...],"members":[...],"kept":K,"mono_ns":T}
//     (K: the connections to the other survivors kept from the old communicator)
//   {"event":"recovered","rank":R,"new_rank":N,"size":S,"iteration":I,"mono_ns":T}
//     (after the first correct collective on the shrunk communicator)
//   {"event":"growing","rank":R,"count":C,"mono_ns":T}
//   {"event":"grown",...}   (as recovered, on the grown communicator)
//   {"event":"wrong_result","rank":R,"iteration":I,"op":"...","type":"...","count":N,"byte":J,"got":G,"expected":E}
//   {"event":"done","rank":R,"iterations":I,"size":S,"failed":[...],"mono_ns":T}
// Exit status: 0 done, 3 error, 4 wrong result, 5 refused by shrink(), 2 usage.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/comm.hpp"
#include "rdmx/error.hpp"
#include "rdmx/verbs.hpp"

namespace {

using rdmx::CollOp;
using rdmx::DataType;
using rdmx::ReduceOp;

std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

std::string json_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

void emit(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// The input value every rank agrees on for (rank, iteration, index).
int value_of(int rank, std::uint64_t iteration, std::size_t index) {
  const std::uint64_t h = (static_cast<std::uint64_t>(rank) * 0x9E3779B97F4A7C15ull) ^
                          (iteration * 0xC2B2AE3D27D4EB4Full) ^
                          (static_cast<std::uint64_t>(index) * 0x165667B19E3779F9ull);
  return static_cast<int>((h >> 29) % 15) - 7;
}

constexpr DataType kTypes[] = {DataType::Float32, DataType::Float64, DataType::Int32, DataType::Int64,
                               DataType::BFloat16};
constexpr ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max};
constexpr CollOp kColls[] = {CollOp::AllReduce, CollOp::AllGather, CollOp::ReduceScatter,
                             CollOp::Broadcast, CollOp::Reduce,    CollOp::AllToAll,
                             CollOp::Gather,    CollOp::Scatter,   CollOp::Barrier};

// Typed storage of small integers, as bytes.
void store(DataType type, void* base, std::size_t index, long long v) {
  switch (type) {
    case DataType::Float32: static_cast<float*>(base)[index] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(base)[index] = static_cast<double>(v); break;
    case DataType::Int32: static_cast<std::int32_t*>(base)[index] = static_cast<std::int32_t>(v); break;
    case DataType::Int64: static_cast<std::int64_t*>(base)[index] = v; break;
    case DataType::BFloat16: {
      const float f = static_cast<float>(v);  // a small integer: its upper 16 bits are exact
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<std::uint16_t*>(base)[index] = static_cast<std::uint16_t>(bits >> 16);
      break;
    }
    default: std::abort();
  }
}

long long combine(ReduceOp op, long long a, long long b) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Min: return a < b ? a : b;
    case ReduceOp::Max: return a > b ? a : b;
    default: std::abort();
  }
}

struct Step {
  CollOp coll;
  DataType type;
  ReduceOp op;
  std::size_t count;
  int root;
};

Step draw(std::mt19937_64& rng, int size, std::size_t max_bytes) {
  Step s{};
  s.coll = kColls[rng() % std::size(kColls)];
  s.type = kTypes[rng() % std::size(kTypes)];
  s.op = kOps[rng() % std::size(kOps)];
  const std::size_t max_count =
      std::max<std::size_t>(1, max_bytes / rdmx::size_of(s.type) / static_cast<std::size_t>(size));
  int bits = 0;
  while ((std::size_t{1} << (bits + 1)) <= max_count) ++bits;
  s.count = 1 + rng() % (std::size_t{1} << (rng() % (bits + 1)));
  s.root = static_cast<int>(rng() % static_cast<std::uint64_t>(size));
  return s;
}

struct Options {
  double seconds = 0;
  std::uint64_t iterations = 0;
  std::uint64_t seed = 1;
  std::size_t max_bytes = 1 << 20;
  bool recover = false;     // shrink after a failure and go on
  std::uint64_t after = 0;  // iterations to run after recovering (and after growing)
  bool grow = false;        // after recovering, grow back by the ranks lost
  bool join = false;        // a new process: join the job instead of starting it
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--recover") {
      o.recover = true;
      continue;
    }
    if (a == "--grow") {
      o.grow = true;
      continue;
    }
    if (a == "--join") {
      o.join = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const char* v = argv[++i];
    if (a == "--seconds") {
      o.seconds = std::atof(v);
    } else if (a == "--iterations") {
      o.iterations = std::strtoull(v, nullptr, 10);
    } else if (a == "--seed") {
      o.seed = std::strtoull(v, nullptr, 10);
    } else if (a == "--max-bytes") {
      o.max_bytes = std::strtoull(v, nullptr, 10);
    } else if (a == "--after") {
      o.after = std::strtoull(v, nullptr, 10);
    } else {
      return false;
    }
  }
  if ((o.grow || o.join) && (!o.recover || o.after == 0)) return false;
  return o.join || o.seconds > 0 || o.iterations > 0;
}

// What one rank has done: the collective it is in, for the error event.
struct Progress {
  int rank = -1;
  std::uint64_t iteration = 0;
  std::int64_t op_start = 0;  // when the current collective was entered
  Step step{};
};

// Runs iteration `p.iteration` on `comm`; false (after emitting it) on a wrong result.
bool run_step(rdmx::Communicator& comm, const Options& o, Progress& p) {
  const int rank = comm.rank();
  const int size = comm.size();
  const std::uint64_t iteration = p.iteration;
  std::mt19937_64 rng(o.seed * 1000003 + iteration);
  Step& step = p.step;
  step = draw(rng, size, o.max_bytes);
  const std::size_t esize = rdmx::size_of(step.type);
  const std::size_t n = step.count;
  const auto ranks = static_cast<std::size_t>(size);
  std::size_t send_count = n, recv_count = n;
  switch (step.coll) {
    case CollOp::AllGather:
    case CollOp::Gather: recv_count = n * ranks; break;
    case CollOp::ReduceScatter:
    case CollOp::Scatter: send_count = n * ranks; break;
    case CollOp::AllToAll: send_count = recv_count = n * ranks; break;
    default: break;
  }
  std::vector<unsigned char> send(send_count * esize, 0), recv(recv_count * esize, 0xEE),
      expect(recv_count * esize, 0xEE);
  const bool scatter_sender = step.coll != CollOp::Scatter || rank == step.root;
  for (std::size_t j = 0; j < send_count && scatter_sender; ++j)
    store(step.type, send.data(), j, value_of(rank, iteration, j));
  auto reduced = [&](std::size_t j) {
    long long acc = value_of(0, iteration, j);
    for (int r = 1; r < size; ++r) acc = combine(step.op, acc, value_of(r, iteration, j));
    return acc;
  };
  bool check = true;
  p.op_start = mono_ns();
  switch (step.coll) {
    case CollOp::AllReduce:
      comm.all_reduce(send.data(), recv.data(), n, step.type, step.op);
      for (std::size_t j = 0; j < n; ++j) store(step.type, expect.data(), j, reduced(j));
      break;
    case CollOp::Reduce:
      comm.reduce(send.data(), recv.data(), n, step.type, step.op, step.root);
      check = rank == step.root;
      for (std::size_t j = 0; j < n && check; ++j) store(step.type, expect.data(), j, reduced(j));
      break;
    case CollOp::Broadcast:
      recv = send;
      comm.broadcast(recv.data(), n, step.type, step.root);
      for (std::size_t j = 0; j < n; ++j) store(step.type, expect.data(), j, value_of(step.root, iteration, j));
      break;
    case CollOp::AllGather:
    case CollOp::Gather:
      if (step.coll == CollOp::AllGather) {
        comm.all_gather(send.data(), recv.data(), n, step.type);
      } else {
        comm.gather(send.data(), recv.data(), n, step.type, step.root);
        check = rank == step.root;
      }
      for (int s = 0; s < size && check; ++s) {
        for (std::size_t k = 0; k < n; ++k) store(step.type, expect.data(), s * n + k, value_of(s, iteration, k));
      }
      break;
    case CollOp::ReduceScatter:
      comm.reduce_scatter(send.data(), recv.data(), n, step.type, step.op);
      for (std::size_t k = 0; k < n; ++k) store(step.type, expect.data(), k, reduced(rank * n + k));
      break;
    case CollOp::Scatter:
      comm.scatter(send.data(), recv.data(), n, step.type, step.root);
      for (std::size_t k = 0; k < n; ++k)
        store(step.type, expect.data(), k, value_of(step.root, iteration, rank * n + k));
      break;
    case CollOp::AllToAll:
      comm.all_to_all(send.data(), recv.data(), n, step.type);
      for (int s = 0; s < size; ++s) {
        for (std::size_t k = 0; k < n; ++k) {
          store(step.type, expect.data(), s * n + k, value_of(s, iteration, rank * n + k));
        }
      }
      break;
    case CollOp::Barrier:
      comm.barrier();
      check = false;
      break;
    default: break;
  }
  if (check && recv != expect) {
    std::size_t at = 0;
    while (recv[at] == expect[at]) ++at;
    emit("{\"event\":\"wrong_result\",\"rank\":" + std::to_string(p.rank) +
         ",\"iteration\":" + std::to_string(iteration) + ",\"op\":\"" + rdmx::to_string(step.coll) + "\",\"type\":\"" +
         rdmx::to_string(step.type) + "\",\"reduce\":\"" + rdmx::to_string(step.op) +
         "\",\"count\":" + std::to_string(n) + ",\"byte\":" + std::to_string(at) +
         ",\"got\":" + std::to_string(recv[at]) + ",\"expected\":" + std::to_string(expect[at]) + "}");
    return false;
  }
  return true;
}

std::string json_ints(const std::vector<int>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + std::to_string(values[i]);
  return out + "]";
}

void emit_error(const rdmx::Error& e, const Progress& p) {
  emit("{\"event\":\"error\",\"rank\":" + std::to_string(p.rank) + ",\"code\":\"" + rdmx::to_string(e.code()) +
       "\",\"peer_rank\":" + std::to_string(e.context().peer_rank) +
       ",\"failed_ranks\":" + json_ints(e.context().failed_ranks) + ",\"iteration\":" + std::to_string(p.iteration) +
       ",\"op\":\"" + rdmx::to_string(p.step.coll) + "\",\"op_start_ns\":" + std::to_string(p.op_start) +
       ",\"mono_ns\":" + std::to_string(mono_ns()) + ",\"message\":\"" + json_escape(e.what()) + "\"}");
}

// The job's store for a joining process: RDMX_STORE, file:/dir or host:port, as its ranks were given.
std::shared_ptr<rdmx::Store> store_from_env() {
  const char* text = std::getenv("RDMX_STORE");
  const std::string address = text ? text : "";
  if (address.rfind("file:", 0) == 0) return rdmx::open_file_store(address.substr(5));
  const auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    throw rdmx::Error(rdmx::ErrorCode::Config, "rdmx_chaos_worker --join needs RDMX_STORE (file:/dir or host:port)");
  }
  const auto port = static_cast<std::uint16_t>(std::strtoul(address.c_str() + colon + 1, nullptr, 10));
  return rdmx::connect_tcp_store(address.substr(0, colon), port, std::chrono::seconds(30));
}

// A job that goes on after failures (--recover): each failure is followed by
// shrink(), an agreement on the iteration to resume from, `after` more
// iterations and, with --grow, a grow() by the ranks lost that the new
// processes (--join) take part in. Ranks are named in events by their
// number in the first communicator (joiners: -1).
class RecoveringRank {
 public:
  explicit RecoveringRank(const Options& o) : o_(o) {}

  int run() {
    std::int64_t end = INT64_MAX;
    if (o_.join) {
      emit("{\"event\":\"started\",\"pid\":" + std::to_string(::getpid()) +
           ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
      try {
        comm_ = rdmx::Communicator::join(store_from_env());
      } catch (const rdmx::Error& e) {
        emit_error(e, progress_);
        return 3;
      }
      progress_.rank = -1;
      phase_ = Phase::Grown;
    } else {
      comm_ = rdmx::Communicator::from_env();
      progress_.rank = comm_->rank();
      first_.resize(static_cast<std::size_t>(comm_->size()));
      for (int r = 0; r < comm_->size(); ++r) first_[static_cast<std::size_t>(r)] = r;
      emit("{\"event\":\"ready\",\"rank\":" + std::to_string(progress_.rank) +
           ",\"pid\":" + std::to_string(::getpid()) + ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
      end = o_.seconds > 0 ? mono_ns() + static_cast<std::int64_t>(o_.seconds * 1e9) : INT64_MAX;
    }
    for (int failures = 0;;) {
      try {
        const bool done = step(end);
        if (wrong_) return 4;
        if (done) return finish();
      } catch (const rdmx::Error& e) {
        emit_error(e, progress_);
        if (!o_.recover || ++failures > 4 || first_.empty()) return 3;
        if (!shrink()) return 5;
      }
    }
  }

 private:
  enum class Phase { Running, Resume, Recovered, Grown, Finishing };

  // One move of the phase machine; true when the job is done.
  bool step(std::int64_t end_ns) {
    switch (phase_) {
      case Phase::Running: {
        if (o_.seconds > 0 && progress_.iteration % 64 == 0) {
          // Every rank stops at the same iteration: the time bound is agreed on by rank 0's clock.
          std::int64_t stop = mono_ns() >= end_ns ? 1 : 0;
          comm_->broadcast(&stop, 1, DataType::Int64, 0);
          if (stop != 0) return true;
        }
        if (o_.iterations > 0 && progress_.iteration >= o_.iterations) return true;
        if (!run_step(*comm_, o_, progress_)) return wrong_ = true;
        ++progress_.iteration;
        return false;
      }
      case Phase::Resume: {
        // The failed collective may have finished on some survivors: go on from the furthest.
        std::int64_t at = static_cast<std::int64_t>(progress_.iteration);
        comm_->all_reduce(&at, &at, 1, DataType::Int64, ReduceOp::Max);
        progress_.iteration = static_cast<std::uint64_t>(at);
        until_ = progress_.iteration + o_.after;
        if (!run_step(*comm_, o_, progress_)) return wrong_ = true;
        ++progress_.iteration;
        emit_phase("recovered");
        phase_ = o_.grow && lost_since_grow_ > 0 ? Phase::Recovered : Phase::Finishing;
        return false;
      }
      case Phase::Recovered: {
        const int count = lost_since_grow_;
        emit("{\"event\":\"growing\",\"rank\":" + std::to_string(progress_.rank) +
             ",\"count\":" + std::to_string(count) + ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
        comm_ = comm_->grow(count);
        lost_since_grow_ = 0;
        phase_ = Phase::Grown;
        return false;
      }
      case Phase::Grown: {
        // The new processes learn where the others are from rank 0.
        std::int64_t at = static_cast<std::int64_t>(progress_.iteration);
        comm_->broadcast(&at, 1, DataType::Int64, 0);
        progress_.iteration = static_cast<std::uint64_t>(at);
        until_ = progress_.iteration + o_.after;
        if (!run_step(*comm_, o_, progress_)) return wrong_ = true;
        ++progress_.iteration;
        emit_phase("grown");
        phase_ = Phase::Finishing;
        return false;
      }
      case Phase::Finishing: {
        if (progress_.iteration >= until_) return true;
        if (!run_step(*comm_, o_, progress_)) return wrong_ = true;
        ++progress_.iteration;
        return false;
      }
    }
    return true;
  }

  // The campaign's recover-agree names, in the file DIE_FILE points to, the
  // rank that dies 1 ms into its first shrink(): while the others agree.
  void die_if_named() {
    static bool asked = false;
    const char* path = std::getenv("DIE_FILE");
    if (asked || path == nullptr) return;
    asked = true;
    std::ifstream in(path);
    int named = -1;
    if (!(in >> named) || named != progress_.rank) return;
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ::kill(::getpid(), SIGKILL);
    }).detach();
  }

  // After a failure: agree on who failed and go on without them; false when this rank may not.
  bool shrink() {
    emit("{\"event\":\"agreeing\",\"rank\":" + std::to_string(progress_.rank) +
         ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
    die_if_named();
    rdmx::ShrinkResult result;
    try {
      result = comm_->shrink();
    } catch (const rdmx::Error& e) {
      emit("{\"event\":\"refused\",\"rank\":" + std::to_string(progress_.rank) + ",\"code\":\"" +
           rdmx::to_string(e.code()) + "\",\"mono_ns\":" + std::to_string(mono_ns()) + ",\"message\":\"" +
           json_escape(e.what()) + "\"}");
      return false;
    }
    std::vector<int> first;
    for (int old : result.survivors) first.push_back(first_[static_cast<std::size_t>(old)]);
    for (int old : result.failed) {
      const int was = first_[static_cast<std::size_t>(old)];
      if (was >= 0) failed_.push_back(was);  // -1: a process that joined
    }
    std::sort(failed_.begin(), failed_.end());
    lost_since_grow_ += static_cast<int>(result.failed.size());
    first_ = std::move(first);
    const int kept = result.kept_connections;
    comm_ = std::move(result.communicator);
    emit("{\"event\":\"shrunk\",\"rank\":" + std::to_string(progress_.rank) +
         ",\"new_rank\":" + std::to_string(comm_->rank()) + ",\"size\":" + std::to_string(comm_->size()) +
         ",\"failed\":" + json_ints(failed_) + ",\"members\":" + json_ints(first_) +
         ",\"kept\":" + std::to_string(kept) + ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
    phase_ = Phase::Resume;
    return true;
  }

  void emit_phase(const char* name) {
    emit(std::string("{\"event\":\"") + name + "\",\"rank\":" + std::to_string(progress_.rank) +
         ",\"new_rank\":" + std::to_string(comm_->rank()) + ",\"size\":" + std::to_string(comm_->size()) +
         ",\"iteration\":" + std::to_string(progress_.iteration - 1) + ",\"mono_ns\":" + std::to_string(mono_ns()) +
         "}");
    if (phase_ == Phase::Grown) {
      // The grown communicator's numbering: the survivors' first numbers, then the joiners (-1).
      first_.resize(static_cast<std::size_t>(comm_->size()), -1);
    }
  }

  int finish() {
    emit("{\"event\":\"done\",\"rank\":" + std::to_string(progress_.rank) +
         ",\"iterations\":" + std::to_string(progress_.iteration) + ",\"size\":" + std::to_string(comm_->size()) +
         ",\"failed\":" + json_ints(failed_) + ",\"mono_ns\":" + std::to_string(mono_ns()) + "}");
    return 0;
  }

  const Options& o_;
  // Declared first so that it is destroyed last.
  std::unique_ptr<rdmx::Communicator> comm_;
  Progress progress_;
  Phase phase_ = Phase::Running;
  std::vector<int> first_;   // this communicator's ranks by their number in the first one (-1: joined)
  std::vector<int> failed_;  // first numbers of the ranks lost, sorted
  int lost_since_grow_ = 0;
  std::uint64_t until_ = 0;
  bool wrong_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  // As a launcher does after killing ranks (rdmx run): remove what they left on this host.
  if (argc == 2 && std::string_view(argv[1]) == "--remove-stale") {
    std::printf("%zu\n", rdmx::remove_stale_endpoints());
    return 0;
  }
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr,
                 "usage: rdmx_chaos_worker (--seconds S | --iterations N) [--seed X] [--max-bytes B]\n"
                 "                         [--recover --after N [--grow]]\n"
                 "       rdmx_chaos_worker --join --recover --after N [--seed X] [--max-bytes B]\n"
                 "       rdmx_chaos_worker --remove-stale\n"
                 "  one rank of scripts/chaos.py: random collectives, checked bit-exactly\n");
    return 2;
  }
  try {
    RecoveringRank rank(o);
    return rank.run();
  } catch (const rdmx::Error& e) {
    emit_error(e, Progress{});
    return 3;
  }
}
