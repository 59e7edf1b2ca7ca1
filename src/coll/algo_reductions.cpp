// SPDX-License-Identifier: MIT
// all_reduce, reduce_scatter and reduce.
#include <cstring>
#include <vector>

#include "coll/algo_registry.hpp"
#include "coll/algorithms.hpp"
#include "coll/reduce.hpp"

namespace rdmx::coll {
namespace {

// out = x[0] op x[1] op ... in rank order, then the avg division.
void reduce_in_rank_order(OpContext& ctx, void* out, const std::vector<const void*>& x, std::size_t count) {
  if (count == 0) return;
  const std::size_t bytes = count * ctx.elem;
  if (x.size() == 1) {
    ctx.copy(out, x[0], bytes);
  } else {
    ctx.combine.reduce(out, x[0], x[1], count);
    for (std::size_t j = 2; j < x.size(); ++j) ctx.combine.reduce(out, out, x[j], count);
  }
  ctx.combine.finalize(out, count);
}

// This rank's input for a fold in rank order: when it is the output buffer
// (in place), a copy, since the fold writes the output before reaching it.
const void* own_input(OpContext& ctx, const void* input, const void* output, void* spare, std::size_t bytes) {
  if (input != output || bytes == 0) return input;
  ctx.copy(spare, input, bytes);
  return spare;
}

}  // namespace

// --- all_reduce ---------------------------------------------------------------

// Reduce-scatter then all-gather around the ring, each step's block streamed
// chunk by chunk into the next step as it is reduced.
void all_reduce_ring(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const std::size_t e = ctx.elem;
  auto& s = ctx.sched;
  int prev = -1;
  for (int step = 0; step < n - 1; ++step) {
    const Block sb = block_of(c.count, n, mod(r - step, n));
    const Block rb = block_of(c.count, n, mod(r - step - 1, n));
    const void* src = step == 0 ? at(c.send, sb.off, e) : at(c.recv, sb.off, e);
    add_send(s, {.peer = right, .src = src, .bytes = sb.len * e, .after = prev, .stream = true, .in_place = true});
    prev = add_recv(
        s, {.peer = left, .dst = at(c.recv, rb.off, e), .bytes = rb.len * e, .reduce_with = at(c.send, rb.off, e)});
  }
  s.recvs.back().finalize = true;  // this rank's block (r + 1) is complete
  // All-gather: large blocks go straight into the right neighbour's buffer.
  const std::size_t largest = block_of(c.count, n, 0).len * e;
  const bool direct_in = ctx.use_direct(left, largest), direct_out = ctx.use_direct(right, largest);
  if (direct_in) add_announce(s, left, c.recv, c.count * e);
  const int announcement = direct_out ? add_announcement_recv(s, right) : -1;
  for (int step = 0; step < n - 1; ++step) {
    const Block sb = block_of(c.count, n, mod(r + 1 - step, n));
    const Block rb = block_of(c.count, n, mod(r - step, n));
    const int si = add_send(s, {.peer = right,
                                .src = at(c.recv, sb.off, e),
                                .bytes = sb.len * e,
                                .after = prev,
                                .stream = true,
                                .in_place = true});
    if (direct_out) make_direct(s, si, announcement, sb.off * e);
    prev = add_recv(s, {.peer = left, .dst = at(c.recv, rb.off, e), .bytes = rb.len * e});
    s.recvs[static_cast<std::size_t>(prev)].direct = direct_in;
  }
  ctx.run();
}

// Recursive doubling: log2(p2) exchanges of the whole vector. Intermediate
// sums alternate between two scratch buffers; a receive may overwrite one
// only after the send that read it has been posted (sends are staged).
void all_reduce_rd(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank;
  const std::size_t bytes = c.count * ctx.elem;
  const Fold f(ctx.n);
  auto& s = ctx.sched;
  const int nr = f.new_rank(r);
  if (nr < 0) {  // odd rank of a folded pair: hand over, get the result back
    add_send(s, {.peer = r - 1, .src = c.send, .bytes = bytes, .in_place = true});
    add_recv(s, {.peer = r - 1, .dst = c.recv, .bytes = bytes});
    ctx.run();
    return;
  }
  auto* scratch = static_cast<char*>(ctx.scratch(2 * bytes));
  char* buf[2] = {scratch, scratch + bytes};
  const void* cur = c.send;
  int last_recv = -1, last_send = -1;
  if (r < 2 * f.extra) {
    last_recv = add_recv(s, {.peer = r + 1, .dst = buf[1], .bytes = bytes, .reduce_with = c.send});
    cur = buf[1];
  }
  int steps = 0;
  for (int mask = 1; mask < f.p2; mask <<= 1) ++steps;
  // Everything streams chunk by chunk: step k's chunk i needs step k-1's
  // chunk i, and a receive writes a chunk of a buffer only after the send
  // that reads the same chunk of it has posted (staged) it.
  for (int k = 0; k < steps; ++k) {
    const int partner = f.real_rank(nr ^ (1 << k));
    const int send_index =
        add_send(s, {.peer = partner, .src = cur, .bytes = bytes, .after = last_recv, .stream = true});
    void* dst = k == steps - 1 ? c.recv : buf[k % 2];
    const int recv_index = add_recv(
        s, {.peer = partner, .dst = dst, .bytes = bytes, .reduce_with = cur, .after = last_recv, .stream = true});
    RecvOp& rop = s.recvs[static_cast<std::size_t>(recv_index)];
    if (last_send >= 0) {
      rop.after_send = last_send;
    } else if (dst == cur) {
      rop.after_send = send_index;
    }
    last_send = send_index;
    last_recv = recv_index;
    cur = dst;
  }
  s.recvs[static_cast<std::size_t>(last_recv)].finalize = true;
  if (r < 2 * f.extra)
    add_send(s, {.peer = r + 1, .src = c.recv, .bytes = bytes, .after = last_recv, .stream = true, .in_place = true});
  ctx.run();
}

// Halving-doubling (Rabenseifner): reduce-scatter by recursive halving, then
// all-gather by recursive doubling, over the folded power of two.
void all_reduce_hd(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank;
  const std::size_t e = ctx.elem, bytes = c.count * e;
  const Fold f(ctx.n);
  auto& s = ctx.sched;
  const int nr = f.new_rank(r);
  if (nr < 0) {
    add_send(s, {.peer = r - 1, .src = c.send, .bytes = bytes, .in_place = true});
    add_recv(s, {.peer = r - 1, .dst = c.recv, .bytes = bytes});
    ctx.run();
    return;
  }
  auto range = [&](int lo, int hi) {  // participant blocks [lo, hi) as elements
    const Block a = block_of(c.count, f.p2, lo), b = block_of(c.count, f.p2, hi - 1);
    return Block{a.off, b.off + b.len - a.off};
  };
  const void* in = c.send;
  int last = -1;
  if (r < 2 * f.extra) {
    last = add_recv(s, {.peer = r + 1, .dst = c.recv, .bytes = bytes, .reduce_with = c.send});
    in = c.recv;
  }
  int lo = 0, hi = f.p2;  // the participant blocks this rank still reduces
  for (int mask = f.p2 / 2; mask >= 1; mask /= 2) {
    const int partner = f.real_rank(nr ^ mask);
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (nr & mask) == 0;
    const Block keep = lower ? range(lo, mid) : range(mid, hi);
    const Block give = lower ? range(mid, hi) : range(lo, mid);
    add_send(s, {.peer = partner, .src = at(in, give.off, e), .bytes = give.len * e, .after = last, .in_place = true});
    last = add_recv(s, {.peer = partner,
                        .dst = at(c.recv, keep.off, e),
                        .bytes = keep.len * e,
                        .reduce_with = at(in, keep.off, e),
                        .after = last});
    if (lower)
      hi = mid;
    else
      lo = mid;
    in = c.recv;
  }
  s.recvs[static_cast<std::size_t>(last)].finalize = true;
  // This rank now holds participant block nr; double it each step.
  for (int mask = 1; mask < f.p2; mask <<= 1) {
    const int partner = f.real_rank(nr ^ mask);
    const int base = nr & ~(mask - 1), partner_base = (nr ^ mask) & ~(mask - 1);
    const Block mine = range(base, base + mask), theirs = range(partner_base, partner_base + mask);
    add_send(s,
             {.peer = partner, .src = at(c.recv, mine.off, e), .bytes = mine.len * e, .after = last, .in_place = true});
    last = add_recv(s, {.peer = partner, .dst = at(c.recv, theirs.off, e), .bytes = theirs.len * e, .after = last});
  }
  if (r < 2 * f.extra) add_send(s, {.peer = r + 1, .src = c.recv, .bytes = bytes, .after = last, .in_place = true});
  ctx.run();
}

// Binomial tree towards rank 0 (children folded in a fixed order), then back.
// Up the binomial tree, children folded in a fixed order.
namespace {
void reduce_tree_into(OpContext& ctx, const void* in, void* out, int root, bool then_broadcast);
}  // namespace

void all_reduce_tree(OpContext& ctx) { reduce_tree_into(ctx, ctx.call.send, ctx.call.recv, 0, true); }

// Everyone sends everything to everyone; each rank folds in rank order.
void all_reduce_direct(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  auto* scratch = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(n) * bytes));
  std::vector<const void*> x(static_cast<std::size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    add_send(ctx.sched,
             {.peer = to, .src = c.send, .bytes = bytes, .in_place = true});  // nothing writes c.recv before run() ends
    add_recv(ctx.sched, {.peer = from, .dst = scratch + static_cast<std::size_t>(from) * bytes, .bytes = bytes});
    x[static_cast<std::size_t>(from)] = scratch + static_cast<std::size_t>(from) * bytes;
  }
  x[static_cast<std::size_t>(r)] = own_input(ctx, c.send, c.recv, scratch + static_cast<std::size_t>(r) * bytes, bytes);
  ctx.run();
  reduce_in_rank_order(ctx, c.recv, x, c.count);
}

