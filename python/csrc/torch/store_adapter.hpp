// SPDX-License-Identifier: MIT
// The store torch hands a backend, seen as an rdmx::Store: the communicator
// rendezvouses through torch's own store (TCPStore, FileStore, behind the
// group's PrefixStore), so a job needs no second rendezvous and no extra port.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <mutex>

#include "rdmx/bootstrap.hpp"

namespace rdmx::torch_backend {

class TorchStore final : public Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> inner);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  bool remove(const std::string& key) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool check(const std::string& key) override;

 private:
  // torch's store clients are not documented as thread-safe; rdmx may call
  // from its watch as well as from the creating thread.
  std::mutex mutex_;
  c10::intrusive_ptr<c10d::Store> inner_;
};

}  // namespace rdmx::torch_backend
