// SPDX-License-Identifier: MIT
// rdmx/comm.hpp: collectives over the verbs-style core.
//
// A Communicator is a group of ranks that run collectives together, as an
// NCCL communicator or an MPI communicator:
//
//   auto comm = rdmx::Communicator::from_env();       // torchrun, mpirun, Slurm, rdmx run
//   comm->all_reduce(grad.data(), grad.data(), grad.size(), DataType::Float32, ReduceOp::Sum);
//   auto work = comm->iall_gather(mine, all, n, DataType::Int32);
//   ... overlap ...
//   work.wait();
//
// Semantics:
// - Collectives are matched by call order: every rank of the communicator
//   must call the same collectives in the same order, with the same type,
//   count, operation and root. Each call carries its sequence number and
//   those arguments; when ranks disagree, every rank gets an
//   rdmx::Error(Protocol) naming which ranks called what, instead of a hang
//   or wrong data.
// - Buffers are host memory, given as (pointer, element count, DataType).
//   In-place operation: pass the same pointer as send and receive buffer
//   (for all_gather/gather: send == recv + rank * count elements, as MPI_IN_PLACE).
// - Blocking calls return when this rank's part is done: its receive buffer
//   holds the result and its send buffer may be reused.
// - Asynchronous calls (i*) return a Work handle at once. Operations of one
//   communicator run one at a time, in call order (like NCCL operations on
//   one stream); a blocking call issued behind pending asynchronous ones
//   waits for them first.
// - Every wait is bounded by RDMX_TIMEOUT (or CommOptions::timeout). A rank
//   that never arrives makes the others fail with a Timeout error naming the
//   missing ranks and the collective's sequence number. A dead peer gives
//   PeerFailure. After any error the communicator is unusable: destroy it,
//   or shrink() it to go on with the ranks that are left.
// - Failures are watched for all the time, not only inside calls: each
//   communicator keeps a control connection to every peer with a heartbeat.
//   A killed rank is found at once and a stopped or cut-off one after
//   RDMX_TIMEOUT without a heartbeat; either revokes the communicator on
//   every survivor (every pending and later operation fails with
//   PeerFailure, Error::context().failed_ranks naming them).
// - Floating-point reductions are deterministic: the same inputs, rank count
//   and algorithm give the same bits on every run, and every rank gets the
//   same bits. fp16 and bf16 are reduced in fp32 and rounded once per step.
//   Avg is a sum followed by one division by the rank count (floating types only).
// - Algorithms are chosen by operation, size and rank count from a table;
//   RDMX_ALGO (or CommOptions::algo) forces one, e.g. "ring", or per
//   operation "all_reduce:rd,broadcast:tree". `rdmx info` and RDMX_DEBUG=INFO
//   show what was chosen and why.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmx/bootstrap.hpp"
#include "rdmx/error.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// ---------------------------------------------------------------------------
// Element types and reduction operations.
enum class DataType : std::uint8_t {
  Int8,
  Uint8,
  Int32,
  Uint32,
  Int64,
  Uint64,
  Float16,   // IEEE 754 binary16, stored as 16 bits
  BFloat16,  // bfloat16 (the upper half of a binary32), stored as 16 bits
  Float32,
  Float64,
};
inline constexpr int kDataTypeCount = 10;
std::size_t size_of(DataType type) noexcept;    // bytes per element
const char* to_string(DataType type) noexcept;  // "fp32", "bf16", "int8", ...
bool is_floating(DataType type) noexcept;

enum class ReduceOp : std::uint8_t { Sum, Prod, Min, Max, Avg };
inline constexpr int kReduceOpCount = 5;
const char* to_string(ReduceOp op) noexcept;  // "sum", "prod", "min", "max", "avg"

// The collective operations, for errors, logs and algorithm selection.
enum class CollOp : std::uint8_t {
  AllReduce,
  AllGather,
  ReduceScatter,
  Broadcast,
  Reduce,
  AllToAll,
  AllToAllv,
  Gather,
  Scatter,
  Barrier,
  Send,
  Recv,
  SendRecv,
};
const char* to_string(CollOp op) noexcept;  // "all_reduce", ...

