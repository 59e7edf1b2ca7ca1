// SPDX-License-Identifier: MIT
#include "membership/control_handshake.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "services/little_endian.hpp"

namespace rdmx::membership {
namespace {

constexpr std::uint32_t kHelloMagic = 0x48584452;  // "RDXH"
// 2: either rank of a pair may dial, and the answer may say "duplicate".
constexpr std::uint8_t kHelloVersion = 2;
constexpr std::size_t kHelloBytes = 24;
constexpr const char* kPurpose = "rdmx control mesh";
constexpr std::uint8_t kAccepted = 0xA5;
constexpr std::uint8_t kDuplicate = 0x5A;

void tune(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

// Reads what has arrived, up to `want` bytes in all: "" while the connection
// is fine, else what went wrong.
std::string read_some(int fd, std::vector<std::uint8_t>& got, std::size_t want) {
  while (got.size() < want) {
    std::uint8_t buffer[128];
    const ssize_t n = ::recv(fd, buffer, std::min(sizeof(buffer), want - got.size()), MSG_DONTWAIT);
    if (n > 0) {
      got.insert(got.end(), buffer, buffer + n);
    } else if (n == 0) {
      return "the connection closed";
    } else if (errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK ? ""
                                                     : std::string("the connection failed: ") + std::strerror(errno);
    }
  }
  return "";
}

// The handshake's few bytes fit any socket buffer, so a send that does not
// take them at once means the connection is broken.
std::string send_small(int fd, const std::uint8_t* data, std::size_t length) {
  const ssize_t n = ::send(fd, data, length, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(length)) return "";
  return n < 0 ? std::string("the connection failed: ") + std::strerror(errno) : "the connection took too little";
}

}  // namespace

ControlHandshakes::ControlHandshakes(int rank, int size, std::uint64_t tag_digest, int listener,
                                     std::chrono::milliseconds answer_within)
    : rank_(rank), size_(size), tag_digest_(tag_digest), answer_within_(answer_within), listener_(listener) {}

std::string ControlHandshakes::dial(int peer, const std::string& published) {
  const std::size_t cut = published.find('\n');
  std::string host = cut == std::string::npos ? published : published.substr(0, cut);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  const int port = cut == std::string::npos ? 0 : std::atoi(published.c_str() + cut + 1);
  Dialing d;
  d.peer = peer;
  d.where = host + ":" + std::to_string(port);
  std::string error;
  const auto addresses = bootstrap::resolve_tcp(host, static_cast<std::uint16_t>(port), false, error);
  if (addresses.empty()) return "it published " + d.where + ", which does not resolve: " + error;
  d.fd.reset(::socket(addresses[0].family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!d.fd) return std::string("socket: ") + std::strerror(errno);
  tune(d.fd.get());
  if (::connect(d.fd.get(), addresses[0].get(), addresses[0].length) != 0 && errno != EINPROGRESS) {
    return "cannot connect to " + d.where + ": " + std::strerror(errno);
  }
  dialing_.push_back(std::move(d));
  return "";
}

bool ControlHandshakes::dialing(int peer) const {
  return std::any_of(dialing_.begin(), dialing_.end(), [peer](const Dialing& d) { return d.peer == peer; });
}

void ControlHandshakes::cancel(int peer) {
  std::erase_if(dialing_, [peer](const Dialing& d) { return d.peer == peer; });
}

std::string ControlHandshakes::where(int peer) const {
  for (const Dialing& d : dialing_) {
    if (d.peer == peer) return d.where;
  }
  return "";
}

std::vector<int> ControlHandshakes::fds() const {
  std::vector<int> out{listener_};
  for (const Dialing& d : dialing_) out.push_back(d.fd.get());
  for (const Answering& a : answering_) out.push_back(a.fd.get());
  return out;
}

void ControlHandshakes::advance_dial(Dialing& d, std::vector<Outcome>& done) {
  const auto fail = [&](const std::string& problem) {
    done.push_back(Outcome{.peer = d.peer, .fd = bootstrap::UniqueFd(), .problem = problem});
    d.fd.reset();
  };
  const std::size_t want = d.challenged ? 1 : core::auth::kChallengeBytes;
  const std::string problem = read_some(d.fd.get(), d.got, want);
  if (!problem.empty()) return fail(problem);
  if (d.got.size() < want) return;
  if (d.challenged) {
    if (d.got[0] == kDuplicate) {
      done.push_back(Outcome{.peer = d.peer, .fd = bootstrap::UniqueFd(), .problem = {}, .duplicate = true});
      d.fd.reset();
    } else if (d.got[0] != kAccepted) {
      fail("it refused this rank (its log says why)");
    } else {
      done.push_back(Outcome{.peer = d.peer, .fd = std::move(d.fd)});
    }
    return;
  }
  std::uint8_t hello[kHelloBytes + core::auth::kProofBytes] = {};
  core::put_le32(hello, kHelloMagic);
  hello[4] = kHelloVersion;
  core::put_le32(hello + 8, static_cast<std::uint32_t>(rank_));
  core::put_le32(hello + 12, static_cast<std::uint32_t>(d.peer));
  core::put_le64(hello + 16, tag_digest_);
  core::auth::Challenge theirs;
  std::memcpy(theirs.data(), d.got.data(), theirs.size());
  const auto proof = core::auth::prove(kPurpose, theirs, std::span<const std::uint8_t>(hello, kHelloBytes));
  std::memcpy(hello + kHelloBytes, proof.data(), proof.size());
  const std::string sent = send_small(d.fd.get(), hello, sizeof(hello));
  if (!sent.empty()) return fail(sent);
  d.challenged = true;
  d.got.clear();
}

void ControlHandshakes::advance_answer(Answering& a, const Admit& admit, std::vector<Outcome>& done) {
  const std::size_t want = kHelloBytes + core::auth::kProofBytes;
  std::string problem = read_some(a.fd.get(), a.got, want);
  if (problem.empty() && a.got.size() < want) return;
  const std::uint8_t* hello = a.got.data();
  int from = -1;
  Admission admission = Admission::Refuse;
  if (problem.empty()) {
    from = static_cast<int>(core::get_le32(hello + 8));
    core::auth::Proof proof;
    std::memcpy(proof.data(), hello + kHelloBytes, proof.size());
    if (core::get_le32(hello) != kHelloMagic || hello[4] != kHelloVersion) {
      problem = "not an rdmx control-mesh hello of this version";
    } else if (!core::auth::verify(kPurpose, a.challenge, std::span<const std::uint8_t>(hello, kHelloBytes), proof)) {
      problem = "wrong proof of the job secret (RDMX_AUTH_KEY)";
    } else if (core::get_le64(hello + 16) != tag_digest_ || static_cast<int>(core::get_le32(hello + 12)) != rank_) {
      problem = "a hello for another communicator or rank";
    } else if (from < 0 || from >= size_ || from == rank_) {
      problem = "a hello from rank " + std::to_string(from) + ", outside the communicator";
    } else {
      admission = admit(from, problem);
    }
  }
  if (admission == Admission::Refuse) {
    core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source, problem);
    a.fd.reset();
    return;
  }
  const std::uint8_t answer = admission == Admission::Accept ? kAccepted : kDuplicate;
  if (send_small(a.fd.get(), &answer, 1).empty() && admission == Admission::Accept) {
    done.push_back(Outcome{.peer = from, .fd = std::move(a.fd)});
  }
  a.fd.reset();
}

std::vector<ControlHandshakes::Outcome> ControlHandshakes::progress(const Admit& admit) {
  std::vector<Outcome> done;
  const auto now = core::Clock::now();
  for (;;) {
    bootstrap::UniqueFd fd(::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) break;
    tune(fd.get());
    Answering a;
    a.source = bootstrap::peer_address_of(fd.get());
    a.challenge = core::auth::new_challenge();
    a.until = now + answer_within_;
    const std::string problem = send_small(fd.get(), a.challenge.data(), a.challenge.size());
    if (!problem.empty()) {
      core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source, problem);
      continue;
    }
    a.fd = std::move(fd);
    answering_.push_back(std::move(a));
  }
  for (Dialing& d : dialing_) advance_dial(d, done);
  std::erase_if(dialing_, [](const Dialing& d) { return !d.fd; });
  // What has arrived is read before the clock is looked at: a hello that
  // came in time must not be dropped because this thread ran late.
  for (Answering& a : answering_) {
    advance_answer(a, admit, done);
    if (a.fd && now >= a.until) {
      core::auth::log_refusal("control mesh of rank " + std::to_string(rank_), a.source,
                              "no hello within " + std::to_string(answer_within_.count()) + " ms");
      a.fd.reset();
    }
  }
  std::erase_if(answering_, [](const Answering& a) { return !a.fd; });
  return done;
}

}  // namespace rdmx::membership
