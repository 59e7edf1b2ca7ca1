// SPDX-License-Identifier: MIT
#include "providers/tcp/tcp_device.hpp"

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cstring>

#include "driver/completion_queue.hpp"
#include "providers/tcp/address.hpp"
#include "providers/tcp/tcp_factory.hpp"
#include "providers/tcp/tcp_qp.hpp"
#include "services/auth.hpp"
#include "services/config.hpp"
#include "services/log.hpp"
#include "services/mutex.hpp"
#include "services/port_range.hpp"

namespace rdmx::tcp {
namespace {

// Up to this many QPs, application progress polls their sockets directly.
constexpr std::size_t kDirectPollQps = 4;
constexpr std::uint32_t kFullPassEvery = 16;
// Refused connections keep their descriptor this long, at most this many at once.
constexpr auto kLinger = std::chrono::seconds(2);
constexpr std::size_t kMaxLingering = 256;

// Sends a whole small frame on a fresh socket, whose buffer always has room.
bool send_frame(int fd, const wire::Header& header, const std::uint8_t* payload, std::size_t payload_bytes) {
  std::array<std::uint8_t, wire::kHeaderSize + 64> frame{};
  wire::encode(header, frame.data());
  if (payload_bytes > 0) std::memcpy(frame.data() + wire::kHeaderSize, payload, payload_bytes);
  const std::size_t total = wire::kHeaderSize + payload_bytes;
  return ::send(fd, frame.data(), total, MSG_DONTWAIT | MSG_NOSIGNAL) == static_cast<ssize_t>(total);
}

[[noreturn]] void throw_system(const std::string& what, const std::string& where) {
  throw Error(ErrorCode::System, what + ": " + std::strerror(errno),
              {.op = "open_device tcp",
               .peer_addr = where,
               .hint = "check RDMX_SOCKET_IFNAME and that the interface has an address"});
}
}  // namespace

std::shared_ptr<Device> open_tcp_device(const std::string& why, core::DeviceResources resources) {
  auto iface = choose_interface();
  return std::make_shared<TcpDevice>(std::move(iface), why, std::move(resources));
}

TcpDevice::TcpDevice(SocketInterface iface, std::string why, core::DeviceResources resources)
    : SoftRcDevice(core::provider_tcp, std::move(resources), wire::kMaxMessage, true, true, CudaMemorySupport::Staging),
      iface_(std::move(iface)) {
  // A secret that cannot be read fails here, where the user can see it, not in the engine.
  core::auth::key_configured();
  std::string local = format_address(reinterpret_cast<const sockaddr*>(&iface_.address));
  const int listen_fd = ::socket(iface_.address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) throw_system("socket() for the listener failed", local);
  int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const core::PortRange ports = core::port_range();
  if (const int error = core::bind_in_port_range(listen_fd, iface_.address, iface_.address_len, ports); error != 0) {
    ::close(listen_fd);
    errno = error;
    throw_system("bind() of the listener on ports " + ports.text() + " failed", local);
  }
  // As deep an accept queue as the kernel allows (net.core.somaxconn): a
  // job connecting thousands of QPs at once overflows a shallow one, and the
  // kernel then drops connections silently.
  if (::listen(listen_fd, SOMAXCONN) != 0) {
    ::close(listen_fd);
    throw_system("listen() failed", local);
  }
  socklen_t len = sizeof(listen_address_);
  getsockname(listen_fd, reinterpret_cast<sockaddr*>(&listen_address_), &len);
  // getsockname loses a link-local scope id; keep the interface's.
  if (listen_address_.ss_family == AF_INET6) {
    reinterpret_cast<sockaddr_in6*>(&listen_address_)->sin6_scope_id =
        reinterpret_cast<sockaddr_in6*>(&iface_.address)->sin6_scope_id;
  }

  start(listen_fd, "tcp:" + iface_.name + "/" + format_address(reinterpret_cast<const sockaddr*>(&listen_address_)),
        why + "; interface " + iface_.name + ": " + iface_.why);
}

TcpDevice::~TcpDevice() {
  stop();
  for (auto& [fd, until] : lingering_) ::close(fd);
}

std::unique_ptr<QueuePair> TcpDevice::make_qp(const core::QpParts& parts, const QpCaps& caps) {
  return std::make_unique<TcpQp>(*this, parts, caps);
}

QpAddress TcpDevice::qp_address(std::uint32_t qpn) const {
  TcpAddress self;
  self.socket = listen_address_;
  self.socket_len = self.socket.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  self.qpn = qpn;
  self.nonce = nonce();
  return self.encode();
}

std::size_t TcpDevice::progress() {
  note_application_activity();
  if (!lock_.try_lock()) return 0;
  core::LockGuard guard(lock_, core::kAdoptLock);
  application_pass_ = true;
  std::size_t did = spin_pass_locked();
  application_pass_ = false;
  return did;
}

std::size_t TcpDevice::spin_pass_locked() {
  // Passes made by application threads that spin (a CQ wait, a loop on a
  // memory flag). With few QPs, poll() on their sockets tells which have work
  // without taking a lock the data path needs (a failed recv() takes the
  // socket lock), which shortens a small ping-pong (docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the
  // code"). Every few passes a full epoll pass also accepts connections, and every so often it runs the timers.
  ++spin_passes_;
  if (qps_.size() > kDirectPollQps || spin_passes_ % kFullPassEvery == 0) {
    return pass_locked(spin_passes_ % (kFullPassEvery * 8) == 0);
  }
  std::array<pollfd, kDirectPollQps> fds;
  std::array<TcpQp*, kDirectPollQps> owners;
  nfds_t count = 0;
  for (core::SoftRcQp* base : qp_list_) {
    auto* qp = static_cast<TcpQp*>(base);
    short events = 0;
    int fd = qp->poll_fd(events);
    if (fd < 0) continue;
    fds[count] = {fd, events, 0};
    owners[count++] = qp;
  }
  // The raw system call: libc's poll() is a cancellation point with bookkeeping on every spin.
  if (count == 0 || syscall(SYS_poll, fds.data(), count, 0) <= 0) return 0;
  std::size_t did = 0;
  for (nfds_t i = 0; i < count; ++i) {
    // poll and epoll report readiness with the same bits.
    if (fds[i].revents == 0) continue;
    owners[i]->device_lock_held(lock_);
    if (owners[i]->on_socket_locked(static_cast<std::uint32_t>(fds[i].revents))) ++did;
  }
  return did;
}

std::size_t TcpDevice::engine_pass_locked(bool) {
  // epoll passes here even while spinning: they batch a stream's arrivals
  // into fewer, larger reads than poll(), which matters for the receiver of
  // a stream (docs/journal/PERFORMANCE-HISTORY.md, "Measurements behind the code").
  return pass_locked(true);
}

std::size_t TcpDevice::pass_locked(bool check_timers) {
  const std::size_t did = epoll_pass_locked();
  if (check_timers) maybe_run_timers_locked();
  return did;
}

bool TcpDevice::on_watch_locked(Watch kind, std::uint32_t id, std::uint32_t) {
  if (kind == Watch::Linger) read_lingering_locked(static_cast<int>(id));
  return false;
}

std::string TcpDevice::accepted_locked(int fd, const sockaddr_storage& from) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return format_address(reinterpret_cast<const sockaddr*>(&from));
}

