// SPDX-License-Identifier: MIT
#include "coll/host_layout.hpp"

#include <map>

namespace rdmx::coll {
namespace {

std::string ring_text(const std::vector<int>& members) {
  std::string out;
  for (int r : members) out += std::to_string(r) + "->";
  return out + std::to_string(members.front());
}

}  // namespace

int HostLayout::per_host() const noexcept {
  if (ranks.empty()) return 0;
  const std::size_t size = ranks.front().size();
  for (const auto& host : ranks) {
    if (host.size() != size) return 0;
  }
  return static_cast<int>(size);
}

std::string HostLayout::describe() const {
  const int per = per_host();
  std::string out = std::to_string(hosts()) + (hosts() == 1 ? " host" : " hosts");
  out += per > 0 ? " x " + std::to_string(per) + (per == 1 ? " rank" : " ranks") : " of unequal rank counts";
  out += ":";
  for (int h = 0; h < hosts(); ++h) {
    out += (h == 0 ? " " : ", ") + names[static_cast<std::size_t>(h)] + " [";
    const auto& members = ranks[static_cast<std::size_t>(h)];
    for (std::size_t i = 0; i < members.size(); ++i) out += (i == 0 ? "" : " ") + std::to_string(members[i]);
    out += "]";
  }
  return out;
}

std::string HostLayout::describe_rings() const {
  const int per = per_host();
  if (per == 0) return "no hierarchical rings: hosts have unequal rank counts";
  std::string out = "within hosts:";
  for (int h = 0; h < hosts(); ++h) out += " " + ring_text(ranks[static_cast<std::size_t>(h)]);
  out += "; across hosts, one per local index:";
  for (int l = 0; l < per; ++l) {
    std::vector<int> members;
    for (int h = 0; h < hosts(); ++h) members.push_back(rank_at(h, l));
    out += " " + ring_text(members);
  }
  return out;
}

HostLayout make_host_layout(const std::vector<std::string>& identities, const std::vector<std::string>& names) {
  HostLayout layout;
  std::map<std::string, int> index;
  layout.host_of.resize(identities.size());
  layout.local_of.resize(identities.size());
  for (std::size_t r = 0; r < identities.size(); ++r) {
    auto [it, fresh] = index.emplace(identities[r], layout.hosts());
    if (fresh) {
      layout.ranks.emplace_back();
      layout.names.push_back(r < names.size() ? names[r] : identities[r]);
    }
    auto& members = layout.ranks[static_cast<std::size_t>(it->second)];
    layout.host_of[r] = it->second;
    layout.local_of[r] = static_cast<int>(members.size());
    members.push_back(static_cast<int>(r));
  }
  return layout;
}

}  // namespace rdmx::coll
