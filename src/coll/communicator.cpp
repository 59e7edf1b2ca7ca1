// SPDX-License-Identifier: MIT
// The Communicator: argument checks, sequence numbers, algorithm choice, and
// the operations it hands its executor (coll/executor.hpp).
#include <algorithm>

#include "coll/algorithms.hpp"
#include "coll/comm_memory.hpp"
#include "coll/cuda/device_ops.hpp"
#include "coll/cuda/kernels.hpp"
#include "coll/cuda/stream_order.hpp"
#include "coll/executor.hpp"
#include "coll/links.hpp"
#include "coll/rank_placement.hpp"
#include "coll/reduce.hpp"
#include "coll/selection.hpp"
#include "coll/settings.hpp"
#include "rdmx/profile.hpp"
#include "services/config.hpp"
#include "services/cuda/driver.hpp"
#include "services/cuda/memory.hpp"
#include "services/cuda/pointer.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/settings.hpp"
#include "services/wait.hpp"

namespace rdmx {

// ---------------------------------------------------------------------------
bool Work::test() {
  if (!state_) throw Error(ErrorCode::InvalidState, "test() on an empty Work handle", {.op = "Work::test"});
  const auto s = state_->status.load(std::memory_order_acquire);
  if (s == State::kFailed) std::rethrow_exception(state_->error);
  return s == State::kDone;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw Error(ErrorCode::InvalidState, "wait() on an empty Work handle", {.op = "Work::wait"});
  profile::waited(state_->profile_id);
  // Run it here if nobody has started it: no thread hop for a wait that
  // follows its call. Not under a bound shorter than the operation's own,
  // which running it could overstay.
  if (timeout.count() < 0 || timeout >= state_->timeout) {
    if (auto executor = state_->executor.lock()) executor->run_until(state_.get());
  }
  auto r = core::wait_until([&] { return state_->status.load(std::memory_order_acquire) != State::kPending; },
                            &state_->word, core::deadline_after(timeout));
  if (r != core::WaitResult::Ready) {
    throw Error(ErrorCode::Timeout, state_->what + " is still running after " + std::to_string(timeout.count()) + " ms",
                {.op = "Work::wait",
                 .hint = "the operation goes on and is bounded by its own timeout; wait again or "
                         "abort the communicator"});
  }
  test();
}

void Work::wait() { wait(state_ ? state_->timeout : core::timeout()); }

// ---------------------------------------------------------------------------
namespace coll {
namespace {

constexpr core::TextSetting kAlgo{
    "RDMX_ALGO", "auto",
    "force collective algorithms: ring, hier, or per operation all_reduce:rd,broadcast:tree "
    "(auto: by size, rank count and hosts)"};
RDMX_SETTING(kAlgo);
constexpr core::TextSetting kHostId{"RDMX_HOSTID", "unset",
                                    "this rank's host identity: ranks with the same value count as one host for the "
                                    "hierarchical algorithms (unset: host name and boot id)"};
RDMX_SETTING(kHostId);

class CommImpl final : public Communicator {
 public:
  CommImpl(std::shared_ptr<Device> device, std::shared_ptr<Store> store, int rank, int size, const CommOptions& options,
           std::shared_ptr<void> keepalive)
      : keepalive_(std::move(keepalive)),
        store_(std::move(store)),
        rank_(rank),
        size_(size),
        options_(options),
        timeout_(options.timeout.count() >= 0 ? options.timeout : core::timeout()),
        selector_(!options.algo.empty() ? options.algo : kAlgo.read().value_or("")) {
    // Where everyone lives: host name plus boot id, so containers sharing a
    // name are told apart (RDMX_HOSTID overrides it, as NCCL_HOSTID does).
    // The boot id also says which ranks share this machine's cores, whatever
    // RDMX_HOSTID or a network namespace makes of their hosts.
    const RankWhere mine = RankWhere::here(kHostId.read(), device->name());
    store_->set(options_.tag + "/host/" + std::to_string(rank_), std::string_view(mine.encode()));
    std::vector<std::string> identities(static_cast<std::size_t>(size_)), names(static_cast<std::size_t>(size_));
    std::vector<RankWhere> everyone;
    int sharing_cores = 0;
    for (int p = 0; p < size_; ++p) {
      const RankWhere where =
          p == rank_ ? mine : RankWhere::decode(store_->get_string(options_.tag + "/host/" + std::to_string(p)));
      everyone.push_back(where);
      identities[static_cast<std::size_t>(p)] = where.identity;
      names[static_cast<std::size_t>(p)] = where.name;
      if (where.boot_id == mine.boot_id) ++sharing_cores;
      devices_.push_back(where.device +
                         (where.numa_node >= 0 ? " (NUMA node " + std::to_string(where.numa_node) + ")" : ""));
    }
    layout_ = make_host_layout(identities, names);
    placement_.host = host_name();
    placement_.local_rank = layout_.local_of[static_cast<std::size_t>(rank_)];
    placement_.local_size = static_cast<int>(
        layout_.ranks[static_cast<std::size_t>(layout_.host_of[static_cast<std::size_t>(rank_)])].size());
    selector_.set_layout(layout_.hosts(), layout_.per_host());
    require_buffers_fit(everyone, rank_);
    LinksConfig config = links_config();
    const std::size_t cpus = online_cpus();
    config.yield_when_waiting = static_cast<std::size_t>(sharing_cores) > cpus;
    const WaitPolicy waits = wait_policy(sharing_cores, cpus);
    config.spin = waits.spin;
    waits_ = "spin " + std::to_string(waits.spin.count()) + " us, then sleep; " + waits.why +
             (config.yield_when_waiting ? "; more ranks than cores: spinning waiters yield" : "");
    links_ = std::make_unique<Links>(std::move(device), *store_, rank_, size_, options_.tag, config, timeout_);
    selector_.set_network(links_->network());
    RDMX_INFO("communicator '%s': rank %d of %d, local rank %d of %d on %s; waits %s", options_.tag.c_str(), rank_,
              size_, placement_.local_rank, placement_.local_size, placement_.host.c_str(), waits_.c_str());
    if (rank_ == 0) {
      RDMX_INFO("communicator '%s': topology %s; hierarchical rings %s; trees across hosts %s; devices %s",
                options_.tag.c_str(), layout_.describe().c_str(), layout_.describe_rings().c_str(),
                describe_host_trees(layout_.hosts()).c_str(), describe_devices().c_str());
    }
  }

