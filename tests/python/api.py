"""What each rank of a torch 2.x API test runs: `python api.py NAME JSON_ARGS`.

The operations torch 2.x hands a backend beyond the plain collectives
(scenarios.py has those): per-device backend strings, the coalesced forms,
batch_isend_irecv, object collectives, monitored_barrier, group
construction (new_group, new_subgroups, split_group, DeviceMesh), abort and
shutdown, the errors' types, and the Work API. Each rank checks what it
can and reports {"failures": [...], ...} (scenarios.emit); an exception
nobody expected reports {"error": trace}.
"""
# SPDX-License-Identifier: MIT
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

import rdmx.torch  # noqa: F401  (registers the "rdmx" backend)
from scenarios import TOLERANCE, emit, reporting_scenarios, values

SCENARIOS, scenario = reporting_scenarios()
CPU = torch.device("cpu")


def same(got, want):
    if got.dtype.is_floating_point:
        tol = TOLERANCE[got.dtype]
        return got.shape == want.shape and torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    return got.shape == want.shape and torch.equal(got, want.to(got.dtype))


class Checks:
    def __init__(self):
        self.failures = []
        self.vs_gloo = 0

    def equal(self, name, got, want, gloo=None):
        got, want = got.reshape(-1), want.reshape(-1)
        if not same(got, want):
            self.failures.append(f"{name}: got {got[:6].tolist()} want {want[:6].tolist()}")
        if gloo is not None:
            self.vs_gloo += 1
            if not same(got, gloo.reshape(-1)):
                self.failures.append(f"{name}: differs from gloo: {got[:6].tolist()} against {gloo[:6].tolist()}")

    def true(self, name, ok):
        if not ok:
            self.failures.append(name)


def error_of(fn):
    """(exception type name, message, seconds) of what fn raised; type None when it returned."""
    start = time.monotonic()
    try:
        fn()
        return None, None, time.monotonic() - start
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e), time.monotonic() - start


def backend_of(group, device=CPU):
    return type((group or c10d._get_default_group())._get_backend(device)).__name__


# Set while Gloo computes reference values: Gloo's coalesced gathers and
# scatters refuse 2-D outputs (torch 2.15's Gloo crashes on some), so Gloo
# gets 1-D strided tensors where rdmx gets transposed ones.
GLOO_1D = [False]


