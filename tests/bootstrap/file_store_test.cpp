// SPDX-License-Identifier: MIT
// The file store: basic operations, blocking across processes, atomicity of
// add/compare_set across processes, and what a timeout says.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "process_util.hpp"
#include "rdmx/bootstrap.hpp"
#include "support/text.hpp"

namespace rdmx {
namespace {

using test::bytes_of;

using namespace std::chrono_literals;
using test::spawn;
using test::TempDir;
using test::wait_exit;

TEST(FileStore, SetGetCheckRemove) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  EXPECT_FALSE(store->check("a"));
  store->set("a", std::string_view("hello"));
  EXPECT_TRUE(store->check("a"));
  EXPECT_EQ(store->get_string("a"), "hello");
  store->set("a", std::string_view("again"));
  EXPECT_EQ(store->get_string("a"), "again");
  EXPECT_TRUE(store->remove("a"));
  EXPECT_FALSE(store->remove("a"));
  EXPECT_FALSE(store->check("a"));
}

// stats() counts the keys (files) and their values' bytes; the lock file is none.
TEST(FileStore, StatsCountKeysAndValueBytes) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  EXPECT_EQ(store->stats().keys, 0);
  store->set("a/b", std::string_view("12345"));
  store->add("n", 7);
  const StoreStats two = store->stats();
  EXPECT_EQ(two.keys, 2);
  EXPECT_EQ(two.bytes, 5 + 1);
  EXPECT_EQ(two.parked, -1);
  EXPECT_EQ(two.clients, -1);
  store->remove("a/b");
  store->remove("n");
  EXPECT_EQ(store->stats().keys, 0);
  EXPECT_EQ(store->stats().bytes, 0);
}

// keys() gives back every key as it was written ('/', '%', spaces, dots),
// sorted, by prefix; the lock file and temporary files are none.
TEST(FileStore, KeysAreListedAsWrittenByPrefix) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  EXPECT_EQ(store->keys(""), std::vector<std::string>{});
  for (const char* key : {"comm/status/1", "comm/status/0", "a b%c.d", "comm2/x"})
    store->set(key, std::string_view("v"));
  EXPECT_EQ(store->keys(""), (std::vector<std::string>{"a b%c.d", "comm/status/0", "comm/status/1", "comm2/x"}));
  EXPECT_EQ(store->keys("comm/"), (std::vector<std::string>{"comm/status/0", "comm/status/1"}));
  EXPECT_EQ(prefix_store(std::move(store), "comm")->keys("status/"),
            (std::vector<std::string>{"status/0", "status/1"}));
}

// A store holds QP addresses and memory keys: its directory and files are
// their owner's alone, whatever the umask.
TEST(FileStore, ItsDirectoryAndFilesAreTheOwnersAlone) {
  TempDir dir;
  const std::string job = dir.path() + "/jobs/42";
  const mode_t old_mask = ::umask(0);
  auto store = open_file_store(job);
  store->set("addr", std::string_view("secret"));
  EXPECT_EQ(store->add("counter", 1), 1);
  ::umask(old_mask);
  namespace fs = std::filesystem;
  EXPECT_EQ(fs::status(job).permissions() & fs::perms::all, fs::perms::owner_all);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(job)) {
    if (!entry.is_regular_file()) continue;
    ++files;
    EXPECT_EQ(entry.status().permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write)
        << entry.path();
  }
  EXPECT_GE(files, 2);
}

TEST(FileStore, KeysAndValuesMayHoldAnyBytes) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  Bytes binary = {0, 1, 2, 0, 255, '/', '\n'};
  store->set("mesh/0/1", binary);
  store->set("../escape", std::string_view("x"));
  store->set(std::string("nul\0key", 7), std::string_view("y"));
  store->set("empty", Bytes{});
  std::string longest(4096, 'k');
  store->set(longest, std::string_view("long"));
  EXPECT_EQ(store->get("mesh/0/1", 1s), binary);
  EXPECT_EQ(store->get_string("../escape"), "x");
  EXPECT_EQ(store->get_string(std::string("nul\0key", 7)), "y");
  EXPECT_TRUE(store->check("empty"));
  EXPECT_TRUE(store->get("empty", 1s).empty());
  EXPECT_EQ(store->get_string(longest), "long");
  // Nothing escaped the directory, and "nul" is a different key.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir.path()).parent_path() / "escape"));
  EXPECT_FALSE(store->check("nul"));
}

TEST(FileStore, RefusesEmptyAndOversizedKeys) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  try {
    store->set("", std::string_view("x"));
    FAIL() << "empty key accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  try {
    store->set(std::string(4097, 'k'), std::string_view("x"));
    FAIL() << "oversized key accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("key_len=4097"), std::string::npos) << e.what();
  }
}

TEST(FileStore, AddAndCompareSet) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  EXPECT_EQ(store->add("counter", 5), 5);
  EXPECT_EQ(store->add("counter", -2), 3);
  EXPECT_EQ(store->get_string("counter"), "3");
  store->set("text", std::string_view("not a number"));
  try {
    store->add("text", 1);
    FAIL() << "add on a non-integer value succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  }
  // Empty expected matches an absent key.
  EXPECT_EQ(store->compare_set("leader", {}, bytes_of("r0")), bytes_of("r0"));
  // A mismatch leaves the value and returns it.
  EXPECT_EQ(store->compare_set("leader", {}, bytes_of("r1")), bytes_of("r0"));
  EXPECT_EQ(store->compare_set("leader", bytes_of("wrong"), bytes_of("r1")), bytes_of("r0"));
  EXPECT_EQ(store->compare_set("leader", bytes_of("r0"), bytes_of("r2")), bytes_of("r2"));
  EXPECT_EQ(store->get_string("leader"), "r2");
  // Non-empty expected on an absent key: nothing stored, empty returned.
  EXPECT_TRUE(store->compare_set("absent", bytes_of("x"), bytes_of("y")).empty());
  EXPECT_FALSE(store->check("absent"));
}