  ~CommImpl() override {
    executor_->stop();
    if (links_->say_goodbye()) remove_store_keys();
    links_.reset();
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  const RankPlacement& placement() const noexcept override { return placement_; }
  std::uint64_t next_sequence() const noexcept override { return seq_ + 1; }
  void set_cuda_stream(void* stream) override { cuda_stream_ = stream; }

  std::vector<std::string> peer_providers() const override {
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) out[static_cast<std::size_t>(p)] = links_->peer_provider(p);
    }
    return out;
  }

  std::string describe_topology() const override {
    return "hosts: " + layout_.describe() + "\nrings: " + layout_.describe_rings() +
           "\ntrees across hosts (small all_reduce, double binary tree): " + describe_host_trees(layout_.hosts()) +
           "\nwaits (rank " + std::to_string(rank_) + "): " + waits_ + "\ndevices: " + describe_devices();
  }

  // A communicator's store keys are read only while its ranks connect; once
  // every peer has said goodbye, each had read them, so each rank removes
  // its own and the store does not grow with communicators made and
  // destroyed. A rank that did not hear every goodbye leaves its keys: a
  // peer may still be connecting.
  void remove_store_keys() noexcept {
    try {
      for (const std::string& key : links_->published_keys()) store_->remove(key);
      store_->remove(options_.tag + "/host/" + std::to_string(rank_));
    } catch (const std::exception& e) {
      RDMX_INFO("communicator '%s' teardown on rank %d: its store keys stay: %s", options_.tag.c_str(), rank_,
                e.what());
    }
  }

  // Each host's ranks with their devices (the NIC a rank's network
  // traffic leaves by) and NUMA nodes.
  std::string describe_devices() const {
    std::string out;
    for (std::size_t h = 0; h < layout_.ranks.size(); ++h) {
      out += (h == 0 ? "" : "; ") + layout_.names[h] + ":";
      for (int r : layout_.ranks[h]) {
        out += " " + std::to_string(r) + " " + devices_[static_cast<std::size_t>(r)] + ",";
      }
      out.pop_back();
    }
    return out;
  }

