// SPDX-License-Identifier: MIT
// Hardware that checks keys itself (an RDMA NIC) must register every region
// of a protection domain too. A provider that drives such hardware installs a
// RegionBinder in the device's MemoryRegistry; every protection domain and
// region over that registry is then also made in the hardware, and the
// hardware's keys become the registry's keys. So one PD and one MR serve QPs
// of every provider of a process (auto selection), whichever checks the key:
// software providers look it up in the registry, the NIC in its own tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "rdmx/verbs.hpp"

namespace rdmx::core {

class RegionBinder {
 public:
  virtual ~RegionBinder() = default;

  // The hardware's side of one protection domain; destroyed with the PD.
  class Domain {
   public:
    virtual ~Domain() = default;
  };
  // The hardware's side of one region; destroying it deregisters it.
  class Binding {
   public:
    virtual ~Binding() = default;
    virtual std::uint32_t lkey() const = 0;
    virtual std::uint32_t rkey() const = 0;
  };

  // Throws rdmx::Error naming what the hardware refused and why.
  virtual std::unique_ptr<Domain> open_domain() = 0;
  // `memory`/`gpu`: where the region lives (device memory of GPU `gpu`, or host memory).
  virtual std::unique_ptr<Binding> bind(Domain& domain, void* addr, std::size_t length, Access access,
                                        MemoryType memory, int gpu) = 0;
};

}  // namespace rdmx::core
