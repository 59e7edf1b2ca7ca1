// SPDX-License-Identifier: MIT
// rdmx bench's figures: the rounds of a p2p test merged into one row with
// their spread, the summary per provider, and the table a person reads in
// ten seconds. It leads with what a program sees on a fabric (a WRITE's
// latency, the WRITE bandwidth of messages larger than the last-level cache),
// not the best figure of any kind, which on one host is a READ out of mapped
// memory or a copy that stays in the caches.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rdmx::cli {

// A figure whose largest round is more than this times its smallest is
// marked in the summary (docs/TOOLS.md).
inline constexpr double kSpreadMark = 1.2;

// The size of the largest data cache of this host's first CPU (sysfs), or
// `fallback` where the host does not say.
std::uint64_t last_level_cache_bytes(std::uint64_t fallback = std::uint64_t{32} << 20);

// The message size the bench measures out-of-cache bandwidth at: the smallest
// power of two at least twice `llc_bytes`.
std::uint64_t out_of_cache_bytes(std::uint64_t llc_bytes);

// p2p entries (provider, test, results), where a test that ran in several
// rounds appears once per round, merged into one entry per provider and test:
// one row per size, the round with the median figure (t_typical_us or
// bw_avg_gb_s), with `rounds` and `spread` (largest over smallest figure).
nlohmann::json merge_rounds(const nlohmann::json& p2p);

// One summary entry per provider (docs/schemas/bench.schema.json).
nlohmann::json summarize(const nlohmann::json& doc, const std::vector<std::string>& providers);

// A message size as the tables write it: "64 MiB", "4 KiB", "8 B" (whole
// binary multiples only; other sizes in bytes).
std::string human_bytes(std::uint64_t bytes);

// The terminal summary of a results document.
std::string format_summary(const nlohmann::json& doc);

}  // namespace rdmx::cli
