// SPDX-License-Identifier: MIT
// The figures of the links between a communicator's hosts, measured when
// it is created: a few small exchanges and two of 256 KiB between the first
// ranks of neighbouring hosts over the connected Links; then every rank
// reads theirs from the store and takes the slowest step and the lowest
// bandwidth, so all choose alike. Links inside a host keep the figures their providers
// declare: on a host's shared cores a single exchange says more about the
// moment's load than about the link.
#pragma once

#include <chrono>
#include <string>

#include "coll/cost_model.hpp"
#include "coll/host_layout.hpp"
#include "coll/links.hpp"
#include "rdmx/bootstrap.hpp"

namespace rdmx::coll {

// Whether RDMX_COLL_MEASURE_LINKS asks for the measurement (on unless set to 0).
bool measure_links_enabled();

// `declared`: what the providers say, kept inside the hosts. Collective
// over the ranks of a communicator on several hosts; bounded by `timeout`
// per exchange. The first rank of each host publishes what it measured
// under `tag` in `store` and names the key in `published_key` (the
// communicator removes it with its others). Throws what Links::run and the
// store throw, naming the probe.
LinkModel measure_links(Links& links, Store& store, const std::string& tag, const HostLayout& layout, int rank,
                        const LinkModel& declared, std::chrono::milliseconds timeout, std::string* published_key);

}  // namespace rdmx::coll