  std::string explain_algorithm(CollOp op, std::size_t bytes) const override {
    return selector_.explain(op, bytes, size_);
  }

  void abort(const std::string& reason) override {
    links_->abort(reason);
    executor_->drop(reason);
  }

  std::unique_ptr<Communicator> split(int color, int key) override;

  // A communicator is driven by one thread at a time (as an NCCL
  // communicator): its calls are ordered, which is what matching them needs.
  Work submit(Call call, bool async) override {
    const int gpu = validate(call);
    StreamTicket ticket;
    // A task's own calls are part of it, a host function: ordering them on
    // the stream when the task runs would wait for work queued after the
    // task's call, behind operations that run only after the task.
    if (gpu >= 0 && !executor_->runs_here() && cuda_stream_ != nullptr) {
      ticket = stream_order_.enter(cuda_stream_, gpu, to_string(call.op));
    }
    const std::uint64_t profile_id =
        options_.profile ? profile::issued(rank_, size_, call.op,
                                           profile::counted_bytes(call.op, call.count, call.type, size_), call.type)
                         : 0;
    Executor::Job job{std::move(call), gpu, std::move(ticket), nullptr, nullptr};
    return run_or_post(std::move(job), profile_id, async);
  }

  Work submit_task(std::function<void()> fn, const char* what, bool async) override {
    if (!fn) throw Error(ErrorCode::InvalidArgument, "submit_task: the function is empty", {.rank = rank_});
    Executor::Job job;
    job.call.op = CollOp::Barrier;  // for messages only: a task is no collective
    job.task = std::move(fn);
    return run_or_post(std::move(job), 0, async, what);
  }

 private:
  Work run_or_post(Executor::Job job, std::uint64_t profile_id, bool async, const char* what = nullptr) {
    // Inline when nothing is queued or running, or when called by the job
    // running on this thread (a task's own calls are part of it).
    // No lock and no Work state there: the caller only waits.
    if (!async && (executor_->idle() || executor_->runs_here())) {
      profile::waited(profile_id);
      executor_->complete(job);
      profile::completed(profile_id);
      return Work();
    }
    job.state = std::make_shared<Work::State>();
    job.state->profile_id = profile_id;
    job.state->timeout = timeout_;
    job.state->what =
        std::string(what != nullptr ? what : to_string(job.call.op)) + " on rank " + std::to_string(rank_);
    Work work(job.state);
    executor_->post(std::move(job), executor_);
    if (!async) work.wait(std::chrono::milliseconds(-1));
    return work;
  }

  [[noreturn]] void bad(const Call& call, const std::string& message, const std::string& hint = "") const {
    throw Error(ErrorCode::InvalidArgument, std::string(to_string(call.op)) + ": " + message,
                {.op = to_string(call.op), .rank = rank_, .hint = hint});
  }

