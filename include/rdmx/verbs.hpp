// SPDX-License-Identifier: MIT
// rdmx/verbs.hpp: the verbs-style core API.
//
// It mirrors InfiniBand verbs for a reliable-connected (RC) queue pair, and
// behaves the same on every provider:
//
//   auto dev = rdmx::open_device("tcp");          // or "auto"
//   auto pd  = dev->alloc_pd();
//   auto mr  = pd->register_memory(buf, len, Access::LocalWrite | Access::RemoteWrite);
//   auto cq  = dev->create_cq(256);
//   auto qp  = dev->create_qp(*pd, *cq, *cq);
//   send qp->local_address() to the peer out of band, receive theirs, then
//   qp->connect(peer_address);
//   qp->post_send(...); cq->wait(...);
//
// Semantics follow IB RC: reliable and in order per QP; RDMA WRITE consumes no
// receive; SEND and WRITE_WITH_IMM consume one; a remote access outside a
// registered region, with a wrong key or without the right gives
// REM_ACCESS_ERR and leaves target memory untouched; any error moves the QP to
// ERROR, after which every outstanding work request completes with
// WR_FLUSH_ERR. READ and atomics are served without the target application
// calling anything.
//
// Threads: objects may be used from several threads; post_send/post_recv on
// one QP are serialised internally.
//
// Lifetimes: a Device's children are its PDs, CQs and QPs; a PD's its
// memory regions and QPs; a CQ's the QPs that complete into it. IB refuses
// to destroy a parent while children live (ibv_dealloc_pd, ibv_destroy_cq
// and ibv_close_device answer EBUSY); rdmx::destroy() does the same, naming
// them (InvalidState). A destructor cannot refuse, so every child holds its
// parent's state: destroying a parent first (a PD or CQ handle, or the last
// shared_ptr to a Device) is safe, never undefined; the parent's resources
// are released with its last child, and a PD or CQ destroyed so logs a
// warning naming the children it left. Destroy in reverse order, or call
// destroy() to have the order checked.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "rdmx/error.hpp"

#include "rdmx/export.hpp"

RDMX_API_BEGIN

namespace rdmx {

// ---------------------------------------------------------------------------
// Access rights of a memory region (ibv_access_flags).
enum class Access : std::uint32_t {
  None = 0,
  LocalWrite = 1u << 0,    // the local side may write (RECV, READ target, atomic result)
  RemoteWrite = 1u << 1,   // peers may RDMA WRITE into it (requires LocalWrite, as in IB)
  RemoteRead = 1u << 2,    // peers may RDMA READ from it
  RemoteAtomic = 1u << 3,  // peers may run atomics on it (requires LocalWrite)
};
constexpr Access operator|(Access a, Access b) {
  return static_cast<Access>(static_cast<std::uint32_t>(a) | static_cast<std::uint32_t>(b));
}
constexpr bool has(Access set, Access flag) {
  return (static_cast<std::uint32_t>(set) & static_cast<std::uint32_t>(flag)) != 0;
}
std::string to_string(Access access);  // "LOCAL_WRITE|REMOTE_READ"

// ---------------------------------------------------------------------------
// Work requests and completions.
enum class Opcode : std::uint8_t {
  Send,
  SendWithImm,
  RdmaWrite,
  RdmaWriteWithImm,
  RdmaRead,
  AtomicFetchAdd,
  AtomicCmpSwap,
};
const char* to_string(Opcode op) noexcept;  // "RDMA_WRITE", ...

// Completion status, named and ordered as ibv_wc_status.
enum class WcStatus : std::uint8_t {
  Success,
  LocLenErr,
  LocQpOpErr,
  LocEecOpErr,
  LocProtErr,
  WrFlushErr,
  MwBindErr,
  BadRespErr,
  LocAccessErr,
  RemInvReqErr,
  RemAccessErr,
  RemOpErr,
  RetryExcErr,
  RnrRetryExcErr,
  LocRddViolErr,
  RemInvRdReqErr,
  RemAbortErr,
  InvEecnErr,
  InvEecStateErr,
  FatalErr,
  RespTimeoutErr,
  GeneralErr,
};
const char* to_string(WcStatus status) noexcept;  // "REM_ACCESS_ERR", ...

// What a completion completes (ibv_wc_opcode).
enum class WcOpcode : std::uint8_t {
  Send,
  RdmaWrite,
  RdmaRead,
  CompSwap,
  FetchAdd,
  Recv,             // a SEND or SEND_WITH_IMM consumed this receive
  RecvRdmaWithImm,  // an RDMA_WRITE_WITH_IMM consumed this receive
};
const char* to_string(WcOpcode op) noexcept;

// One scatter-gather element: local memory covered by the region with `lkey`.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

struct SendWr {
  std::uint64_t wr_id = 0;
  Opcode opcode = Opcode::Send;
  std::span<const Sge> sg_list;   // copied at post time; may be reused after post_send returns
  bool signaled = true;           // false: no completion on success (errors always complete)
  std::uint32_t imm_data = 0;     // SendWithImm / RdmaWriteWithImm (host order)
  std::uint64_t remote_addr = 0;  // RDMA and atomics: target virtual address
  std::uint32_t rkey = 0;         // RDMA and atomics: target region key
  std::uint64_t compare_add = 0;  // FetchAdd: addend; CmpSwap: compare value
  std::uint64_t swap = 0;         // CmpSwap: value written when equal
  // Atomics write the original 8-byte target value into sg_list[0] (8 bytes).
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;  // copied at post time
};

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::Success;
  WcOpcode opcode = WcOpcode::Send;
  std::uint32_t byte_len = 0;  // receives, READ and atomics: bytes placed locally
  std::uint32_t imm_data = 0;
  bool with_imm = false;
  std::uint32_t qp_num = 0;
};