// --- reduce (rooted) ---------------------------------------------------------

namespace {
void reduce_tree_into(OpContext& ctx, const void* in, void* out, int root, bool then_broadcast) {
  const auto [parent, children] = binomial_tree(ctx.rank, ctx.n, root);
  reduce_along(ctx, in, out, parent, children, then_broadcast);
}
}  // namespace

void reduce_tree(OpContext& ctx) { reduce_tree_into(ctx, ctx.call.send, ctx.call.recv, ctx.call.root, false); }

// A chain towards the root: v receives v+1's partial, adds its own and
// passes it on, chunk by chunk; the root's result is x_root op (x_root+1 op (...)).
void reduce_ring(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  auto& s = ctx.sched;
  const int v = mod(r - c.root, n);
  const int next = mod(r + 1, n), prev_rank = mod(r - 1, n);
  int got = -1;
  void* acc = v == 0 ? c.recv : nullptr;
  if (v < n - 1) {
    if (acc == nullptr) acc = ctx.scratch(bytes);
    got = add_recv(s, {.peer = next, .dst = acc, .bytes = bytes, .reduce_with = c.send});
    if (v == 0) s.recvs.back().finalize = true;
  }
  if (v > 0)
    add_send(s, {.peer = prev_rank,
                 .src = got < 0 ? c.send : acc,
                 .bytes = bytes,
                 .after = got,
                 .stream = true,
                 .in_place = true});
  ctx.run();
}