  // Throws for a call no rank could run; returns the GPU holding its
  // buffers, or -1 when they are host memory.
  int validate(const Call& call) const {
    if (static_cast<int>(call.type) >= kDataTypeCount) bad(call, "unknown data type");
    if (static_cast<int>(call.redop) >= kReduceOpCount) {
      bad(call, "unknown reduction operation");
    }
    const bool reduces = call.op == CollOp::AllReduce || call.op == CollOp::ReduceScatter || call.op == CollOp::Reduce;
    if (reduces && call.redop == ReduceOp::Avg && !is_floating(call.type)) {
      bad(call, std::string("avg is defined for floating types only, not ") + to_string(call.type),
          "use sum and divide, or a floating type");
    }
    const bool rooted = call.op == CollOp::Broadcast || call.op == CollOp::Reduce || call.op == CollOp::Gather ||
                        call.op == CollOp::Scatter;
    if (rooted && (call.root < 0 || call.root >= size_)) {
      bad(call, "root " + std::to_string(call.root) + " is not a rank of this communicator (size " +
                    std::to_string(size_) + ")");
    }
    auto check_peer = [&](int peer, const char* what) {
      if (peer < 0 || peer >= size_ || peer == rank_) {
        bad(call, std::string(what) + " " + std::to_string(peer) + " is not another rank of this communicator (rank " +
                      std::to_string(rank_) + " of " + std::to_string(size_) + ")");
      }
    };
    if (call.op == CollOp::Send || call.op == CollOp::Recv) check_peer(call.root, "peer");
    if (call.op == CollOp::SendRecv) {
      check_peer(call.root, "destination");
      check_peer(call.source, "source");
    }
    const std::size_t e = size_of(call.type);
    const std::size_t limit = (std::size_t{1} << 47) / e / static_cast<std::size_t>(size_);
    if (call.count > limit || call.recv_count > limit) {
      bad(call, "count " + std::to_string(std::max(call.count, call.recv_count)) + " is too large");
    }
    auto need = [&](const void* p, std::size_t elems, const char* which) {
      if (p == nullptr && elems != 0)
        bad(call, std::string(which) + " buffer is null with count " + std::to_string(elems));
    };
    const std::size_t n = static_cast<std::size_t>(size_);
    switch (call.op) {
      case CollOp::AllReduce:
      case CollOp::Reduce:
        need(call.send, call.count, "send");
        if (call.op == CollOp::AllReduce || call.root == rank_) need(call.recv, call.count, "receive");
        break;
      case CollOp::AllGather:
        need(call.send, call.count, "send");
        need(call.recv, call.count * n, "receive");
        break;
      case CollOp::ReduceScatter:
      case CollOp::AllToAll:
        need(call.send, call.count * n, "send");
        need(call.recv, call.count, "receive");
        break;
      case CollOp::Broadcast: need(call.recv, call.count, "broadcast"); break;
      case CollOp::Gather:
        need(call.send, call.count, "send");
        if (call.root == rank_) need(call.recv, call.count * n, "receive");
        break;
      case CollOp::Scatter:
        if (call.root == rank_) need(call.send, call.count * n, "send");
        need(call.recv, call.count, "receive");
        break;
      case CollOp::AllToAllv: {
        if (call.send_counts.size() != n || call.send_displs.size() != n || call.recv_counts.size() != n ||
            call.recv_displs.size() != n) {
          bad(call, "counts and displacements need " + std::to_string(n) + " entries each (got " +
                        std::to_string(call.send_counts.size()) + ", " + std::to_string(call.send_displs.size()) +
                        ", " + std::to_string(call.recv_counts.size()) + ", " +
                        std::to_string(call.recv_displs.size()) + ")");
        }
        for (std::size_t j = 0; j < n; ++j) {
          if (call.send_counts[j] > limit || call.recv_counts[j] > limit || call.send_displs[j] > limit * n ||
              call.recv_displs[j] > limit * n) {
            bad(call, "count or displacement of rank " + std::to_string(j) + " is too large");
          }
          need(call.send, call.send_counts[j], "send");
          need(call.recv, call.recv_counts[j], "receive");
        }
        const auto r = static_cast<std::size_t>(rank_);
        if (call.send_counts[r] != call.recv_counts[r]) {
          bad(call,
              "this rank sends itself " + std::to_string(call.send_counts[r]) + " elements but expects " +
                  std::to_string(call.recv_counts[r]),
              "send_counts[rank] must equal recv_counts[rank]");
        }
        break;
      }
      case CollOp::Send: need(call.send, call.count, "send"); break;
      case CollOp::Recv: need(call.recv, call.count, "receive"); break;
      case CollOp::SendRecv:
        need(call.send, call.count, "send");
        need(call.recv, call.recv_count, "receive");
        break;
      case CollOp::Barrier: break;
    }
    const auto [send_bytes, recv_bytes] = extents(call, e);
    return operation_gpu(call, send_bytes, recv_bytes);
  }

