// SPDX-License-Identifier: MIT
// The collective algorithms. Each one turns a call into a Schedule of sends
// and receives (plus, for some, local copies or reductions before or after)
// and runs it on the Links; none knows which provider carries its messages.
//
// Determinism: every reduction is applied in an order fixed by the
// algorithm, the rank count and the sizes (never by arrival order), and each
// element's final value is computed in one place or identically everywhere,
// so every rank gets the same bits on every run.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "coll/communicator_internal.hpp"
#include "coll/host_layout.hpp"
#include "coll/links.hpp"
#include "coll/op_desc.hpp"
#include "rdmx/comm.hpp"

namespace rdmx::coll {

struct OpContext {
  Links& links;
  const Call& call;
  const OpDesc& desc;
  Schedule& sched;
  Combine combine;  // reduce kernel, element size, avg divisor
  std::chrono::milliseconds timeout;
  int rank = 0;
  int n = 1;
  std::size_t elem = 1;
  // Transfers of at least this many bytes go straight into the receiver's
  // buffer (direct sends after a ready-to-receive announcement), over links
  // whose device places WRITEs into registered memory itself; 0: never.
  std::size_t direct_min = 0;
  const HostLayout* layout = nullptr;  // which ranks share a host (the hierarchical algorithms)

  // Both ends of a link decide alike: the same size, setting and device.
  bool use_direct(int peer, std::size_t transfer_bytes) const {
    return direct_min != 0 && transfer_bytes >= direct_min && links.direct_writes(peer);
  }

  void run() { links.run(sched, desc, combine, timeout); }
  // Scratch in the operation's memory (on its GPU when its buffers are).
  void* scratch(std::size_t bytes) { return links.scratch(bytes, combine.device); }
  void copy(void* dst, const void* src, std::size_t bytes) const { combine.copy(dst, src, bytes); }
};

// Runs ctx.call with ctx.desc.algo (already chosen and valid for the op).
void run_algorithm(OpContext& ctx);
// The operations by host; ctx.layout has equal hosts. Below kHierRingMin
// bytes they take trees, latency-bound (algo_hierarchical_trees.cpp); from
// it on rings and chains, bandwidth-bound (algo_hierarchical.cpp).
constexpr std::size_t kHierRingMin = 64 * 1024;
void all_reduce_hier(OpContext& ctx);
void all_reduce_hier_trees(OpContext& ctx);
// The double binary tree over `hosts` hosts, for logs and `rdmx info`:
// "tree 0: h1 <- h0 h2, h3 <- h1; tree 1: ...".
std::string describe_host_trees(int hosts);
void all_gather_hier(OpContext& ctx);
void reduce_scatter_hier(OpContext& ctx);
void broadcast_hier(OpContext& ctx);
void reduce_hier(OpContext& ctx);

// --- helpers shared by the algorithm files --------------------------------
// Block j of `count` elements split over `parts` as evenly as possible.
struct Block {
  std::size_t off = 0;  // elements
  std::size_t len = 0;  // elements
};
inline Block block_of(std::size_t count, int parts, int j) {
  const std::size_t base = count / static_cast<std::size_t>(parts);
  const std::size_t rem = count % static_cast<std::size_t>(parts);
  const auto uj = static_cast<std::size_t>(j);
  return {uj * base + std::min(uj, rem), base + (uj < rem ? 1 : 0)};
}
inline int mod(int a, int n) { return ((a % n) + n) % n; }
inline char* at(void* p, std::size_t elems, std::size_t elem) { return static_cast<char*>(p) + elems * elem; }
inline const char* at(const void* p, std::size_t elems, std::size_t elem) {
  return static_cast<const char*>(p) + elems * elem;
}

// One send or receive of a schedule, its fields named where it is added:
// add_send(s, {.peer = right, .src = p, .bytes = n, .after = prev, .stream = true}).
// What each field means is said on SendOp and RecvOp (links.hpp).
struct SendStep {
  int peer = -1;
  const void* src = nullptr;
  std::size_t bytes = 0;
  int after = -1;
  bool stream = false;
  bool in_place = false;
};
struct RecvStep {
  int peer = -1;
  void* dst = nullptr;
  std::size_t bytes = 0;
  const void* reduce_with = nullptr;
  int after = -1;
  bool stream = false;
};
// Each returns the index of what it added, for later steps' `after`.
int add_send(Schedule& s, const SendStep& step);
int add_recv(Schedule& s, const RecvStep& step);
// Direct transfers: the receiver announces its buffer to the sender; the
// sender's sends then name that announcement and an offset into the buffer.
int add_announce(Schedule& s, int peer, void* buffer, std::size_t bytes);
int add_announcement_recv(Schedule& s, int peer);
void make_direct(Schedule& s, int send_index, int announcement, std::size_t offset);

// Power-of-two folding for rd/hd with any rank count: the first 2*extra
// ranks pair up (even keeps, odd hands its data to even and waits), the rest
// shift down, leaving a power of two of participants.
struct Fold {
  int p2 = 1;     // participants
  int extra = 0;  // n - p2
  explicit Fold(int n) {
    while (p2 * 2 <= n) p2 *= 2;
    extra = n - p2;
  }
  int new_rank(int r) const { return r < 2 * extra ? (r % 2 == 0 ? r / 2 : -1) : r - extra; }
  int real_rank(int nr) const { return nr < extra ? nr * 2 : nr + extra; }
  // The real ranks whose data participant nr carries: [lo, hi).
  int group_lo(int nr) const { return nr < extra ? 2 * nr : nr + extra; }
  int group_hi(int nr) const { return nr < extra ? 2 * nr + 2 : nr + extra + 1; }
};

// The binomial tree of MPICH rooted at `root`: in root-relative numbering,
// v's parent is v minus its lowest set bit, its children v + m for each power
// of two m below that bit (smallest subtree first).
struct BinomialTree {
  int parent = -1;  // -1 at the root
  std::vector<int> children;
};
inline BinomialTree binomial_tree(int rank, int n, int root) {
  BinomialTree t;
  const int v = mod(rank - root, n);
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v & mask) {
      t.parent = mod(v - mask + root, n);
      break;
    }
    if (v + mask < n) t.children.push_back(mod(v + mask + root, n));
  }
  return t;
}