def laid_out(x, layout):
    """x (1-D) in a tensor of the given layout: contiguous, strided (every other
    element of a larger one), offset (a view into a storage), or transposed
    (2-D, x.numel() even); in row-major order, its values are x's."""
    n = x.numel()
    if layout == "transposed" and GLOO_1D[0]:
        layout = "strided"
    if layout == "strided":
        t = torch.zeros(2 * n + 1, dtype=x.dtype)[1::2][:n]
    elif layout == "offset":
        t = torch.zeros(n + 3, dtype=x.dtype)[3:]
    elif layout == "transposed" and n % 2 == 0 and n > 0:
        t = torch.zeros(n // 2, 2, dtype=x.dtype).t()
    else:
        t = torch.zeros(n, dtype=x.dtype)
    t.copy_(x.view(t.shape))
    return t


def flat(t):
    return t.reshape(-1)


def gloo_and_rdmx(timeout_s=60):
    """A default Gloo group for reference values and an rdmx group over the same ranks."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    return dist.new_group(backend="rdmx", timeout=timedelta(seconds=timeout_s))


# ---------------------------------------------------------------------------
@scenario
def init_forms(args):
    """init_process_group(spec): which backend each device gets, and an all_reduce on each."""
    spec = args["spec"]
    dist.init_process_group(spec, timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    out = {"get_backend": str(dist.get_backend()), "cpu": backend_of(None)}
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    chk.equal("all_reduce of CPU tensors", t, torch.full((1000,), n * (n + 1) / 2))
    if "cuda" in spec and torch.cuda.is_available():
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        out["cuda"] = backend_of(None, device)
        t = torch.full((1000,), float(rank + 1), device=device)
        dist.all_reduce(t)
        chk.equal("all_reduce of CUDA tensors", t.cpu(), torch.full((1000,), n * (n + 1) / 2))
    # A group made without a backend takes the default group's per-device ones.
    sub = dist.new_group()
    out["new_group_cpu"] = backend_of(sub)
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=sub)
    chk.equal("all_reduce on new_group()", t, torch.tensor([float(sum(range(n)))]))
    dist.destroy_process_group()
    return dict(out, failures=chk.failures)


# ---------------------------------------------------------------------------
COALESCED_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8,
                    torch.uint8]
# Uneven sizes, one of each layout: a coalesced call concatenates them.
COALESCED_SIZES = [1, 38, 1000, 6]
COALESCED_LAYOUTS = ["contiguous", "strided", "offset", "transposed"]


@scenario
def coalesced(args):
    """all_reduce_coalesced, the coalescing manager's three forms, all_gather_coalesced;
    rdmx against Gloo (same inputs) and against a reference."""
    rd = gloo_and_rdmx()
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    gloo_cannot = set()
    seed = [0]

    def inputs(scale=1):
        seed[0] += 1
        return [[values(seed[0] * 100 + 10 * k + r, scale * m, dtype) for r in range(n)]
                for k, m in enumerate(COALESCED_SIZES)]

    def both(name, fn):
        """fn(group) on rdmx, and on Gloo where Gloo runs it."""
        got = fn(rd)
        GLOO_1D[0] = True
        try:
            gloo = fn(None)
        except (RuntimeError, NotImplementedError):
            gloo_cannot.add(name)
            gloo = [None] * len(got)
        finally:
            GLOO_1D[0] = False
        return got, gloo

    def summed(xs):
        acc = xs[0].double() if xs[0].dtype.is_floating_point else xs[0].long()
        for x in xs[1:]:
            acc = acc + (x.double() if x.dtype.is_floating_point else x.long())
        return acc

    for dtype in COALESCED_DTYPES:
        lay = COALESCED_LAYOUTS
        xs = inputs()
        want = [summed(x) for x in xs]

        def all_reduce_coalesced(group, xs=xs):
            ts = [laid_out(x[rank], lay[k]) for k, x in enumerate(xs)]
            dist.all_reduce_coalesced(ts, group=group)
            return [flat(t) for t in ts]
        for k, (got, gloo) in enumerate(zip(*both("all_reduce_coalesced", all_reduce_coalesced))):
            chk.equal(f"all_reduce_coalesced {dtype} tensor {k}", got, want[k], gloo)

        def managed_all_reduce(group, xs=xs):
            ts = [laid_out(x[rank], lay[k]) for k, x in enumerate(xs)]
            with c10d._coalescing_manager(group=group, async_ops=True) as cm:
                for t in ts:
                    dist.all_reduce(t, group=group)
            cm.wait()
            return [flat(t) for t in ts]
        for k, (got, gloo) in enumerate(zip(*both("coalesced all_reduce", managed_all_reduce))):
            chk.equal(f"coalescing manager all_reduce {dtype} tensor {k}", got, want[k], gloo)

        xs = inputs()

        def managed_all_gather(group, xs=xs):
            outs = [laid_out(torch.zeros(n * m, dtype=dtype), lay[k]) for k, m in enumerate(COALESCED_SIZES)]
            with c10d._coalescing_manager(group=group, async_ops=True) as cm:
                for k, x in enumerate(xs):
                    dist.all_gather_into_tensor(outs[k], laid_out(x[rank], lay[-1 - k]), group=group)
            cm.wait()
            return [flat(o) for o in outs]
        for k, (got, gloo) in enumerate(zip(*both("coalesced all_gather_into_tensor", managed_all_gather))):
            chk.equal(f"coalescing manager all_gather_into_tensor {dtype} tensor {k}", got, torch.cat(xs[k]), gloo)

        xs = inputs(scale=n)

        def managed_reduce_scatter(group, xs=xs):
            outs = [laid_out(torch.zeros(m, dtype=dtype), lay[k]) for k, m in enumerate(COALESCED_SIZES)]
            with c10d._coalescing_manager(group=group, async_ops=True) as cm:
                for k, x in enumerate(xs):
                    dist.reduce_scatter_tensor(outs[k], laid_out(x[rank], lay[-1 - k]), group=group)
            cm.wait()
            return [flat(o) for o in outs]
        for k, (got, gloo) in enumerate(zip(*both("coalesced reduce_scatter_tensor", managed_reduce_scatter))):
            m = COALESCED_SIZES[k]
            chk.equal(f"coalescing manager reduce_scatter_tensor {dtype} tensor {k}", got,
                      summed(xs[k])[rank * m:(rank + 1) * m], gloo)

        xs = inputs()
        if hasattr(dist, "all_gather_coalesced"):
            def all_gather_coalesced(group, xs=xs):
                outs = [[laid_out(torch.zeros(m, dtype=dtype), lay[k]) for k, m in enumerate(COALESCED_SIZES)]
                        for _ in range(n)]
                dist.all_gather_coalesced(outs, [laid_out(x[rank], lay[k]) for k, x in enumerate(xs)], group=group)
                return [flat(o) for per_rank in outs for o in per_rank]
            got, gloo = both("all_gather_coalesced", all_gather_coalesced)
            for i, (g, gl) in enumerate(zip(got, gloo)):
                r, k = divmod(i, len(COALESCED_SIZES))
                chk.equal(f"all_gather_coalesced {dtype} rank {r} tensor {k}", g, xs[k][r], gl)

    dist.destroy_process_group()
    return {"failures": chk.failures, "vs_gloo": chk.vs_gloo, "gloo_cannot": sorted(gloo_cannot),
            "has_all_gather_coalesced": hasattr(dist, "all_gather_coalesced")}


# ---------------------------------------------------------------------------
# Ring sizes in float32 elements: below 64 KiB, above it, and 1.2 MB, beyond
# the 16 KiB from which rdmx's send completes only as the peer receives:
# batch_isend_irecv pairs each send with a recv, so a ring does not wait on
# itself. Plain isend/irecv run one at a time in call order: there each
# message stays below 16 KiB (docs/TORCH.md, "Limit").
RING_ELEMENTS = [1000, 20_000, 300_000]


@scenario
def ring(args):
    """batch_isend_irecv around a ring (send to the next rank, recv from the
    previous), and tags matched out of order, on rdmx and on Gloo. A short
    timeout: a ring that waits on itself fails in seconds."""
    rd = gloo_and_rdmx(timeout_s=15)
    rank, n = dist.get_rank(), dist.get_world_size()
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    chk = Checks()
    sent = {}
    for i, count in enumerate(RING_ELEMENTS):
        for dtype in (torch.float32, torch.int64):
            mine, theirs = values(1000 * i + rank, count, dtype), values(1000 * i + prv, count, dtype)

            def exchange(group, mine=mine, count=count, dtype=dtype):
                got = torch.zeros(count, dtype=dtype)
                ops = [dist.P2POp(dist.isend, mine, nxt, group=group), dist.P2POp(dist.irecv, got, prv, group=group)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                return got
            chk.equal(f"batch_isend_irecv ring {dtype} {count * mine.element_size()} B", exchange(rd), theirs,
                      exchange(None))
            sent[count] = count * mine.element_size()

    # Two messages each way with tags, received in the other order than sent,
    # one into a non-contiguous tensor; then isend/irecv with the same tags.
    a, b = values(7 + rank, 100, torch.float32), values(70 + rank, 30_000, torch.float32)
    want_a, want_b = values(7 + prv, 100, torch.float32), values(70 + prv, 30_000, torch.float32)

    def tagged_batch(group):
        # Gloo receives into contiguous tensors only.
        got_a, got_b = torch.zeros(100), torch.zeros(60_001)[1::2] if group is not None else torch.zeros(30_000)
        ops = [dist.P2POp(dist.isend, a, nxt, group=group, tag=3), dist.P2POp(dist.isend, b, nxt, group=group, tag=5),
               dist.P2POp(dist.irecv, got_b, prv, group=group, tag=5),
               dist.P2POp(dist.irecv, got_a, prv, group=group, tag=3)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return torch.cat([got_a, got_b])
    chk.equal("batch_isend_irecv tags out of order", tagged_batch(rd), torch.cat([want_a, want_b]),
              tagged_batch(None))

    small_b = b[:3000]  # 12 KB

    def tagged_isend(group):
        got_a, got_b = torch.zeros(100), torch.zeros(3000)
        works = [dist.isend(a, nxt, group=group, tag=3), dist.isend(small_b, nxt, group=group, tag=5),
                 dist.irecv(got_b, prv, group=group, tag=5), dist.irecv(got_a, prv, group=group, tag=3)]
        for w in reversed(works):
            w.wait()
        return torch.cat([got_a, got_b])
    chk.equal("isend/irecv tags out of order", tagged_isend(rd), torch.cat([want_a, want_b[:3000]]),
              tagged_isend(None))
    dist.destroy_process_group()
    return {"failures": chk.failures, "vs_gloo": chk.vs_gloo, "bytes": sorted(sent.values())}


# ---------------------------------------------------------------------------
def object_of(rank, size=0):
    return {"rank": rank, "name": f"rank-{rank}", "items": list(range(rank + 2)), "blob": "x" * size,
            "tensor": torch.arange(rank + 3, dtype=torch.float64)}


def object_equal(a, b):
    return (isinstance(a, dict) and a.keys() == b.keys() and torch.equal(a["tensor"], b["tensor"])
            and all(a[k] == b[k] for k in a if k != "tensor"))


@scenario
def objects(args):
    """The object collectives on a default rdmx group."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    root = n - 1
    # One object larger than RDMX_COLL_BUFFSIZE's per-chunk slots.
    objs = [object_of(root, 200_000), "text", 42] if rank == root else [None, None, None]
    dist.broadcast_object_list(objs, src=root)
    chk.true(f"broadcast_object_list got {str(objs)[:80]}",
             object_equal(objs[0], object_of(root, 200_000)) and objs[1:] == ["text", 42])

    gathered = [None] * n
    dist.all_gather_object(gathered, object_of(rank, 10 * rank))
    chk.true("all_gather_object", all(object_equal(g, object_of(r, 10 * r)) for r, g in enumerate(gathered)))

    into = [None] * n if rank == 0 else None
    dist.gather_object(object_of(rank, rank), into, dst=0)
    if rank == 0:
        chk.true("gather_object", all(object_equal(g, object_of(r, r)) for r, g in enumerate(into)))

    out = [None]
    dist.scatter_object_list(out, [object_of(100 + r) for r in range(n)] if rank == 0 else None, src=0)
    chk.true(f"scatter_object_list got {str(out[0])[:80]}", object_equal(out[0], object_of(100 + rank)))

    # Around the ring: rank 0 sends first, every other rank receives first.
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    got = [None, None]
    if rank == 0:
        dist.send_object_list([object_of(rank), rank], dst=nxt)
        dist.recv_object_list(got, src=prv)
    else:
        dist.recv_object_list(got, src=prv)
        dist.send_object_list([object_of(rank), rank], dst=nxt)
    chk.true(f"send/recv_object_list got {str(got)[:80]}", object_equal(got[0], object_of(prv)) and got[1] == prv)
    dist.destroy_process_group()
    return {"failures": chk.failures}


# ---------------------------------------------------------------------------
@scenario
def monitored(args):
    """monitored_barrier: all arrive; then the ranks in args["late"] do not come, and
    rank 0 must name them within the barrier's timeout (2 s); then every rank,
    the late ones included, all_reduces on the same group."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    store = c10d._get_default_store()
    late = args["late"]
    chk = Checks()
    kind, message, seconds = error_of(lambda: dist.monitored_barrier(timeout=timedelta(seconds=30)))
    chk.true(f"monitored_barrier with every rank raised {kind}: {message}", kind is None)
    kind = message = None
    if rank in late:
        # Comes back once rank 0 has raised, not after a sleep.
        store.wait(["api/monitored/verdict"], timedelta(seconds=60))
    else:
        kind, message, seconds = error_of(lambda: dist.monitored_barrier(
            timeout=timedelta(seconds=2), wait_all_ranks=args["wait_all_ranks"]))
        if rank == 0:
            store.set("api/monitored/verdict", "raised")
    t = torch.full((100,), float(rank + 1))
    dist.all_reduce(t)
    chk.equal("all_reduce after the failed monitored_barrier", t, torch.full((100,), n * (n + 1) / 2))
    dist.destroy_process_group()
    return {"failures": chk.failures, "type": kind, "message": message, "seconds": seconds}


# ---------------------------------------------------------------------------
@scenario
def groups(args):
    """new_group (a subset), new_subgroups, split_group, and a 2x2 DeviceMesh on 4 ranks."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    out = {}

    def summed_over(group, members):
        t = torch.full((10,), float(rank + 1))
        dist.all_reduce(t, group=group)
        chk.equal(f"all_reduce on {members} (rank {rank})", t, torch.full((10,), float(sum(r + 1 for r in members))))

    odd = [r for r in range(n) if r % 2]
    sub = dist.new_group(odd)
    if rank in odd:
        summed_over(sub, odd)
        out["new_group"] = backend_of(sub)
    else:
        chk.true("a rank outside new_group's ranks got a group", sub == dist.GroupMember.NON_GROUP_MEMBER)

    mine, _ = dist.new_subgroups(group_size=2)
    pair = [rank - rank % 2, rank - rank % 2 + 1]
    summed_over(mine, pair)
    chk.true(f"new_subgroups: rank {dist.get_rank(mine)} of {dist.get_world_size(mine)}",
             dist.get_rank(mine) == rank % 2 and dist.get_world_size(mine) == 2)

    halves = [list(range(n // 2)), list(range(n // 2, n))]
    split = dist.split_group(split_ranks=halves, timeout=timedelta(seconds=30))
    half = halves[0] if rank in halves[0] else halves[1]
    summed_over(split, half)
    out["split"] = backend_of(split)

    mesh = init_device_mesh("cpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
    grid = torch.arange(n).view(2, n // 2)
    row, col = rank // (n // 2), rank % (n // 2)
    summed_over(mesh.get_group("dp"), grid[:, col].tolist())
    summed_over(mesh.get_group("tp"), grid[row].tolist())
    out["mesh"] = [backend_of(mesh.get_group(d)) for d in ("dp", "tp")]
    dist.destroy_process_group()
    return dict(out, failures=chk.failures)


@scenario
def split_outside(args):
    """split_group naming one group: its members ranked by their place in the
    list, the other ranks NON_GROUP_MEMBER; then the parent still works."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=10))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    chosen = [n - 1, 1]
    split = dist.split_group(split_ranks=[chosen])
    if rank in chosen:
        chk.true(f"split_group rank {dist.get_rank(split)}, want {chosen.index(rank)}",
                 dist.get_rank(split) == chosen.index(rank) and dist.get_world_size(split) == len(chosen))
        t = torch.tensor([float(rank)])
        dist.broadcast(t, group_src=0, group=split)
        chk.equal("broadcast from the split group's rank 0", t, torch.tensor([float(chosen[0])]))
    else:
        chk.true(f"rank {rank} outside split_group got {split}", split is dist.GroupMember.NON_GROUP_MEMBER)
    t = torch.ones(4)
    dist.all_reduce(t)
    chk.equal("all_reduce on the parent after split_group", t, torch.full((4,), float(n)))
    dist.destroy_process_group()
    return {"failures": chk.failures}


# ---------------------------------------------------------------------------
@scenario
def destroy_pending(args):
    """destroy_process_group() right after async collectives were issued: they complete."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    ts = [torch.full((100_000,), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    start = time.monotonic()
    dist.destroy_process_group()
    seconds = time.monotonic() - start
    for i, (w, t) in enumerate(zip(works, ts)):
        chk.true(f"work {i} not completed after destroy_process_group", w.is_completed())
        kind, message, _ = error_of(w.wait)
        chk.true(f"wait() on work {i} after destroy_process_group raised {kind}: {message}", kind is None)
        chk.equal(f"all_reduce {i} issued before destroy_process_group", t,
                  torch.full((100_000,), float(sum(r + i for r in range(n)))))
    kind, message, _ = error_of(lambda: dist.all_reduce(torch.ones(1)))
    return {"failures": chk.failures, "seconds": seconds, "after": [kind, message]}


@scenario
def abort_after_death(args):
    """The last rank dies. The survivors' call raises DistBackendError naming it; a
    healthy subgroup's backend abort() fails its later calls; torch's
    _abort_process_group() returns promptly and later calls raise."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=args["timeout_s"]))
    rank, n = dist.get_rank(), dist.get_world_size()
    survivors = list(range(n - 1))
    sub = dist.new_group(survivors)
    dist.all_reduce(torch.ones(4))
    if rank == n - 1:
        os._exit(3)
    out = {}
    out["death"] = error_of(lambda: dist.all_reduce(torch.ones(100_000)))
    t = torch.ones(4)
    dist.all_reduce(t, group=sub)
    out["sub_sum"] = t[0].item()
    # Both survivors are done with the subgroup before either aborts it: an
    # abort fails what its peers still run.
    store = c10d._get_default_store()
    store.set(f"api/abort/summed/{rank}", "1")
    store.wait([f"api/abort/summed/{r}" for r in survivors], timedelta(seconds=60))
    start = time.monotonic()
    sub._get_backend(CPU).abort()
    out["backend_abort_seconds"] = time.monotonic() - start
    out["after_backend_abort"] = error_of(lambda: dist.all_reduce(torch.ones(4), group=sub))
    out["has_abort_process_group"] = hasattr(c10d, "_abort_process_group")
    start = time.monotonic()
    if out["has_abort_process_group"]:
        c10d._abort_process_group()
    else:
        c10d._get_default_group()._get_backend(CPU).abort()
    out["abort_seconds"] = time.monotonic() - start
    out["after_abort"] = error_of(lambda: dist.all_reduce(torch.ones(4)))
    out["failures"] = []
    return out


@scenario
def errors(args):
    """Each error's type: a wrong dtype (RuntimeError, the group stays usable), a
    rank that never calls (DistBackendError by the timeout), mismatched
    collectives (DistBackendError at once)."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    store = c10d._get_default_store()
    short = dist.new_group(backend="rdmx", timeout=timedelta(seconds=2))
    out = {"failures": []}
    out["dtype"] = error_of(lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int16)))
    out["reduce_op"] = error_of(lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=dist.ReduceOp.BAND))
    t = torch.ones(3)
    dist.all_reduce(t)
    out["sum_after_bad_arguments"] = t[0].item()
    if rank == n - 1:
        store.wait(["api/errors/timed_out"], timedelta(seconds=60))
    else:
        out["timeout"] = error_of(lambda: dist.all_reduce(torch.ones(10), group=short))
        out["after_timeout"] = error_of(lambda: dist.all_reduce(torch.ones(10), group=short))
        store.set(f"api/errors/raised/{rank}", "1")
        if rank == 0:
            store.wait([f"api/errors/raised/{r}" for r in range(n - 1)], timedelta(seconds=60))
            store.set("api/errors/timed_out", "1")
    if rank == 0:
        out["mismatch"] = error_of(lambda: dist.all_reduce(torch.ones(1000)))
    else:
        out["mismatch"] = error_of(lambda: dist.broadcast(torch.ones(1000), src=0))
    out["is_dist_backend_error_runtime"] = issubclass(dist.DistBackendError, RuntimeError)
    # Rank 0 serves the store: it leaves last; the groups are broken, so no teardown.
    if rank == 0:
        store.wait([f"api/errors/left/{r}" for r in range(1, n)], timedelta(seconds=60))
    else:
        store.set(f"api/errors/left/{rank}", "1")
    emit(out)
    os._exit(0)


# ---------------------------------------------------------------------------
@scenario
def work_api(args):
    """async_op=True: is_completed, wait(timeout), get_future().then, exception(), and a failed work."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    store = c10d._get_default_store()
    chk = Checks()
    out = {}
    total = float(sum(r + 1 for r in range(n)))
    # Rank 0's work cannot complete before the last rank calls, which it does
    # only once rank 0 has looked, and once rank 0's wait(timeout) has run out.
    t = torch.full((1000,), float(rank + 1))
    if rank == n - 1:
        store.wait(["api/work/looked"], timedelta(seconds=60))
    w = dist.all_reduce(t, async_op=True)
    if rank == 0:
        chk.true("is_completed() before every rank called", not w.is_completed())
        out["short_wait"] = error_of(lambda: w.wait(timeout=timedelta(milliseconds=300)))
        store.set("api/work/looked", "1")
    chk.true("wait(timeout=30 s) did not return True", w.wait(timeout=timedelta(seconds=30)) is True)
    chk.true("is_completed() after wait", w.is_completed())
    chk.true(f"exception() of a work that succeeded: {w.exception()}", w.exception() is None)
    chk.equal("async all_reduce", t, torch.full((1000,), total))

    fut = dist.all_reduce(torch.full((10,), float(rank + 1)), async_op=True).get_future()
    chained = fut.then(lambda f: f.value()[0] * 2).then(lambda f: f.value().sum().item())
    chk.true(f"get_future().then(...).then(...) gave {chained.wait()}", chained.wait() == 20 * total)

    # A failed work: rank 0 all_reduces where the others broadcast, on a group of its own.
    sub = dist.new_group(backend="rdmx")
    if rank == 0:
        bad = dist.all_reduce(torch.ones(1000), group=sub, async_op=True)
    else:
        bad = dist.broadcast(torch.ones(1000), src=0, group=sub, async_op=True)
    out["failed_wait"] = error_of(bad.wait)
    chk.true("is_completed() of a failed work", bad.is_completed())
    exc = bad.exception()
    out["failed_exception"] = [type(exc).__name__, str(exc)] if exc is not None else None
    out["failed_future"] = error_of(bad.get_future().wait)
    # The default group is another communicator: still usable.
    t = torch.full((10,), float(rank + 1))
    dist.all_reduce(t)
    chk.equal("all_reduce on the default group after a failed work on another", t, torch.full((10,), total))
    store.set(f"api/work/done/{rank}", "1")
    if rank == 0:
        store.wait([f"api/work/done/{r}" for r in range(1, n)], timedelta(seconds=60))
    out["failures"] = chk.failures
    emit(out)
    os._exit(0)  # the failed group is left as it is


if __name__ == "__main__":
    name = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    SCENARIOS[name](args)