TEST(FileStore, BlockingGetIsSatisfiedByAnotherProcess) {
  TempDir dir;
  const std::string path = dir.path();
  // The child announces it is about to block, then blocks; the parent sets
  // the key only after the announcement.
  pid_t child = spawn([&] {
    auto store = open_file_store(path);
    store->set("child/ready", std::string_view("1"));
    CHILD_REQUIRE(store->get_string("answer") == "42");
    store->wait({"parent/ready"}, 20s);
    return 0;
  });
  auto store = open_file_store(path);
  EXPECT_EQ(store->get_string("child/ready"), "1");
  store->set("answer", std::string_view("42"));
  store->set("parent/ready", std::string_view("1"));
  EXPECT_EQ(wait_exit(child), 0);
}

TEST(FileStore, ParentBlocksUntilChildSets) {
  TempDir dir;
  const std::string path = dir.path();
  pid_t child = spawn([&] {
    auto store = open_file_store(path);
    store->wait({"parent/blocking"}, 20s);
    store->set("from/child", bytes_of("payload"));
    return 0;
  });
  auto store = open_file_store(path);
  store->set("parent/blocking", std::string_view("1"));
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store->get("from/child", 20s), bytes_of("payload"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(wait_exit(child), 0);
}

TEST(FileStore, TimeoutNamesTheMissingKeysAndDirectory) {
  TempDir dir;
  auto store = open_file_store(dir.path());
  auto start = std::chrono::steady_clock::now();
  try {
    store->get("rank/3/addr", 200ms);
    FAIL() << "get of a missing key returned";
  } catch (const Error& e) {
    auto elapsed = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    std::string what = e.what();
    EXPECT_NE(what.find("'rank/3/addr'"), std::string::npos) << what;
    EXPECT_NE(what.find(dir.path()), std::string::npos) << what;
    EXPECT_NE(what.find("hint:"), std::string::npos) << what;
    EXPECT_EQ(e.context().op, "store.get");
    EXPECT_GE(elapsed, 200ms);
    EXPECT_LT(elapsed, 5s);
  }
  store->set("present", std::string_view("1"));
  try {
    store->wait({"present", "absent/1", "absent/2"}, 100ms);
    FAIL() << "wait for missing keys returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Timeout);
    std::string what = e.message();
    EXPECT_NE(what.find("'absent/1'"), std::string::npos) << what;
    EXPECT_NE(what.find("'absent/2'"), std::string::npos) << what;
    EXPECT_EQ(what.find("'present'"), std::string::npos) << what;
  }
}

TEST(FileStore, AddIsAtomicAcrossProcesses) {
  TempDir dir;
  const std::string path = dir.path();
  constexpr int kProcesses = 4;
  constexpr int kAddsEach = 200;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(spawn([&] {
      auto store = open_file_store(path);
      for (int n = 0; n < kAddsEach; ++n) store->add("total", 1);
      return 0;
    }));
  }
  for (pid_t child : children) EXPECT_EQ(wait_exit(child), 0);
  auto store = open_file_store(path);
  EXPECT_EQ(store->get_string("total"), std::to_string(kProcesses * kAddsEach));
}

TEST(FileStore, CompareSetElectsExactlyOneProcess) {
  TempDir dir;
  const std::string path = dir.path();
  constexpr int kProcesses = 6;
  std::vector<pid_t> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(spawn([&, i] {
      auto store = open_file_store(path);
      std::string mine = "candidate-" + std::to_string(i);
      Bytes now = store->compare_set("leader", {}, bytes_of(mine));
      if (now == bytes_of(mine)) store->add("winners", 1);
      return 0;
    }));
  }
  for (pid_t child : children) EXPECT_EQ(wait_exit(child), 0);
  auto store = open_file_store(path);
  EXPECT_EQ(store->get_string("winners"), "1");
}

TEST(FileStore, PrefixStoreSeparatesNamespaces) {
  TempDir dir;
  std::shared_ptr<Store> inner = open_file_store(dir.path());
  auto job_a = prefix_store(inner, "jobA");
  auto job_b = prefix_store(inner, "jobB");
  job_a->set("k", std::string_view("a"));
  job_b->set("k", std::string_view("b"));
  EXPECT_EQ(job_a->get_string("k"), "a");
  EXPECT_EQ(job_b->get_string("k"), "b");
  EXPECT_EQ(inner->get_string("jobA/k"), "a");
  EXPECT_EQ(job_a->add("n", 2), 2);
  EXPECT_TRUE(inner->check("jobA/n"));
  job_a->wait({"k", "n"}, 1s);
  EXPECT_TRUE(job_a->remove("k"));
  EXPECT_TRUE(inner->check("jobB/k"));
  EXPECT_THROW(prefix_store(nullptr, "x"), Error);
}

TEST(FileStore, CreatesMissingDirectories) {
  TempDir dir;
  std::string nested = dir.path() + "/a/b/c/";
  auto store = open_file_store(nested);
  store->set("k", std::string_view("v"));
  EXPECT_TRUE(std::filesystem::is_directory(dir.path() + "/a/b/c"));
  auto again = open_file_store(dir.path() + "/a/b/c");
  EXPECT_EQ(again->get_string("k"), "v");
}

}  // namespace
}  // namespace rdmx
