// SPDX-License-Identifier: MIT
// The tcp provider's device: a listening socket on the chosen interface
// (core::SoftRcDevice holds the rest: registry, engine, pending connections).
//
// Progress: one level-triggered epoll set per device. An application thread
// that spins with few QPs poll()s their sockets directly instead.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>

#include "providers/soft_rc/device.hpp"
#include "providers/tcp/wire.hpp"
#include "services/socket_iface.hpp"
#include "services/thread_annotations.hpp"

namespace rdmx::tcp {

using core::choose_interface;
using core::format_address;
using core::SocketInterface;
using core::Watch;
using core::watch_tag;

class TcpDevice final : public core::SoftRcDevice {
 public:
  TcpDevice(SocketInterface iface, std::string why, core::DeviceResources resources);
  ~TcpDevice() override;

  std::size_t progress() override;

  // ---- for QPs ----
  QpAddress qp_address(std::uint32_t qpn) const override;
  // Takes over the socket of a destroyed QP that said goodbye and shut down
  // its side: reads and drops what still arrives until the peer closes too
  // (closing with unread bytes would reset the connection under the peer's
  // last reads), at most kLinger. Device lock held.
  void linger_locked(int fd) RDMX_REQUIRES(lock_);
  // Device lock held: is the current pass run by an application thread?
  bool in_application_pass_locked() const RDMX_REQUIRES(lock_) { return application_pass_; }

 private:
  std::unique_ptr<QueuePair> make_qp(const core::QpParts& parts, const QpCaps& caps) override;
  std::size_t engine_pass_locked(bool idle) override RDMX_REQUIRES(lock_);
  // Lingering sockets of destroyed QPs.
  bool on_watch_locked(Watch kind, std::uint32_t id, std::uint32_t events) override RDMX_REQUIRES(lock_);
  bool device_timers_locked(core::Clock::time_point now) override RDMX_REQUIRES(lock_);
  // TCP_NODELAY on the accepted socket; its source address.
  std::string accepted_locked(int fd, const sockaddr_storage& from) override RDMX_REQUIRES(lock_);
  const char* greet_locked(core::PendingConnection& p) override RDMX_REQUIRES(lock_);
  const char* read_hello_locked(core::PendingConnection& p) override RDMX_REQUIRES(lock_);
  void close_refused_locked(int fd) override RDMX_REQUIRES(lock_);

  std::size_t pass_locked(bool check_timers) RDMX_REQUIRES(lock_);
  std::size_t spin_pass_locked() RDMX_REQUIRES(lock_);
  void read_lingering_locked(int fd) RDMX_REQUIRES(lock_);

  SocketInterface iface_;
  sockaddr_storage listen_address_{};
  // fd -> when to close it anyway
  std::unordered_map<int, core::Clock::time_point> lingering_ RDMX_GUARDED_BY(lock_);
  std::uint32_t spin_passes_ RDMX_GUARDED_BY(lock_) = 0;
  bool application_pass_ RDMX_GUARDED_BY(lock_) = false;  // the current pass runs on an application thread
};

}  // namespace rdmx::tcp
