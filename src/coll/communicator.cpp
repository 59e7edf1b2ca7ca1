// SPDX-License-Identifier: MIT
// The Communicator: CommImpl composes what a communicator is made of, each
// in its own file: where its ranks run (comm_placement), the checks its
// calls pass (comm_validation), their order on the caller's CUDA stream
// (comm_device_order), and how they run (comm_execution, over the Links).
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "coll/comm_device_order.hpp"
#include "coll/comm_execution.hpp"
#include "coll/comm_membership.hpp"
#include "coll/comm_placement.hpp"
#include "coll/comm_validation.hpp"
#include "coll/communicator_internal.hpp"
#include "coll/flight_recorder.hpp"
#include "coll/link_probe.hpp"
#include "coll/links.hpp"
#include "coll/metrics_endpoint.hpp"
#include "coll/rank_placement.hpp"
#include "coll/rank_status.hpp"
#include "coll/selection.hpp"
#include "coll/settings.hpp"
#include "coll/status_publisher.hpp"
#include "rdmx/profile.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx {
namespace coll {
namespace {

constexpr core::TextSetting kAlgo{
    "RDMX_ALGO", "auto",
    "force collective algorithms: ring, hier, or per operation all_reduce:rd,broadcast:tree "
    "(auto: the lowest time the cost model predicts)"};
RDMX_SETTING(kAlgo);

class CommImpl final : public CommunicatorCore {
 public:
  // Where a communicator comes from, when not made from scratch.
  struct Lineage {
    std::unique_ptr<CommMembership> membership;  // a shrunk one's (CommMembership::successor())
    std::string job_tag;                         // where new processes join (join()); "": options.tag
    Links::Handover* links;                      // a shrunk one's: the connections it may keep (or null)
  };

  CommImpl(std::shared_ptr<Device> device, std::shared_ptr<Store> store, int rank, int size, const CommOptions& options,
           std::shared_ptr<void> keepalive, Lineage lineage = {})
      : keepalive_(std::move(keepalive)),
        job_tag_(lineage.job_tag.empty() ? options.tag : lineage.job_tag),
        store_(std::move(store)),
        rank_(rank),
        size_(size),
        options_(options),
        timeout_(options.timeout.count() >= 0 ? options.timeout : core::timeout()),
        selector_(!options.algo.empty() ? options.algo : kAlgo.read().value_or("")),
        membership_(lineage.membership
                        ? std::move(lineage.membership)
                        : std::make_unique<CommMembership>(store_, options_.tag, rank_, size_, timeout_)),
        build_store_(membership_->watched(store_)),
        placement_(membership_->gather_all(), options_.tag, rank_, size_, device->name()),
        validator_(rank_, size_) {
    selector_.set_layout(placement_.layout().hosts(), placement_.layout().per_host());
    placement_.require_buffers_fit();
    LinksConfig config = placement_.links_config_with_waits();
    config.host_of = placement_.layout().host_of;
    config.gather_all = membership_->gather_all();
    links_ = std::make_unique<Links>(std::move(device), *build_store_, rank_, size_, options_.tag, config, timeout_,
                                     lineage.links);
    const LinkFigures& figures = links_->link_figures();
    LinkModel model = declared_links(figures.in_host, figures.between_hosts);
    model.staging_bytes = static_cast<double>(coll_settings().buffsize);
    if (placement_.layout().hosts() > 1 && measure_links_enabled())
      model =
          measure_links(*links_, *build_store_, options_.tag, placement_.layout(), rank_, model, timeout_, &probe_key_);
    selector_.set_links(model);
    RDMX_INFO(
        "communicator '%s': rank %d: the cost model charges a step and a byte in-host %.3g us/%.3g GB/s, "
        "between hosts %.3g us/%.3g GB/s, reduction %.3g GB/s (%s)",
        options_.tag.c_str(), rank_, model.in_host.latency_us, model.in_host.bandwidth_gbps,
        model.between_hosts.latency_us, model.between_hosts.bandwidth_gbps, model.reduce_gbps, model.basis.c_str());
    execution_ = std::make_unique<CommExecution>(*links_, selector_, placement_.layout(), *recorder_, rank_, size_,
                                                 timeout_, direct_min_);
    membership_->attach([this](int failed, const std::string& why) { links_->revoke(why, failed); });
    links_->kept();
    links_->set_status_reader(
        [store = store_, tag = options_.tag](const std::vector<int>& ranks) {
          return describe_ranks_from_store(*store, tag, ranks);
        },
        stall_warn_);
    const RankIdentity who{.tag = options_.tag,
                           .rank = rank_,
                           .size = size_,
                           .host = host_name(),
                           .pid = static_cast<long>(::getpid()),
                           .device = links_->device().name()};
    metrics_ =
        serve_metrics({.who = who,
                       .recorder = recorder_,
                       .traffic = [links = links_.get()](int peer, std::uint64_t& sent, std::uint64_t& received) {
                         const Links::PeerTraffic t = links->traffic(peer);
                         sent = t.sent;
                         received = t.received;
                       }});
    status_ = StatusPublisher::publish(store_, who, recorder_, timeout_, stall_warn_);
    placement_.log_created();
  }

