// SPDX-License-Identifier: MIT
// One-sided copies without the peer: a region the peer allocated with
// allocate_memory() is offered to us (its memfd over the QP's socket) once
// we first use its rkey; we map it, and later WRITEs and READs on it are
// copied straight into or out of that mapping, guarded by the region's
// shared liveness word so none outlives its deregistration. A region of the
// peer's own memory (register_memory) is offered with a state page alone,
// and copied into and out of with cross-memory calls on the peer's process. Shared device
// memory is offered the same way with its allocation's handle: we open it
// through CUDA IPC, and the copies run on the GPU's copy engine. An import
// of cudaMalloc memory (a legacy handle) is closed when the peer
// deregisters the region, before its deregistration returns.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "driver/ordered_placement.hpp"
#include "driver/shared_region.hpp"
#include "providers/shm/cross_memory.hpp"
#include "providers/shm/offer_link.hpp"
#include "providers/shm/shm_device.hpp"
#include "providers/shm/shm_qp.hpp"
#include "services/asymmetric_fence.hpp"
#include "services/cuda/copy.hpp"
#include "services/log.hpp"
#include "services/race_annotations.hpp"
#include "services/settings.hpp"

namespace rdmx::shm {
namespace {

constexpr core::SizeSetting kHeapDirectMin{
    "RDMX_SHM_HEAP_DIRECT_MIN", std::size_t{64} << 10,
    "shm: WRITEs and READs from this size on into a peer's registered heap memory are copied by the initiator "
    "across processes (smaller ones go through the peer's ring; 0: all do)"};
RDMX_SETTING(kHeapDirectMin);

bool heap_direct(std::uint64_t total) {
  const std::size_t min = heap_direct_min();
  return min != 0 && total >= min;
}

}  // namespace

std::size_t heap_direct_min() {
  static const std::size_t min = kHeapDirectMin.read();
  return min;
}

bool ShmQp::post_direct_locked(const SendWr& wr, std::uint64_t total) {
  // One-sided: a WRITE or READ with nothing queued ahead of it, on a region
  // the peer shared, is copied here and completes at once, without the
  // peer's threads and without a send-queue entry.
  if (!sq_.empty() || peer_regions_.empty() || !peer_gone_.empty() ||
      (wr.opcode != Opcode::RdmaWrite && wr.opcode != Opcode::RdmaRead) || !direct_locals_ok_locked(wr) ||
      !try_direct_locked(wr, total)) {
    return false;
  }
  if (wr.signaled) push_send_completion_locked(wr.wr_id, wr.opcode, total, WcStatus::Success);
  return true;
}

bool ShmQp::direct_locals_ok_locked(const SendWr& wr) {
  const Access need = wr.opcode == Opcode::RdmaRead ? Access::LocalWrite : Access::None;
  direct_local_gpu_ = -1;
  for (const Sge& sge : wr.sg_list) {
    if (local_key_.check(pd_.registry(), false, &pd_, sge.lkey, sge.addr, sge.length, need) != core::AccessCheck::Ok) {
      return false;  // the ordinary path reports it
    }
    // Local device memory is copied by the GPU (try_direct_locked).
    if (sge.length > 0 && core::Staging::needs(local_key_.verdict())) {
      direct_local_gpu_ = local_key_.verdict().memory.device;
    }
  }
  return true;
}

bool ShmQp::try_direct_locked(const SendWr& wr, std::uint64_t total) {
  const bool write = wr.opcode == Opcode::RdmaWrite;
  for (std::size_t i = 0; i < peer_regions_.size(); ++i) {
    PeerRegion& r = peer_regions_[i];
    if (r.rkey != wr.rkey) continue;
    if (!has(r.access, write ? Access::RemoteWrite : Access::RemoteRead) || wr.remote_addr < r.base ||
        total > r.length || wr.remote_addr - r.base > r.length - total) {
      return false;  // the peer's region table gives the verdict on the ring path
    }
    if (r.heap && !heap_direct(total)) return false;
    // Mark ourselves busy before looking at `live`: deregistration clears
    // `live`, then waits for busy slots (see core::SharedRegionState).
    r.busy->store(1, std::memory_order_relaxed);
    core::light_fence(device_.asymmetric_fence());
    if (r.state->live.load(std::memory_order_relaxed) == 0) {
      r.busy->store(0, std::memory_order_release);
      drop_peer_region_locked(i);
      return false;
    }
    if (r.heap) {
      // Local device memory cannot be handed to the kernel: the ring stages it.
      const bool done = direct_local_gpu_ < 0 && copy_across_processes_locked(wr, total);
      if (done && write) core::ring(r.state->doorbell);
      r.busy->store(0, std::memory_order_release);
      if (!done && direct_local_gpu_ < 0) {
        // Refused (a ptrace policy, the region unmapped under it): the ring
        // path carries this one and every later one, and reports what is
        // wrong.
        drop_peer_region_locked(i);
      }
      return done;
    }
    if (r.device_data != nullptr || direct_local_gpu_ >= 0) {
      const bool done = copy_through_gpu_locked(r, wr, total);
      if (done && write) core::ring(r.state->doorbell);
      r.busy->store(0, std::memory_order_release);
      return done;
    }
    char* remote = r.map + (wr.remote_addr - r.base);
    // A WRITE's last word is stored last (DeviceCaps::ordered_write_placement).
    const bool hold = write && core::has_last_word(wr.remote_addr, total);
    const std::uint64_t before_tail = hold ? total - 8 : total;
    char tail[8];
    std::uint64_t at = 0;
    for (const Sge& sge : wr.sg_list) {
      auto* local = reinterpret_cast<char*>(sge.addr);
      const std::uint64_t now = at < before_tail ? std::min<std::uint64_t>(sge.length, before_tail - at) : 0;
      if (now <= 64) {  // the latency case: no detour through the large-copy machinery
        std::memcpy(write ? remote : local, write ? local : remote, now);
      } else if (write) {
        device_.copier().copy(remote, local, now);
      } else {
        device_.copier().copy(local, remote, now);
      }
      if (now < sge.length) std::memcpy(tail + (at + now - before_tail), local + now, sge.length - now);
      remote += sge.length;
      at += sge.length;
    }
    if (hold) core::store_last_word(remote - 8, tail);
    // What this copy read and wrote here is done before the peer can learn
    // of it and place anything new into these buffers.
    core::release_remote_placements();
    if (write) core::ring(r.state->doorbell);
    r.busy->store(0, std::memory_order_release);
    return true;
  }
  return false;
}

// Device memory on either side: each SGE is one copy on the GPU's copy
// engine (unified addressing tells the driver which side is which), waited
// for before the completion; a WRITE's last word goes in a copy of its own,
// after the rest. False when the driver fails, so the ring path (whose
// staging reports the error) carries the request instead.
bool ShmQp::copy_through_gpu_locked(const PeerRegion& r, const SendWr& wr, std::uint64_t total) {
  const bool write = wr.opcode == Opcode::RdmaWrite;
  char* remote = (r.device_data != nullptr ? r.device_data : r.map) + (wr.remote_addr - r.base);
  const int gpu = r.imported ? r.imported->device() : direct_local_gpu_;
  const bool hold = write && core::has_last_word(wr.remote_addr, total);
  const char* op = write ? "shm WRITE by the GPU" : "shm READ by the GPU";
  try {
    std::uint64_t at = 0;
    for (const Sge& sge : wr.sg_list) {
      auto* local = reinterpret_cast<char*>(sge.addr);
      // The last word apart when it lies in the last SGE (nothing polls device memory for it).
      const bool last = hold && at + sge.length == total && sge.length >= 8;
      const std::uint64_t body = last ? sge.length - 8 : sge.length;
      if (write) {
        core::cuda::copy_memory(remote + at, local, body, gpu, op);
        if (body != sge.length) core::cuda::copy_memory(remote + at + body, local + body, 8, gpu, op);
      } else {
        core::cuda::copy_memory(local, remote + at, sge.length, gpu, op);
      }
      at += sge.length;
    }
  } catch (const Error& e) {
    RDMX_INFO("shm qp %u: %s failed, the ring carries it instead: %s", qpn_, op, e.what());
    return false;
  }
  return true;
}

// The peer's heap: the kernel copies between the two processes (cross-
// memory attach, allowed where the peer's ring path copies too). A WRITE's
// last word goes in a call of its own after the rest, as one aligned
// 8-byte copy (DeviceCaps::ordered_write_placement). False when the kernel
// refuses, so the ring path carries the request instead.
bool ShmQp::copy_across_processes_locked(const SendWr& wr, std::uint64_t total) {
  const bool write = wr.opcode == Opcode::RdmaWrite;
  iovec local[kMaxSge];
  int count = 0;
  for (const Sge& sge : wr.sg_list) {
    if (sge.length > 0) local[count++] = {reinterpret_cast<void*>(sge.addr), sge.length};
  }
  const bool hold = write && core::has_last_word(wr.remote_addr, total);
  const std::uint64_t body = hold ? total - 8 : total;
  const iovec remote{reinterpret_cast<void*>(wr.remote_addr), body};
  if (body > 0) {
    // One local buffer (the common case) may be split over the copy helper.
    const bool moved =
        count == 1 ? device_.copier().copy_across(peer_pid_, write, wr.remote_addr, local[0].iov_base, body)
        : write    ? write_to_process(peer_pid_, local, count, &remote, 1, body) == static_cast<ssize_t>(body)
                   : read_from_process(peer_pid_, local, count, &remote, 1, body) == static_cast<ssize_t>(body);
    if (!moved) {
      RDMX_INFO(
          "shm qp %u: %s of %llu bytes at 0x%llx in %s's memory across processes failed (%s); the ring "
          "carries it instead",
          qpn_, write ? "WRITE" : "READ", static_cast<unsigned long long>(body),
          static_cast<unsigned long long>(wr.remote_addr), describe_peer().c_str(), std::strerror(errno));
      return false;
    }
  }
  if (hold) {
    iovec tail[kMaxSge];
    const int tail_count = tail_iovecs(local, count, body, tail);
    const iovec last{reinterpret_cast<void*>(wr.remote_addr + body), 8};
    if (write_to_process(peer_pid_, tail, tail_count, &last, 1, 8) != 8) return false;
  }
  return true;
}

void ShmQp::offer_region_locked(std::uint32_t rkey, const core::MemoryRegistry::Verdict& verdict) {
  if (verdict.shared == nullptr || socket_ < 0 || !accepted_) return;
  if (std::find(offered_.begin(), offered_.end(), rkey) != offered_.end()) return;
  offered_.push_back(rkey);
  const bool heap = verdict.shared->heap;
  const core::StatePage heap_page = heap ? core::heap_state_page(*verdict.shared) : core::StatePage{};
  if (heap && heap_page.memfd < 0) return;
  const bool legacy = verdict.shared->offers != nullptr;
  // A legacy handle cannot be opened by the process that made it.
  if (legacy && peer_pid_ == ::getpid()) return;
  const std::uint32_t slot = verdict.shared->slots_given.fetch_add(1);
  if (slot >= core::kDirectSlots) return;  // every slot taken: this peer keeps using the ring
  verdict.shared->slot_pids[slot].store(peer_pid_, std::memory_order_relaxed);
  if (legacy) {
    if (!offer_link_) offer_link_ = std::make_shared<ShmOfferLink>(device_lock_, this, peer_pid_, describe_peer());
    core::LockGuard lock(verdict.shared->offers->mutex);
    verdict.shared->offers->offers.push_back({offer_link_, rkey, slot});
  }
  ShareOffer offer;
  offer.rkey = rkey;
  offer.base = verdict.base;
  offer.length = verdict.length;
  offer.map_length = heap ? sizeof(core::SharedRegionState) : verdict.shared->map_length;
  offer.state_offset = heap ? 0 : verdict.shared->state_offset;
  offer.heap = heap ? 1 : 0;
  offer.access = static_cast<std::uint32_t>(verdict.access);
  offer.slot = slot;
  offer.device = verdict.shared->device ? 1 : 0;
  offer.cuda_offset = verdict.shared->cuda_offset;
  offer.on_first_touch = verdict.shared->on_first_touch ? 1 : 0;
  offer.cuda = verdict.shared->cuda;
  if (int error = send_with_fd(socket_, &offer, sizeof(offer), heap ? heap_page.memfd : verdict.shared->memfd,
                               verdict.shared->cuda_fd);
      error != 0) {
    RDMX_INFO("shm qp %u: offering region rkey 0x%x to %s failed: %s", qpn_, rkey, describe_peer().c_str(),
              std::strerror(error));
  }
}

void ShmQp::take_offer_locked(const ShareOffer& offer, int fd, int cuda_fd) {
  struct stat st {};
  const bool device = offer.device != 0;
  const bool heap = offer.heap != 0 && !device;
  const bool sane =
      (device ? offer.cuda_offset <= offer.cuda.size && offer.length <= offer.cuda.size - offer.cuda_offset
       : heap ? offer.state_offset == 0 && offer.base + offer.length >= offer.base
              : offer.state_offset >= offer.length) &&
      offer.map_length >= offer.state_offset + sizeof(core::SharedRegionState) && offer.slot < core::kDirectSlots &&
      ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= offer.map_length;
  // Page tables filled now rather than page by page inside the copies;
  // populating a region meant to take memory where it is used would take
  // all of it (a page of a memfd that nobody wrote is allocated by the fault).
  const int populate = offer.on_first_touch != 0 ? 0 : MAP_POPULATE;
  void* map =
      sane ? ::mmap(nullptr, offer.map_length, PROT_READ | PROT_WRITE, MAP_SHARED | populate, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) {
    if (cuda_fd >= 0) ::close(cuda_fd);
    RDMX_WARN("shm qp %u: cannot map the region rkey 0x%x offered by %s; its WRITEs and READs keep using the ring",
              qpn_, offer.rkey, describe_peer().c_str());
    return;
  }
  auto* base = static_cast<char*>(map);
  auto* state = reinterpret_cast<core::SharedRegionState*>(base + offer.state_offset);
  std::atomic<std::uint32_t>* holding = &state->slots[offer.slot].holding;
  std::shared_ptr<core::cuda::ImportedMemory> imported;
  if (device) {
    // A legacy handle's exporter waits for `holding` to clear before its
    // memory may be freed: set before `live` is read, as `busy` is.
    const bool legacy = offer.cuda.kind == core::cuda::SharedMemoryHandle::kLegacy;
    if (legacy) {
      holding->store(1, std::memory_order_relaxed);
      core::light_fence(device_.asymmetric_fence());
    }
    std::string why;
    if (state->live.load(std::memory_order_relaxed) == 0) {
      why = "it was deregistered meanwhile";
      if (cuda_fd >= 0) ::close(cuda_fd);
    } else {
      try {
        imported = core::cuda::import_shared(peer_pid_, offer.cuda, cuda_fd, "shm device region offer");
      } catch (const Error& e) {
        why = e.what();
      }
    }
    if (!why.empty()) {
      RDMX_INFO(
          "shm qp %u: not opening the device region rkey 0x%x offered by %s; its WRITEs and READs keep "
          "using the ring: %s",
          qpn_, offer.rkey, describe_peer().c_str(), why.c_str());
      holding->store(0, std::memory_order_release);
      ::munmap(map, offer.map_length);
      return;
    }
  } else if (cuda_fd >= 0) {
    ::close(cuda_fd);
  }
  // Regions the peer has deregistered since go now: it offers a new one for
  // each buffer it registers (a cache of the application's buffers may
  // register thousands over a job), and nothing else would unmap them.
  for (std::size_t i = peer_regions_.size(); i-- > 0;) {
    if (peer_regions_[i].rkey == offer.rkey || peer_regions_[i].state->live.load(std::memory_order_relaxed) == 0) {
      drop_peer_region_locked(i);
    }
  }
  char* device_data = imported ? imported->base() + offer.cuda_offset : nullptr;
  peer_regions_.push_back({offer.rkey, offer.base, offer.length, static_cast<Access>(offer.access), base,
                           offer.map_length, state, &state->slots[offer.slot].busy, holding, std::move(imported),
                           device_data, heap});
  RDMX_TRACE("shm qp %u: mapped %s's region rkey 0x%x (%llu bytes) for direct access", qpn_, describe_peer().c_str(),
             offer.rkey, static_cast<unsigned long long>(offer.length));
}

void ShmQp::drop_peer_region_locked(std::size_t index) {
  PeerRegion& r = peer_regions_[index];
  // Closed (when ours was the last reference in this process) before the
  // exporter may see `holding` clear and let its memory be freed.
  r.imported.reset();
  r.holding->store(0, std::memory_order_release);
  ::munmap(r.map, r.map_length);
  peer_regions_.erase(peer_regions_.begin() + static_cast<std::ptrdiff_t>(index));
}

void ShmQp::drop_peer_regions_locked() {
  while (!peer_regions_.empty()) drop_peer_region_locked(peer_regions_.size() - 1);
}

bool ShmQp::ask_peer_to_close_locked(std::uint32_t rkey) {
  state_held_by_device(device_lock_);
  // A QP in ERROR closes its connection, or says Bye: the peer drops every
  // region it mapped then.
  if (state() == QpState::Error || socket_ < 0) return true;
  if (!push_control_locked(RecordType::Revoke, 0, rkey)) return false;
  wake_peer_locked();
  return true;
}

void ShmQp::revoke_peer_region_locked(std::uint32_t rkey) {
  for (std::size_t i = 0; i < peer_regions_.size(); ++i) {
    if (peer_regions_[i].rkey != rkey) continue;
    RDMX_TRACE("shm qp %u: %s deregisters its region rkey 0x%x: closing our import", qpn_, describe_peer().c_str(),
               rkey);
    drop_peer_region_locked(i);
    return;
  }
}

}  // namespace rdmx::shm