// ---------------------------------------------------------------------------
// A pending asynchronous operation.
namespace coll {
class RDMX_INTERNAL Executor;
class RDMX_INTERNAL CommunicatorCore;
}  // namespace coll
class Work {
 public:
  struct RDMX_INTERNAL State;
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  // True once the operation has finished; rethrows its error if it failed.
  bool test();
  // Waits until it finishes (default bound: the communicator's timeout).
  // Throws the operation's error, or Timeout if it is still running when the
  // bound passes (the operation itself goes on, bounded by its own timeout).
  void wait(std::chrono::milliseconds timeout);
  void wait();
  bool valid() const noexcept { return state_ != nullptr; }

 private:
  std::shared_ptr<State> state_;
};

// ---------------------------------------------------------------------------
struct CommOptions {
  std::string provider;                   // empty: RDMX_PROVIDER, else "auto"
  std::string algo;                       // empty: RDMX_ALGO, else the cost model
  std::chrono::milliseconds timeout{-1};  // negative: RDMX_TIMEOUT
  std::string tag = "comm";               // store key prefix (several communicators per store)
  bool profile = true;                    // record into RDMX_PROFILE's trace (rdmx/profile.hpp) when it is set
};

// Where a rank lives, as the communicator learnt it at creation.
struct RankPlacement {
  std::string host;  // host name
  int local_rank = 0;
  int local_size = 1;
};

// The memory a communicator's buffers take on one host, and what the host
// can give them (docs/COLLECTIVES.md, "Memory"). Every rank maps, for every
// peer it connects to, an inbox and a staging area of RDMX_COLL_BUFFSIZE,
// resident from when the pair connects, plus its share of the shm rings to
// a local peer. A communicator connects its ring neighbours when it is
// made and other peers when an operation first uses them; this estimates
// the ring neighbours and the partners of the log-depth algorithms (2 + 2
// log2 n peers). An operation that connects beyond what the host can give
// (an all_to_all connects everyone) is refused when first called.
struct CommMemory {
  int ranks = 0;               // in the communicator
  int local_ranks = 0;         // of them on the host
  std::string host;            // its name ("" for this host)
  std::size_t buffsize = 0;    // RDMX_COLL_BUFFSIZE in force
  int peers = 0;               // the peers a rank is expected to connect to: 2 + 2 log2(ranks), at most ranks - 1
  std::size_t per_peer = 0;    // bytes one rank maps for each peer it connects to
  std::size_t per_rank = 0;    // bytes one rank maps in all, for `peers` peers
  std::size_t per_host = 0;    // per_rank x local_ranks
  std::size_t available = 0;   // what the host can give them; 0: unknown or not checked
  std::string available_from;  // where `available` comes from (RDMX_COLL_MEMORY)
  // The largest power-of-two RDMX_COLL_BUFFSIZE, from 64K up to the one in
  // force, at which the buffers fit; 0 if none does.
  std::size_t fitting_buffsize = 0;

  bool fits() const noexcept { return available == 0 || per_host <= available; }
};

// For `ranks` ranks, `local_ranks` of them on this host, at the RDMX_COLL_*
// settings in force, with what this host can give now: RDMX_COLL_MEMORY, by
// default MemAvailable and this process's cgroup memory limits. Throws
// Error(Config) for a malformed RDMX_COLL_MEMORY.
CommMemory comm_memory(int ranks, int local_ranks);
// Throws Error(Config) when `memory` does not fit, naming every figure and
// the settings that change them; `op` says who checks ("rdmx run -n 64").
void require_comm_memory_fits(const CommMemory& memory, const std::string& op, int rank = -1);

class Communicator;

