// SPDX-License-Identifier: MIT
// Scale and exhaustion: thousands of QPs and of memory regions work side by
// side and give back what they took; a region larger than the machine's
// memory is served where the provider does not pin it and refused, naming
// the limit, where it does; running out of descriptors while connecting QPs
// is an error that names the limit, never a crash or a hang, and the QPs
// made before go on working.
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "conformance/conformance.hpp"
#include "services/config.hpp"

namespace rdmx::test {
namespace {

using namespace std::chrono_literals;

// This process's descriptors and what each one is.
std::map<int, std::string> open_descriptors() {
  std::map<int, std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (!ec && target == std::filesystem::path("/proc/" + std::to_string(::getpid()) + "/fd"))
      continue;  // the listing's own
    out[std::stoi(entry.path().filename().string())] = ec ? "?" : target.string();
  }
  return out;
}

// The descriptors of `now` that `before` did not have, as "fd -> target".
std::string new_descriptors(const std::map<int, std::string>& before, const std::map<int, std::string>& now) {
  std::string out;
  for (const auto& [fd, target] : now) {
    auto it = before.find(fd);
    if (it == before.end() || it->second != target) out += " " + std::to_string(fd) + " -> " + target + ";";
  }
  return out;
}

// Sets this process's open-files soft limit (never above the hard limit);
// returns the limit in force.
rlim_t set_descriptor_limit(rlim_t want) {
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = std::min(want, lim.rlim_max);
  ::setrlimit(RLIMIT_NOFILE, &lim);
  ::getrlimit(RLIMIT_NOFILE, &lim);
  return lim.rlim_cur;
}

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// What one QP's number tells about its index: tags the data it carries.
std::uint64_t tag_of(int from_rank, std::size_t index) {
  return 0x5100'0000'0000'0000ull | (static_cast<std::uint64_t>(from_rank) << 32) | index;
}

std::string join_addresses(const std::vector<std::unique_ptr<QueuePair>>& qps) {
  std::string out;
  for (const auto& qp : qps) out += qp->local_address().to_hex() + "\n";
  return out;
}

std::vector<QpAddress> split_addresses(const std::string& text) {
  std::vector<QpAddress> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(QpAddress::from_hex(line));
  return out;
}

// Creates `n` QPs on each of the two ranks and connects the i-th of one to
// the i-th of the other; the addresses travel as one store value a side.
std::vector<std::unique_ptr<QueuePair>> connect_many(RankEnv& env, Node& node, std::size_t n, const std::string& tag) {
  const int peer = 1 - env.rank();
  std::vector<std::unique_ptr<QueuePair>> qps;
  qps.reserve(n);
  // Each carries one WR: small queues, as a job with thousands of peers sizes them.
  const QpCaps caps{.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1};
  for (std::size_t i = 0; i < n; ++i) qps.push_back(make_qp(node, caps));
  env.store().set(tag + "/" + std::to_string(env.rank()), std::string_view(join_addresses(qps)));
  const auto remote = split_addresses(env.store().get_string(tag + "/" + std::to_string(peer)));
  CHECK_EQ(remote.size(), n) << "the peer published " << remote.size() << " QP addresses";
  for (std::size_t i = 0; i < n; ++i) qps[i]->connect(remote[i], ConnectOptions{.peer_rank = peer});
  return qps;
}

// One 8-byte WRITE on each QP into slot i of the peer's region; waits for
// all of them and checks each completion belongs to its own QP.
void write_on_each(RankEnv& env, Node& node, std::vector<std::unique_ptr<QueuePair>>& qps, const RemoteRegion& region,
                   const char* what) {
  const std::size_t n = qps.size();
  Buffer local(n * 8);
  auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
  for (std::size_t i = 0; i < n; ++i) local.store64(i * 8, tag_of(env.rank(), i));
  for (std::size_t i = 0; i < n; ++i) {
    Sge sge = mr->sge(i * 8, 8);
    qps[i]->post_send(rdma_wr(i, Opcode::RdmaWrite, {&sge, 1}, region.addr + i * 8, region.rkey));
  }
  std::vector<char> seen(n, 0);
  for (const WorkCompletion& wc : WAIT_WCS(*node.send_cq, n, what)) {
    CHECK_LT(wc.wr_id, n) << what << ": " << describe(wc);
    CHECK_EQ(wc.status, WcStatus::Success)
        << what << ": " << describe(wc) << " (QP error: " << qps[wc.wr_id]->error_reason() << ")";
    CHECK_EQ(wc.qp_num, qps[wc.wr_id]->qp_num())
        << what << ": the completion of WR " << wc.wr_id << " names another QP";
    CHECK(!seen[wc.wr_id]) << what << ": WR " << wc.wr_id << " completed twice";
    seen[wc.wr_id] = 1;
  }
}

void check_slots(RankEnv& env, const Buffer& slots, std::size_t n, const char* what) {
  const int peer = 1 - env.rank();
  for (std::size_t i = 0; i < n; ++i) {
    CHECK_EQ(slots.load64(i * 8), tag_of(peer, i)) << what << ": slot " << i << " of " << n;
  }
}

// 2048 QPs between two ranks at once, each carrying its own WRITE both ways;
// destroying them gives back every descriptor they took.
constexpr std::size_t kManyQps = 2048;

TEST_P(HostMemoryConformance, ThousandsOfQueuePairsCarryTheirOwnWrites) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    const rlim_t needed = kManyQps * 6 + 1024;
    CHECK_GE(set_descriptor_limit(needed), needed)
        << "this case needs an open-files limit of " << needed << " (the hard limit is lower: ulimit -Hn)";
    Node node(env, 2 * kManyQps);
    Buffer slots(kManyQps * 8);
    // Registers the slots and returns the peer's; `round` names the keys.
    auto exchange_slots = [&](const std::string& round) {
      auto mr = node.pd->register_memory(slots.data(), slots.size(), Access::LocalWrite | Access::RemoteWrite);
      publish_region(env, round + "/" + std::to_string(env.rank()), *mr);
      return std::make_pair(std::move(mr), fetch_region(env, round + "/" + std::to_string(1 - env.rank())));
    };
    {
      // A first pair opens whatever the device opens once (listeners, sockets).
      auto [mr, region] = exchange_slots("warm-slots");
      auto warm = connect_many(env, node, 1, "warm");
      write_on_each(env, node, warm, region, "the warm-up QP's WRITE");
      env.barrier("warm");
    }
    const auto before = open_descriptors();
    std::size_t during = 0;
    {
      auto [mr, region] = exchange_slots("slots");
      auto qps = connect_many(env, node, kManyQps, "many");
      during = open_descriptors().size();
      write_on_each(env, node, qps, region, "the WRITEs of 2048 QPs");
      env.barrier("written");
      check_slots(env, slots, kManyQps, "after one WRITE on each of 2048 QPs");
      env.barrier("checked");
    }
    std::map<int, std::string> after;
    CHECK(eventually([&] { return new_descriptors(before, after = open_descriptors()).empty(); }, default_timeout()))
        << "2048 QPs and their region destroyed, " << after.size() << " descriptors open where " << before.size()
        << " were before them (" << during << " while they lived); new:" << new_descriptors(before, after);
    std::fprintf(stderr, "[rank %d] descriptors: %zu before, %zu with 2048 QPs, %zu after\n", env.rank(), before.size(),
                 during, after.size());
    env.barrier("done");
  }));
}

