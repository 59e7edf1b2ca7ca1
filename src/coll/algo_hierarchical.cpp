// SPDX-License-Identifier: MIT
// Hierarchical rings over several hosts of as many ranks each. all_reduce
// (NCCL's ring over the topology, in three phases): a reduce-scatter around each
// host's ring leaves local rank l with block l+1 of its host's sum; the
// ranks of one local index then all-reduce that block around a ring across
// the hosts; an all-gather around each host's ring spreads the blocks. What
// leaves a host is 2(H-1)/H of the vector, shared by its L ranks, the least
// any algorithm sends; a flat ring sends 2(n-1)/n from each rank.
// all_gather and reduce_scatter are its halves, in the order that crosses
// the hosts' links with the least: all_gather first across the hosts (each
// local index its own ring), then around each host; reduce_scatter around
// each host first, then across.
#include "coll/algorithms.hpp"

namespace rdmx::coll {

void all_reduce_hier(OpContext& ctx) {
  if (ctx.call.count * ctx.elem < kHierRingMin) return all_reduce_hier_trees(ctx);
  const HostLayout& layout = *ctx.layout;
  const auto& c = ctx.call;
  const std::size_t e = ctx.elem;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int H = layout.hosts(), L = layout.per_host();
  auto local = [&](int i) { return layout.rank_at(h, mod(i, L)); };
  auto across = [&](int i) { return layout.rank_at(mod(i, H), l); };
  auto& s = ctx.sched;

  // One schedule, so no phase waits for the others to finish everywhere:
  // each waits only for the receive that completes what it sends.
  // Phase 1: block (l + 1) mod L of the host's sum ends in c.recv here.
  int done = -1;  // the receive after which this rank's block is complete
  if (L > 1) {
    for (int step = 0; step < L - 1; ++step) {
      const Block sb = block_of(c.count, L, mod(l - step, L));
      const Block rb = block_of(c.count, L, mod(l - step - 1, L));
      const void* src = step == 0 ? at(c.send, sb.off, e) : at(c.recv, sb.off, e);
      add_send(
          s, {.peer = local(l + 1), .src = src, .bytes = sb.len * e, .after = done, .stream = true, .in_place = true});
      done = add_recv(s, {.peer = local(l - 1),
                          .dst = at(c.recv, rb.off, e),
                          .bytes = rb.len * e,
                          .reduce_with = at(c.send, rb.off, e)});
    }
    if (H == 1) s.recvs.back().finalize = true;
  } else if (c.send != c.recv) {
    ctx.copy(c.recv, c.send, c.count * e);
  }

  // Phase 2: that block summed over the hosts, in place, around the ring of
  // this local index: reduce-scatter, then all-gather. Its first transfers
  // wait for phase 1's last receive (later ones from the same peer follow
  // in list order).
  bool stream_block = true;  // phase 3's first send streams behind `done`
  if (H > 1) {
    const Block mine = L > 1 ? block_of(c.count, L, mod(l + 1, L)) : Block{0, c.count};
    char* base = at(c.recv, mine.off, e);
    const int phase1 = done;
    int prev = -1;
    for (int step = 0; step < H - 1; ++step) {
      const Block sb = block_of(mine.len, H, mod(h - step, H));
      const Block rb = block_of(mine.len, H, mod(h - step - 1, H));
      add_send(s, {.peer = across(h + 1),
                   .src = at(base, sb.off, e),
                   .bytes = sb.len * e,
                   .after = step == 0 ? phase1 : prev,
                   .stream = step > 0,
                   .in_place = true});
      prev = add_recv(s, {.peer = across(h - 1),
                          .dst = at(base, rb.off, e),
                          .bytes = rb.len * e,
                          .reduce_with = at(base, rb.off, e),
                          .after = step == 0 ? phase1 : -1});
    }
    s.recvs.back().finalize = true;
    for (int step = 0; step < H - 1; ++step) {
      const Block sb = block_of(mine.len, H, mod(h + 1 - step, H));
      const Block rb = block_of(mine.len, H, mod(h - step, H));
      add_send(s, {.peer = across(h + 1),
                   .src = at(base, sb.off, e),
                   .bytes = sb.len * e,
                   .after = prev,
                   .stream = true,
                   .in_place = true});
      prev = add_recv(s, {.peer = across(h - 1), .dst = at(base, rb.off, e), .bytes = rb.len * e});
    }
    done = prev;
    stream_block = false;
  }

  // Phase 3: every block to every rank of the host. Writing a block here
  // cannot overtake phase 1's in-place send of it: the block is complete
  // only after the next rank has taken that send and passed the sum on.
  if (L > 1) {
    int prev = done;
    for (int step = 0; step < L - 1; ++step) {
      const Block sb = block_of(c.count, L, mod(l + 1 - step, L));
      const Block rb = block_of(c.count, L, mod(l - step, L));
      add_send(s, {.peer = local(l + 1),
                   .src = at(c.recv, sb.off, e),
                   .bytes = sb.len * e,
                   .after = prev,
                   .stream = step > 0 || stream_block,
                   .in_place = true});
      prev = add_recv(s, {.peer = local(l - 1), .dst = at(c.recv, rb.off, e), .bytes = rb.len * e});
    }
  }
  ctx.run();
}

// Blocks are ranks' shares of the output; a host's "super-block" j is the
// blocks of local index j on every host, which leave the host together.
void all_gather_hier(OpContext& ctx) {
  const HostLayout& layout = *ctx.layout;
  const auto& c = ctx.call;
  const std::size_t bytes = c.count * ctx.elem;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int H = layout.hosts(), L = layout.per_host();
  auto* out = static_cast<char*>(c.recv);
  auto block = [&](int host, int local) { return out + static_cast<std::size_t>(layout.rank_at(host, local)) * bytes; };
  auto& s = ctx.sched;
  ctx.copy(block(h, l), c.send, bytes);
  // complete[host]: the receive after which block (host, l) is here (-1: from the start).
  std::vector<int> complete(static_cast<std::size_t>(H), -1);
  const int right = layout.rank_at(mod(h + 1, H), l), left = layout.rank_at(mod(h - 1, H), l);
  for (int step = 0; step < H - 1; ++step) {
    const int sh = mod(h - step, H), rh = mod(h - step - 1, H);
    add_send(s, {.peer = right,
                 .src = block(sh, l),
                 .bytes = bytes,
                 .after = complete[static_cast<std::size_t>(sh)],
                 .stream = true,
                 .in_place = true});
    complete[static_cast<std::size_t>(rh)] = add_recv(s, {.peer = left, .dst = block(rh, l), .bytes = bytes});
  }
  // Around the host: super-block (l - step) goes on, its blocks each behind
  // the receive that brought it.
  std::vector<int> got(static_cast<std::size_t>(H * L), -1);
  for (int host = 0; host < H; ++host)
    got[static_cast<std::size_t>(host * L + l)] = complete[static_cast<std::size_t>(host)];
  const int next = layout.rank_at(h, mod(l + 1, L)), prev = layout.rank_at(h, mod(l - 1, L));
  for (int step = 0; step < L - 1; ++step) {
    const int sl = mod(l - step, L), rl = mod(l - step - 1, L);
    for (int host = 0; host < H; ++host) {
      add_send(s, {.peer = next,
                   .src = block(host, sl),
                   .bytes = bytes,
                   .after = got[static_cast<std::size_t>(host * L + sl)],
                   .stream = true,
                   .in_place = true});
    }
    for (int host = 0; host < H; ++host)
      got[static_cast<std::size_t>(host * L + rl)] =
          add_recv(s, {.peer = prev, .dst = block(host, rl), .bytes = bytes});
  }
  ctx.run();
}

void reduce_scatter_hier(OpContext& ctx) {
  const HostLayout& layout = *ctx.layout;
  const auto& c = ctx.call;
  const std::size_t e = ctx.elem, bytes = c.count * e;
  const int h = layout.host(ctx.rank), l = layout.local(ctx.rank);
  const int H = layout.hosts(), L = layout.per_host();
  // Partial sums travel in a scratch image of the input, so no block a peer
  // may still be reading is overwritten.
  auto* scratch = static_cast<char*>(ctx.scratch(static_cast<std::size_t>(ctx.n) * bytes));
  auto offset = [&](int host, int local) { return static_cast<std::size_t>(layout.rank_at(host, local)) * bytes; };
  auto input = [&](int host, int local) { return at(c.send, offset(host, local) / e, e); };
  auto partial = [&](int host, int local) { return scratch + offset(host, local); };
  auto& s = ctx.sched;
  // Around the host: after L-1 steps super-block l holds the host's sum.
  std::vector<int> got(static_cast<std::size_t>(H * L), -1);
  const int next = layout.rank_at(h, mod(l + 1, L)), prev = layout.rank_at(h, mod(l - 1, L));
  for (int step = 0; step < L - 1; ++step) {
    const int sl = mod(l - step - 1, L), rl = mod(l - step - 2, L);
    for (int host = 0; host < H; ++host) {
      const void* src = step == 0 ? input(host, sl) : partial(host, sl);
      add_send(s, {.peer = next,
                   .src = src,
                   .bytes = bytes,
                   .after = got[static_cast<std::size_t>(host * L + sl)],
                   .stream = true,
                   .in_place = true});
    }
    for (int host = 0; host < H; ++host) {
      // With one host the last step's block is this rank's result.
      void* dst = H == 1 && step == L - 2 ? c.recv : partial(host, rl);
      got[static_cast<std::size_t>(host * L + rl)] =
          add_recv(s, {.peer = prev, .dst = dst, .bytes = bytes, .reduce_with = input(host, rl)});
    }
  }
  if (H > 1) {
    // Across the hosts, among the ranks of local index l: the ring's block
    // (h - step - 1) goes right; this host's block ends in c.recv.
    auto host_sum = [&](int host) -> const void* { return L > 1 ? partial(host, l) : input(host, l); };
    const int right = layout.rank_at(mod(h + 1, H), l), left = layout.rank_at(mod(h - 1, H), l);
    int last = -1;
    for (int step = 0; step < H - 1; ++step) {
      const int sh = mod(h - step - 1, H), rh = mod(h - step - 2, H);
      const int ready = got[static_cast<std::size_t>(sh * L + l)];
      add_send(s, {.peer = right,
                   .src = step == 0 ? host_sum(sh) : partial(sh, l),
                   .bytes = bytes,
                   .after = step == 0 ? ready : last,
                   .stream = step > 0,
                   .in_place = true});
      void* dst = step == H - 2 ? c.recv : partial(rh, l);
      last = add_recv(s, {.peer = left,
                          .dst = dst,
                          .bytes = bytes,
                          .reduce_with = host_sum(rh),
                          .after = got[static_cast<std::size_t>(rh * L + l)]});
    }
  }
  s.recvs.back().finalize = true;
  ctx.run();
}

}  // namespace rdmx::coll