// What Communicator::shrink() gives every survivor.
struct ShrinkResult {
  // The survivors, ranked 0, 1, ... in their order in the old communicator.
  std::unique_ptr<Communicator> communicator;
  // Ranks of the old communicator: the ones agreed failed, and the old rank
  // of each new rank (survivors[new rank] == old rank).
  std::vector<int> failed;
  std::vector<int> survivors;
  // How many of this rank's connections to the other survivors were kept
  // from the old communicator; the rest (those a failed operation left
  // with work in flight) were made anew. None when nothing failed: the old
  // communicator then stays usable and keeps its own.
  int kept_connections = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Collective over `size` ranks that share `store`: opens a device, connects
  // every pair and exchanges buffers. Throws on a bad rank/size, an
  // unreachable peer, or a timeout naming the ranks that did not arrive;
  // refuses (Error(Config)) before mapping anything when the buffers of the
  // ranks sharing a host would not fit in its memory (CommMemory).
  static std::unique_ptr<Communicator> create(std::shared_ptr<Store> store, int rank, int size,
                                              const CommOptions& options = {});
  // rdmx::from_env() (torchrun, Open MPI, MPICH, Slurm, rdmx run, RDMX_*), then create().
  static std::unique_ptr<Communicator> from_env(const CommOptions& options = {});
  // A new process joining a running job: a replacement for a rank that
  // died, or one more. It waits, up to the timeout, for the job's ranks to
  // call grow() (on a communicator made with the same store and
  // `options.tag`, or one shrunk or grown from it), and returns its place
  // in the communicator grow() makes: the ranks after theirs, in the order
  // the new processes arrived.
  static std::unique_ptr<Communicator> join(std::shared_ptr<Store> store, const CommOptions& options = {});

  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  virtual const RankPlacement& placement() const noexcept = 0;
  int local_rank() const noexcept { return placement().local_rank; }
  int local_size() const noexcept { return placement().local_size; }
  // How each peer is reached ("shm", "tcp"); empty for this rank and for a
  // peer not connected yet (pairs connect on first use).
  virtual std::vector<std::string> peer_providers() const = 0;
  // The device this rank's links go through, as Device::name() says it
  // (each provider's, with its interface and address where it has them).
  virtual std::string device_name() const = 0;
  // What the communicator built from where its ranks live, one line each:
  // the hosts and their ranks, the hierarchical algorithms' rings within and
  // across the hosts, and their trees across the hosts.
  virtual std::string describe_topology() const = 0;
  // The algorithm `op` takes for `bytes` (as nccl-tests counts them: the
  // whole output of all_gather, the whole input of reduce_scatter), and why ("ring: table
  // choice for ...", "hier: forced by RDMX_ALGO=...").
  virtual std::string explain_algorithm(CollOp op, std::size_t bytes) const = 0;

  // Collective: ranks with the same color form a new communicator, ordered by
  // (key, rank in this one). A negative color joins none and returns null.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // Fails every pending and future operation of this communicator with an
  // Error(InvalidState) carrying `reason`, at once, and tells the peers
  // (best effort), whose operations then fail with PeerFailure.
  virtual void abort(const std::string& reason) = 0;

  // After a failure, collective over the survivors: they agree, with no
  // coordinator, on which ranks failed (the agreement survives more
  // failures, during it too), and each gets the same new communicator of
  // the others, renumbered in their old order, over the connections among
  // them that still work (the others are made anew). This communicator
  // stays revoked; destroy it after. Called with no failure, it gives a
  // communicator of everyone. Bounded by the timeout; a rank that cannot go
  // on gets an Error: PeerFailure when the others counted it failed,
  // InvalidState when too few ranks are left to be sure this side is not
  // the smaller of a cut (a group goes on with more than half of its ranks,
  // or exactly half if it wins the tie in the store). The store must still
  // be reachable, so keep it apart from the ranks (rdmx_store, a file
  // store, torchrun's agent) when ranks may die.
  virtual ShrinkResult shrink() = 0;
  // The first half of shrink(): agrees with the other survivors on which
  // ranks failed and returns them (ranks of this communicator), making
  // nothing; a shrink() after it builds from the same decision (torch's
  // shrink_group takes the list first). Throws as shrink() does.
  virtual std::vector<int> agree_failures() = 0;
  // Collective: makes room for `count` new processes that call join(), and
  // returns, here and to them, one communicator of this one's ranks
  // (keeping their numbers) followed by theirs. The existing ranks restart
  // nothing. The new processes find the job in `store` (null: the store
  // this communicator was made with) under the first communicator's tag.
  // Bounded by the timeout (a new process that does not come: a Timeout
  // naming it); this communicator stays usable either way.
  virtual std::unique_ptr<Communicator> grow(int count, std::shared_ptr<Store> store = nullptr) = 0;
  // The sequence number the next collective will carry (starts at 1).
  virtual std::uint64_t next_sequence() const noexcept = 0;
  // Orders this rank's later operations on device buffers on the CUDA
  // stream `stream` (a CUstream or cudaStream_t of the buffers' GPU), as
  // NCCL orders its own: an operation waits for the work queued on the
  // stream before the call (which may write its inputs), and work queued on
  // the stream after the call waits for the operation (which writes its
  // outputs). Blocking calls still return once done, asynchronous ones give
  // a Work that completes with the operation; a failure is reported there,
  // and the stream goes on. Null, the default: no ordering (the caller
  // synchronizes). Operations on host buffers ignore it.
  virtual void set_cuda_stream(void* stream) = 0;

