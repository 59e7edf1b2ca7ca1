// SPDX-License-Identifier: MIT
#include "coll/settings.hpp"

#include "core/settings.hpp"

namespace rdmx::coll {
namespace {

constexpr core::SizeSetting kBuffsize{"RDMX_COLL_BUFFSIZE", std::size_t{4} << 20,
                                      "collectives: inbox bytes per peer (every rank must agree)"};
RDMX_SETTING(kBuffsize);
constexpr core::SizeSetting kSlots{"RDMX_COLL_SLOTS", 16, "collectives: inbox slots per peer (every rank must agree)"};
RDMX_SETTING(kSlots);
constexpr core::SizeSetting kStageLimit{"RDMX_COLL_STAGE_LIMIT", std::size_t{16} << 10,
                                        "collectives: payloads up to this size are copied, larger ones written in "
                                        "place"};
RDMX_SETTING(kStageLimit);
constexpr core::SizeSetting kDirectMin{"RDMX_COLL_DIRECT_MIN", 0,
                                       "collectives: transfers from this size on go straight into the receiver's "
                                       "buffer (0: off)"};
RDMX_SETTING(kDirectMin);

}  // namespace

CollSettings coll_settings() {
  return {.buffsize = kBuffsize.read(),
          .slots = kSlots.read(),
          .stage_limit = kStageLimit.read(),
          .direct_min = kDirectMin.read()};
}

}  // namespace rdmx::coll