// 4096 regions, one per page of one buffer: distinct keys, each admits
// WRITEs to its own page and refuses them one page beyond.
constexpr std::size_t kManyRegions = 4096;
constexpr std::size_t kPage = 4096;

TEST_P(HostMemoryConformance, ThousandsOfRegionsKeepTheirOwnKeys) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    Node node(env);
    if (env.rank() == kTarget) {
      Buffer pages(kManyRegions * kPage);
      std::vector<std::unique_ptr<MemoryRegion>> mrs;
      std::vector<std::uint32_t> rkeys;
      std::set<std::uint32_t> lkeys, distinct_rkeys;
      for (std::size_t i = 0; i < kManyRegions; ++i) {
        mrs.push_back(
            node.pd->register_memory(pages.data() + i * kPage, kPage, Access::LocalWrite | Access::RemoteWrite));
        rkeys.push_back(mrs.back()->rkey());
        distinct_rkeys.insert(mrs.back()->rkey());
        lkeys.insert(mrs.back()->lkey());
      }
      CHECK_EQ(distinct_rkeys.size(), kManyRegions) << "rkeys of live regions must differ";
      CHECK_EQ(lkeys.size(), kManyRegions) << "lkeys of live regions must differ";
      auto qp = connected_qp(env, node, kInitiator, "t");
      env.store().set("rkeys", std::string_view(reinterpret_cast<const char*>(rkeys.data()), rkeys.size() * 4));
      publish_region(env, "base", RemoteRegion{.addr = pages.addr(), .rkey = 0, .length = pages.size()});
      await(env, "written");
      for (std::size_t i = 0; i < kManyRegions; ++i) {
        const std::size_t at = i * kPage + (i % (kPage / 8)) * 8;
        CHECK_EQ(pages.load64(at), tag_of(kInitiator, i)) << "the WRITE through region " << i << "'s key";
        for (std::size_t off = i * kPage; off < (i + 1) * kPage; off += 8) {
          if (off == at) continue;
          CHECK_EQ(pages.load64(off), 0u) << "page " << i << " written at offset " << off - i * kPage;
        }
      }
      mrs.clear();
      for (std::size_t i = 0; i < kManyRegions; ++i) {
        mrs.push_back(node.pd->register_memory(pages.data() + i * kPage, kPage, Access::LocalWrite));
      }
      env.barrier("done");
    } else {
      Buffer local(kManyRegions * 8);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      for (std::size_t i = 0; i < kManyRegions; ++i) local.store64(i * 8, tag_of(kInitiator, i));
      auto qp = connected_qp(env, node, kTarget, "t");
      const std::string keys = env.store().get_string("rkeys");
      CHECK_EQ(keys.size(), kManyRegions * 4);
      std::vector<std::uint32_t> rkeys(kManyRegions);
      std::memcpy(rkeys.data(), keys.data(), keys.size());
      const RemoteRegion base = fetch_region(env, "base");
      constexpr std::size_t kBatch = 256;
      for (std::size_t first = 0; first < kManyRegions; first += kBatch) {
        for (std::size_t i = first; i < first + kBatch; ++i) {
          Sge sge = mr->sge(i * 8, 8);
          const std::uint64_t at = base.addr + i * kPage + (i % (kPage / 8)) * 8;
          qp->post_send(rdma_wr(i, Opcode::RdmaWrite, {&sge, 1}, at, rkeys[i]));
        }
        for (const WorkCompletion& wc : WAIT_WCS(*node.send_cq, kBatch, "WRITEs through 256 regions' keys")) {
          CHECK_WC(wc, "WRITE through one of 4096 regions' keys", .wr_id = wc.wr_id);
        }
      }
      // Region 7's key does not reach page 8.
      Sge sge = mr->sge(0, 8);
      qp->post_send(rdma_wr(0xBAD, Opcode::RdmaWrite, {&sge, 1}, base.addr + 8 * kPage, rkeys[7]));
      auto wc = WAIT_WC(*node.send_cq, "a WRITE one page past its region");
      CHECK_WC(wc, "a WRITE one page past its region", .wr_id = 0xBAD, .status = WcStatus::RemAccessErr);
      signal(env, "written");
      env.barrier("done");
    }
  }));
}

