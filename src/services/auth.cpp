// SPDX-License-Identifier: MIT
#include "services/auth.hpp"

#include <sodium.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>

#include "rdmx/error.hpp"
#include "services/kernel_random.hpp"
#include "services/log.hpp"
#include "services/settings.hpp"

namespace rdmx::core::auth {
namespace {

// Set to the empty string, as `RDMX_AUTH_KEY=$SECRET` gives when SECRET is
// unset, is not the same as unset: a job that meant to have a secret must not
// run without one. Setting::raw() treats empty as unset, as every other
// setting wants, so the secret's settings look at the environment themselves.
bool set_but_empty(const Setting& setting) {
  const char* value = std::getenv(setting.name());
  return value != nullptr && *value == '\0';
}

[[noreturn]] void refuse(const std::string& what, const std::string& hint) {
  throw Error(ErrorCode::Config, what, {.op = "auth", .hint = hint});
}

[[noreturn]] void refuse_empty(const Setting& setting) {
  refuse(std::string(setting.name()) + " is set but empty, so this job would run without authentication",
         std::string("unset ") + setting.name() + " to run without a job secret, or set it to the secret (an " +
             "empty value often comes from `" + setting.name() + "=$VAR` with VAR unset)");
}

// The job secret's settings, refused when set but empty. The secret is
// reported as set or unset, never by value (`rdmx info` and its JSON are
// pasted into bug reports); the key file's path is shown as it is.
class SecretSetting final : public Setting {
 public:
  constexpr SecretSetting(const char* name, const char* doc, bool shown) : Setting(name, doc), shown_(shown) {}
  std::string default_text() const override { return "unset"; }
  std::string value_text() const override {
    const auto text = read();
    if (!text) return "unset";
    return shown_ ? *text : "set (" + std::to_string(text->size()) + " bytes, not shown)";
  }
  std::optional<std::string> read() const {
    if (set_but_empty(*this)) refuse_empty(*this);
    return raw();
  }

 private:
  bool shown_;
};

constexpr SecretSetting kAuthKey{"RDMX_AUTH_KEY",
                                 "the job secret every network connection proves with HMAC-SHA256 (rdmx run sets one "
                                 "per job); unset: connections are not authenticated; set but empty: refused",
                                 false};
RDMX_SETTING(kAuthKey);
constexpr SecretSetting kAuthKeyFile{
    "RDMX_AUTH_KEY_FILE",
    "a file holding the job secret (owner-readable only; one trailing newline is not part of it), instead of "
    "RDMX_AUTH_KEY",
    true};
RDMX_SETTING(kAuthKeyFile);

// A secret shorter than this could be guessed by a patient attacker.
constexpr std::size_t kMinKeyBytes = 16;
constexpr std::size_t kMaxKeyBytes = 4096;

struct Key {
  std::string bytes;  // empty: none configured
  std::string source;
};

// As chmod and ls write it: "0644".
std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string read_key_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    refuse("RDMX_AUTH_KEY_FILE=" + path + " cannot be read: " + std::strerror(errno),
           "give a file that holds the job's secret, or unset RDMX_AUTH_KEY_FILE");
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    // As ssh does with private keys: a secret others can read is no secret.
    refuse("RDMX_AUTH_KEY_FILE=" + path + " is readable or writable by others (mode " + octal_mode(st.st_mode) + ")",
           "chmod 600 " + path);
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) refuse("RDMX_AUTH_KEY_FILE=" + path + " cannot be read", "check the file");
  std::string bytes = text.str();
  // One line ending, as `echo` or an editor leaves it; any other byte,
  // a second newline included, is part of the secret.
  if (bytes.ends_with("\r\n")) {
    bytes.resize(bytes.size() - 2);
  } else if (bytes.ends_with('\n')) {
    bytes.pop_back();
  }
  return bytes;
}

Key load_key() {
  auto inline_key = kAuthKey.read();
  auto file = kAuthKeyFile.read();
  if (inline_key && file) {
    refuse("both RDMX_AUTH_KEY and RDMX_AUTH_KEY_FILE are set", "set only one of them");
  }
  Key key;
  if (inline_key) {
    key.bytes = *inline_key;
    key.source = "RDMX_AUTH_KEY";
  } else if (file) {
    key.bytes = read_key_file(*file);
    key.source = "RDMX_AUTH_KEY_FILE=" + *file;
  } else {
    key.source = "none (RDMX_AUTH_KEY and RDMX_AUTH_KEY_FILE are unset)";
    return key;
  }
  if (key.bytes.size() < kMinKeyBytes || key.bytes.size() > kMaxKeyBytes) {
    refuse("the job secret from " + key.source + " is " + std::to_string(key.bytes.size()) + " bytes; it must be " +
               std::to_string(kMinKeyBytes) + " to " + std::to_string(kMaxKeyBytes),
           "use a long random secret, e.g. `head -c 32 /dev/urandom | xxd -p -c 64`");
  }
  return key;
}

