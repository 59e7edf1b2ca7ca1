// SPDX-License-Identifier: MIT
#include "topo/sysfs.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace rdmx::topo {
namespace {
bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

std::optional<std::string> read_text(const std::string& path) {
  // POSIX read, not iostreams: a sysfs attribute that does not apply fails
  // the read itself (EINVAL), which a stream would turn into empty text.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string value;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      value.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

std::optional<long long> read_integer(const std::string& path) {
  auto text = read_text(path);
  if (!text || text->empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text->c_str(), &end, 0);
  if (errno != 0 || *end != '\0') return std::nullopt;
  return value;
}

DirListing list_dir(const std::string& path) {
  DirListing listing;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) {
    listing.exists = errno != ENOENT && errno != ENOTDIR;
    if (listing.exists) listing.error = std::strerror(errno);
    return listing;
  }
  listing.exists = true;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") listing.names.push_back(name);
  }
  ::closedir(dir);
  // Ports and GID indexes are numbers: "10" must come after "9".
  std::sort(listing.names.begin(), listing.names.end(), [](const std::string& a, const std::string& b) {
    if (all_digits(a) && all_digits(b) && a.size() != b.size()) return a.size() < b.size();
    return a < b;
  });
  return listing;
}

}  // namespace rdmx::topo
