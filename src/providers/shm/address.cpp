// SPDX-License-Identifier: MIT
#include "providers/shm/address.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

namespace rdmx::shm {
namespace {
constexpr std::uint8_t kMagic = 'S';
constexpr std::uint8_t kVersion = 1;
constexpr std::size_t kBootIdSize = 36;
constexpr std::size_t kFixedSize = 2 + kBootIdSize + 8 + 4 + 4 + 8 + 2;
constexpr std::size_t kMaxPath = 107;  // sun_path without its terminator

std::string read_boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (id.size() != kBootIdSize) id.assign(kBootIdSize, '?');
  return id;
}
}  // namespace

const HostIdentity& HostIdentity::self() {
  static const HostIdentity identity = [] {
    HostIdentity h;
    h.boot_id = read_boot_id();
    struct stat st {};
    if (::stat("/proc/self/ns/pid", &st) == 0) h.pid_namespace = st.st_ino;
    return h;
  }();
  return identity;
}

QpAddress ShmAddress::encode() const {
  QpAddress out;
  out.bytes.resize(kFixedSize + socket_path.size());
  auto* b = out.bytes.data();
  b[0] = kMagic;
  b[1] = kVersion;
  std::memcpy(b + 2, boot_id.data(), kBootIdSize);
  std::size_t at = 2 + kBootIdSize;
  std::memcpy(b + at, &pid_namespace, 8);
  std::memcpy(b + at + 8, &pid, 4);
  std::memcpy(b + at + 12, &qpn, 4);
  std::memcpy(b + at + 16, &nonce, 8);
  auto len = static_cast<std::uint16_t>(socket_path.size());
  std::memcpy(b + at + 24, &len, 2);
  std::memcpy(b + kFixedSize, socket_path.data(), socket_path.size());
  return out;
}

bool ShmAddress::is_shm(const QpAddress& address) {
  return address.bytes.size() >= kFixedSize && address.bytes[0] == kMagic && address.bytes[1] == kVersion;
}

ShmAddress ShmAddress::decode(const QpAddress& address) {
  const auto& b = address.bytes;
  std::uint16_t len = 0;
  if (is_shm(address)) std::memcpy(&len, b.data() + kFixedSize - 2, 2);
  if (!is_shm(address) || len == 0 || len > kMaxPath || b.size() != kFixedSize + len) {
    throw Error(ErrorCode::InvalidArgument, "not a shm provider QP address",
                {.op = "connect",
                 .sizes = "bytes=" + std::to_string(b.size()),
                 .hint = "both QPs must use the shm provider; pass the peer's local_address() unchanged"});
  }
  ShmAddress a;
  a.boot_id.assign(reinterpret_cast<const char*>(b.data() + 2), kBootIdSize);
  std::size_t at = 2 + kBootIdSize;
  std::memcpy(&a.pid_namespace, b.data() + at, 8);
  std::memcpy(&a.pid, b.data() + at + 8, 4);
  std::memcpy(&a.qpn, b.data() + at + 12, 4);
  std::memcpy(&a.nonce, b.data() + at + 16, 8);
  a.socket_path.assign(reinterpret_cast<const char*>(b.data() + kFixedSize), len);
  return a;
}

std::string ShmAddress::to_string() const {
  return "pid " + std::to_string(pid) + " qp " + std::to_string(qpn) + " (" + socket_path + ")";
}

bool reachable(const ShmAddress& peer, std::string* why) {
  const auto& self = HostIdentity::self();
  if (peer.boot_id != self.boot_id) {
    if (why) *why = "another host (boot id " + peer.boot_id + ", ours " + self.boot_id + ")";
    return false;
  }
  if (peer.pid_namespace != self.pid_namespace) {
    if (why) *why = "same host but another PID namespace (cross-memory attach cannot name the process)";
    return false;
  }
  if (::access(peer.socket_path.c_str(), F_OK) != 0) {
    if (why) *why = "same host but its socket " + peer.socket_path + " is not visible here (another mount namespace?)";
    return false;
  }
  if (why) *why = "same host (boot id " + self.boot_id + ") and PID namespace";
  return true;
}

}  // namespace rdmx::shm
