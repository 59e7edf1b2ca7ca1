// SPDX-License-Identifier: MIT
// examples/write_read.cpp: two ranks, an RDMA WRITE and an RDMA READ.
//
// Start it with scripts/run_example.sh (`make run`), which runs rank 0 and
// rank 1 with RDMX_RANK, RDMX_WORLD_SIZE=2 and a shared RDMX_STORE. Rank 0
// writes a buffer into rank 1's memory, reads it back and checks it; rank 1
// only registers memory and checks what landed, since one-sided operations
// need nothing else from the target. Usage: rdmx_write_read [bytes]
#include <rdmx/bootstrap.hpp>
#include <rdmx/verbs.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kDefaultBytes = std::size_t{64} << 20;
constexpr int kTimedTransfers = 4;
constexpr int kLatencyIterations = 5000;
constexpr std::uint32_t kSmallBytes = 8;

// A registered buffer as a peer needs to see it; travels through the store
// as "addr rkey".
struct RemoteBuffer {
  std::uint64_t addr = 0;
  std::uint32_t rkey = 0;
};

std::string encode(const RemoteBuffer& buffer) {
  return std::to_string(buffer.addr) + " " + std::to_string(buffer.rkey);
}

RemoteBuffer decode(const std::string& text) {
  unsigned long long addr = 0;
  unsigned rkey = 0;
  if (std::sscanf(text.c_str(), "%llu %u", &addr, &rkey) != 2) {
    throw rdmx::Error(rdmx::ErrorCode::Protocol, "malformed buffer record '" + text + "' in the store");
  }
  return {addr, rkey};
}

// A period of 251 (prime) makes a page landing at the wrong offset visible.
std::uint8_t pattern_byte(std::size_t offset) { return static_cast<std::uint8_t>(offset % 251); }

void fill_pattern(std::vector<std::uint8_t>& buffer) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern_byte(i);
}

void check_pattern(const std::vector<std::uint8_t>& buffer, const char* what) {
  for (std::size_t i = 0; i < buffer.size(); ++i) {
    if (buffer[i] != pattern_byte(i)) {
      throw rdmx::Error(rdmx::ErrorCode::Protocol, std::string(what) + ": wrong byte at offset " + std::to_string(i) +
                                                       " (got " + std::to_string(buffer[i]) + ", expected " +
                                                       std::to_string(pattern_byte(i)) + ")");
    }
  }
}

std::string size_label(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// Posts one work request and waits (bounded by RDMX_TIMEOUT) for its completion.
void post_and_wait(rdmx::QueuePair& qp, rdmx::CompletionQueue& cq, const rdmx::SendWr& wr) {
  qp.post_send(wr);
  rdmx::WorkCompletion wc;
  cq.wait(std::span(&wc, 1));
  if (wc.status != rdmx::WcStatus::Success) {
    throw rdmx::Error(rdmx::ErrorCode::PeerFailure, std::string(rdmx::to_string(wr.opcode)) + " completed with " +
                                                        rdmx::to_string(wc.status) + ": " + qp.error_reason());
  }
}

// Average seconds per operation over `count` operations run one after another.
double seconds_per_op(rdmx::QueuePair& qp, rdmx::CompletionQueue& cq, const rdmx::SendWr& wr, int count) {
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) post_and_wait(qp, cq, wr);
  return std::chrono::duration<double>(Clock::now() - start).count() / count;
}

void run_initiator(rdmx::Store& store, rdmx::ProtectionDomain& pd, rdmx::QueuePair& qp, rdmx::CompletionQueue& cq,
                   std::size_t bytes) {
  std::vector<std::uint8_t> source(bytes);
  std::vector<std::uint8_t> readback(bytes);
  fill_pattern(source);
  auto source_mr = pd.register_memory(source.data(), bytes, rdmx::Access::LocalWrite);
  auto readback_mr = pd.register_memory(readback.data(), bytes, rdmx::Access::LocalWrite);
  const RemoteBuffer target = decode(store.get_string("buffer/1"));
  std::printf("[rank 0] target buffer of rank 1: addr=0x%llx rkey=0x%x\n", static_cast<unsigned long long>(target.addr),
              target.rkey);

  const rdmx::Sge source_sge = source_mr->sge(0, static_cast<std::uint32_t>(bytes));
  rdmx::SendWr write{.wr_id = 1,
                     .opcode = rdmx::Opcode::RdmaWrite,
                     .sg_list = std::span(&source_sge, 1),
                     .remote_addr = target.addr,
                     .rkey = target.rkey};
  post_and_wait(qp, cq, write);
  std::printf("[rank 0] RDMA WRITE of %s: SUCCESS\n", size_label(bytes).c_str());
  store.set("written", std::string_view("1"));
  store.get_string("verified");  // rank 1 has checked its copy

  const rdmx::Sge readback_sge = readback_mr->sge(0, static_cast<std::uint32_t>(bytes));
  rdmx::SendWr read{.wr_id = 2,
                    .opcode = rdmx::Opcode::RdmaRead,
                    .sg_list = std::span(&readback_sge, 1),
                    .remote_addr = target.addr,
                    .rkey = target.rkey};
  post_and_wait(qp, cq, read);
  check_pattern(readback, "RDMA READ result");
  std::printf("[rank 0] RDMA READ of %s: SUCCESS, contents verified\n", size_label(bytes).c_str());

  const double write_s = seconds_per_op(qp, cq, write, kTimedTransfers);
  const double read_s = seconds_per_op(qp, cq, read, kTimedTransfers);
  std::printf("[rank 0] %s RDMA WRITE: %.2f ms, %.2f GB/s (average of %d)\n", size_label(bytes).c_str(), write_s * 1e3,
              bytes / write_s / 1e9, kTimedTransfers);
  std::printf("[rank 0] %s RDMA READ:  %.2f ms, %.2f GB/s (average of %d)\n", size_label(bytes).c_str(), read_s * 1e3,
              bytes / read_s / 1e9, kTimedTransfers);

  // Small messages: each one waits for its completion, so this is a round trip.
  const rdmx::Sge small_source = source_mr->sge(0, kSmallBytes);
  const rdmx::Sge small_readback = readback_mr->sge(0, kSmallBytes);
  write.sg_list = std::span(&small_source, 1);
  read.sg_list = std::span(&small_readback, 1);
  const double small_write_s = seconds_per_op(qp, cq, write, kLatencyIterations);
  const double small_read_s = seconds_per_op(qp, cq, read, kLatencyIterations);
  std::printf("[rank 0] %u B RDMA WRITE, post to completion: %.2f us average over %d\n", kSmallBytes,
              small_write_s * 1e6, kLatencyIterations);
  std::printf("[rank 0] %u B RDMA READ,  post to completion: %.2f us average over %d\n", kSmallBytes,
              small_read_s * 1e6, kLatencyIterations);
}