  // Where an operation's buffers are: all in host memory (-1), or all on one
  // GPU, whose copy engine and kernels then move and reduce them.
  int operation_gpu(const Call& call, std::size_t send_bytes, std::size_t recv_bytes) const {
    if (core::cuda::driver_if_loaded() == nullptr) return -1;  // no device memory without a driver
    const char* op = to_string(call.op);
    auto place = [](const core::cuda::PointerInfo& info) {
      return info.type == MemoryType::Host ? std::string("host memory") : "GPU " + std::to_string(info.device);
    };
    core::cuda::PointerInfo send, recv;
    const bool has_send = call.send != nullptr && send_bytes != 0, has_recv = call.recv != nullptr && recv_bytes != 0;
    if (has_send) send = core::cuda::classify(call.send, send_bytes, op);
    if (has_recv) recv = core::cuda::classify(call.recv, recv_bytes, op);
    if (has_send && has_recv && (send.type != recv.type || send.device != recv.device)) {
      bad(call, "the send buffer is in " + place(send) + " and the receive buffer in " + place(recv),
          "one operation's buffers must all be host memory or all on one GPU");
    }
    const core::cuda::PointerInfo& where = has_send ? send : recv;
    if (where.type == MemoryType::Host) return -1;
    const CudaMemorySupport support = links_->device().caps().cuda_memory;
    if (support == CudaMemorySupport::None) {
      throw Error(ErrorCode::NotSupported,
                  std::string(op) + ": its buffers are device memory on GPU " + std::to_string(where.device) +
                      ", which the " + links_->device().name() + " provider does not serve (cuda_memory: none)",
                  {.op = op, .rank = rank_, .hint = "use RDMX_PROVIDER=shm or tcp, or host buffers"});
    }
    const bool reduces = call.op == CollOp::AllReduce || call.op == CollOp::ReduceScatter || call.op == CollOp::Reduce;
    if (reduces && !cuda_kernels_built()) {
      throw Error(ErrorCode::NotSupported,
                  std::string(op) + ": device buffers are reduced on the GPU, and " + cuda_kernels_note(),
                  {.op = op, .rank = rank_, .hint = "rebuild rdmx where nvcc is installed, or use host buffers"});
    }
    return where.device;
  }

  // The size nccl-tests reports, which the selection table is indexed by.
  std::size_t reported_bytes(const Call& call) const {
    const std::size_t e = size_of(call.type), n = static_cast<std::size_t>(size_);
    switch (call.op) {
      case CollOp::AllGather:
      case CollOp::ReduceScatter:
      case CollOp::AllToAll:
      case CollOp::Gather:
      case CollOp::Scatter: return call.count * e * n;
      default: return call.count * e;
    }
  }

  void execute(const Call& call, int gpu, StreamTicket& ticket) {
    const coll::Links::Driving driving(*links_);
    if (links_->aborted()) {
      throw Error(ErrorCode::InvalidState,
                  "the communicator is unusable after an earlier error or abort: " + links_->abort_reason(),
                  {.op = to_string(call.op), .rank = rank_, .hint = "destroy it and create a new one"});
    }
    coll::OpDesc desc;
    desc.op = call.op;
    desc.type = call.type;
    desc.redop = call.redop;
    desc.count = call.count;
    desc.root = call.root;
    if (call.op == CollOp::AllToAllv || call.op == CollOp::Barrier) desc.count = 0;
    if (!desc.p2p()) {
      desc.seq = ++seq_;
      desc.algo = selector_.choose(call.op, reported_bytes(call), size_);
    } else {
      desc.algo = Algo::Direct;
    }
    if (size_ == 1 && !desc.p2p()) desc.algo = Algo::Local;
    if (core::log_enabled(core::LogLevel::Trace)) {
      RDMX_TRACE("%s: %s", describe(desc).c_str(), selector_.explain(call.op, reported_bytes(call), size_).c_str());
    }
    const std::size_t e = size_of(call.type);
    Combine combine;
    combine.elem = e;
    combine.type = call.type;
    combine.op = call.redop == ReduceOp::Avg ? ReduceOp::Sum : call.redop;
    combine.host_reduce = reduce_function(call.type, combine.op);
    combine.avg_divisor = call.redop == ReduceOp::Avg ? size_ : 0;
    if (gpu >= 0) combine.device = &links_->device_ops(gpu);
    Call copy;
    const auto [send_bytes, recv_bytes] = extents(call, e);
    const Call& run_call = guard_overlap(call, e, send_bytes, recv_bytes, combine, copy);
    ticket.wait_for_inputs(core::deadline_after(timeout_), to_string(call.op));
    register_user_buffers(run_call, send_bytes, recv_bytes);
    schedule_.clear();
    OpContext ctx{*links_, run_call, desc, schedule_, combine, timeout_, rank_, size_, e, direct_min_, &layout_};
    links_->enter(desc);
    coll::run_algorithm(ctx);
    links_->leave(desc);
  }

