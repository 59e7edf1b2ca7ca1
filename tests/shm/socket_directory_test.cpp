// SPDX-License-Identifier: MIT
// The shm provider's socket directory is its user's alone: a directory others
// can enter is made private, and one owned by another user is refused (it
// could hold a socket planted to intercept connections).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "rdmx/verbs.hpp"

namespace rdmx {
namespace {

class SocketDirectory : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/rdmx-shmdir-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    base_ = pattern;
    dir_ = base_ + "/sockets";
    ASSERT_EQ(::mkdir(dir_.c_str(), 0755), 0);
    ::setenv("RDMX_SHM_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("RDMX_SHM_DIR");
    std::filesystem::remove_all(base_);
  }
  std::string base_;
  std::string dir_;
};

TEST_F(SocketDirectory, OneOthersCanEnterIsMadePrivate) {
  auto device = open_device("shm");
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(SocketDirectory, OneOwnedByAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving the directory to another user needs root";
  ASSERT_EQ(::chown(dir_.c_str(), 65534, 65534), 0);
  try {
    auto device = open_device("shm");
    FAIL() << "the shm device opened in a directory owned by uid 65534";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::Config) << e.what();
    EXPECT_NE(std::string(e.what()).find("not a directory owned by this user"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("RDMX_SHM_DIR"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rdmx