const char* TcpDevice::greet_locked(core::PendingConnection& p) {
  p.challenge = core::auth::new_challenge();
  wire::Header challenge;
  challenge.type = wire::FrameType::Challenge;
  challenge.length = wire::kChallengePayload;
  // The engine must not throw: a secret file gone unreadable since the
  // device opened refuses the connection instead.
  try {
    challenge.arg0 = core::auth::key_configured() ? 1 : 0;
  } catch (const Error&) {
    return "this process's job secret cannot be read any more (RDMX_AUTH_KEY_FILE)";
  }
  if (!send_frame(p.fd, challenge, p.challenge.data(), p.challenge.size())) return "cannot send the challenge";
  return nullptr;
}

const char* TcpDevice::read_hello_locked(core::PendingConnection& p) {
  // Exactly the HELLO, its proof and its challenge: bytes after them belong to the QP that claims the socket.
  constexpr std::size_t kHelloBytes = wire::kHeaderSize + wire::kHelloPayload;
  static_assert(kHelloBytes <= sizeof(p.hello));
  ssize_t n = ::recv(p.fd, p.hello.data() + p.got, kHelloBytes - p.got, MSG_DONTWAIT);
  if (n == 0) return "closed before sending HELLO";
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return nullptr;
    return "receive failed before HELLO";
  }
  const std::size_t before = p.got;
  p.got += static_cast<std::size_t>(n);
  // Check the header as soon as it is whole: a stranger's bytes are not waited for.
  if (before < wire::kHeaderSize && p.got >= wire::kHeaderSize) {
    wire::Header hello = wire::decode(p.hello.data());
    if (const char* bad = wire::validate(hello)) return bad;
    if (hello.type != wire::FrameType::Hello) return "first frame is not HELLO";
    if (hello.arg1 > 0xffffffffu) return "HELLO target QP number out of range";
  }
  if (p.got < kHelloBytes) return nullptr;
  core::auth::Proof proof;
  std::memcpy(proof.data(), p.hello.data() + wire::kHeaderSize, proof.size());
  core::auth::Challenge theirs;
  std::memcpy(theirs.data(), p.hello.data() + wire::kHeaderSize + proof.size(), theirs.size());
  bool verified = false;
  core::auth::Proof answer{};
  try {
    verified = core::auth::verify(wire::kAuthPurpose, p.challenge, {p.hello.data(), wire::kHeaderSize}, proof);
    // The connector trusts this listener only once it proves the secret in turn.
    if (verified) answer = core::auth::prove(wire::kAcceptPurpose, theirs, p.challenge);
  } catch (const Error&) {
    return "this process's job secret cannot be read any more (RDMX_AUTH_KEY_FILE)";
  }
  if (!verified) {
    wire::Header refused;
    refused.type = wire::FrameType::Refused;
    send_frame(p.fd, refused, nullptr, 0);
    return "its proof of the job secret did not verify (RDMX_AUTH_KEY differs, or the peer has none)";
  }
  // Sent before the socket reaches a QP, so it precedes every frame the QP sends;
  // only the CHALLENGE went before it, so the socket's buffer has room.
  wire::Header accept;
  accept.type = wire::FrameType::Accept;
  accept.length = wire::kProofPayload;
  if (!send_frame(p.fd, accept, answer.data(), answer.size())) return "cannot send ACCEPT";
  p.ids = wire::hello_ids(wire::decode(p.hello.data()));
  return "";
}