// Drops CAP_IPC_LOCK from this process (root pins without limit otherwise)
// and caps locked memory, so a provider that pins must refuse.
void cap_locked_memory(rlim_t bytes) {
  __user_cap_header_struct header{.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
  __user_cap_data_struct data[2]{};
  CHECK_EQ(::syscall(SYS_capget, &header, data), 0) << "capget: " << std::strerror(errno);
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  CHECK_EQ(::syscall(SYS_capset, &header, data), 0) << "capset: " << std::strerror(errno);
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  lim.rlim_cur = std::min(bytes, lim.rlim_max);
  CHECK_EQ(::setrlimit(RLIMIT_MEMLOCK, &lim), 0) << "setrlimit(RLIMIT_MEMLOCK): " << std::strerror(errno);
}

// A region of twice the machine's memory (reserved, not touched). A
// provider that pins must refuse it with an error naming the size and the
// limit; one that does not serves WRITEs and READs anywhere in it, and only
// the pages touched become resident.
TEST_P(HostMemoryConformance, RegistrationLargerThanMemory) {
  {
    std::ifstream mode("/proc/sys/vm/overcommit_memory");
    int overcommit = 0;
    mode >> overcommit;
    if (overcommit == 2) GTEST_SKIP() << "vm.overcommit_memory is 2: no mapping larger than memory can be made";
  }
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    const std::size_t ram =
        static_cast<std::size_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    const std::size_t huge = ((2 * ram) | ((std::size_t{1} << 30) - 1)) + 1;
    Node node(env);
    const bool pins = node.device->caps().registration_pins_memory;
    if (env.rank() == kTarget) {
      void* base = ::mmap(nullptr, huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      CHECK(base != MAP_FAILED) << "mmap of " << huge << " bytes: " << std::strerror(errno);
      auto* bytes = static_cast<std::uint8_t*>(base);
      auto qp = connected_qp(env, node, kInitiator, "t");
      const std::size_t resident_before = resident_bytes();
      if (pins) {
        cap_locked_memory(64u << 20);
        try {
          auto mr = node.pd->register_memory(base, huge, Access::LocalWrite | Access::RemoteWrite);
          FAIL_RANK() << "a provider that pins registered " << huge << " bytes with 64 MiB of locked memory allowed";
        } catch (const Error& e) {
          std::fprintf(stderr, "[rank %d] refused: %s\n", env.rank(), e.what());
          CHECK(e.context().sizes.find(std::to_string(huge)) != std::string::npos)
              << "the error must give the size asked for: " << e.what();
          CHECK(!e.context().hint.empty()) << "the error must say what to do: " << e.what();
        }
        // The device goes on serving regions that fit.
        Buffer small(4096);
        auto mr = node.pd->register_memory(small.data(), small.size(), Access::LocalWrite | Access::RemoteWrite);
        publish_region(env, "region", *mr);
        await(env, "written");
        CHECK_EQ(small.load64(0), tag_of(kInitiator, 0)) << "a WRITE after the refused registration";
      } else {
        auto mr = node.pd->register_memory(base, huge, Access::LocalWrite | Access::RemoteWrite | Access::RemoteRead);
        std::memset(bytes + huge / 2 + 4096, 0x3c, 4096);
        publish_region(env, "region", *mr);
        await(env, "written");
        for (std::size_t at : {std::size_t{0}, huge / 2, huge - 4096}) {
          std::uint64_t words[4096 / 8];
          copy_bytes(words, bytes + at, sizeof(words));
          for (std::size_t i = 0; i < 4096; i += 8) {
            CHECK_EQ(words[i / 8], tag_of(kInitiator, at + i))
                << "offset " << at + i << " of a " << huge << "-byte region";
          }
        }
        const std::size_t grown = resident_bytes() - std::min(resident_bytes(), resident_before);
        CHECK_LT(grown, std::size_t{256} << 20) << "registering " << huge << " bytes made " << grown
                                                << " bytes resident: a provider that does not pin must not touch them";
      }
      env.barrier("done");
      ::munmap(base, huge);
    } else {
      Buffer local(3 * 4096 + 4096);
      auto mr = node.pd->register_memory(local.data(), local.size(), Access::LocalWrite);
      auto qp = connected_qp(env, node, kTarget, "t");
      const RemoteRegion region = fetch_region(env, "region");
      if (pins) {
        local.store64(0, tag_of(kInitiator, 0));
        Sge sge = mr->sge(0, 8);
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, sge, region.addr, region.rkey, 1), "WRITE",
                 .wr_id = 1);
      } else {
        CHECK_EQ(region.length, huge);
        const std::size_t spots[] = {0, huge / 2, huge - 4096};
        for (std::size_t s = 0; s < 3; ++s) {
          for (std::size_t i = 0; i < 4096; i += 8) local.store64(s * 4096 + i, tag_of(kInitiator, spots[s] + i));
          Sge sge = mr->sge(s * 4096, 4096);
          CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaWrite, sge, region.addr + spots[s], region.rkey, s),
                   "a WRITE into a region larger than memory", .wr_id = s);
        }
        Sge back = mr->sge(3 * 4096, 4096);
        CHECK_WC(RDMA_SYNC(*qp, *node.send_cq, Opcode::RdmaRead, back, region.addr + huge / 2 + 4096, region.rkey, 9),
                 "a READ from a region larger than memory", .wr_id = 9);
        for (std::size_t i = 0; i < 4096; ++i) CHECK_EQ(local[3 * 4096 + i], 0x3c) << "byte " << i << " READ back";
      }
      signal(env, "written");
      env.barrier("done");
    }
  }));
}

