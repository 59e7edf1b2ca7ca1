// SPDX-License-Identifier: MIT
// connect_mesh() over the tcp provider: four real processes build a full mesh
// through a file store and each RDMA WRITEs a distinct pattern to every peer.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "process_util.hpp"
#include "rdmx/bootstrap.hpp"
#include "rdmx/verbs.hpp"
#include "services/race_annotations.hpp"

namespace rdmx {
namespace {

using namespace std::chrono_literals;
using test::spawn;
using test::TempDir;
using test::wait_exit;

constexpr std::size_t kChunk = 4096;

std::uint8_t pattern(int writer, int target, std::size_t i) {
  return static_cast<std::uint8_t>(writer * 37 + target * 11 + i * 7 + 1);
}

std::vector<std::string> keys_for(const std::string& prefix, int world_size, int except) {
  std::vector<std::string> keys;
  for (int r = 0; r < world_size; ++r) {
    if (r != except) keys.push_back(prefix + std::to_string(r));
  }
  return keys;
}

// `ring`: each rank connects to its two neighbours only (connect_mesh with
// a list of peers); otherwise to everyone.
bool connects(int a, int b, int world_size, bool ring) {
  return a != b && (!ring || (a + 1) % world_size == b || (b + 1) % world_size == a);
}

int run_rank(const std::string& store_dir, int rank, int world_size, bool ring) {
  std::shared_ptr<Store> store = open_file_store(store_dir);
  auto device = open_device("tcp");
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(256);

  // Peer w writes into [w * kChunk, +kChunk) of this rank's inbox.
  std::vector<std::uint8_t> inbox(kChunk * static_cast<std::size_t>(world_size), 0);
  std::vector<std::uint8_t> outbox(kChunk * static_cast<std::size_t>(world_size), 0);
  auto inbox_mr = pd->register_memory(inbox.data(), inbox.size(), Access::LocalWrite | Access::RemoteWrite);
  auto outbox_mr = pd->register_memory(outbox.data(), outbox.size(), Access::LocalWrite);
  store->set("inbox/" + std::to_string(rank),
             std::string_view(std::to_string(reinterpret_cast<std::uintptr_t>(inbox.data())) + ":" +
                              std::to_string(inbox_mr->rkey())));

  std::vector<int> peers;
  for (int peer = 0; peer < world_size; ++peer) {
    if (connects(rank, peer, world_size, ring)) peers.push_back(peer);
  }
  Mesh mesh = ring ? connect_mesh(*store, rank, world_size, peers, *device, *pd, *cq, *cq)
                   : connect_mesh(*store, rank, world_size, *device, *pd, *cq, *cq);
  CHILD_REQUIRE(mesh.qps.size() == static_cast<std::size_t>(world_size));
  for (int peer = 0; peer < world_size; ++peer) {
    CHILD_REQUIRE((mesh.qps[static_cast<std::size_t>(peer)] != nullptr) == connects(rank, peer, world_size, ring));
  }

  for (int peer : peers) {
    std::string remote = store->get_string("inbox/" + std::to_string(peer));
    auto colon = remote.find(':');
    std::uint64_t remote_addr = std::stoull(remote.substr(0, colon));
    auto rkey = static_cast<std::uint32_t>(std::stoul(remote.substr(colon + 1)));
    std::size_t offset = kChunk * static_cast<std::size_t>(peer);
    for (std::size_t i = 0; i < kChunk; ++i) outbox[offset + i] = pattern(rank, peer, i);
    Sge sge = outbox_mr->sge(offset, kChunk);
    SendWr wr;
    wr.wr_id = static_cast<std::uint64_t>(peer);
    wr.opcode = Opcode::RdmaWrite;
    wr.sg_list = std::span<const Sge>(&sge, 1);
    wr.remote_addr = remote_addr + kChunk * static_cast<std::size_t>(rank);
    wr.rkey = rkey;
    mesh.qps[static_cast<std::size_t>(peer)]->post_send(wr);
  }
  // A successful RDMA WRITE completion means the data is placed at the target.
  int completed = 0;
  std::array<WorkCompletion, 16> completions;
  while (completed < static_cast<int>(peers.size())) {
    std::size_t n = cq->wait(completions, 20s);
    for (std::size_t i = 0; i < n; ++i) {
      if (completions[i].status != WcStatus::Success) {
        throw std::runtime_error("rank " + std::to_string(rank) + ": WRITE to peer " +
                                 std::to_string(completions[i].wr_id) + " completed with " +
                                 to_string(completions[i].status));
      }
      CHILD_REQUIRE(completions[i].opcode == WcOpcode::RdmaWrite);
    }
    completed += static_cast<int>(n);
  }
  store->set("wrote/" + std::to_string(rank), std::string_view("1"));
  store->wait(keys_for("wrote/", world_size, rank), 20s);

  core::acquire_remote_placements();  // the store said every peer's WRITE landed (tells TSan)
  for (int writer = 0; writer < world_size; ++writer) {
    if (writer == rank) continue;
    const bool wrote = connects(writer, rank, world_size, ring);
    for (std::size_t i = 0; i < kChunk; ++i) {
      if (inbox[kChunk * static_cast<std::size_t>(writer) + i] != (wrote ? pattern(writer, rank, i) : 0)) {
        throw std::runtime_error("rank " + std::to_string(rank) + ": byte " + std::to_string(i) + " from rank " +
                                 std::to_string(writer) + " is wrong");
      }
    }
  }
  // Nobody tears down QPs while a peer may still use them.
  store->set("done/" + std::to_string(rank), std::string_view("1"));
  store->wait(keys_for("done/", world_size, rank), 20s);
  return 0;
}

void run_four_ranks(bool ring) {
  TempDir dir;
  const std::string store_dir = dir.path();
  constexpr int kWorld = 4;
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.push_back(spawn([&, rank] { return run_rank(store_dir, rank, kWorld, ring); }));
  }
  for (int rank = 0; rank < kWorld; ++rank)
    EXPECT_EQ(wait_exit(ranks[static_cast<std::size_t>(rank)]), 0) << "rank " << rank;
}

TEST(ConnectMesh, FourRanksWriteToEveryPeer) { run_four_ranks(false); }

TEST(ConnectMesh, FourRanksInARingConnectTheirNeighboursOnly) { run_four_ranks(true); }

// Forwards to a store but caps every blocking wait, so a test can provoke a
// timeout inside connect_mesh() (which waits with RDMX_TIMEOUT) quickly.
class ShortWaitStore final : public Store {
 public:
  ShortWaitStore(Store& inner, std::chrono::milliseconds cap) : inner_(inner), cap_(cap) {}
  using Store::get;
  using Store::set;
  using Store::wait;
  void set(const std::string& key, const Bytes& value) override { inner_.set(key, value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_.get(key, std::min(timeout, cap_));
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    inner_.wait(keys, std::min(timeout, cap_));
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_.add(key, delta); }
  bool remove(const std::string& key) override { return inner_.remove(key); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return inner_.compare_set(key, expected, desired);
  }
  bool check(const std::string& key) override { return inner_.check(key); }

 private:
  Store& inner_;
  std::chrono::milliseconds cap_;
};

TEST(ConnectMesh, MissingPeerTimeoutNamesTheRank) {
  std::shared_ptr<Device> device;
  try {
    device = open_device("tcp");
  } catch (const Error& e) {
    GTEST_SKIP() << "tcp provider unavailable: " << e.what();
  }
  // World of 3 where rank 2 never shows up: rank 0's error names mesh/2/0 only.
  TempDir dir;
  auto files = open_file_store(dir.path());
  ShortWaitStore store(*files, 300ms);
  store.set("mesh/1/0", std::string_view("00"));
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(16);
  try {
    connect_mesh(store, 0, 3, *device, *pd, *cq, *cq);
    FAIL() << "connect_mesh returned without rank 2";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_EQ(e.code(), ErrorCode::Timeout) << what;
    EXPECT_NE(what.find("'mesh/2/0'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'mesh/1/0'"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
  }
  // Rank 0 published its own addresses before waiting.
  EXPECT_TRUE(files->check("mesh/0/1"));
  EXPECT_TRUE(files->check("mesh/0/2"));
}

TEST(ConnectMesh, RejectsARankOutsideTheWorld) {
  std::shared_ptr<Device> device;
  try {
    device = open_device("tcp");
  } catch (const Error& e) {
    GTEST_SKIP() << "tcp provider unavailable: " << e.what();
  }
  TempDir dir;
  auto store = open_file_store(dir.path());
  auto pd = device->alloc_pd();
  auto cq = device->create_cq(16);
  EXPECT_THROW(connect_mesh(*store, 3, 3, *device, *pd, *cq, *cq), Error);
  // A list of peers naming this rank or one outside the world, before anything is published.
  for (const std::vector<int>& peers : {std::vector<int>{1, 0}, std::vector<int>{3}}) {
    try {
      connect_mesh(*store, 0, 3, peers, *device, *pd, *cq, *cq);
      FAIL() << "connect_mesh took peer " << peers.back();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
      EXPECT_NE(std::string(e.what()).find("peer " + std::to_string(peers.back())), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(store->check("mesh/0/1"));
}

}  // namespace
}  // namespace rdmx