// ---------------------------------------------------------------------------
// Where a region's memory lives. Host memory includes pinned host memory
// (cudaHostAlloc) and CUDA managed memory, which the CPU reaches directly.
enum class MemoryType : std::uint8_t {
  Host,
  Cuda,  // device memory of one GPU (cudaMalloc, cuMemCreate + cuMemMap, or inside either)
};
const char* to_string(MemoryType type) noexcept;  // "host", "cuda"

// How a provider serves CUDA device memory (DeviceCaps::cuda_memory).
enum class CudaMemorySupport : std::uint8_t {
  None,         // register_memory refuses device memory
  Staging,      // copied through host buffers of the provider's, within RDMX_CUDA_STAGING_BYTES per QP
  PeerMapping,  // peers on the host map the GPU buffer (CUDA IPC): copies run on the GPU's copy engines
  DmaBuf,       // the NIC reads and writes GPU memory itself (GPUDirect RDMA through dma-buf)
};
const char* to_string(CudaMemorySupport support) noexcept;  // "none", "staging", "peer-mapping", "dma-buf"

// Where [addr, addr+length) lives, as register_memory finds it: cuda for a
// GPU's device memory (asked of the CUDA driver, in a process that runs
// one), host otherwise. Throws InvalidArgument for device memory that runs
// past the end of its allocation.
MemoryType memory_type(const void* addr, std::size_t length);

// ---------------------------------------------------------------------------
// Memory registration. Destroying a MemoryRegion deregisters it: its lkey and
// rkey stop working at once, for local and remote users alike.
// Something a thread can sleep on until it happens (a peer's WRITE landing
// in a region: MemoryRegion::write_doorbell()). Read epoch(), test the
// condition, then block(seen, deadline): it returns once epoch() has moved
// past `seen`, at `deadline`, or after a short slice (test again).
class Doorbell {
 public:
  virtual ~Doorbell() = default;
  virtual std::uint32_t epoch() const noexcept = 0;
  virtual void block(std::uint32_t seen, std::chrono::steady_clock::time_point deadline) const noexcept = 0;
};

namespace core {
class RDMX_INTERNAL RegionBase;  // what providers' regions derive from (src/driver/provider.hpp)
}

// When the pages of a region from ProtectionDomain::allocate_memory() take
// memory. Now: at once, as a pinned registration does, so no access faults
// inside a transfer. OnFirstTouch: where they are first written, here or by
// a peer, for a region of which only some parts are ever used (a
// communicator's per-peer buffers, of which it uses the connected peers');
// the owner may make a part resident ahead with make_resident(). Where
// registration pins memory (caps().registration_pins_memory) every page is
// resident at once either way.
enum class Residency : std::uint8_t { Now, OnFirstTouch };
// Makes [addr, addr + length) of this process's memory resident without
// changing its contents (madvise MADV_POPULATE_WRITE, or a touch of each
// page where the kernel lacks it). A peer may be writing into it meanwhile.
void make_resident(void* addr, std::size_t length) noexcept;

