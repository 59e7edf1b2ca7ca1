// SPDX-License-Identifier: MIT
// The tcp provider's device: a listening socket on the chosen interface, the
// memory registry, and the progress engine.
//
// Progress: one epoll set (level-triggered) per device. Whoever holds the
// engine lock runs a pass: an application thread calling progress() (cq
// poll/wait do), or the background engine thread when no application thread
// has driven progress for a while. So READ and atomics are served while the
// target application computes, and a thread spinning on completions or memory
// flags gets the data itself, without waking another thread. The background
// thread spins RDMX_SPIN_US after activity, then blocks in epoll_wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "core/device_resources.hpp"
#include "core/engine_parking.hpp"
#include "core/memory_registry.hpp"
#include "core/wait.hpp"
#include "providers/tcp/socket_iface.hpp"
#include "providers/tcp/wire.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::tcp {

class TcpQp;

// epoll tags: kind in the high 32 bits, id (fd or qpn) in the low ones.
enum class Watch : std::uint32_t { Listener = 1, Pending = 2, Qp = 3, Wake = 4, Linger = 5 };
inline std::uint64_t watch_tag(Watch kind, std::uint32_t id) {
  return (static_cast<std::uint64_t>(kind) << 32) | id;
}

class TcpDevice final : public Device, public core::EngineHandoff {
 public:
  TcpDevice(SocketInterface iface, std::string why, core::DeviceResources resources);
  ~TcpDevice() override;

  std::string provider() const override { return "tcp"; }
  std::string name() const override { return name_; }
  std::string selection_reason() const override { return why_; }
  DeviceCaps caps() const override;
  std::unique_ptr<ProtectionDomain> alloc_pd() override;
  std::unique_ptr<CompletionQueue> create_cq(std::size_t depth) override;
  std::unique_ptr<QueuePair> create_qp(ProtectionDomain& pd, CompletionQueue& send_cq, CompletionQueue& recv_cq,
                                       const QpCaps& caps) override;
  using Device::create_qp;
  std::size_t progress() override;

  // ---- for QPs ----
  core::MemoryRegistry& registry() { return *resources_.registry; }
  std::uint64_t nonce() const { return nonce_; }
  const sockaddr_storage& listen_address() const { return listen_address_; }
  std::mutex& engine_mutex() { return engine_mutex_; }
  int epoll_fd() const { return epoll_fd_; }
  // Called with the engine lock held.
  void add_qp_locked(TcpQp* qp);
  void remove_qp_locked(TcpQp* qp);
  // Hands over a parked accepted connection whose HELLO named this QP and peer.
  int claim_pending_locked(std::uint32_t qpn, std::uint32_t remote_qpn, std::uint64_t remote_nonce);
  // Takes over the socket of a destroyed QP that said goodbye and shut down
  // its side: reads and drops what still arrives until the peer closes too
  // (closing with unread bytes would reset the connection under the peer's
  // last reads), at most kLinger.
  void linger_locked(int fd);
  // The caller is about to sleep: let the background engine take over now.
  void application_idle() override { parking_.application_idle(); }
  // An application thread is working the device (posting): the background
  // engine stays parked, as it does while the application calls progress().
  void note_application_activity() { parking_.note_application_activity(); }
  std::uint32_t next_qpn() { return resources_.next_qpn(); }
  // Engine lock held: is the current pass run by an application thread?
  bool in_application_pass_locked() const { return application_pass_; }

 private:
  struct PendingConnection {
    int fd = -1;
    std::string peer;
    std::uint8_t hello[wire::kHeaderSize];
    std::size_t got = 0;
    bool complete = false;
    std::uint32_t target_qpn = 0;
    std::uint32_t source_qpn = 0;
    std::uint64_t source_nonce = 0;
    core::Clock::time_point accepted_at;
  };

  std::size_t pass_locked(bool check_timers);
  std::size_t spin_pass_locked();
  void accept_all_locked();
  void read_hello_locked(int fd);
  void drop_pending_locked(int fd, const char* why);
  void read_lingering_locked(int fd);
  void run_timers_locked(core::Clock::time_point now);
  void engine_main();

  std::string name_;
  std::string why_;
  SocketInterface iface_;
  sockaddr_storage listen_address_{};
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that interrupts the engine's epoll_wait
  std::uint64_t nonce_ = 0;
  core::DeviceResources resources_;

  std::mutex engine_mutex_;
  std::unordered_map<std::uint32_t, TcpQp*> qps_;
  std::unordered_map<int, PendingConnection> pending_;
  std::unordered_map<int, core::Clock::time_point> lingering_;  // fd -> when to close it anyway
  core::Clock::time_point next_timer_scan_{};
  std::atomic<bool> timers_busy_{false};  // read by the engine thread before it blocks, outside the lock

  std::atomic<bool> stopping_{false};
  std::uint32_t spin_passes_ = 0;  // engine lock
  bool application_pass_ = false;  // engine lock
  core::EngineParking parking_;
  std::thread engine_;
};

}  // namespace rdmx::tcp