  // The bytes of the send and receive buffers an operation touches on this rank.
  std::pair<std::size_t, std::size_t> extents(const Call& call, std::size_t e) const {
    const std::size_t n = static_cast<std::size_t>(size_);
    const bool root = call.root == rank_;
    switch (call.op) {
      case CollOp::AllReduce:
      case CollOp::Broadcast: return {call.count * e, call.count * e};
      case CollOp::Reduce: return {call.count * e, root ? call.count * e : 0};
      case CollOp::AllGather: return {call.count * e, call.count * e * n};
      case CollOp::Gather: return {call.count * e, root ? call.count * e * n : 0};
      case CollOp::ReduceScatter:
      case CollOp::AllToAll: return {call.count * e * n, call.count * e};
      case CollOp::Scatter: return {root ? call.count * e * n : 0, call.count * e};
      case CollOp::AllToAllv: {
        std::size_t send_extent = 0, recv_extent = 0;
        for (std::size_t j = 0; j < n; ++j) {
          send_extent = std::max(send_extent, (call.send_displs[j] + call.send_counts[j]) * e);
          recv_extent = std::max(recv_extent, (call.recv_displs[j] + call.recv_counts[j]) * e);
        }
        return {send_extent, recv_extent};
      }
      case CollOp::Send: return {call.count * e, 0};
      case CollOp::Recv: return {0, call.count * e};
      case CollOp::SendRecv: return {call.count * e, call.recv_count * e};
      case CollOp::Barrier: return {0, 0};
    }
    return {0, 0};
  }

  // The in-place forms the algorithms handle; any other overlap of the send
  // and receive buffers (MPI_IN_PLACE's reduce_scatter into the first block,
  // partly overlapping buffers) runs from a copy of the send buffer.
  bool supported_in_place(const Call& call, std::size_t e) const {
    const auto* s = static_cast<const char*>(call.send);
    const auto* r = static_cast<const char*>(call.recv);
    const std::size_t mine = static_cast<std::size_t>(rank_) * call.count * e;
    switch (call.op) {
      case CollOp::AllReduce:
      case CollOp::Reduce:
      case CollOp::Broadcast:
      case CollOp::AllToAll: return s == r;
      case CollOp::AllGather:
      case CollOp::Gather: return s == r + mine;
      case CollOp::ReduceScatter: return s + mine == r;
      case CollOp::Scatter: return r == s + mine;
      default: return false;
    }
  }

  const Call& guard_overlap(const Call& call, std::size_t e, std::size_t send_bytes, std::size_t recv_bytes,
                            const Combine& combine, Call& copy) {
    const auto s = reinterpret_cast<std::uintptr_t>(call.send), r = reinterpret_cast<std::uintptr_t>(call.recv);
    const bool overlap = send_bytes != 0 && recv_bytes != 0 && s < r + recv_bytes && r < s + send_bytes;
    if (!overlap || supported_in_place(call, e)) return call;
    copy = call;
    if (combine.device != nullptr) {
      const int gpu = combine.device->device();
      if (device_send_copy_.device() != gpu || device_send_copy_.size() < send_bytes) {
        device_send_copy_ = core::cuda::DeviceAllocation();
        device_send_copy_ = core::cuda::DeviceAllocation(send_bytes, gpu, "copy of an overlapping send buffer");
      }
      combine.copy(device_send_copy_.get(), call.send, send_bytes);
      copy.send = device_send_copy_.get();
      return copy;
    }
    send_copy_.assign(static_cast<const char*>(call.send), static_cast<const char*>(call.send) + send_bytes);
    copy.send = send_copy_.data();
    return copy;
  }

  // Registers whole user buffers once, so that in-place WRITEs of any part
  // of them find a covering registration.
  void register_user_buffers(const Call& call, std::size_t send_bytes, std::size_t recv_bytes) {
    const std::size_t limit = links_->stage_limit();
    if (call.send != nullptr && send_bytes > limit) links_->lkey_for(call.send, send_bytes);
    if (call.recv != nullptr && recv_bytes > limit && call.op != CollOp::Recv) links_->lkey_for(call.recv, recv_bytes);
  }