// Made only by ProtectionDomain::register_memory() and allocate_memory().
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  MemoryRegion(const MemoryRegion&) = delete;
  MemoryRegion& operator=(const MemoryRegion&) = delete;

  void* addr() const noexcept { return addr_; }
  std::size_t length() const noexcept { return length_; }
  std::uint32_t lkey() const noexcept { return lkey_; }
  std::uint32_t rkey() const noexcept { return rkey_; }
  Access access() const noexcept { return access_; }
  MemoryType memory_type() const noexcept { return memory_type_; }
  // The GPU ordinal of CUDA memory, -1 for host memory.
  int cuda_device() const noexcept { return cuda_device_; }
  // A ready-made SGE over [addr() + offset, +length).
  Sge sge(std::size_t offset, std::uint32_t length) const;
  // Rings once each peer RDMA WRITE (with or without immediate) into this
  // region has landed, so a thread waiting for data sleeps until it comes
  // rather than polling. Regions from allocate_memory() on a device whose
  // caps().writes_wake_waiters; null otherwise. Lives as long as the region.
  const Doorbell* write_doorbell() const noexcept { return write_doorbell_; }

 private:
  friend class core::RegionBase;
  MemoryRegion(void* addr, std::size_t length, std::uint32_t lkey, std::uint32_t rkey, Access access,
               MemoryType memory_type, int cuda_device)
      : addr_(addr),
        length_(length),
        lkey_(lkey),
        rkey_(rkey),
        access_(access),
        memory_type_(memory_type),
        cuda_device_(cuda_device) {}

  void* addr_;
  std::size_t length_;
  std::uint32_t lkey_;
  std::uint32_t rkey_;
  Access access_;
  MemoryType memory_type_;
  int cuda_device_;
  const Doorbell* write_doorbell_ = nullptr;
};

// The live children of a device, protection domain or completion queue, by
// kind: what destroy() refuses for.
struct LiveChildren {
  std::size_t protection_domains = 0;
  std::size_t completion_queues = 0;
  std::size_t queue_pairs = 0;
  std::size_t memory_regions = 0;
  bool empty() const noexcept {
    return protection_domains == 0 && completion_queues == 0 && queue_pairs == 0 && memory_regions == 0;
  }
  std::string to_string() const;  // "2 queue pairs, 1 memory region", or "none"
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  // Its memory regions and QPs that are still alive.
  virtual LiveChildren live_children() const = 0;
  // Registers [addr, addr+length). Keys are unguessable and unique while
  // registered. Throws InvalidArgument for a null address with non-zero
  // length, or rights IB would refuse (RemoteWrite/RemoteAtomic without LocalWrite).
  // Host memory must be mapped, every byte of it, readable, and writable
  // where any write right is asked (as ibv_reg_mr, which fails with EFAULT
  // otherwise); InvalidArgument names the first part that is not. Where
  // nothing pins the pages (caps().registration_pins_memory false), a region
  // whose memory is later unmapped, remapped or dropped (madvise) grants no
  // access any more: a peer's access gets REM_ACCESS_ERR, a local one
  // LOC_PROT_ERR (rdmx::unmap_detection() says whether this process can
  // tell; where it cannot, such an access touches whatever is mapped there).
  // CUDA device memory is recognised by the driver, when the process runs
  // one, and may start anywhere inside an allocation but must end inside
  // it (InvalidArgument otherwise); a provider whose caps().cuda_memory is
  // None refuses it with NotSupported.
  virtual std::unique_ptr<MemoryRegion> register_memory(void* addr, std::size_t length, Access access) = 0;
  // Allocates `length` zeroed bytes that processes on this host can map, and
  // registers them (as ucp_mem_map with ALLOCATE, or ncclMemAlloc). The
  // memory is freed when the region is destroyed. Every provider accepts
  // such regions; the shm provider lets a peer copy into or out of them
  // directly, one-sidedly, instead of through the target process.
  // `residency`: see Residency.
  virtual std::unique_ptr<MemoryRegion> allocate_memory(std::size_t length, Access access,
                                                        Residency residency = Residency::Now) = 0;
};

// ---------------------------------------------------------------------------
// Completion queue. When a completion arrives and the CQ is full, the CQ
// overflows: it is an error (every later poll/wait throws QueueFull and QPs
// using it go to ERROR), never a silently lost completion.
class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  virtual std::size_t depth() const noexcept = 0;
  // The QPs still alive that complete into it.
  virtual LiveChildren live_children() const = 0;
  // Non-blocking: takes up to out.size() completions, returns how many.
  virtual std::size_t poll(std::span<WorkCompletion> out) = 0;
  // Blocks until at least one completion or the timeout (default RDMX_TIMEOUT)
  // passes; spins briefly, then sleeps. Throws Timeout on expiry.
  virtual std::size_t wait(std::span<WorkCompletion> out, std::chrono::milliseconds timeout) = 0;
  std::size_t wait(std::span<WorkCompletion> out);
};