void TcpDevice::close_refused_locked(int fd) {
  // Closing with unread bytes resets the connection, which can destroy the
  // REFUSED frame before the peer reads why.
  ::shutdown(fd, SHUT_WR);
  linger_locked(fd);
}

void TcpDevice::linger_locked(int fd) {
  // Bounded, so a storm of connections or of QPs made and destroyed cannot
  // run the process out of descriptors: past it, sockets close at once.
  if (lingering_.size() >= kMaxLingering) {
    ::close(fd);
    return;
  }
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP;
  event.data.u64 = watch_tag(Watch::Linger, static_cast<std::uint32_t>(fd));
  if (epoll_ctl(epoll_fd(), EPOLL_CTL_ADD, fd, &event) != 0) {
    ::close(fd);
    return;
  }
  lingering_[fd] = core::Clock::now() + kLinger;
}

void TcpDevice::read_lingering_locked(int fd) {
  static thread_local char sink[16 * 1024];
  for (int i = 0; i < 64; ++i) {
    const ssize_t n = ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    break;  // end of file or error: the peer is done
  }
  epoll_ctl(epoll_fd(), EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  lingering_.erase(fd);
}

bool TcpDevice::device_timers_locked(core::Clock::time_point now) {
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    auto next = std::next(it);
    if (now >= it->second) {
      epoll_ctl(epoll_fd(), EPOLL_CTL_DEL, it->first, nullptr);
      ::close(it->first);
      lingering_.erase(it);
    }
    it = next;
  }
  return false;
}

}  // namespace rdmx::tcp