// A tree given by this rank's parent (-1 at the root) and children.
// Receives the buffer from the parent and forwards it to the children in
// that order, each forward streaming chunk by chunk behind the receive
// (algo_movement.cpp).
void broadcast_along(OpContext& ctx, int parent, const std::vector<int>& children);
// Folds `in` and the children's partials in their order (each streamed
// behind the one before), sends the sum to the parent; the root's lands in
// `out`. then_broadcast: the root's result goes back down the tree into
// every rank's `out` (algo_reductions.cpp).
void reduce_along(OpContext& ctx, const void* in, void* out, int parent, const std::vector<int>& children,
                  bool then_broadcast);
// Its halves for `bytes` of the operation, added to ctx.sched without
// running it. Up: `scratch` holds the partial sum on ranks that are neither
// root nor leaf; returns the receive after which this rank's sum is whole
// (-1 on a leaf). Down: `reduced` is that receive on the root.
int add_reduce_up(OpContext& ctx, const void* in, void* out, void* scratch, std::size_t bytes, int parent,
                  const std::vector<int>& children);
void add_broadcast_down(OpContext& ctx, void* out, std::size_t bytes, int parent, const std::vector<int>& children,
                        int reduced);

// The operations' schedule builders, one per algorithm (algo_registry.cpp
// names them in its rows); each op's entry below runs the row's.
void all_reduce_ring(OpContext& ctx);
void all_reduce_rd(OpContext& ctx);
void all_reduce_hd(OpContext& ctx);
void all_reduce_tree(OpContext& ctx);
void all_reduce_direct(OpContext& ctx);
void reduce_scatter_ring(OpContext& ctx);
void reduce_scatter_hd(OpContext& ctx);
void reduce_scatter_direct(OpContext& ctx);
void reduce_tree(OpContext& ctx);
void reduce_ring(OpContext& ctx);
void reduce_direct(OpContext& ctx);
void all_gather_ring(OpContext& ctx);
void all_gather_rd(OpContext& ctx);
void all_gather_direct(OpContext& ctx);
void broadcast_tree(OpContext& ctx);
void broadcast_ring(OpContext& ctx);
void broadcast_direct(OpContext& ctx);

void all_reduce(OpContext& ctx);
void reduce_scatter(OpContext& ctx);
void reduce(OpContext& ctx);
void all_gather(OpContext& ctx);
void broadcast(OpContext& ctx);
void gather(OpContext& ctx);
void scatter(OpContext& ctx);
void all_to_all(OpContext& ctx);
void barrier(OpContext& ctx);
void point_to_point(OpContext& ctx);

}  // namespace rdmx::coll