void run_target(rdmx::Store& store, rdmx::ProtectionDomain& pd, std::size_t bytes) {
  std::vector<std::uint8_t> window(bytes);
  auto window_mr = pd.register_memory(window.data(), bytes,
                                      rdmx::Access::LocalWrite | rdmx::Access::RemoteWrite | rdmx::Access::RemoteRead);
  std::printf("[rank 1] registered %s at %p: lkey=0x%x rkey=0x%x access=%s\n", size_label(bytes).c_str(),
              window_mr->addr(), window_mr->lkey(), window_mr->rkey(), rdmx::to_string(window_mr->access()).c_str());
  store.set("buffer/1", encode({reinterpret_cast<std::uint64_t>(window.data()), window_mr->rkey()}));

  store.get_string("written");
  check_pattern(window, "RDMA WRITE target");
  std::printf("[rank 1] %s written by rank 0: contents verified\n", size_label(bytes).c_str());
  store.set("verified", std::string_view("1"));
  // Rank 0 now reads the buffer back: served without rank 1 calling anything.
  store.get_string("done/0");
}

std::size_t parse_bytes(int argc, char** argv) {
  if (argc < 2) return kDefaultBytes;
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(argv[1], &end, 10);
  if (*end != '\0' || bytes < kSmallBytes || bytes > 0xffffffffull) {
    throw rdmx::Error(rdmx::ErrorCode::InvalidArgument, std::string("bad size '") + argv[1] + "'",
                      {.hint = "usage: rdmx_write_read [bytes], 8 <= bytes < 4 GiB"});
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // two ranks share a terminal
  try {
    const std::size_t bytes = parse_bytes(argc, argv);
    rdmx::Bootstrap job = rdmx::from_env();
    const int rank = job.info.rank;
    if (job.info.world_size != 2) {
      throw rdmx::Error(rdmx::ErrorCode::Config,
                        "this example needs exactly 2 ranks, got " + std::to_string(job.info.world_size));
    }
    const int peer = 1 - rank;

    // "auto" (RDMX_PROVIDER overrides it): shm for a peer on this host, tcp otherwise.
    auto device = rdmx::open_device();
    auto pd = device->alloc_pd();
    auto cq = device->create_cq(256);
    auto qp = device->create_qp(*pd, *cq, *cq);
    std::printf("[rank %d] device %s, qp %u\n", rank, device->name().c_str(), qp->qp_num());

    job.store->set("qp/" + std::to_string(rank), qp->local_address().to_hex());
    qp->connect(rdmx::QpAddress::from_hex(job.store->get_string("qp/" + std::to_string(peer))), {.peer_rank = peer});
    std::printf("[rank %d] connected to rank %d over %s, qp state %s\n", rank, peer, qp->provider().c_str(),
                rdmx::to_string(qp->state()));

    if (rank == 0) {
      run_initiator(*job.store, *pd, *qp, *cq, bytes);
      job.store->set("done/0", std::string_view("1"));
      job.store->get_string("done/1");  // keep our QP up until rank 1 has let go
    } else {
      run_target(*job.store, *pd, bytes);
      job.store->set("done/1", std::string_view("1"));
    }
    std::printf("[rank %d] done\n", rank);
    return 0;
  } catch (const rdmx::Error& e) {
    std::fprintf(stderr, "rdmx_write_read: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdmx_write_read: unexpected error: %s\n", e.what());
    return 1;
  }
}
