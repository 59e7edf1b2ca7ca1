// SPDX-License-Identifier: MIT
// The Store base class's convenience methods, the helpers every store shares,
// and prefix_store().
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <utility>

#include "bootstrap/store_common.hpp"
#include "services/config.hpp"

namespace rdmx {

Bytes Store::get(const std::string& key) { return get(key, core::timeout()); }

void Store::wait(const std::vector<std::string>& keys) { wait(keys, core::timeout()); }

void Store::set(const std::string& key, std::string_view value) { set(key, bootstrap::to_bytes(value)); }

std::string Store::get_string(const std::string& key) { return bootstrap::to_string(get(key)); }

std::vector<std::string> Store::keys(const std::string& prefix) {
  throw Error(ErrorCode::NotSupported, "store.keys: this store cannot list its keys (asked for \"" + prefix + "\")",
              ErrorContext{.op = "store.keys", .hint = "the TCP and file stores can"});
}

StoreStats Store::stats() {
  throw Error(ErrorCode::NotSupported, "store.stats: this store cannot count what it holds",
              ErrorContext{.op = "store.stats", .hint = "the TCP and file stores can"});
}

namespace bootstrap {

void validate_key(const std::string& key, const char* op, const std::string& store_addr) {
  if (!key.empty() && key.size() <= kMaxKeyBytes) return;
  throw Error(ErrorCode::InvalidArgument,
              key.empty() ? std::string("store keys must not be empty")
                          : "store key " + printable_key(key) + " is longer than the limit",
              ErrorContext{.op = op,
                           .peer_addr = store_addr,
                           .sizes = "key_len=" + std::to_string(key.size()) + " max=" + std::to_string(kMaxKeyBytes)});
}

void validate_value(std::size_t value_size, const char* op, const std::string& key, const std::string& store_addr) {
  if (value_size <= kMaxValueBytes) return;
  throw Error(
      ErrorCode::InvalidArgument, "value for store key " + printable_key(key) + " is larger than the limit",
      ErrorContext{.op = op,
                   .peer_addr = store_addr,
                   .sizes = "value_len=" + std::to_string(value_size) + " max=" + std::to_string(kMaxValueBytes),
                   .hint = "stores carry addresses and small metadata; move bulk data over a QP"});
}

std::string printable_key(std::string_view key) {
  constexpr std::size_t kShown = 120;
  std::string out = "'";
  for (std::size_t i = 0; i < key.size() && i < kShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    }
  }
  out += "'";
  if (key.size() > kShown) out += "... (" + std::to_string(key.size()) + " bytes)";
  return out;
}

std::string printable_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 8;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i != 0) out += ", ";
    out += printable_key(keys[i]);
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

std::optional<std::int64_t> parse_int64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t value = 0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (*first == '+') ++first;  // from_chars rejects a leading '+'
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last) return std::nullopt;
  return value;
}

std::string describe_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() < 0) return "no timeout";
  return std::to_string(timeout.count()) + " ms";
}

std::string strip_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

std::string format_host_port(const std::string& host, std::uint16_t port) {
  std::string bare = strip_brackets(host);
  if (bare.find(':') != std::string::npos) return "[" + bare + "]:" + std::to_string(port);
  return bare + ":" + std::to_string(port);
}

namespace {

// Every key goes to the inner store as prefix + "/" + key; nothing else changes.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix) + "/") {}

  using Store::get;
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override { inner_->set(full(key), value); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    return inner_->get(full(key), timeout);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> prefixed;
    prefixed.reserve(keys.size());
    for (const auto& key : keys) prefixed.push_back(full(key));
    inner_->wait(prefixed, timeout);
  }
  std::int64_t add(const std::string& key, std::int64_t delta) override { return inner_->add(full(key), delta); }
  bool remove(const std::string& key) override { return inner_->remove(full(key)); }
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return inner_->compare_set(full(key), expected, desired);
  }
  bool check(const std::string& key) override { return inner_->check(full(key)); }
  StoreStats stats() override { return inner_->stats(); }
  std::vector<std::string> keys(const std::string& prefix) override {
    std::vector<std::string> own = inner_->keys(prefix_ + prefix);
    for (std::string& key : own) key.erase(0, prefix_.size());
    return own;
  }

 private:
  std::string full(const std::string& key) const {
    // An empty key stays empty so the inner store refuses it as such rather
    // than silently accepting "prefix/".
    if (key.empty()) return key;
    return prefix_ + key;
  }

  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace
}  // namespace bootstrap

std::unique_ptr<Store> prefix_store(std::shared_ptr<Store> inner, std::string prefix) {
  if (!inner) {
    throw Error(
        ErrorCode::InvalidArgument, "prefix_store needs a store to wrap, got null",
        ErrorContext{.op = "prefix_store", .hint = "pass the shared_ptr returned by from_env() or open_*_store()"});
  }
  return std::make_unique<bootstrap::PrefixStore>(std::move(inner), std::move(prefix));
}

}  // namespace rdmx