void reduce_direct(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  if (r != c.root) {
    add_send(ctx.sched, {.peer = c.root, .src = c.send, .bytes = bytes, .in_place = true});
    ctx.run();
    return;
  }
  auto* scratch = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(n) * bytes));
  std::vector<const void*> x(static_cast<std::size_t>(n));
  for (int j = 0; j < n; ++j) {
    if (j == r) continue;
    x[static_cast<std::size_t>(j)] = scratch + static_cast<std::size_t>(j) * bytes;
    add_recv(ctx.sched, {.peer = j, .dst = scratch + static_cast<std::size_t>(j) * bytes, .bytes = bytes});
  }
  x[static_cast<std::size_t>(r)] = own_input(ctx, c.send, c.recv, scratch + static_cast<std::size_t>(r) * bytes, bytes);
  ctx.run();
  reduce_in_rank_order(ctx, c.recv, x, c.count);
}

// --- reduce_scatter -----------------------------------------------------------

// Ring: block r ends here after n-1 steps; partial sums travel in a
// full-size scratch buffer so no block is overwritten while a peer may still
// be reading it.
void reduce_scatter_ring(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t e = ctx.elem, bytes = c.count * e;
  auto* scratch = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(n) * bytes));
  auto& s = ctx.sched;
  int prev = -1;
  for (int step = 0; step < n - 1; ++step) {
    const auto sb = static_cast<std::size_t>(mod(r - step - 1, n));
    const auto rb = static_cast<std::size_t>(mod(r - step - 2, n));
    const void* src = step == 0 ? at(c.send, sb * c.count, e) : scratch + sb * bytes;
    add_send(s, {.peer = mod(r + 1, n), .src = src, .bytes = bytes, .after = prev, .stream = true, .in_place = true});
    void* dst = step == n - 2 ? c.recv : scratch + rb * bytes;
    prev = add_recv(s, {.peer = mod(r - 1, n), .dst = dst, .bytes = bytes, .reduce_with = at(c.send, rb * c.count, e)});
  }
  s.recvs.back().finalize = true;
  ctx.run();
}