// ---------------------------------------------------------------------------
// Reliable-connected queue pair.
struct QpCaps {
  std::uint32_t max_send_wr = 1024;
  std::uint32_t max_recv_wr = 1024;
  std::uint32_t max_send_sge = 16;
  std::uint32_t max_recv_sge = 16;
  std::uint32_t max_inline_data = 0;  // clamped to DeviceCaps; actual values via QueuePair::caps()
};

enum class QpState : std::uint8_t { Reset, Init, Rtr, Rts, Error };
const char* to_string(QpState state) noexcept;

// A QP's address, to be exchanged out of band. Opaque bytes with a stable,
// printable hex form so it can travel through any store or launcher.
struct QpAddress {
  std::vector<std::uint8_t> bytes;
  std::string to_hex() const;
  static QpAddress from_hex(std::string_view hex);  // throws InvalidArgument
};

struct ConnectOptions {
  int peer_rank = -1;  // only used to label errors and logs
  // RNR retry bound: how long a SEND waits for the peer to post a receive
  // before failing with RNR_RETRY_EXC_ERR. Default: RDMX_RNR_TIMEOUT (1 s).
  std::chrono::milliseconds rnr_timeout{-1};
};

struct DeviceCaps;

// What try_post_send() did.
enum class PostResult : std::uint8_t {
  Ok,         // posted
  QueueFull,  // not posted: the send queue is full (poll the send CQ, then post again)
};
const char* to_string(PostResult result) noexcept;  // "OK", "QUEUE_FULL"

class QueuePair {
 public:
  virtual ~QueuePair() = default;

  virtual std::uint32_t qp_num() const noexcept = 0;
  virtual QpState state() const noexcept = 0;
  virtual QpCaps caps() const noexcept = 0;
  // The capabilities of the device that carries this QP's traffic: for an
  // auto QP, those of the provider connect() chose (before it, the auto
  // device's).
  virtual DeviceCaps device_caps() const = 0;
  virtual std::string provider() const = 0;
  // Why the QP entered ERROR, empty otherwise.
  virtual std::string error_reason() const = 0;

  // Valid from creation on.
  virtual QpAddress local_address() const = 0;
  // RESET -> INIT (also done by connect()). Receives may be posted in INIT.
  virtual void init() = 0;
  // INIT -> RTR -> RTS towards `remote`. Does not wait for the peer: like IB,
  // work posted before the peer connects is delivered once it does; if the
  // peer never does, it fails with RETRY_EXC_ERR after RDMX_TIMEOUT.
  virtual void connect(const QpAddress& remote, const ConnectOptions& options) = 0;
  void connect(const QpAddress& remote) { connect(remote, ConnectOptions{}); }
  // Moves the QP to ERROR: outstanding work completes with WR_FLUSH_ERR.
  virtual void set_error(const std::string& reason) = 0;

  // Posting throws InvalidArgument for malformed requests (too many SGEs,
  // bad opcode, unaligned atomic, inline too large), QueueFull when the queue
  // is full and InvalidState before INIT (recv) or RTS (send). Key and bounds
  // problems complete with an error status instead, as in IB.
  virtual void post_send(const SendWr& wr) = 0;
  virtual void post_recv(const RecvWr& wr) = 0;
  // post_send for a loop that expects the queue to fill: a full send queue
  // is PostResult::QueueFull, at no more cost than a post, instead of an
  // exception; every other problem throws as post_send does.
  virtual PostResult try_post_send(const SendWr& wr) = 0;
  // Posts `wrs` in order, as one list (ibv_post_send with a chained list): a
  // provider over hardware rings the doorbell once for the lot. Same checks
  // and completions as posting each; if one throws, those before it are
  // posted, it and those after are not, and the error names its index.
  virtual void post_send_batch(std::span<const SendWr> wrs);
};