void ensure_sodium() {
  static const int ready = sodium_init();
  if (ready < 0) {
    throw Error(ErrorCode::System, "libsodium failed to initialise", {.op = "auth", .hint = "check the installation"});
  }
}

Proof hmac(const std::string& key, std::string_view purpose, const Challenge& challenge,
           std::span<const std::uint8_t> bound) {
  ensure_sodium();
  crypto_auth_hmacsha256_state state;
  crypto_auth_hmacsha256_init(&state, reinterpret_cast<const unsigned char*>(key.data()), key.size());
  // Length-prefixed, so no two (purpose, bound) pairs hash the same bytes.
  const std::uint32_t purpose_length = static_cast<std::uint32_t>(purpose.size());
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(&purpose_length),
                                sizeof(purpose_length));
  crypto_auth_hmacsha256_update(&state, reinterpret_cast<const unsigned char*>(purpose.data()), purpose.size());
  crypto_auth_hmacsha256_update(&state, challenge.data(), challenge.size());
  crypto_auth_hmacsha256_update(&state, bound.data(), bound.size());
  Proof proof;
  crypto_auth_hmacsha256_final(&state, proof.data());
  sodium_memzero(&state, sizeof(state));
  return proof;
}

}  // namespace

bool key_configured() { return !load_key().bytes.empty(); }

std::string key_source() { return load_key().source; }

Challenge new_challenge() {
  Challenge challenge;
  for (std::size_t i = 0; i < challenge.size(); i += 8) {
    const std::uint64_t word = kernel_random64();
    std::memcpy(challenge.data() + i, &word, 8);
  }
  return challenge;
}

Proof prove(std::string_view purpose, const Challenge& challenge, std::span<const std::uint8_t> bound) {
  const Key key = load_key();
  if (key.bytes.empty()) return Proof{};
  return hmac(key.bytes, purpose, challenge, bound);
}

bool verify(std::string_view purpose, const Challenge& challenge, std::span<const std::uint8_t> bound,
            const Proof& proof) {
  const Key key = load_key();
  if (key.bytes.empty()) return true;
  const Proof expected = hmac(key.bytes, purpose, challenge, bound);
  return crypto_verify_32(expected.data(), proof.data()) == 0;
}

void warn_if_unauthenticated(const char* what) {
  static std::once_flag once;
  if (key_configured()) return;
  std::call_once(once, [what] {
    RDMX_WARN(
        "%s: connections are not authenticated: any process that can reach this host's ports can join the job "
        "(set RDMX_AUTH_KEY or RDMX_AUTH_KEY_FILE to the same secret on every rank; rdmx run sets one per job)",
        what);
  });
}

void log_refusal(const std::string& listener, const std::string& source, const std::string& why) {
  constexpr int kLoggedPerSecond = 5;
  static std::mutex mutex;
  static std::chrono::steady_clock::time_point window;
  static int logged = 0;
  static long unlogged = 0;
  std::lock_guard<std::mutex> guard(mutex);
  const auto now = std::chrono::steady_clock::now();
  if (now - window >= std::chrono::seconds(1)) {
    if (unlogged > 0) {
      RDMX_WARN("%s: %ld more connections refused in the last second were not logged", listener.c_str(), unlogged);
    }
    window = now;
    logged = 0;
    unlogged = 0;
  }
  if (logged >= kLoggedPerSecond) {
    ++unlogged;
    return;
  }
  ++logged;
  RDMX_WARN("%s: refused a connection from %s: %s", listener.c_str(), source.empty() ? "?" : source.c_str(),
            why.c_str());
}

std::string new_job_secret() {
  static const char* digits = "0123456789abcdef";
  std::string text;
  const Challenge bytes = new_challenge();
  for (std::uint8_t b : bytes) {
    text += digits[b >> 4];
    text += digits[b & 15];
  }
  return text;
}

}  // namespace rdmx::core::auth