  ~CommImpl() override {
    status_ = StatusPublisher::Handle();  // no write of its status after its keys are removed
    metrics_.reset();                     // no scrape reads the links past here
    membership_->detach();
    execution_->stop();
    if (links_->say_goodbye()) remove_store_keys();
    links_.reset();
  }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  const RankPlacement& placement() const noexcept override { return placement_.placement(); }
  std::uint64_t next_sequence() const noexcept override { return execution_->next_sequence(); }
  void set_cuda_stream(void* stream) override { device_order_.set_stream(stream); }

  std::vector<std::string> peer_providers() const override {
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      if (p != rank_) out[static_cast<std::size_t>(p)] = links_->peer_provider(p);
    }
    return out;
  }

  std::string device_name() const override { return links_->device().name(); }

  std::string describe_topology() const override { return placement_.describe(); }

  std::string explain_algorithm(CollOp op, std::size_t bytes) const override {
    return selector_.explain(op, bytes, size_);
  }

  void abort(const std::string& reason) override {
    links_->abort(reason);
    execution_->drop(reason);
  }

  std::unique_ptr<Communicator> split(int color, int key) override;
  ShrinkResult shrink() override;
  std::vector<int> agree_failures() override;
  std::unique_ptr<Communicator> grow(int count, std::shared_ptr<Store> store) override;

  // A communicator is driven by one thread at a time (as an NCCL
  // communicator): its calls are ordered, which is what matching them needs.
  Work submit(Call call, bool async) override {
    const int gpu = validator_.validate(call, links_->device());
    StreamTicket ticket = device_order_.enter(call.op, gpu, execution_->runs_here());
    const std::uint64_t profile_id =
        options_.profile ? profile::issued(rank_, size_, call.op,
                                           profile::counted_bytes(call.op, call.count, call.type, size_), call.type)
                         : 0;
    Executor::Job job{std::move(call), gpu, std::move(ticket), nullptr, nullptr};
    return execution_->run_or_post(std::move(job), profile_id, async);
  }

  Work submit_task(std::function<void()> fn, const char* what, bool async) override {
    if (!fn) throw Error(ErrorCode::InvalidArgument, "submit_task: the function is empty", {.rank = rank_});
    Executor::Job job;
    job.call.op = CollOp::Barrier;  // for messages only: a task is no collective
    job.task = std::move(fn);
    return execution_->run_or_post(std::move(job), 0, async, what);
  }

 private:
  // A communicator's store keys are read only while its ranks connect; once
  // every peer has said goodbye, each had read them, so each rank removes
  // its own and the store does not grow with communicators made and
  // destroyed. A rank that did not hear every goodbye leaves its keys: a
  // peer may still be connecting.
  void remove_store_keys() noexcept {
    try {
      for (const std::string& key : links_->published_keys()) store_->remove(key);
      if (!probe_key_.empty()) store_->remove(probe_key_);
      store_->remove(rank_status_key(options_.tag, rank_));
    } catch (const std::exception& e) {
      RDMX_INFO("communicator '%s' teardown on rank %d: its store keys stay: %s", options_.tag.c_str(), rank_,
                e.what());
    }
  }