// Recursive halving over the folded power of two: participant nr ends with
// the blocks of the real ranks it carries, and hands its odd partner its block.
void reduce_scatter_hd(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t e = ctx.elem, bytes = c.count * e;
  const Fold f(n);
  auto& s = ctx.sched;
  const int nr = f.new_rank(r);
  if (nr < 0) {
    add_send(s, {.peer = r - 1, .src = c.send, .bytes = static_cast<std::size_t>(n) * bytes, .in_place = true});
    add_recv(s, {.peer = r - 1, .dst = c.recv, .bytes = bytes});
    ctx.run();
    return;
  }
  auto* acc = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(n) * bytes));
  auto range = [&](int lo, int hi) {  // participants [lo, hi) as bytes of the full vector
    const auto a = static_cast<std::size_t>(f.group_lo(lo)), b = static_cast<std::size_t>(f.group_hi(hi - 1));
    return std::pair<std::size_t, std::size_t>{a * bytes, (b - a) * bytes};
  };
  const char* in = static_cast<const char*>(c.send);
  int last = -1;
  if (r < 2 * f.extra) {
    last =
        add_recv(s, {.peer = r + 1, .dst = acc, .bytes = static_cast<std::size_t>(n) * bytes, .reduce_with = c.send});
    in = acc;
  }
  int lo = 0, hi = f.p2;
  for (int mask = f.p2 / 2; mask >= 1; mask /= 2) {
    const int partner = f.real_rank(nr ^ mask);
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (nr & mask) == 0;
    const auto keep = lower ? range(lo, mid) : range(mid, hi);
    const auto give = lower ? range(mid, hi) : range(lo, mid);
    add_send(s, {.peer = partner, .src = in + give.first, .bytes = give.second, .after = last, .in_place = true});
    last = add_recv(s, {.peer = partner,
                        .dst = acc + keep.first,
                        .bytes = keep.second,
                        .reduce_with = in + keep.first,
                        .after = last});
    if (lower)
      hi = mid;
    else
      lo = mid;
    in = acc;
  }
  if (last >= 0) s.recvs[static_cast<std::size_t>(last)].finalize = true;
  if (r < 2 * f.extra)
    add_send(s, {.peer = r + 1,
                 .src = acc + static_cast<std::size_t>(r + 1) * bytes,
                 .bytes = bytes,
                 .after = last,
                 .in_place = true});
  ctx.run();
  ctx.copy(c.recv, acc + static_cast<std::size_t>(r) * bytes, bytes);
}

