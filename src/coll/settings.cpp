// SPDX-License-Identifier: MIT
#include "coll/settings.hpp"

#include <algorithm>

#include "coll/links.hpp"
#include "services/settings.hpp"

namespace rdmx::coll {
namespace {

// From 1K (16 slots of 64 bytes) to 1G (a job of n local ranks holds about
// 2 * n * n inboxes); Links refuses a pair that leaves slots under 64 bytes.
constexpr core::SizeSetting kBuffsize{"RDMX_COLL_BUFFSIZE", std::size_t{4} << 20,
                                      "collectives: inbox bytes per peer (every rank must agree)", std::size_t{1} << 10,
                                      std::size_t{1} << 30};
RDMX_SETTING(kBuffsize);
// At least 2: a sender refills one slot while the receiver drains the other.
constexpr core::IntegerSetting kSlots{
    "RDMX_COLL_SLOTS", 16, 2, 1 << 16, "slots", "collectives: inbox slots per peer (every rank must agree)"};
RDMX_SETTING(kSlots);
constexpr core::SizeSetting kStageLimit{"RDMX_COLL_STAGE_LIMIT", std::size_t{16} << 10,
                                        "collectives: payloads up to this size are copied, larger ones written in "
                                        "place"};
RDMX_SETTING(kStageLimit);
// A slot's size (256 KiB): over tcp on loopback, 2-rank all_reduce at 1 MiB
// (512 KiB transfers) took 370-460 us this way against 320-580 with the
// inbox; smaller transfers pay the announcement's round trip for little
// (docs/journal/PERFORMANCE-HISTORY.md, "Direct transfers and rounds over tcp").
constexpr core::SizeSetting kDirectMin{"RDMX_COLL_DIRECT_MIN", std::size_t{256} << 10,
                                       "collectives: transfers from this size on go straight into the receiver's "
                                       "buffer where the link's device places such WRITEs itself (tcp, verbs; not "
                                       "shm); 0: never"};
RDMX_SETTING(kDirectMin);

}  // namespace

CollSettings coll_settings() {
  return {.buffsize = kBuffsize.read(),
          .slots = static_cast<std::size_t>(kSlots.read()),
          .stage_limit = kStageLimit.read(),
          .direct_min = kDirectMin.read()};
}

LinksConfig links_config() {
  LinksConfig c;
  const CollSettings settings = coll_settings();
  c.slots = static_cast<std::uint32_t>(std::clamp<std::size_t>(settings.slots, 1, 1 << 16));
  c.chunk = settings.buffsize / std::max<std::size_t>(settings.slots, 1) / 64 * 64;
  c.stage_limit = settings.stage_limit;
  return c;
}

}  // namespace rdmx::coll