  std::shared_ptr<void> keepalive_;  // the Bootstrap (store server) of from_env()
  std::string job_tag_;
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  CommOptions options_;
  std::chrono::milliseconds timeout_;
  AlgoSelector selector_;
  std::string probe_key_;  // the link figures this rank published (measure_links)
  // RDMX_COLL_DIRECT_MIN (comm_execution.hpp), read with the other RDMX_COLL_*
  // settings before this rank publishes anything: a malformed one fails the
  // creation before the store holds any of this rank's keys.
  const std::size_t direct_min_ = coll_settings().direct_min;
  const std::shared_ptr<FlightRecorder> recorder_ =
      std::make_shared<FlightRecorder>(FlightRecorder::configured_capacity());
  const std::chrono::milliseconds stall_warn_ = stall_warning_after();
  std::unique_ptr<CommMembership> membership_;
  std::shared_ptr<Store> build_store_;  // store_, watched for members failing while this is made
  CommPlacement placement_;
  CallValidator validator_;
  DeviceOrder device_order_;
  std::unique_ptr<Links> links_;
  std::unique_ptr<CommExecution> execution_;
  std::uint64_t splits_ = 0;
  bool shrunk_ = false;
  std::shared_ptr<void> metrics_;   // serve_metrics(): reads links_, so released before them
  StatusPublisher::Handle status_;  // last: it stops publishing before the rest goes
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

// Agrees on who failed and builds the survivors' communicator. A survivor
// that dies while it is being built fails the build at once (the watched
// store), and the next agreement leaves it out too.
ShrinkResult CommImpl::shrink() {
  if (shrunk_) {
    throw Error(ErrorCode::InvalidState, "shrink: this communicator was shrunk already",
                {.op = "shrink", .rank = rank_, .hint = "shrink the communicator the first shrink() gave"});
  }
  shrunk_ = true;
  const auto deadline = core::deadline_after(timeout_);
  std::uint32_t epoch = membership_->epoch() + 1;
  // After a failure this communicator is revoked, and the survivors keep
  // the connections among them that still work, through every attempt.
  // With no failure, this one stays usable and keeps its own.
  std::unique_ptr<Links::Handover> handover;
  for (;;) {
    CommMembership::Next next = membership_->agree(epoch, deadline, rank_);
    CommOptions options = options_;
    options.tag = next.tag;
    if (!next.failed.empty() && !handover) handover = links_->hand_over(next.survivors, deadline);
    if (handover) handover->survivors = next.survivors;
    try {
      auto comm = std::make_unique<CommImpl>(links_->device_shared(), store_, next.rank,
                                             static_cast<int>(next.members.size()), options, keepalive_,
                                             Lineage{membership_->successor(next), job_tag_, handover.get()});
      RDMX_INFO("communicator '%s': rank %d shrank to rank %d of %zu ('%s'); failed: %s", options_.tag.c_str(), rank_,
                next.rank, next.members.size(), next.tag.c_str(), membership_->failures().c_str());
      const int kept_connections = comm->links_->kept_connections();
      return ShrinkResult{std::move(comm), std::move(next.failed), std::move(next.survivors), kept_connections};
    } catch (const Error& e) {
      if (core::Clock::now() >= deadline || !membership_->member_failed(next.members)) throw;
      RDMX_INFO("communicator '%s': rank %d: a survivor failed while shrinking (%s); agreeing again",
                options_.tag.c_str(), rank_, e.what());
      ++epoch;
    }
  }
}

// New processes find an open grow under "<job tag>/join/<n>": the size of
// the group they join and how many places it has, taken in turn with add().
std::string join_key(const std::string& job_tag, std::int64_t generation) {
  return job_tag + "/join/" + std::to_string(generation);
}

std::vector<int> CommImpl::agree_failures() {
  return membership_->agree(membership_->epoch() + 1, core::deadline_after(timeout_), rank_).failed;
}

std::unique_ptr<Communicator> CommImpl::grow(int count, std::shared_ptr<Store> store) {
  if (!store) store = store_;
  if (count < 1) {
    throw Error(ErrorCode::InvalidArgument, "grow: count " + std::to_string(count) + " is not a number of new ranks",
                {.op = "grow", .rank = rank_, .hint = "grow(1) makes room for one new process"});
  }
  std::int64_t generation = 0;
  if (rank_ == 0) {
    generation = store->add(job_tag_ + "/join/generations", 1);
    store->set(join_key(job_tag_, generation), std::string_view(std::to_string(size_) + " " + std::to_string(count)));
  }
  broadcast(&generation, 1, DataType::Int64, 0);
  CommOptions options = options_;
  options.tag = job_tag_ + "/grow" + std::to_string(generation);
  auto comm = std::make_unique<CommImpl>(links_->device_shared(), std::move(store), rank_, size_ + count, options,
                                         keepalive_, Lineage{nullptr, job_tag_});
  RDMX_INFO("communicator '%s': rank %d grew to %d ranks ('%s')", options_.tag.c_str(), rank_, size_ + count,
            options.tag.c_str());
  return comm;
}

std::unique_ptr<Communicator> join_running(std::shared_ptr<Store> store, const CommOptions& options) {
  const auto timeout = options.timeout.count() >= 0 ? options.timeout : core::timeout();
  const auto deadline = core::deadline_after(timeout);
  for (std::int64_t generation = 1;; ++generation) {
    const std::string key = join_key(options.tag, generation);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - core::Clock::now());
    Bytes opened;
    try {
      opened = store->get(key, std::max(left, std::chrono::milliseconds(1)));
    } catch (const Error& e) {
      if (e.code() != ErrorCode::Timeout) throw;
      throw Error(ErrorCode::Timeout,
                  "join: no communicator under tag '" + options.tag + "' made room for a new rank within " +
                      std::to_string(timeout.count()) + " ms",
                  {.op = "join",
                   .peer_addr = key,
                   .hint = "the job's ranks call grow(count) with count at least the processes joining; this one "
                           "must use the same store and CommOptions::tag"});
    }
    const std::string text(opened.begin(), opened.end());
    int size = 0;
    int count = 0;
    if (std::sscanf(text.c_str(), "%d %d", &size, &count) != 2 || size < 1 || count < 1) {
      throw Error(ErrorCode::Protocol, "join: the store holds '" + text + "' under " + key + ", not a grow",
                  {.op = "join", .hint = "another program uses this tag in the store"});
    }
    const std::int64_t claim = store->add(key + "/claims", 1);
    if (claim > count) continue;  // that grow is full: a later one
    CommOptions grown = options;
    grown.tag = options.tag + "/grow" + std::to_string(generation);
    const int rank = size + static_cast<int>(claim) - 1;
    return std::make_unique<CommImpl>(open_for(options), std::move(store), rank, size + count, grown, nullptr,
                                      CommImpl::Lineage{nullptr, options.tag});
  }
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

std::unique_ptr<Communicator> Communicator::join(std::shared_ptr<Store> store, const CommOptions& options) {
  if (!store) throw Error(ErrorCode::InvalidArgument, "Communicator::join: the store is null", {.op = "join"});
  if (options.tag.empty()) {
    throw Error(ErrorCode::InvalidArgument, "Communicator::join: the tag must not be empty", {.op = "join"});
  }
  return coll::join_running(std::move(store), options);
}

std::unique_ptr<Communicator> Communicator::from_env(const CommOptions& options) {
  auto joined = std::make_shared<Bootstrap>(rdmx::from_env());
  auto store = joined->store;
  return std::make_unique<coll::CommImpl>(coll::open_for(options), store, joined->info.rank, joined->info.world_size,
                                          options, joined);
}

}  // namespace rdmx