void reduce_scatter_direct(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t e = ctx.elem, bytes = c.count * e;
  auto* scratch = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(n) * bytes));
  std::vector<const void*> x(static_cast<std::size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    add_send(
        ctx.sched,
        {.peer = to, .src = at(c.send, static_cast<std::size_t>(to) * c.count, e), .bytes = bytes, .in_place = true});
    add_recv(ctx.sched, {.peer = from, .dst = scratch + static_cast<std::size_t>(from) * bytes, .bytes = bytes});
    x[static_cast<std::size_t>(from)] = scratch + static_cast<std::size_t>(from) * bytes;
  }
  x[static_cast<std::size_t>(r)] = own_input(ctx, at(c.send, static_cast<std::size_t>(r) * c.count, e), c.recv,
                                             scratch + static_cast<std::size_t>(r) * bytes, bytes);
  ctx.run();
  reduce_in_rank_order(ctx, c.recv, x, c.count);
}

int add_reduce_up(OpContext& ctx, const void* in, void* out, void* scratch, std::size_t bytes, int parent,
                  const std::vector<int>& children) {
  auto& s = ctx.sched;
  void* acc = parent < 0 ? out : scratch;
  int prev = -1;
  for (int child : children) {
    prev = add_recv(
        s,
        {.peer = child, .dst = acc, .bytes = bytes, .reduce_with = prev < 0 ? in : acc, .after = prev, .stream = true});
  }
  if (parent < 0 && prev >= 0) s.recvs[static_cast<std::size_t>(prev)].finalize = true;
  if (parent >= 0)
    add_send(s, {.peer = parent,
                 .src = children.empty() ? in : acc,
                 .bytes = bytes,
                 .after = prev,
                 .stream = true,
                 .in_place = true});
  return prev;
}

void add_broadcast_down(OpContext& ctx, void* out, std::size_t bytes, int parent, const std::vector<int>& children,
                        int reduced) {
  auto& s = ctx.sched;
  // In the reverse order (a binomial tree's largest subtree first).
  const int from_parent = parent >= 0 ? add_recv(s, {.peer = parent, .dst = out, .bytes = bytes}) : reduced;
  for (auto it = children.rbegin(); it != children.rend(); ++it) {
    add_send(s, {.peer = *it, .src = out, .bytes = bytes, .after = from_parent, .stream = true, .in_place = true});
  }
}

void reduce_along(OpContext& ctx, const void* in, void* out, int parent, const std::vector<int>& children,
                  bool then_broadcast) {
  const std::size_t bytes = ctx.call.count * ctx.elem;
  void* scratch = parent >= 0 && !children.empty() ? ctx.scratch(bytes) : nullptr;
  const int reduced = add_reduce_up(ctx, in, out, scratch, bytes, parent, children);
  if (then_broadcast) add_broadcast_down(ctx, out, bytes, parent, children, reduced);
  ctx.run();
}

void all_reduce(OpContext& ctx) {
  const auto& c = ctx.call;
  if (ctx.desc.algo == Algo::Local) return reduce_in_rank_order(ctx, c.recv, {c.send}, c.count);
  build_of(ctx.desc)(ctx);
}

void reduce(OpContext& ctx) { all_reduce(ctx); }
void reduce_scatter(OpContext& ctx) { all_reduce(ctx); }

}  // namespace rdmx::coll
