// SPDX-License-Identifier: MIT
// rdmx run and memory: a job whose collectives' buffers cannot fit is
// refused before any rank starts, and a rank the kernel's OOM killer ends is
// reported as such. The small hosts are real: a memory cgroup with a small
// limit, made for the test where this machine lets root make one.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "run_cli.hpp"

namespace rdmx::test {
namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.flush();
  return static_cast<bool>(out);
}

// A child memory cgroup of this process's own, limited to `limit` bytes with
// no swap; `procs` is where a process writes its pid to enter it.
class SmallCgroup {
 public:
  explicit SmallCgroup(std::size_t limit) {
    std::ifstream self("/proc/self/cgroup");
    const std::string name = "/rdmx-test-" + std::to_string(::getpid()) + "-" + std::to_string(++serial_);
    for (std::string line; std::getline(self, line) && dir_.empty();) {
      const std::size_t first = line.find(':'), second = line.find(':', first + 1);
      if (first == std::string::npos || second == std::string::npos) continue;
      const std::string controllers = line.substr(first + 1, second - first - 1);
      std::string path = line.substr(second + 1);
      if (path == "/") path.clear();
      if (("," + controllers + ",").find(",memory,") != std::string::npos) {
        try_make("/sys/fs/cgroup/memory" + path + name, "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", limit);
      } else if (line.compare(0, first, "0") == 0 && controllers.empty()) {
        try_make("/sys/fs/cgroup" + path + name, "memory.max", "memory.swap.max", limit);
      }
    }
  }
  ~SmallCgroup() {
    if (!dir_.empty()) ::rmdir(dir_.c_str());
  }
  bool usable() const { return !dir_.empty(); }
  std::string procs() const { return dir_ + "/cgroup.procs"; }
  const std::string& why_not() const { return why_not_; }

 private:
  void try_make(const std::string& dir, const char* limit_file, const char* swap_file, std::size_t limit) {
    if (::mkdir(dir.c_str(), 0755) != 0) {
      why_not_ += "cannot create " + dir + "; ";
      return;
    }
    if (!write_file(dir + "/" + limit_file, std::to_string(limit))) {
      why_not_ += "cannot write " + dir + "/" + limit_file + "; ";
      ::rmdir(dir.c_str());
      return;
    }
    struct stat st {};
    if (::stat((dir + "/" + swap_file).c_str(), &st) == 0) {
      write_file(dir + "/" + swap_file, swap_file == std::string("memory.swap.max") ? "0" : std::to_string(limit));
    }
    dir_ = dir;
  }
  static inline int serial_ = 0;
  std::string dir_, why_not_;
};

// `rdmx run args...` started inside the cgroup.
CliResult run_in(const SmallCgroup& cgroup, const std::string& args) {
  return run_program({"/bin/sh", "-c", "echo $$ > " + cgroup.procs() + " && exec " + cli_path() + " " + args});
}

TEST(RunMemory, RanksWhoseBuffersCannotFitAreRefusedBeforeAnyStarts) {
  const CliResult r = run_cli({"run", "-n", "64", "--", "sh", "-c", "echo started"}, {{"RDMX_COLL_MEMORY", "4G"}});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(contains(r.out + r.err, "started")) << r.out << r.err;
  EXPECT_TRUE(contains(r.err,
                       "rdmx run -n 64: the collectives' buffers of the 64 ranks on this host need 7.2 GiB "
                       "and it has 4 GiB available (RDMX_COLL_MEMORY=4G)"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "per peer for the 14 peers its operations are expected to connect to of the 64 ranks"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "RDMX_COLL_BUFFSIZE=2M fits")) << r.err;
  // Told to check nothing, it starts them.
  const CliResult off = run_cli({"run", "-n", "3", "--", "sh", "-c", "echo started"}, {{"RDMX_COLL_MEMORY", "off"}});
  EXPECT_EQ(off.exit_code, 0) << off.err;
  EXPECT_TRUE(contains(off.out, "[2] started")) << off.out;
}

TEST(RunMemory, TheLimitOfTheJobsCgroupCounts) {
  SmallCgroup cgroup(std::size_t{256} << 20);
  if (!cgroup.usable()) GTEST_SKIP() << "no memory cgroup can be made here: " << cgroup.why_not();
  const CliResult r = run_in(cgroup, "run -n 8 -- sh -c 'echo started'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(contains(r.out + r.err, "started")) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "the collectives' buffers of the 8 ranks on this host need")) << r.err;
  EXPECT_TRUE(contains(r.err, "/rdmx-test-")) << r.err;  // the figure is the cgroup's room
}

TEST(RunMemory, ARankTheOomKillerEndsIsReportedAsSuch) {
  SmallCgroup cgroup(std::size_t{64} << 20);
  if (!cgroup.usable()) GTEST_SKIP() << "no memory cgroup can be made here: " << cgroup.why_not();
  // The shell keeps a command substitution's output in memory: 512 MiB of it.
  const CliResult r =
      run_in(cgroup, "run -n 1 -- sh -c 'x=$(head -c 536870912 /dev/zero | tr \"\\\\0\" a); echo done'");
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_FALSE(contains(r.out, "done")) << r.out;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by signal 9 (SIGKILL), likely by the kernel's OOM killer")) << r.err;
  EXPECT_TRUE(contains(r.err, "the ranks need less memory")) << r.err;
}

TEST(RunMemory, ASigkillFromElsewhereIsNotBlamedOnMemory) {
  const CliResult r =
      run_cli({"run", "-n", "2", "--", "sh", "-c", "if [ $RDMX_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 60"});
  EXPECT_EQ(r.exit_code, 128 + 9) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid")) << r.err;
  EXPECT_TRUE(contains(r.err, "was killed by signal 9 (SIGKILL) after")) << r.err;
  EXPECT_FALSE(contains(r.err, "OOM")) << r.err;
}

}  // namespace
}  // namespace rdmx::test