// Rank 0 may open only a few more descriptors; the ranks make and connect
// QPs one at a time, each proved by a WRITE both ways, until one fails. The
// failure on rank 0 names the open-files limit (it may be the peer whose
// connection rank 0 could not take: then rank 0's own QP says so when
// RDMX_TIMEOUT ends the wait); the QPs made before still carry WRITEs.
// The ranks talk over a QP made before the limit (a file store would need
// descriptors of its own).
constexpr std::size_t kSpareDescriptors = 40;
constexpr std::size_t kMaxTries = 128;

// Messages between the two ranks over one connected QP with its own CQs.
class Channel {
 public:
  Channel(RankEnv& env, Node& node)
      : send_cq_(node.device->create_cq(64)), recv_cq_(node.device->create_cq(64)), buffers_(2 * kSlots * kBytes) {
    mr_ = node.pd->register_memory(buffers_.data(), buffers_.size(), Access::LocalWrite);
    qp_ = make_qp(*node.device, *node.pd, *send_cq_, *recv_cq_);
    for (std::size_t i = 0; i < kSlots; ++i) post_recv(i);
    connect_qp(env, *qp_, 1 - env.rank(), "channel");
  }
  void send(const std::string& text) {
    CHECK_LE(text.size(), kBytes);
    const std::size_t at = (kSlots + sent_ % kSlots) * kBytes;
    std::memcpy(buffers_.data() + at, text.data(), text.size());
    Sge sge = mr_->sge(at, static_cast<std::uint32_t>(text.size()));
    qp_->post_send(send_wr(sent_++, Opcode::Send, {&sge, 1}));
    CHECK_WC(WAIT_WC(*send_cq_, "a SEND on the control channel"), "control SEND", .wr_id = sent_ - 1);
  }
  std::string receive() {
    WorkCompletion wc =
        wait_wc(*recv_cq_, "a message on the control channel", __FILE__, __LINE__, default_timeout() + 10s);
    CHECK_EQ(wc.status, WcStatus::Success) << describe(wc) << ": " << qp_->error_reason();
    std::string text(reinterpret_cast<const char*>(buffers_.data() + wc.wr_id * kBytes), wc.byte_len);
    post_recv(wc.wr_id);
    return text;
  }

