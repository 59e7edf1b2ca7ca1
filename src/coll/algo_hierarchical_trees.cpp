// SPDX-License-Identifier: MIT
// Hierarchical trees: one tree over the hosts joins one rank of each (of
// the root's local index), and within each host a tree joins its ranks to
// that one, so a message crosses each host's link once each way.
//
// broadcast and reduce: large messages run down (or up) chains, pipelined
// chunk by chunk, and every link carries the message once; small ones
// binomial trees, with ceil(log2) levels each.
//
// all_reduce of small messages: each host reduces to its first rank; those
// all-reduce across the hosts over two binary trees (NCCL's double binary
// tree), each carrying half of the vector, the second the first shifted by
// one host so that a host inner in one is mostly a leaf in the other; each
// host then broadcasts. Reduction order is fixed by the trees, and every
// rank receives the roots' results, so every rank gets the same bits.
#include <algorithm>
#include <string>
#include <vector>

#include "coll/algorithms.hpp"

namespace rdmx::coll {
namespace {

// A chain from `origin` through origin+1, ... (mod count).
BinomialTree chain(int v, int count, int origin) {
  BinomialTree t;
  const int pos = mod(v - origin, count);
  if (pos > 0) t.parent = mod(v - 1, count);
  if (pos + 1 < count) t.children.push_back(mod(v + 1, count));
  return t;
}

int lowest_bit(int x) { return x & -x; }

// The in-order binary tree over 1..m: node x with lowest set bit b has
// children x - b/2 and x + b/2 and lies one level below x - b or x + b
// (whichever has lowest bit 2b); nodes past m are skipped over. The root is
// the highest power of two up to m. `x` is 1-based; parents and children too.
BinomialTree in_order_tree(int x, int m) {
  BinomialTree t;
  int root = 1;
  while (root * 2 <= m) root *= 2;
  if (x != root) {
    int y = x, b = lowest_bit(x);
    do {
      y = (y / (2 * b)) % 2 == 1 ? y - b : y + b;
      b *= 2;
    } while (y > m);
    t.parent = y;
  }
  const int b = lowest_bit(x);
  if (b > 1) {
    t.children.push_back(x - b / 2);
    int right = x + b / 2;
    while (right > m && lowest_bit(right) > 1) right -= lowest_bit(right) / 2;
    if (right <= m) t.children.push_back(right);
  }
  return t;
}

// Tree `which` (0 or 1) of the double binary tree over `count` nodes, in
// 0-based node numbers; tree 1 is tree 0 with every node shifted by one.
BinomialTree double_binary_tree(int v, int count, int which) {
  const int shifted = mod(v + which, count);
  BinomialTree t = in_order_tree(shifted + 1, count);
  auto back = [&](int x) { return mod(x - 1 - which, count); };
  if (t.parent >= 0) t.parent = back(t.parent);
  for (int& c : t.children) c = back(c);
  return t;
}

// This rank's place in the tree that joins `root`'s local index across the
// hosts (`across`, in host numbers) and each host's ranks to that rank
// (`within`, in local indices). Children: across the hosts first.
BinomialTree by_host(const OpContext& ctx, int root, const BinomialTree& across, const BinomialTree& within) {
  const HostLayout& layout = *ctx.layout;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int lr = layout.local(root);
  BinomialTree t;
  if (l == lr) {
    if (across.parent >= 0) t.parent = layout.rank_at(across.parent, lr);
    for (int c : across.children) t.children.push_back(layout.rank_at(c, lr));
  } else {
    t.parent = layout.rank_at(h, within.parent);
  }
  for (int c : within.children) t.children.push_back(layout.rank_at(h, c));
  return t;
}

// The rooted operations' tree: chains for large messages, binomial trees
// (largest subtree first, for broadcast) for small ones.
BinomialTree rooted_tree(const OpContext& ctx, int root, bool largest_first) {
  const HostLayout& layout = *ctx.layout;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int H = layout.hosts(), L = layout.per_host();
  if (ctx.call.count * ctx.elem >= kHierRingMin) {
    return by_host(ctx, root, chain(h, H, layout.host(root)), chain(l, L, layout.local(root)));
  }
  BinomialTree across = binomial_tree(h, H, layout.host(root));
  BinomialTree within = binomial_tree(l, L, layout.local(root));
  if (largest_first) {
    std::reverse(across.children.begin(), across.children.end());
    std::reverse(within.children.begin(), within.children.end());
  }
  return by_host(ctx, root, across, within);
}

}  // namespace

std::string describe_host_trees(int hosts) {
  if (hosts < 2) return "none: one host";
  std::string out;
  for (int which = 0; which < 2; ++which) {
    out += which == 0 ? "tree 0:" : "; tree 1:";
    std::string links;
    for (int h = 0; h < hosts; ++h) {
      const BinomialTree t = double_binary_tree(h, hosts, which);
      if (t.parent < 0) out += " root h" + std::to_string(h);
      if (t.children.empty()) continue;
      links += ", h" + std::to_string(h) + " <-";
      for (int c : t.children) links += " h" + std::to_string(c);
    }
    out += links;
  }
  return out;
}

void broadcast_hier(OpContext& ctx) {
  const BinomialTree t = rooted_tree(ctx, ctx.call.root, true);
  broadcast_along(ctx, t.parent, t.children);
}

void reduce_hier(OpContext& ctx) {
  const BinomialTree t = rooted_tree(ctx, ctx.call.root, false);
  reduce_along(ctx, ctx.call.send, ctx.call.recv, t.parent, t.children, false);
}

void all_reduce_hier_trees(OpContext& ctx) {
  const HostLayout& layout = *ctx.layout;
  const auto& c = ctx.call;
  const std::size_t e = ctx.elem;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int H = layout.hosts(), L = layout.per_host();
  const int root = layout.rank_at(0, 0);  // only its local index counts
  const BinomialTree within = binomial_tree(l, L, 0);
  auto* scratch = static_cast<char*>(ctx.scratch(c.count * e));
  // Both halves up, then both down: transfers between two ranks go in list
  // order, and a host may be the parent in one tree and the child in the
  // other, so one half's way down must not come before the other's way up.
  BinomialTree trees[2];
  int reduced[2] = {-1, -1};
  for (int which = 0; which < 2; ++which) {
    const Block half = block_of(c.count, 2, which);
    // Both trees' roots are ranks of local index 0, which `by_host` joins by.
    trees[which] = by_host(ctx, root, double_binary_tree(h, H, which), within);
    if (half.len == 0) continue;
    reduced[which] = add_reduce_up(ctx, at(c.send, half.off, e), at(c.recv, half.off, e), at(scratch, half.off, e),
                                   half.len * e, trees[which].parent, trees[which].children);
  }
  for (int which = 0; which < 2; ++which) {
    const Block half = block_of(c.count, 2, which);
    if (half.len == 0) continue;
    add_broadcast_down(ctx, at(c.recv, half.off, e), half.len * e, trees[which].parent, trees[which].children,
                       reduced[which]);
  }
  ctx.run();
}

}  // namespace rdmx::coll
