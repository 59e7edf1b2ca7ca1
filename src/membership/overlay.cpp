// SPDX-License-Identifier: MIT
#include "membership/overlay.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

#include "rdmx/error.hpp"
#include "services/little_endian.hpp"

namespace rdmx::membership {
namespace {

constexpr std::uint32_t kGatherMagic = 0x47584452;  // "RDXG"
constexpr std::size_t kHeadBytes = 12;

// One step's message coming in: the head, then as many body bytes as it
// announces, and not a byte more.
struct Incoming {
  std::uint8_t head[kHeadBytes] = {};
  std::size_t head_got = 0;
  std::vector<std::uint8_t> body;
  std::size_t body_got = 0;
  bool head_done() const { return head_got == kHeadBytes; }
  bool done() const { return head_done() && body_got == body.size(); }
};

}  // namespace

std::vector<int> overlay_neighbours(int rank, int size) {
  std::vector<int> out;
  for (long long d = 1; d < size; d *= 2) {
    out.push_back(static_cast<int>((rank + d) % size));
    out.push_back(static_cast<int>((rank - d % size + size) % size));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  std::erase(out, rank);
  return out;
}

BruckSteps::BruckSteps(int index, int size, std::string mine) : index_(index), size_(size) {
  held_.reserve(static_cast<std::size_t>(size));
  held_.push_back(std::move(mine));
}

int BruckSteps::send_to() const noexcept { return static_cast<int>((index_ - distance() % size_ + size_) % size_); }
int BruckSteps::receive_from() const noexcept { return static_cast<int>((index_ + distance()) % size_); }
std::size_t BruckSteps::count() const noexcept {
  return static_cast<std::size_t>(std::min<long long>(distance(), size_ - distance()));
}

std::size_t BruckSteps::max_message_bytes(int size) {
  return 4 + (static_cast<std::size_t>(size) / 2 + 1) * (4 + kMaxEntryBytes);
}

std::vector<std::uint8_t> BruckSteps::message() const {
  std::vector<std::uint8_t> out;
  core::append_le32(out, static_cast<std::uint32_t>(count()));
  for (std::size_t i = 0; i < count(); ++i) {
    core::append_le32(out, static_cast<std::uint32_t>(held_[i].size()));
    out.insert(out.end(), held_[i].begin(), held_[i].end());
  }
  return out;
}

std::string BruckSteps::take(std::span<const std::uint8_t> message) {
  if (message.size() < 4 || core::get_le32(message.data()) != count()) {
    return "it does not hold the " + std::to_string(count()) + " values step " + std::to_string(step_) + " carries";
  }
  std::vector<std::string> got;
  std::size_t at = 4;
  for (std::size_t i = 0; i < count(); ++i) {
    if (message.size() - at < 4) return "a value runs past the message";
    const std::uint32_t length = core::get_le32(message.data() + at);
    at += 4;
    if (length > kMaxEntryBytes || message.size() - at < length) {
      return "a value of " + std::to_string(length) + " bytes";
    }
    got.emplace_back(reinterpret_cast<const char*>(message.data() + at), length);
    at += length;
  }
  if (at != message.size()) return "bytes past the last value";
  for (std::string& value : got) held_.push_back(std::move(value));
  ++step_;
  return "";
}

std::vector<std::string> BruckSteps::values() const {
  std::vector<std::string> all(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_ && i < static_cast<int>(held_.size()); ++i) {
    all[static_cast<std::size_t>((index_ + i) % size_)] = held_[static_cast<std::size_t>(i)];
  }
  return all;
}

std::vector<std::string> gather_over_overlay(std::span<const bootstrap::UniqueFd> connections, int rank, int size,
                                             const std::string& mine, core::Clock::time_point deadline) {
  if (mine.size() > BruckSteps::kMaxEntryBytes) {
    throw Error(ErrorCode::InvalidArgument,
                "control overlay: this rank publishes " + std::to_string(mine.size()) + " bytes (at most " +
                    std::to_string(BruckSteps::kMaxEntryBytes) + ")",
                ErrorContext{.op = "control overlay gather", .rank = rank});
  }
  BruckSteps steps(rank, size, mine);
  while (!steps.done()) {
    const int to = steps.send_to();
    const int from = steps.receive_from();
    const std::uint32_t step = steps.step();
    const auto failed = [&](int peer, const std::string& why) {
      const bool timed_out = why.find("timed out") != std::string::npos;
      return Error(timed_out ? ErrorCode::Timeout : ErrorCode::PeerFailure,
                   "control overlay: step " + std::to_string(step) + " of the address exchange with rank " +
                       std::to_string(peer) + " failed: " + why,
                   ErrorContext{.op = "control overlay gather",
                                .rank = rank,
                                .peer_rank = peer,
                                .hint = "that rank died, hung or was cut off while the communicator was being "
                                        "created; its own log says why"});
    };
    const int out_fd = connections[static_cast<std::size_t>(to)].get();
    const int in_fd = connections[static_cast<std::size_t>(from)].get();
    if (out_fd < 0) throw failed(to, "no control connection to it");
    if (in_fd < 0) throw failed(from, "no control connection to it");
    const std::vector<std::uint8_t> body = steps.message();
    std::vector<std::uint8_t> out;
    core::append_le32(out, kGatherMagic);
    core::append_le32(out, step);
    core::append_le32(out, static_cast<std::uint32_t>(body.size()));
    out.insert(out.end(), body.begin(), body.end());
    std::size_t sent = 0;
    Incoming in;
    while (sent < out.size() || !in.done()) {
      const auto now = core::Clock::now();
      if (now >= deadline || core::waits_aborted()) {
        throw failed(sent < out.size() ? to : from, core::waits_aborted() ? "waits were aborted" : "timed out");
      }
      pollfd fds[2] = {};
      nfds_t used = 0;
      if (sent < out.size()) fds[used++] = {out_fd, POLLOUT, 0};
      if (!in.done()) {
        if (used == 1 && out_fd == in_fd) {
          fds[0].events |= POLLIN;
        } else {
          fds[used++] = {in_fd, POLLIN, 0};
        }
      }
      const auto slice = std::min(deadline - now, core::Clock::duration(std::chrono::milliseconds(100)));
      const int ms =
          static_cast<int>(std::max<long long>(std::chrono::ceil<std::chrono::milliseconds>(slice).count(), 1));
      if (::poll(fds, used, ms) <= 0) continue;
      if (sent < out.size()) {
        const ssize_t n = ::send(out_fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          sent += static_cast<std::size_t>(n);
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          throw failed(to, std::string("the connection failed: ") + std::strerror(errno));
        }
      }
      while (!in.done()) {
        std::uint8_t* into = in.head_done() ? in.body.data() + in.body_got : in.head + in.head_got;
        const std::size_t want = in.head_done() ? in.body.size() - in.body_got : kHeadBytes - in.head_got;
        const ssize_t n = ::recv(in_fd, into, want, MSG_DONTWAIT);
        if (n == 0) throw failed(from, "the connection closed");
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          throw failed(from, std::string("the connection failed: ") + std::strerror(errno));
        }
        if (in.head_done()) {
          in.body_got += static_cast<std::size_t>(n);
          continue;
        }
        in.head_got += static_cast<std::size_t>(n);
        if (!in.head_done()) continue;
        const std::uint32_t body_bytes = core::get_le32(in.head + 8);
        if (core::get_le32(in.head) != kGatherMagic || core::get_le32(in.head + 4) != step ||
            body_bytes > BruckSteps::max_message_bytes(size)) {
          throw failed(from, "it sent a message that is not step " + std::to_string(step) + "'s addresses");
        }
        in.body.resize(body_bytes);
      }
    }
    const std::string problem = steps.take(in.body);
    if (!problem.empty()) throw failed(from, "it sent a malformed message (" + problem + ")");
  }
  return steps.values();
}

}  // namespace rdmx::membership
