// SPDX-License-Identifier: MIT
#include "store_adapter.hpp"

#include <c10/util/Exception.h>

namespace rdmx::torch_backend {
namespace {

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
  return out;
}

// torch reports store failures as c10::Error (DistStoreError and friends);
// rdmx callers expect rdmx::Error with what and where.
template <typename F>
auto translated(const char* op, const std::string& keys, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    const bool timed_out = what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos;
    throw Error(timed_out ? ErrorCode::Timeout : ErrorCode::PeerFailure,
                std::string("torch store ") + op + " of " + keys + " failed: " + what.substr(0, what.find('\n')),
                {.op = std::string("store.") + op,
                 .hint = timed_out ? "a rank did not reach this point within the timeout given to init_process_group"
                                   : "the store (MASTER_ADDR:MASTER_PORT, served by rank 0) is gone or unreachable"});
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> inner) : inner_(std::move(inner)) {
  if (!inner_) throw Error(ErrorCode::InvalidArgument, "torch gave the rdmx backend no store", {.op = "store"});
}

void TorchStore::set(const std::string& key, const Bytes& value) {
  std::lock_guard lock(mutex_);
  translated("set", key, [&] { inner_->set(key, value); });
}

Bytes TorchStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  return translated("get", key, [&] {
    inner_->wait({key}, timeout);
    return inner_->get(key);
  });
}

void TorchStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  translated("wait", joined(keys), [&] { inner_->wait(keys, timeout); });
}

std::int64_t TorchStore::add(const std::string& key, std::int64_t delta) {
  std::lock_guard lock(mutex_);
  return translated("add", key, [&] { return inner_->add(key, delta); });
}

bool TorchStore::remove(const std::string& key) {
  std::lock_guard lock(mutex_);
  return translated("remove", key, [&] { return inner_->deleteKey(key); });
}

Bytes TorchStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  std::lock_guard lock(mutex_);
  return translated("compare_set", key, [&] { return inner_->compareSet(key, expected, desired); });
}

bool TorchStore::check(const std::string& key) {
  std::lock_guard lock(mutex_);
  return translated("check", key, [&] { return inner_->check({key}); });
}

}  // namespace rdmx::torch_backend