 private:
  static constexpr std::size_t kSlots = 8;
  static constexpr std::size_t kBytes = 4096;
  void post_recv(std::size_t slot) {
    Sge sge = mr_->sge(slot * kBytes, kBytes);
    qp_->post_recv(RecvWr{.wr_id = slot, .sg_list = {&sge, 1}});
  }
  std::unique_ptr<CompletionQueue> send_cq_, recv_cq_;
  Buffer buffers_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<QueuePair> qp_;
  std::uint64_t sent_ = 0;
};

// Makes, connects and proves QP i; returns what failed, or "" when it works.
std::string try_one_qp(RankEnv& env, Node& node, Channel& channel, const MemoryRegion& mr, const RemoteRegion& region,
                       std::size_t i, std::vector<std::unique_ptr<QueuePair>>& qps) {
  const int peer = 1 - env.rank();
  std::unique_ptr<QueuePair> qp;
  std::string failure;
  try {
    qp = node.device->create_qp(*node.pd, *node.send_cq, *node.recv_cq,
                                QpCaps{.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1});
    qp->init();
  } catch (const Error& e) {
    failure = std::string("create_qp: ") + e.what();
  }
  channel.send(failure.empty() ? qp->local_address().to_hex() : "!" + failure);
  const std::string theirs = channel.receive();
  if (!failure.empty()) return failure;
  if (theirs.starts_with("!")) return "the peer failed: " + theirs.substr(1);
  try {
    qp->connect(QpAddress::from_hex(theirs), ConnectOptions{.peer_rank = peer});
    Sge sge = mr.sge(i * 8, 8);
    qp->post_send(rdma_wr(i, Opcode::RdmaWrite, {&sge, 1}, region.addr + (kMaxTries + i) * 8, region.rkey));
    WorkCompletion wc{};
    if (node.send_cq->wait({&wc, 1}, default_timeout() + 5s) == 0) return "no completion for the WRITE";
    if (wc.status != WcStatus::Success)
      failure = "the WRITE completed with " + describe(wc) + ": " + qp->error_reason();
  } catch (const Error& e) {
    failure = std::string("connect or WRITE: ") + e.what();
  }
  qps.push_back(std::move(qp));
  return failure;
}

