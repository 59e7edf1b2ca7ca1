// SPDX-License-Identifier: MIT
// The "auto" device: one device over several providers that picks, per peer,
// the best one that can reach it (shm for processes on this host, tcp for
// the rest). It shares one region table and one set of QP numbers among its
// providers, so a PD, MR or CQ of the auto device serves whichever provider a
// QP ends up on. A QP publishes every candidate's address; at connect() both
// sides apply the same rule to the two addresses, so they agree without a
// round trip, and RDMX_DEBUG=INFO says what was chosen for each peer and why.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver/device_resources.hpp"
#include "rdmx/verbs.hpp"

namespace rdmx::autosel {

struct Candidate {
  std::string name;                // "shm"
  std::shared_ptr<Device> device;  // opened over the shared DeviceResources
  // Whether `address` (one of this provider's QP addresses) can be reached
  // from here; `why` explains either way.
  std::function<bool(const QpAddress& address, std::string* why)> reaches;
  // Whether `address` is one of this provider's QP addresses.
  std::function<bool(const QpAddress& address)> owns;
};

// Candidates best first; the last one should reach every peer.
std::shared_ptr<Device> open_auto_device(std::vector<Candidate> candidates, core::DeviceResources resources,
                                         std::string why);

}  // namespace rdmx::autosel
