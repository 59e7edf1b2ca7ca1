// SPDX-License-Identifier: MIT
#include "providers/shm/offer_link.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "providers/shm/shm_qp.hpp"
#include "services/mutex.hpp"

namespace rdmx::shm {

ShmOfferLink::ShmOfferLink(core::DeviceLock& lock, ShmQp* qp, int peer_pid, std::string peer)
    : lock_(lock), qp_(qp), peer_(std::move(peer)) {
#ifdef SYS_pidfd_open
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, peer_pid, 0));
#else
  (void)peer_pid;
#endif
}

ShmOfferLink::~ShmOfferLink() {
  if (pidfd_ >= 0) ::close(pidfd_);
}

// lock_ is the QP's device lock, which the analysis knows by the QP's name.
bool ShmOfferLink::ask_to_close(std::uint32_t rkey) noexcept RDMX_NO_THREAD_SAFETY_ANALYSIS {
  core::LockGuard lock(lock_);
  return qp_ == nullptr || qp_->ask_peer_to_close_locked(rkey);
}

bool ShmOfferLink::peer_exited() const noexcept {
  if (pidfd_ < 0) return false;
  pollfd p{.fd = pidfd_, .events = POLLIN, .revents = 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLIN | POLLHUP)) != 0;
}

}  // namespace rdmx::shm