TEST_P(HostMemoryConformance, QueuePairsPastTheDescriptorLimitFailClearly) {
  ASSERT_TRUE(run(2, [](RankEnv& env) {
    ::setenv("RDMX_TIMEOUT", "3", 1);
    CHECK_EQ(core::timeout(), 3000ms) << "RDMX_TIMEOUT was read before the rank body set it";
    const int peer = 1 - env.rank();
    Node node(env);
    Channel channel(env, node);
    Buffer slots(2 * kMaxTries * 8);  // what this rank sends, then what the peer wrote
    auto mr = node.pd->register_memory(slots.data(), slots.size(), Access::LocalWrite | Access::RemoteWrite);
    for (std::size_t i = 0; i < kMaxTries; ++i) slots.store64(i * 8, tag_of(env.rank(), i));
    publish_region(env, "slots/" + std::to_string(env.rank()), *mr);
    const RemoteRegion region = fetch_region(env, "slots/" + std::to_string(peer));
    env.barrier("ready");
    // UBSan's vptr check makes a pipe the first time it meets a stream type;
    // a failed WRITE is described once here, before the descriptors run out.
    CHECK(!describe(WorkCompletion{}).empty());
    rlimit old{};
    ::getrlimit(RLIMIT_NOFILE, &old);
    if (env.rank() == 0) set_descriptor_limit(open_descriptors().size() + kSpareDescriptors);
    std::vector<std::unique_ptr<QueuePair>> qps;
    std::size_t made = 0;
    std::string mine, theirs;
    for (std::size_t i = 0; i < kMaxTries && mine.empty() && theirs.empty(); ++i) {
      mine = try_one_qp(env, node, channel, *mr, region, i, qps);
      channel.send(mine.empty() ? "ok" : "!" + mine.substr(0, 4000));
      const std::string outcome = channel.receive();
      if (outcome != "ok") theirs = outcome.substr(1);
      if (mine.empty() && theirs.empty()) made = i + 1;
    }
    if (env.rank() == 0) ::setrlimit(RLIMIT_NOFILE, &old);
    std::fprintf(stderr, "[rank %d] %zu QPs made; this rank: %s; the peer: %s\n", env.rank(), made,
                 mine.empty() ? "ok" : mine.c_str(), theirs.empty() ? "ok" : theirs.c_str());
    if (env.rank() == 0 && made < kMaxTries) {
      CHECK(!mine.empty()) << "rank 0 ran out of descriptors yet saw no error of its own (the peer: " << theirs << ")";
      CHECK(mine.find("open files") != std::string::npos || mine.find("descriptor") != std::string::npos)
          << "the error on the rank out of descriptors must name the open-files limit: " << mine;
    }
    CHECK_GT(made, 0u) << "not one QP could be made with " << kSpareDescriptors << " descriptors to spare";
    env.barrier("stopped");
    // The QPs made before the failure still carry WRITEs.
    for (std::size_t i : {std::size_t{0}, made - 1}) {
      Sge sge = mr->sge(i * 8, 8);
      CHECK_WC(RDMA_SYNC(*qps[i], *node.send_cq, Opcode::RdmaWrite, sge, region.addr + (kMaxTries + i) * 8, region.rkey,
                         1000 + i),
               "a WRITE on a QP made before the limit was reached", .wr_id = 1000 + i);
    }
    env.barrier("proved");
    for (std::size_t i = 0; i < made; ++i) {
      CHECK_EQ(slots.load64((kMaxTries + i) * 8), tag_of(peer, i)) << "slot " << i << " of the " << made << " QPs made";
    }
    env.barrier("done");
  }));
}

}  // namespace
}  // namespace rdmx::test
