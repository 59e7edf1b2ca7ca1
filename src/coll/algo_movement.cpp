// SPDX-License-Identifier: MIT
// Operations that move data without reducing it: all_gather, broadcast,
// gather, scatter, all_to_all(v), barrier and point to point.
#include <algorithm>
#include <cstring>
#include <vector>

#include "coll/algo_registry.hpp"
#include "coll/algorithms.hpp"

namespace rdmx::coll {

// --- all_gather ---------------------------------------------------------------

void all_gather_ring(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  auto* out = static_cast<char*>(c.recv);
  ctx.copy(out + static_cast<std::size_t>(r) * bytes, c.send, bytes);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Large blocks go straight into the right neighbour's buffer.
  const bool direct_in = ctx.use_direct(left, bytes), direct_out = ctx.use_direct(right, bytes);
  if (direct_in) add_announce(ctx.sched, left, out, bytes * static_cast<std::size_t>(n));
  const int announcement = direct_out ? add_announcement_recv(ctx.sched, right) : -1;
  int prev = -1;
  for (int step = 0; step < n - 1; ++step) {
    const auto sb = static_cast<std::size_t>(mod(r - step, n));
    const auto rb = static_cast<std::size_t>(mod(r - step - 1, n));
    const int si = add_send(
        ctx.sched,
        {.peer = right, .src = out + sb * bytes, .bytes = bytes, .after = prev, .stream = true, .in_place = true});
    if (direct_out) make_direct(ctx.sched, si, announcement, sb * bytes);
    prev = add_recv(ctx.sched, {.peer = left, .dst = out + rb * bytes, .bytes = bytes});
    ctx.sched.recvs[static_cast<std::size_t>(prev)].direct = direct_in;
  }
  ctx.run();
}

// Recursive doubling over the folded power of two; a participant carries the
// blocks of its odd partner too, so its ranges stay contiguous.
void all_gather_rd(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  const Fold f(n);
  auto* out = static_cast<char*>(c.recv);
  auto& s = ctx.sched;
  const int nr = f.new_rank(r);
  if (nr < 0) {
    add_send(s, {.peer = r - 1, .src = c.send, .bytes = bytes, .in_place = true});
    add_recv(s, {.peer = r - 1, .dst = out, .bytes = static_cast<std::size_t>(n) * bytes});
    ctx.run();
    return;
  }
  ctx.copy(out + static_cast<std::size_t>(r) * bytes, c.send, bytes);
  int last = -1;
  if (r < 2 * f.extra)
    last = add_recv(s, {.peer = r + 1, .dst = out + static_cast<std::size_t>(r + 1) * bytes, .bytes = bytes});
  auto range = [&](int lo, int hi) {  // participants [lo, hi) as (offset, length) in bytes
    const auto a = static_cast<std::size_t>(f.group_lo(lo)), b = static_cast<std::size_t>(f.group_hi(hi - 1));
    return std::pair<std::size_t, std::size_t>{a * bytes, (b - a) * bytes};
  };
  for (int mask = 1; mask < f.p2; mask <<= 1) {
    const int partner = f.real_rank(nr ^ mask);
    const int base = nr & ~(mask - 1), partner_base = (nr ^ mask) & ~(mask - 1);
    const auto mine = range(base, base + mask), theirs = range(partner_base, partner_base + mask);
    add_send(s, {.peer = partner, .src = out + mine.first, .bytes = mine.second, .after = last, .in_place = true});
    last = add_recv(s, {.peer = partner, .dst = out + theirs.first, .bytes = theirs.second, .after = last});
  }
  if (r < 2 * f.extra)
    add_send(
        s, {.peer = r + 1, .src = out, .bytes = static_cast<std::size_t>(n) * bytes, .after = last, .in_place = true});
  ctx.run();
}

void all_gather_direct(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  auto* out = static_cast<char*>(c.recv);
  ctx.copy(out + static_cast<std::size_t>(r) * bytes, c.send, bytes);
  for (int k = 1; k < n; ++k) {
    add_send(
        ctx.sched,
        {.peer = mod(r + k, n), .src = out + static_cast<std::size_t>(r) * bytes, .bytes = bytes, .in_place = true});
    const int from = mod(r - k, n);
    add_recv(ctx.sched, {.peer = from, .dst = out + static_cast<std::size_t>(from) * bytes, .bytes = bytes});
  }
  ctx.run();
}

// --- broadcast ------------------------------------------------------------------

// The binomial tree (as reduce's), largest subtree first.
void broadcast_tree(OpContext& ctx) {
  auto [parent, children] = binomial_tree(ctx.rank, ctx.n, ctx.call.root);
  std::reverse(children.begin(), children.end());
  broadcast_along(ctx, parent, children);
}

// A pipeline along the ranks from the root.
void broadcast_ring(OpContext& ctx) {
  const int r = ctx.rank, n = ctx.n, v = mod(r - ctx.call.root, n);
  std::vector<int> next;
  if (v < n - 1) next.push_back(mod(r + 1, n));
  broadcast_along(ctx, v > 0 ? mod(r - 1, n) : -1, next);
}

void broadcast_direct(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  if (r == c.root) {
    for (int k = 1; k < n; ++k) {
      const int peer = mod(r + k, n);
      const bool direct = ctx.use_direct(peer, bytes);
      const int announcement = direct ? add_announcement_recv(ctx.sched, peer) : -1;
      const int si = add_send(ctx.sched, {.peer = peer, .src = c.recv, .bytes = bytes, .in_place = true});
      if (direct) make_direct(ctx.sched, si, announcement, 0);
    }
  } else {
    const bool direct = ctx.use_direct(c.root, bytes);
    if (direct) add_announce(ctx.sched, c.root, c.recv, bytes);
    const int got = add_recv(ctx.sched, {.peer = c.root, .dst = c.recv, .bytes = bytes});
    ctx.sched.recvs[static_cast<std::size_t>(got)].direct = direct;
  }
  ctx.run();
}

void broadcast_along(OpContext& ctx, int parent, const std::vector<int>& children) {
  const auto& c = ctx.call;
  const std::size_t bytes = c.count * ctx.elem;
  int got = -1;
  if (parent >= 0) {
    const bool direct = ctx.use_direct(parent, bytes);
    if (direct) add_announce(ctx.sched, parent, c.recv, bytes);
    got = add_recv(ctx.sched, {.peer = parent, .dst = c.recv, .bytes = bytes});
    ctx.sched.recvs[static_cast<std::size_t>(got)].direct = direct;
  }
  for (int child : children) {
    const bool direct = ctx.use_direct(child, bytes);
    const int announcement = direct ? add_announcement_recv(ctx.sched, child) : -1;
    const int si = add_send(
        ctx.sched, {.peer = child, .src = c.recv, .bytes = bytes, .after = got, .stream = true, .in_place = true});
    if (direct) make_direct(ctx.sched, si, announcement, 0);
  }
  ctx.run();
}

void all_gather(OpContext& ctx) {
  if (ctx.desc.algo == Algo::Local) return ctx.copy(ctx.call.recv, ctx.call.send, ctx.call.count * ctx.elem);
  build_of(ctx.desc)(ctx);
}

void broadcast(OpContext& ctx) {
  if (ctx.desc.algo != Algo::Local) build_of(ctx.desc)(ctx);
}

void gather(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  if (r != c.root) {
    add_send(ctx.sched, {.peer = c.root, .src = c.send, .bytes = bytes, .in_place = true});
  } else {
    auto* out = static_cast<char*>(c.recv);
    ctx.copy(out + static_cast<std::size_t>(r) * bytes, c.send, bytes);
    for (int k = 1; k < n; ++k) {
      const int from = mod(r + k, n);
      add_recv(ctx.sched, {.peer = from, .dst = out + static_cast<std::size_t>(from) * bytes, .bytes = bytes});
    }
  }
  if (n > 1) ctx.run();
}

void scatter(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t bytes = c.count * ctx.elem;
  if (r != c.root) {
    add_recv(ctx.sched, {.peer = c.root, .dst = c.recv, .bytes = bytes});
  } else {
    const auto* in = static_cast<const char*>(c.send);
    for (int k = 1; k < n; ++k) {
      const int to = mod(r + k, n);
      add_send(ctx.sched,
               {.peer = to, .src = in + static_cast<std::size_t>(to) * bytes, .bytes = bytes, .in_place = true});
    }
  }
  if (n > 1) ctx.run();
  if (r == c.root) ctx.copy(c.recv, static_cast<const char*>(c.send) + static_cast<std::size_t>(r) * bytes, bytes);
}

// all_to_all and all_to_allv: every pair exchanges directly. An in-place
// call first copies the send side away, since receives overwrite it.
void all_to_all(OpContext& ctx) {
  const auto& c = ctx.call;
  const int r = ctx.rank, n = ctx.n;
  const std::size_t e = ctx.elem;
  const bool v = c.op == CollOp::AllToAllv;
  auto send_off = [&](int j) {
    return (v ? c.send_displs[static_cast<std::size_t>(j)] : static_cast<std::size_t>(j) * c.count) * e;
  };
  auto send_len = [&](int j) { return (v ? c.send_counts[static_cast<std::size_t>(j)] : c.count) * e; };
  auto recv_off = [&](int j) {
    return (v ? c.recv_displs[static_cast<std::size_t>(j)] : static_cast<std::size_t>(j) * c.count) * e;
  };
  auto recv_len = [&](int j) { return (v ? c.recv_counts[static_cast<std::size_t>(j)] : c.count) * e; };
  const char* in = static_cast<const char*>(c.send);
  if (c.send == c.recv) {
    std::size_t extent = 0;
    for (int j = 0; j < n; ++j) extent = std::max(extent, send_off(j) + send_len(j));
    auto* copy = static_cast<char*>(ctx.scratch(extent));
    ctx.copy(copy, in, extent);
    in = copy;
  }
  auto* out = static_cast<char*>(c.recv);
  for (int k = 1; k < n; ++k) {
    const int to = mod(r + k, n), from = mod(r - k, n);
    add_send(ctx.sched, {.peer = to, .src = in + send_off(to), .bytes = send_len(to), .in_place = true});
    add_recv(ctx.sched, {.peer = from, .dst = out + recv_off(from), .bytes = recv_len(from)});
  }
  if (n > 1) ctx.run();
  if (recv_len(r) != send_len(r)) {
    throw Error(ErrorCode::InvalidArgument,
                "all_to_allv: rank " + std::to_string(r) + " sends itself " + std::to_string(send_len(r)) +
                    " bytes but expects " + std::to_string(recv_len(r)),
                {.op = describe(ctx.desc), .rank = r, .hint = "send_counts[rank] must equal recv_counts[rank]"});
  }
  ctx.copy(out + recv_off(r), in + send_off(r), recv_len(r));
}

// Dissemination: round k sends to rank + 2^k and hears from rank - 2^k, so
// after ceil(log2 n) rounds everyone has heard, indirectly, from everyone.
void barrier(OpContext& ctx) {
  const int r = ctx.rank, n = ctx.n;
  if (n == 1) return;
  if (ctx.desc.algo == Algo::Direct) {
    for (int k = 1; k < n; ++k) {
      add_send(ctx.sched, {.peer = mod(r + k, n), .src = nullptr, .bytes = 0});
      add_recv(ctx.sched, {.peer = mod(r - k, n), .dst = nullptr, .bytes = 0});
    }
  } else {
    int prev = -1;
    for (int dist = 1; dist < n; dist <<= 1) {
      // Round k's send must follow every earlier round's receive: chain them.
      add_send(ctx.sched, {.peer = mod(r + dist, n), .src = nullptr, .bytes = 0, .after = prev});
      prev = add_recv(ctx.sched, {.peer = mod(r - dist, n), .dst = nullptr, .bytes = 0, .after = prev});
    }
  }
  ctx.run();
}

void point_to_point(OpContext& ctx) {
  const auto& c = ctx.call;
  const std::size_t e = ctx.elem;
  if (c.op == CollOp::Send || c.op == CollOp::SendRecv) {
    add_send(ctx.sched, {.peer = c.root, .src = c.send, .bytes = c.count * e, .in_place = true});
  }
  if (c.op == CollOp::Recv) add_recv(ctx.sched, {.peer = c.root, .dst = c.recv, .bytes = c.count * e});
  if (c.op == CollOp::SendRecv) add_recv(ctx.sched, {.peer = c.source, .dst = c.recv, .bytes = c.recv_count * e});
  ctx.run();
}

// --- shared -------------------------------------------------------------------

int add_send(Schedule& s, const SendStep& step) {
  SendOp op;
  op.peer = step.peer;
  op.src = step.src;
  op.bytes = step.bytes;
  op.after = step.after;
  op.stream = step.stream;
  op.in_place = step.in_place;
  s.sends.push_back(op);
  return static_cast<int>(s.sends.size()) - 1;
}

int add_announce(Schedule& s, int peer, void* buffer, std::size_t bytes) {
  SendOp op;
  op.peer = peer;
  op.src = buffer;
  op.bytes = bytes;
  op.announce = true;
  s.sends.push_back(op);
  return static_cast<int>(s.sends.size()) - 1;
}

int add_announcement_recv(Schedule& s, int peer) {
  RecvOp op;
  op.peer = peer;
  op.announcement = true;
  s.recvs.push_back(op);
  return static_cast<int>(s.recvs.size()) - 1;
}

void make_direct(Schedule& s, int send_index, int announcement, std::size_t offset) {
  SendOp& op = s.sends[static_cast<std::size_t>(send_index)];
  op.rtr = announcement;
  op.rtr_offset = offset;
  op.in_place = true;
}

int add_recv(Schedule& s, const RecvStep& step) {
  RecvOp op;
  op.peer = step.peer;
  op.dst = step.dst;
  op.bytes = step.bytes;
  op.reduce_with = step.reduce_with;
  op.after = step.after;
  op.stream = step.stream;
  s.recvs.push_back(op);
  return static_cast<int>(s.recvs.size()) - 1;
}

void run_algorithm(OpContext& ctx) {
  switch (ctx.desc.op) {
    case CollOp::AllReduce: return all_reduce(ctx);
    case CollOp::AllGather: return all_gather(ctx);
    case CollOp::ReduceScatter: return reduce_scatter(ctx);
    case CollOp::Broadcast: return broadcast(ctx);
    case CollOp::Reduce: return reduce(ctx);
    case CollOp::AllToAll:
    case CollOp::AllToAllv: return all_to_all(ctx);
    case CollOp::Gather: return gather(ctx);
    case CollOp::Scatter: return scatter(ctx);
    case CollOp::Barrier: return barrier(ctx);
    case CollOp::Send:
    case CollOp::Recv:
    case CollOp::SendRecv: return point_to_point(ctx);
  }
}

}  // namespace rdmx::coll
