// SPDX-License-Identifier: MIT
// Provider-independent pieces of the public verbs API: names of enums,
// address encoding, and convenience overloads.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>

#include "driver/work_request.hpp"
#include "rdmx/verbs.hpp"
#include "services/config.hpp"
#include "services/cuda/pointer.hpp"

namespace rdmx {

std::string to_string(Access access) {
  static constexpr std::pair<Access, const char*> kNames[] = {
      {Access::LocalWrite, "LOCAL_WRITE"},
      {Access::RemoteWrite, "REMOTE_WRITE"},
      {Access::RemoteRead, "REMOTE_READ"},
      {Access::RemoteAtomic, "REMOTE_ATOMIC"},
  };
  std::string out;
  for (const auto& [flag, name] : kNames) {
    if (!has(access, flag)) continue;
    if (!out.empty()) out += '|';
    out += name;
  }
  return out.empty() ? "NONE" : out;
}

const char* to_string(MemoryType type) noexcept {
  switch (type) {
    case MemoryType::Host: return "host";
    case MemoryType::Cuda: return "cuda";
  }
  return "unknown";
}

const char* to_string(CudaMemorySupport support) noexcept {
  switch (support) {
    case CudaMemorySupport::None: return "none";
    case CudaMemorySupport::Staging: return "staging";
    case CudaMemorySupport::PeerMapping: return "peer-mapping";
    case CudaMemorySupport::DmaBuf: return "dma-buf";
  }
  return "unknown";
}

MemoryType memory_type(const void* addr, std::size_t length) {
  return core::cuda::classify(addr, length, "memory_type").type;
}

const char* to_string(Opcode op) noexcept {
  switch (op) {
    case Opcode::Send: return "SEND";
    case Opcode::SendWithImm: return "SEND_WITH_IMM";
    case Opcode::RdmaWrite: return "RDMA_WRITE";
    case Opcode::RdmaWriteWithImm: return "RDMA_WRITE_WITH_IMM";
    case Opcode::RdmaRead: return "RDMA_READ";
    case Opcode::AtomicFetchAdd: return "ATOMIC_FETCH_AND_ADD";
    case Opcode::AtomicCmpSwap: return "ATOMIC_CMP_AND_SWP";
  }
  return "UNKNOWN_OPCODE";
}

const char* to_string(WcStatus status) noexcept {
  switch (status) {
    case WcStatus::Success: return "SUCCESS";
    case WcStatus::LocLenErr: return "LOC_LEN_ERR";
    case WcStatus::LocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::LocEecOpErr: return "LOC_EEC_OP_ERR";
    case WcStatus::LocProtErr: return "LOC_PROT_ERR";
    case WcStatus::WrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::MwBindErr: return "MW_BIND_ERR";
    case WcStatus::BadRespErr: return "BAD_RESP_ERR";
    case WcStatus::LocAccessErr: return "LOC_ACCESS_ERR";
    case WcStatus::RemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::RemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::RemOpErr: return "REM_OP_ERR";
    case WcStatus::RetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::RnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case WcStatus::LocRddViolErr: return "LOC_RDD_VIOL_ERR";
    case WcStatus::RemInvRdReqErr: return "REM_INV_RD_REQ_ERR";
    case WcStatus::RemAbortErr: return "REM_ABORT_ERR";
    case WcStatus::InvEecnErr: return "INV_EECN_ERR";
    case WcStatus::InvEecStateErr: return "INV_EEC_STATE_ERR";
    case WcStatus::FatalErr: return "FATAL_ERR";
    case WcStatus::RespTimeoutErr: return "RESP_TIMEOUT_ERR";
    case WcStatus::GeneralErr: return "GENERAL_ERR";
  }
  return "UNKNOWN_STATUS";
}

const char* to_string(WcOpcode op) noexcept {
  switch (op) {
    case WcOpcode::Send: return "SEND";
    case WcOpcode::RdmaWrite: return "RDMA_WRITE";
    case WcOpcode::RdmaRead: return "RDMA_READ";
    case WcOpcode::CompSwap: return "COMP_SWAP";
    case WcOpcode::FetchAdd: return "FETCH_ADD";
    case WcOpcode::Recv: return "RECV";
    case WcOpcode::RecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN_WC_OPCODE";
}

const char* to_string(PostResult result) noexcept {
  switch (result) {
    case PostResult::Ok: return "OK";
    case PostResult::QueueFull: return "QUEUE_FULL";
  }
  return "UNKNOWN_POST_RESULT";
}

const char* to_string(QpState state) noexcept {
  switch (state) {
    case QpState::Reset: return "RESET";
    case QpState::Init: return "INIT";
    case QpState::Rtr: return "RTR";
    case QpState::Rts: return "RTS";
    case QpState::Error: return "ERROR";
  }
  return "UNKNOWN_STATE";
}

Sge MemoryRegion::sge(std::size_t offset, std::uint32_t length) const {
  if (offset > length_ || length > length_ - offset) {
    char sizes[160];
    std::snprintf(sizes, sizeof(sizes), "offset=%zu length=%u region_length=%zu", offset, length, length_);
    throw Error(ErrorCode::InvalidArgument, "SGE does not fit inside the memory region",
                {.op = "MemoryRegion::sge", .sizes = sizes, .hint = "keep offset + length <= region length"});
  }
  return Sge{reinterpret_cast<std::uint64_t>(static_cast<char*>(addr_) + offset), length, lkey_};
}

void make_resident(void* addr, std::size_t length) noexcept {
  if (addr == nullptr || length == 0) return;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<std::uintptr_t>(addr) / page * page;
  const auto end = reinterpret_cast<std::uintptr_t>(addr) + length;
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14
#endif
  if (::madvise(reinterpret_cast<void*>(first), end - first, MADV_POPULATE_WRITE) == 0) return;
  // An atomic add of zero writes each page without changing what a peer
  // may be writing into it at the same moment.
  for (std::uintptr_t a = std::max(first, reinterpret_cast<std::uintptr_t>(addr)); a < end; a = (a / page + 1) * page) {
    std::atomic_ref<unsigned char>(*reinterpret_cast<unsigned char*>(a)).fetch_add(0, std::memory_order_relaxed);
  }
}

std::string QpAddress::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (auto b : bytes) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

QpAddress QpAddress::from_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) {
    throw Error(ErrorCode::InvalidArgument, "QP address hex string has odd length",
                {.op = "QpAddress::from_hex",
                 .sizes = "chars=" + std::to_string(hex.size()),
                 .hint = "pass the exact string produced by QpAddress::to_hex()"});
  }
  QpAddress address;
  address.bytes.reserve(hex.size() / 2);
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]);
    int lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) {
      throw Error(ErrorCode::InvalidArgument, "QP address hex string has a non-hex character",
                  {.op = "QpAddress::from_hex",
                   .sizes = "position=" + std::to_string(i),
                   .hint = "pass the exact string produced by QpAddress::to_hex()"});
    }
    address.bytes.push_back(static_cast<std::uint8_t>(hi << 4 | lo));
  }
  return address;
}

std::size_t CompletionQueue::wait(std::span<WorkCompletion> out) { return wait(out, core::timeout()); }

void QueuePair::post_send_batch(std::span<const SendWr> wrs) {
  for (std::size_t i = 0; i < wrs.size(); ++i) {
    try {
      post_send(wrs[i]);
    } catch (const Error& e) {
      throw core::batch_error(e, i, wrs.size(), wrs[i].wr_id);
    }
  }
}

Error core::batch_error(const Error& e, std::size_t index, std::size_t count, std::uint64_t wr_id) {
  return Error(e.code(),
               "work request " + std::to_string(index) + " of " + std::to_string(count) + " (wr_id " +
                   std::to_string(wr_id) + "): " + e.message() + "; the " + std::to_string(index) +
                   " before it were posted",
               e.context());
}

}  // namespace rdmx