  // --- collectives (blocking). Counts are in elements. -------------------
  // recv[i] = op over ranks of send[i]; count elements each.
  void all_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  // recv = concat over ranks of send (count each; recv holds size()*count).
  void all_gather(const void* send, void* recv, std::size_t count, DataType type);
  // send holds size()*count; recv (count) = op over ranks of send[rank*count..].
  void reduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  // buf on root is copied to buf on every rank.
  void broadcast(void* buf, std::size_t count, DataType type, int root);
  // recv on root = op over ranks of send; recv is ignored elsewhere.
  void reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  // send holds size()*count; block j goes to rank j; recv block i comes from rank i.
  void all_to_all(const void* send, void* recv, std::size_t count, DataType type);
  // Counts and displacements in elements, size() entries each.
  void all_to_allv(const void* send, std::span<const std::size_t> send_counts, std::span<const std::size_t> send_displs,
                   void* recv, std::span<const std::size_t> recv_counts, std::span<const std::size_t> recv_displs,
                   DataType type);
  // recv on root (size()*count) = concat over ranks of send.
  void gather(const void* send, void* recv, std::size_t count, DataType type, int root);
  // send on root (size()*count); rank i gets block i.
  void scatter(const void* send, void* recv, std::size_t count, DataType type, int root);
  void barrier();
  // Point to point, matched in order per pair. A send of more than
  // RDMX_COLL_STAGE_LIMIT (16 KiB) is written from `buf` in place and
  // completes only as the peer receives: to exchange with a peer, use
  // send_recv, not send then recv on both sides.
  void send(const void* buf, std::size_t count, DataType type, int peer);
  void recv(void* buf, std::size_t count, DataType type, int peer);
  void send_recv(const void* send_buf, std::size_t send_count, int dest, void* recv_buf, std::size_t recv_count,
                 int source, DataType type);

  // --- the same, asynchronous ---------------------------------------------
  Work iall_reduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work iall_gather(const void* send, void* recv, std::size_t count, DataType type);
  Work ireduce_scatter(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op);
  Work ibroadcast(void* buf, std::size_t count, DataType type, int root);
  Work ireduce(const void* send, void* recv, std::size_t count, DataType type, ReduceOp op, int root);
  Work iall_to_all(const void* send, void* recv, std::size_t count, DataType type);
  // The count and displacement spans are copied at the call.
  Work iall_to_allv(const void* send, std::span<const std::size_t> send_counts,
                    std::span<const std::size_t> send_displs, void* recv, std::span<const std::size_t> recv_counts,
                    std::span<const std::size_t> recv_displs, DataType type);
  Work igather(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work iscatter(const void* send, void* recv, std::size_t count, DataType type, int root);
  Work ibarrier();
  Work isend(const void* buf, std::size_t count, DataType type, int peer);
  Work irecv(void* buf, std::size_t count, DataType type, int peer);
  Work isend_recv(const void* send_buf, std::size_t send_count, int dest, void* recv_buf, std::size_t recv_count,
                  int source, DataType type);

 private:
  // Every communicator is a coll::CommunicatorCore (src/coll/communicator_internal.hpp).
  friend class coll::CommunicatorCore;
  Communicator() = default;
};

}  // namespace rdmx
RDMX_API_END