  std::shared_ptr<void> keepalive_;  // the Bootstrap (store server) of from_env()
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  CommOptions options_;
  std::chrono::milliseconds timeout_;
  AlgoSelector selector_;
  HostLayout layout_;
  std::string waits_;                 // how this rank's collectives wait, and why
  std::vector<std::string> devices_;  // each rank's device and NUMA node, for describe_topology()
  RankPlacement placement_;
  std::unique_ptr<Links> links_;
  Schedule schedule_;
  std::vector<char> send_copy_;                    // see guard_overlap()
  core::cuda::DeviceAllocation device_send_copy_;  // the same on a GPU
  void* cuda_stream_ = nullptr;                    // see set_cuda_stream()
  StreamOrder stream_order_;
  // RDMX_COLL_DIRECT_MIN: transfers from this size on are written into the
  // receiver's buffer directly (0, the default, turns it off). Every rank
  // must agree. Off by default: on shm a WRITE into another process's heap
  // is copied by that process (through its rings), which measured slower
  // than the buffers; over tcp it saves the receiver's copy (docs/COLLECTIVES.md).
  const std::size_t direct_min_ = coll_settings().direct_min;
  std::uint64_t seq_ = 0;
  std::uint64_t splits_ = 0;

  std::shared_ptr<Executor> executor_ =
      std::make_shared<Executor>(rank_, [this](Executor::Job& job) { execute(job.call, job.gpu, job.ticket); });
};

std::shared_ptr<Device> open_for(const CommOptions& options) {
  // An empty choice is "auto", which honours RDMX_PROVIDER.
  return open_device(options.provider.empty() ? "auto" : options.provider);
}

// Ranks sharing a color build a communicator under their own store prefix;
// the (color, key) table is gathered over this communicator first.
std::unique_ptr<Communicator> CommImpl::split(int color, int key) {
  std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(2 * static_cast<std::size_t>(size_));
  all_gather(mine, all.data(), 2, DataType::Int64);
  const std::uint64_t id = ++splits_;
  if (color < 0) return nullptr;
  std::vector<std::pair<std::int64_t, int>> members;  // (key, old rank)
  for (int p = 0; p < size_; ++p) {
    if (all[2 * static_cast<std::size_t>(p)] == color)
      members.emplace_back(all[2 * static_cast<std::size_t>(p) + 1], p);
  }
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[static_cast<std::size_t>(new_rank)].second != rank_) ++new_rank;
  CommOptions options = options_;
  options.tag = options_.tag + "/split" + std::to_string(id) + "/" + std::to_string(color);
  return std::make_unique<CommImpl>(links_->device_shared(), store_, new_rank, static_cast<int>(members.size()),
                                    options, keepalive_);
}

}  // namespace
}  // namespace coll

// ---------------------------------------------------------------------------
std::unique_ptr<Communicator> Communicator::create(std::shared_ptr<Store> store, int rank, int size,
                                                   const CommOptions& options) {
  if (!store)
    throw Error(ErrorCode::InvalidArgument, "Communicator::create: the store is null", {.op = "Communicator::create"});
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(
        ErrorCode::InvalidArgument,
        "Communicator::create: rank " + std::to_string(rank) + " is not in a communicator of " + std::to_string(size),
        {.op = "Communicator::create", .rank = rank});
  }
  if (options.tag.empty()) {
    throw Error(ErrorCode::InvalidArgument, "Communicator::create: the tag must not be empty",
                {.op = "Communicator::create", .rank = rank});
  }
  return std::make_unique<coll::CommImpl>(coll::open_for(options), std::move(store), rank, size, options, nullptr);
}

std::unique_ptr<Communicator> Communicator::from_env(const CommOptions& options) {
  auto joined = std::make_shared<Bootstrap>(rdmx::from_env());
  auto store = joined->store;
  return std::make_unique<coll::CommImpl>(coll::open_for(options), store, joined->info.rank, joined->info.world_size,
                                          options, joined);
}

}  // namespace rdmx
