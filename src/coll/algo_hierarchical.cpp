// SPDX-License-Identifier: MIT
// Hierarchical all_reduce over several hosts of as many ranks each (NCCL's
// ring over the topology, in three phases): a reduce-scatter around each
// host's ring leaves local rank l with block l+1 of its host's sum; the
// ranks of one local index then all-reduce that block around a ring across
// the hosts; an all-gather around each host's ring spreads the blocks. What
// leaves a host is 2(H-1)/H of the vector, shared by its L ranks, the least
// any algorithm sends; a flat ring sends 2(n-1)/n from each rank.
#include "coll/algorithms.hpp"

namespace rdmx::coll {

void all_reduce_hier(OpContext& ctx) {
  const HostLayout& layout = *ctx.layout;
  const auto& c = ctx.call;
  const std::size_t e = ctx.elem;
  const auto me = static_cast<std::size_t>(ctx.rank);
  const int h = layout.host_of[me], l = layout.local_of[me];
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
      add_send(s, local(l + 1), src, sb.len * e, done, true, true);
      done = add_recv(s, local(l - 1), at(c.recv, rb.off, e), rb.len * e, at(c.send, rb.off, e));
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
      if (step == 0) {
        add_send(s, across(h + 1), at(base, sb.off, e), sb.len * e, phase1, false, true);
      } else {
        add_send(s, across(h + 1), at(base, sb.off, e), sb.len * e, prev, true, true);
      }
      prev = add_recv(s, across(h - 1), at(base, rb.off, e), rb.len * e, at(base, rb.off, e), step == 0 ? phase1 : -1);
    }
    s.recvs.back().finalize = true;
    for (int step = 0; step < H - 1; ++step) {
      const Block sb = block_of(mine.len, H, mod(h + 1 - step, H));
      const Block rb = block_of(mine.len, H, mod(h - step, H));
      add_send(s, across(h + 1), at(base, sb.off, e), sb.len * e, prev, true, true);
      prev = add_recv(s, across(h - 1), at(base, rb.off, e), rb.len * e);
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
      add_send(s, local(l + 1), at(c.recv, sb.off, e), sb.len * e, prev, step > 0 || stream_block, true);
      prev = add_recv(s, local(l - 1), at(c.recv, rb.off, e), rb.len * e);
    }
  }
  ctx.run();
}

}  // namespace rdmx::coll
