// SPDX-License-Identifier: MIT
#include "services/mapped_memory.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace rdmx::core {
namespace {

struct Mapping {
  std::uintptr_t start = 0;
  std::uintptr_t end = 0;
  std::string_view perms;  // "rw-p"
  std::string_view path;   // may be empty
};

bool parse_hex(std::string_view& s, std::uintptr_t* out) {
  std::uintptr_t v = 0;
  std::size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      break;
    }
    v = v << 4 | static_cast<std::uintptr_t>(d);
  }
  if (i == 0) return false;
  s.remove_prefix(i);
  *out = v;
  return true;
}

std::string_view next_field(std::string_view& s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  const std::size_t end = std::min(s.find(' '), s.size());
  std::string_view field = s.substr(0, end);
  s.remove_prefix(end);
  return field;
}

// One line of /proc/self/maps: "start-end perms offset dev inode   path".
bool parse_line(std::string_view line, Mapping* m) {
  if (!parse_hex(line, &m->start) || line.empty() || line.front() != '-') return false;
  line.remove_prefix(1);
  if (!parse_hex(line, &m->end)) return false;
  m->perms = next_field(line);
  for (int i = 0; i < 3; ++i) next_field(line);  // offset, device, inode
  while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  m->path = line;
  return m->perms.size() >= 2;
}

std::string hex(std::uintptr_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%zx", static_cast<std::size_t>(v));
  return text;
}

// Walks the mappings in address order (as the kernel lists them), moving
// `cursor` over the covered part of the range.
class RangeWalk {
 public:
  RangeWalk(std::uintptr_t start, std::uintptr_t end, bool need_write)
      : cursor_(start), end_(end), need_write_(need_write) {}

  // False once the walk has an answer (done() or a problem).
  bool take(const Mapping& m) {
    if (m.end <= cursor_) return true;
    if (m.start > cursor_) {
      problem_ = hole(std::min<std::uintptr_t>(m.start, end_));
      return false;
    }
    const bool readable = m.perms[0] == 'r';
    const bool writable = m.perms[1] == 'w';
    if (!readable || (need_write_ && !writable)) {
      problem_ = hex(cursor_) + " to " + hex(std::min(m.end, end_)) + " is mapped " + std::string(m.perms) +
                 (m.path.empty() ? "" : " (" + std::string(m.path) + ")") +
                 (!readable ? ", without read access" : ", without write access");
      return false;
    }
    cursor_ = m.end;
    return cursor_ < end_;
  }
  // After the last mapping: what is left of the range is a hole.
  void finish() {
    if (problem_.empty() && cursor_ < end_) problem_ = hole(end_);
  }
  const std::string& problem() const { return problem_; }

 private:
  std::string hole(std::uintptr_t until) const { return hex(cursor_) + " to " + hex(until) + " is not mapped"; }

  std::uintptr_t cursor_;
  std::uintptr_t end_;
  bool need_write_;
  std::string problem_;
};

}  // namespace

std::string mapping_problem(const void* addr, std::size_t length, bool need_write) {
  if (length == 0) return {};
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  RangeWalk walk(start, start + length, need_write);
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};  // no procfs (a bare chroot): the check is not possible, as before it existed
  char buffer[16384];
  std::size_t held = 0;  // bytes of an unfinished line at the buffer's start
  bool more = true;
  bool skipping = false;  // inside a line too long to hold
  for (;;) {
    const ssize_t n = ::read(fd, buffer + held, sizeof(buffer) - held);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    held += static_cast<std::size_t>(n);
    std::string_view text(buffer, held);
    std::size_t used = 0;
    for (std::size_t nl; more && (nl = text.find('\n', used)) != std::string_view::npos; used = nl + 1) {
      Mapping m;
      if (!skipping && parse_line(text.substr(used, nl - used), &m)) more = walk.take(m);
      skipping = false;
    }
    if (!more) break;
    // A line longer than the buffer (paths are shorter; defensive) is skipped whole.
    if (used == 0 && held == sizeof(buffer)) {
      held = 0;
      skipping = true;
      continue;
    }
    held -= used;
    std::memmove(buffer, buffer + used, held);
  }
  ::close(fd);
  if (more) walk.finish();
  return walk.problem();
}

}  // namespace rdmx::core