// ---------------------------------------------------------------------------
// What a provider can do; collectives and tools choose by these, never by name.
struct DeviceCaps {
  bool remote_peers = false;     // can reach other hosts
  bool same_host_peers = false;  // can reach processes on this host
  bool auto_progress = false;    // READ/atomics served without target calls
  // The last 8 bytes of an RDMA WRITE (of at least 8 bytes, ending on an
  // 8-byte boundary) become visible to the target's CPUs only after every
  // other byte of it, and as one 8-byte store: a target may poll them to
  // learn that the whole WRITE has landed (what perftest does with the last
  // byte, and what HCAs writing in address order give in practice; IB does
  // not promise it, so a provider claims it only where it enforces it).
  bool ordered_write_placement = false;
  // Registration pins the pages a region had when registered (an RDMA NIC
  // does): if the application frees the memory and gets new memory at the
  // same address, an old registration still points at the old pages. A
  // caller that keeps registrations of memory it does not own (a cache)
  // must drop them when that memory may have changed.
  bool registration_pins_memory = false;
  // A peer's RDMA WRITE into a region from allocate_memory() rings the
  // region's write_doorbell() once it has landed (software providers; an
  // RDMA NIC writes memory without telling any thread).
  bool writes_wake_waiters = false;
  // A peer's RDMA WRITE into a region from register_memory() is placed by
  // the transport as it arrives (a socket's receive, a NIC's DMA), at no
  // more cost than into memory from allocate_memory(). Where false (shm),
  // such a WRITE costs a copy across processes that the target's own
  // mapped memory does not. Collectives write large payloads straight into
  // receivers' buffers where it holds.
  bool direct_registered_writes = false;
  std::uint64_t max_msg_size = 0;  // bytes per work request
  std::uint32_t max_qp_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t max_inline_data = 0;
  // Host memory is served by every provider; CUDA device memory as this says.
  CudaMemorySupport cuda_memory = CudaMemorySupport::None;
  // What the provider declares of its links (`rdmx info` shows the basis):
  // one small message's one-way latency and one large transfer's bandwidth
  // in GB/s (1e9 bytes). An auto device gives the least favourable of its
  // providers'; a QP's device_caps() those of the provider carrying it.
  double latency_us = 0;
  double bandwidth_gbps = 0;
  // Host memory one connection to a process on this host maps (shm's rings),
  // counted once for the pair.
  std::size_t same_host_connection_memory = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string provider() const = 0;  // "tcp"
  virtual std::string name() const = 0;      // e.g. "tcp:eth0/10.0.0.1"
  // Why this provider and interface were chosen (for `rdmx info`, INFO logs).
  virtual std::string selection_reason() const = 0;
  virtual DeviceCaps caps() const = 0;
  // Its PDs, CQs and QPs that are still alive.
  virtual LiveChildren live_children() const = 0;

  virtual std::unique_ptr<ProtectionDomain> alloc_pd() = 0;
  virtual std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) = 0;
  virtual std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                               const QpCaps& caps) = 0;
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq) {
    return create_qp(pd, send_cq, recv_cq, QpCaps{});
  }

  // Drives the provider's progress from the calling thread (as
  // ucp_worker_progress). Never required for correctness, since a background
  // engine progresses idle devices, but a thread that spins on memory flags
  // gets the lowest latency by calling it in its loop. Returns events handled.
  virtual std::size_t progress() = 0;
};

// Destroys the object and nulls the pointer, as ibv_dealloc_pd,
// ibv_destroy_cq and ibv_close_device do: while it has live children (a
// PD's regions or QPs, a CQ's QPs, a device's PDs, CQs or QPs) it throws
// InvalidState naming them, where IB answers EBUSY, and leaves the pointer
// as it was. A device's pointer is dropped; the device closes once no
// other shared_ptr holds it.
void destroy(std::unique_ptr<ProtectionDomain>& pd);
void destroy(std::unique_ptr<CompletionQueue>& cq);
void destroy(std::shared_ptr<Device>& device);

// Names of the providers compiled in, best first.
std::vector<std::string> available_providers();

// Removes what processes of this user left on this host when they died
// without closing their devices (a SIGKILL): the shm provider's socket
// files. Every device opened later does this too; a launcher that killed
// ranks calls it so the job leaves nothing behind. Returns how many.
std::size_t remove_stale_endpoints();

// Opens a device. `provider` is a provider name, or "auto" (the default, also
// overridden by RDMX_PROVIDER) which picks the best available one and records
// why in Device::selection_reason(). Throws NotFound naming the providers that
// exist when the name is unknown.
std::shared_ptr<Device> open_device(std::string_view provider = "auto");

}  // namespace rdmx
RDMX_API_END
