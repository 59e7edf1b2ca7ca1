// SPDX-License-Identifier: MIT
// Reading the job secret (src/services/auth.cpp): a variable set but empty, as
// `RDMX_AUTH_KEY=$SECRET` gives with SECRET unset, is refused like any other
// unusable secret rather than read as "no secret"; a key file's mode is
// reported as chmod writes it; exactly one line ending is dropped from a key
// file, as docs/SECURITY.md says.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "rdmx/error.hpp"
#include "rdmx/info.hpp"
#include "services/auth.hpp"
#include "support/scoped_env.hpp"

namespace rdmx {
namespace {

using test::ScopedEnv;

constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";

// The Config error reading the secret throws, or nullopt when it throws none.
std::optional<Error> refusal() {
  try {
    core::auth::key_configured();
  } catch (const Error& e) {
    return e;
  }
  return std::nullopt;
}

class KeyFile {
 public:
  KeyFile() {
    char path[] = "/tmp/rdmx-auth-test-XXXXXX";
    const int fd = ::mkstemp(path);
    EXPECT_GE(fd, 0);
    ::close(fd);
    path_ = path;
  }
  ~KeyFile() { ::unlink(path_.c_str()); }
  KeyFile(const KeyFile&) = delete;
  KeyFile& operator=(const KeyFile&) = delete;

  void write(const std::string& bytes, mode_t mode = 0600) {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << bytes;
    ::chmod(path_.c_str(), mode);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Whether the secret in force proves as `expected` does (the same bytes).
bool proves_as(const std::string& expected) {
  const core::auth::Challenge challenge = core::auth::new_challenge();
  const core::auth::Proof proof = core::auth::prove("test", challenge);
  ScopedEnv no_file("RDMX_AUTH_KEY_FILE", nullptr);
  ScopedEnv key("RDMX_AUTH_KEY", expected.c_str());
  return core::auth::verify("test", challenge, {}, proof);
}

TEST(AuthKey, SetButEmptyIsRefusedNamingTheVariable) {
  ScopedEnv no_file("RDMX_AUTH_KEY_FILE", nullptr);
  ScopedEnv empty("RDMX_AUTH_KEY", "");
  const auto error = refusal();
  ASSERT_TRUE(error.has_value()) << "RDMX_AUTH_KEY= ran the job without authentication";
  EXPECT_EQ(error->code(), ErrorCode::Config) << error->what();
  EXPECT_NE(error->message().find("RDMX_AUTH_KEY is set but empty"), std::string::npos) << error->what();
  EXPECT_NE(error->context().hint.find("unset RDMX_AUTH_KEY"), std::string::npos) << error->what();
  EXPECT_THROW(core::auth::prove("p", core::auth::new_challenge()), Error);
  // rdmx info says so too, rather than "not authenticated".
  const AuthStatus status = probe_auth();
  EXPECT_FALSE(status.authenticated);
  EXPECT_NE(status.how.find("refused"), std::string::npos) << status.how;
  EXPECT_NE(status.how.find("RDMX_AUTH_KEY"), std::string::npos) << status.how;
}

TEST(AuthKey, SetButEmptyKeyFileIsRefusedNamingTheVariable) {
  ScopedEnv no_key("RDMX_AUTH_KEY", nullptr);
  ScopedEnv empty("RDMX_AUTH_KEY_FILE", "");
  const auto error = refusal();
  ASSERT_TRUE(error.has_value()) << "RDMX_AUTH_KEY_FILE= ran the job without authentication";
  EXPECT_EQ(error->code(), ErrorCode::Config) << error->what();
  EXPECT_NE(error->message().find("RDMX_AUTH_KEY_FILE is set but empty"), std::string::npos) << error->what();
  EXPECT_NE(error->context().hint.find("unset RDMX_AUTH_KEY_FILE"), std::string::npos) << error->what();
}

TEST(AuthKey, UnsetMeansNoSecretAndIsNotRefused) {
  ScopedEnv no_key("RDMX_AUTH_KEY", nullptr);
  ScopedEnv no_file("RDMX_AUTH_KEY_FILE", nullptr);
  EXPECT_FALSE(refusal().has_value());
  EXPECT_FALSE(core::auth::key_configured());
}

TEST(AuthKeyFile, ModeOpenToOthersIsReportedInOctal) {
  ScopedEnv no_key("RDMX_AUTH_KEY", nullptr);
  KeyFile file;
  file.write(kSecret, 0644);
  ScopedEnv key_file("RDMX_AUTH_KEY_FILE", file.path().c_str());
  const auto error = refusal();
  ASSERT_TRUE(error.has_value()) << "a world-readable key file was accepted";
  EXPECT_NE(error->message().find("(mode 0644)"), std::string::npos) << error->what();
  EXPECT_EQ(error->message().find("decimal"), std::string::npos) << error->what();
}

TEST(AuthKeyFile, ExactlyOneTrailingLineEndingIsDropped) {
  ScopedEnv no_key("RDMX_AUTH_KEY", nullptr);
  KeyFile file;
  ScopedEnv key_file("RDMX_AUTH_KEY_FILE", file.path().c_str());
  const std::string secret = kSecret;

  file.write(secret);
  EXPECT_TRUE(proves_as(secret)) << "no line ending";
  file.write(secret + "\n");
  EXPECT_TRUE(proves_as(secret)) << "one newline";
  file.write(secret + "\r\n");
  EXPECT_TRUE(proves_as(secret)) << "one CR LF";
  // A second line ending is part of the secret, as is a lone CR.
  file.write(secret + "\n\n");
  EXPECT_TRUE(proves_as(secret + "\n")) << "two newlines: the first is part of the secret";
  EXPECT_FALSE(proves_as(secret)) << "two newlines";
  file.write(secret + "\r");
  EXPECT_TRUE(proves_as(secret + "\r")) << "a lone CR is part of the secret";
  file.write(secret + "\r\n\r\n");
  EXPECT_TRUE(proves_as(secret + "\r\n")) << "two CR LFs: the first is part of the secret";
}

}  // namespace
}  // namespace rdmx
