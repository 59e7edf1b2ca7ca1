"""What each rank of a torch backend test runs: `python3 scenarios.py NAME JSON_ARGS`.

Ranks find each other through torch's env:// variables (ranks.py sets them)
and print one `RESULT <json>` line for the test to check.
"""
# SPDX-License-Identifier: MIT
import json
import os
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

import rdmx.torch  # noqa: F401  (registers the "rdmx" backend)

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def emit(result):
    where = os.environ.get("RDMX_TEST_RESULT_DIR")
    if where:
        path = os.path.join(where, os.environ["RANK"] + ".json")
        with open(path + ".tmp", "w") as f:
            json.dump(result, f)
        os.rename(path + ".tmp", path)
    else:
        print("RESULT " + json.dumps(result), flush=True)


def reporting_scenarios(exit_after=False):
    """A table of scenarios and the decorator that fills it: each reports its
    result (emit), or {"error": trace} for an exception nobody expected; with
    `exit_after`, the process then exits at once (a group an error left
    unusable is not torn down)."""
    table = {}

    def scenario(fn):
        def run(args):
            try:
                result = fn(args)
            except Exception:  # noqa: BLE001  (the test shows the trace)
                result = {"error": traceback.format_exc()[-4000:]}
            emit(result)
            if exit_after:
                os._exit(0)
        table[fn.__name__] = run
        return fn
    return table, scenario


# ---------------------------------------------------------------------------
# Inputs every rank can reproduce for any rank, and references computed from them.
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int32,
          torch.int64, torch.bool]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.float16: 1e-2, torch.bfloat16: 2e-2}


def values(seed, n, dtype, for_product=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        if for_product:
            return (torch.rand(n, generator=g, dtype=torch.float64) + 0.5).to(dtype)
        return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype == torch.uint8:
        return torch.randint(0, 11, (n,), generator=g).to(dtype)
    return torch.randint(-5, 6, (n,), generator=g).to(dtype)


FORCE_CONTIGUOUS = [False]


def laid_out(x, layout):
    """x (1-D) as a tensor of the given memory layout with the same values."""
    n = x.numel()
    if FORCE_CONTIGUOUS[0]:
        layout = "contiguous"
    if layout == "strided":
        base = torch.zeros(2 * n + 1, dtype=x.dtype)
        t = base[1::2][:n]
    elif layout == "offset":
        base = torch.zeros(n + 3, dtype=x.dtype)
        t = base[3:]
    else:
        t = torch.zeros(n, dtype=x.dtype)
    t.copy_(x)
    return t


def reduce_ref(xs, op, dtype):
    if dtype == torch.bool:
        stacked = torch.stack(xs)
        return stacked.any(0) if op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX) else stacked.all(0)
    work = [x.double() if dtype.is_floating_point else x for x in xs]
    out = work[0].clone()
    for x in work[1:]:
        if op == dist.ReduceOp.PRODUCT:
            out = out * x
        elif op == dist.ReduceOp.MIN:
            out = torch.minimum(out, x)
        elif op == dist.ReduceOp.MAX:
            out = torch.maximum(out, x)
        else:
            out = out + x
    if op == dist.ReduceOp.AVG:
        out = out / len(xs)
    return out


def same(got, want, dtype):
    if dtype.is_floating_point:
        tol = TOLERANCE[dtype]
        return got.shape == want.shape and torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    return torch.equal(got, want.to(got.dtype))


OP_NAMES = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "product", dist.ReduceOp.MIN: "min",
            dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg"}


class Checker:
    def __init__(self):
        self.cases = 0
        self.vs_gloo = 0
        self.vs_reference = 0
        self.failures = []

    def check(self, name, got, reference, gloo, dtype):
        self.cases += 1
        if not same(got, reference, dtype):
            self.failures.append(f"{name}: differs from the reference: got {got.flatten()[:8].tolist()} "
                                 f"want {reference.flatten()[:8].tolist()}")
            return
        self.vs_reference += 1
        if gloo is not None:
            self.vs_gloo += 1
            if not same(got, gloo, dtype):
                self.failures.append(f"{name}: differs from gloo: got {got.flatten()[:8].tolist()} "
                                     f"gloo {gloo.flatten()[:8].tolist()}")


GLOO_SKIPS_EMPTY = [False]


def on_gloo(fn):
    """Runs the same operation on the default (gloo) group; None where gloo cannot.
    Not for empty tensors: torch 1.13's gloo dies of SIGFPE on an empty all_gather."""
    if GLOO_SKIPS_EMPTY[0]:
        return None
    # Gloo on dense copies of the same values: torch 1.13's gloo writes
    # non-contiguous outputs as if they were dense.
    FORCE_CONTIGUOUS[0] = True
    try:
        return fn(None)
    except RuntimeError:
        return None
    finally:
        FORCE_CONTIGUOUS[0] = False


# ---------------------------------------------------------------------------
@scenario
def operations(args):
    """Every operation x dtype x layout, against gloo (same inputs) and a reference."""
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rd = dist.new_group(backend="rdmx")
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checker()
    R = dist.ReduceOp
    case_id = [0]

    def inputs(length, dtype, for_product=False):
        case_id[0] += 1
        return [values(case_id[0] * 1000 + r, length, dtype, for_product) for r in range(n)]

    layouts = ["contiguous", "strided", "offset"]
    for dtype in DTYPES:
        floating = dtype.is_floating_point
        for layout in layouts + ["empty"]:
            L = 0 if layout == "empty" else 37
            lay = "contiguous" if layout == "empty" else layout
            GLOO_SKIPS_EMPTY[0] = layout == "empty"
            tag = f"{dtype}/{layout}"
            ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX] + ([R.AVG] if floating else [])
            for op in ops:
                xs = inputs(L, dtype, for_product=op == R.PRODUCT)

                def all_reduce(group, xs=xs, op=op):
                    t = laid_out(xs[rank], lay)
                    dist.all_reduce(t, op=op, group=group)
                    return t
                gloo = on_gloo(all_reduce) if op != R.AVG else None
                chk.check(f"all_reduce {OP_NAMES[op]} {tag}", all_reduce(rd), reduce_ref(xs, op, dtype), gloo, dtype)

            xs, ys = inputs(L, dtype), inputs(L // 2 + 1, dtype)

            def coalesced(group):
                ts = [laid_out(xs[rank], lay), laid_out(ys[rank], lay)]
                dist.all_reduce_coalesced(ts, op=R.SUM, group=group)
                return torch.cat(ts)
            chk.check(f"all_reduce_coalesced {tag}", coalesced(rd),
                      torch.cat([reduce_ref(xs, R.SUM, dtype), reduce_ref(ys, R.SUM, dtype)]), on_gloo(coalesced),
                      dtype)

            xs = inputs(L, dtype)
            root = n - 1

            def broadcast(group):
                t = laid_out(xs[rank], lay)
                dist.broadcast(t, src=root, group=group)
                return t
            chk.check(f"broadcast {tag}", broadcast(rd), xs[root], on_gloo(broadcast), dtype)

            for op in (R.SUM, R.MAX):
                xs = inputs(L, dtype)

                def reduce(group, xs=xs, op=op):
                    t = laid_out(xs[rank], lay)
                    dist.reduce(t, dst=0, op=op, group=group)
                    return t
                got, gloo = reduce(rd), on_gloo(reduce)
                if rank == 0:
                    chk.check(f"reduce {OP_NAMES[op]} {tag}", got, reduce_ref(xs, op, dtype), gloo, dtype)

            xs = inputs(L, dtype)

            def all_gather(group):
                outs = [laid_out(torch.zeros(L, dtype=dtype), lay) for _ in range(n)]
                dist.all_gather(outs, laid_out(xs[rank], lay), group=group)
                return torch.cat(outs)
            chk.check(f"all_gather {tag}", all_gather(rd), torch.cat(xs), on_gloo(all_gather), dtype)

            def all_gather_into_tensor(group):
                out = laid_out(torch.zeros(n * L, dtype=dtype), lay)
                dist.all_gather_into_tensor(out, laid_out(xs[rank], lay), group=group)
                return out
            chk.check(f"all_gather_into_tensor {tag}", all_gather_into_tensor(rd), torch.cat(xs),
                      on_gloo(all_gather_into_tensor), dtype)

            xs = inputs(n * L, dtype)
            want = reduce_ref(xs, R.SUM, dtype)[rank * L:(rank + 1) * L]

            def reduce_scatter(group):
                out = laid_out(torch.zeros(L, dtype=dtype), lay)
                dist.reduce_scatter(out, [laid_out(c, lay) for c in xs[rank].split(L)] if L else
                                    [laid_out(torch.zeros(0, dtype=dtype), lay) for _ in range(n)], group=group)
                return out
            chk.check(f"reduce_scatter {tag}", reduce_scatter(rd), want, on_gloo(reduce_scatter), dtype)

            def reduce_scatter_tensor(group):
                out = laid_out(torch.zeros(L, dtype=dtype), lay)
                dist.reduce_scatter_tensor(out, laid_out(xs[rank], lay), group=group)
                return out
            chk.check(f"reduce_scatter_tensor {tag}", reduce_scatter_tensor(rd), want,
                      on_gloo(reduce_scatter_tensor), dtype)

            xs = inputs(n * L, dtype)

            def all_to_all_single(group):
                out = laid_out(torch.zeros(n * L, dtype=dtype), lay)
                dist.all_to_all_single(out, laid_out(xs[rank], lay), group=group)
                return out
            want = torch.cat([xs[j][rank * L:(rank + 1) * L] for j in range(n)])
            chk.check(f"all_to_all_single {tag}", all_to_all_single(rd), want, on_gloo(all_to_all_single), dtype)

            # Rank r sends r + j + 1 elements to rank j (none when empty).
            size = (lambda r, j: 0) if layout == "empty" else (lambda r, j: r + j + 1)
            xs = [values(case_id[0] * 1000 + 500 + r, sum(size(r, j) for j in range(n)), dtype) for r in range(n)]
            in_splits = [size(rank, j) for j in range(n)]
            out_splits = [size(j, rank) for j in range(n)]

            def sliced(j):
                start = sum(size(j, k) for k in range(rank))
                return xs[j][start:start + size(j, rank)]
            want = torch.cat([sliced(j) for j in range(n)])

            def all_to_all_splits(group):
                out = laid_out(torch.zeros(sum(out_splits), dtype=dtype), lay)
                dist.all_to_all_single(out, laid_out(xs[rank], lay), out_splits, in_splits, group=group)
                return out
            chk.check(f"all_to_all_single/splits {tag}", all_to_all_splits(rd), want, on_gloo(all_to_all_splits),
                      dtype)

            def all_to_all(group):
                outs = [laid_out(torch.zeros(out_splits[j], dtype=dtype), lay) for j in range(n)]
                ins = [laid_out(c, lay) for c in xs[rank].split(in_splits)]
                dist.all_to_all(outs, ins, group=group)
                return torch.cat(outs)
            chk.check(f"all_to_all {tag}", all_to_all(rd), want, on_gloo(all_to_all), dtype)

            xs = inputs(L, dtype)

            def gather(group):
                outs = [laid_out(torch.zeros(L, dtype=dtype), lay) for _ in range(n)] if rank == 0 else None
                dist.gather(laid_out(xs[rank], lay), gather_list=outs, dst=0, group=group)
                return torch.cat(outs) if rank == 0 else None
            got, gloo = gather(rd), on_gloo(gather)
            if rank == 0:
                chk.check(f"gather {tag}", got, torch.cat(xs), gloo, dtype)

            xs = inputs(n * L, dtype)

            def scatter(group):
                out = laid_out(torch.zeros(L, dtype=dtype), lay)
                chunks = [laid_out(c, lay) for c in xs[0].split(L)] if L else \
                    [torch.zeros(0, dtype=dtype) for _ in range(n)]
                dist.scatter(out, scatter_list=chunks if rank == 0 else None, src=0, group=group)
                return out
            chk.check(f"scatter {tag}", scatter(rd), xs[0][rank * L:(rank + 1) * L], on_gloo(scatter), dtype)

            # Tagged point to point around a ring, received in the other order than sent.
            a, b = inputs(L, dtype), inputs(L + 1, dtype)
            to, frm = (rank + 1) % n, (rank - 1) % n
            got_a = laid_out(torch.zeros(L, dtype=dtype), lay)
            got_b = laid_out(torch.zeros(L + 1, dtype=dtype), lay)
            sends = [dist.isend(laid_out(a[rank], lay), to, group=rd, tag=7),
                     dist.isend(laid_out(b[rank], lay), to, group=rd, tag=9)]
            recvs = [dist.irecv(got_b, frm, group=rd, tag=9), dist.irecv(got_a, frm, group=rd, tag=7)]
            for w in sends + recvs:
                w.wait()
            chk.check(f"send/recv tags {tag}", torch.cat([got_a, got_b]), torch.cat([a[frm], b[frm]]), None, dtype)

    GLOO_SKIPS_EMPTY[0] = False
    # Sizes that take rdmx's pipelined algorithms; a 2-D transposed view.
    big = 300_007
    xs = inputs(big, torch.float32)
    t = xs[rank].clone()
    dist.all_reduce(t, group=rd)
    chk.check("all_reduce float32 large", t, reduce_ref(xs, dist.ReduceOp.SUM, torch.float32), None, torch.float32)
    out = torch.zeros(n * big)
    dist.all_gather_into_tensor(out, xs[rank], group=rd)
    chk.check("all_gather_into_tensor float32 large", out, torch.cat(xs), None, torch.float32)
    m = inputs(6 * 10, torch.float64)
    t = m[rank].clone().view(6, 10).t()
    dist.all_reduce(t, group=rd)
    want = reduce_ref(m, dist.ReduceOp.SUM, torch.float64).view(6, 10).t()
    chk.check("all_reduce float64 transposed", t, want, None, torch.float64)
    dist.barrier(group=rd)

    # A dtype rdmx has not: a clear error naming it, and the group stays usable.
    errors = []
    try:
        dist.all_reduce(torch.zeros(4, dtype=torch.int16), group=rd)
    except RuntimeError as e:
        errors.append(str(e))
    try:
        dist.all_reduce(torch.zeros(4, dtype=torch.int32), op=dist.ReduceOp.BAND, group=rd)
    except RuntimeError as e:
        errors.append(str(e))
    t = torch.ones(3)
    dist.all_reduce(t, group=rd)
    chk.check("all_reduce after refused calls", t, torch.full((3,), float(n)), None, torch.float32)
    dist.destroy_process_group()
    emit({"cases": chk.cases, "vs_gloo": chk.vs_gloo, "vs_reference": chk.vs_reference,
          "failures": chk.failures, "errors": errors})


def init_rdmx(args):
    kwargs = {}
    if "timeout_s" in args:
        kwargs["timeout"] = timedelta(seconds=args["timeout_s"])
    dist.init_process_group("rdmx", **kwargs)


@scenario
def async_and_groups(args):
    """async_op works, get_future and its callbacks, subgroups, destroy."""
    init_rdmx(args)
    rank, n = dist.get_rank(), dist.get_world_size()
    failures = []
    ts = [torch.full((1000,), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for i, (w, t) in enumerate(zip(works, ts)):
        if w.wait() is not True:
            failures.append(f"wait() of work {i} did not return True")
        if not w.is_completed():
            failures.append(f"work {i} not completed after wait()")
        want = float(sum(r + i for r in range(n)))
        if not torch.equal(t, torch.full((1000,), want)):
            failures.append(f"async all_reduce {i}: got {t[0].item()} want {want}")
    t = torch.full((5,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    got = doubled.wait()
    want = 2.0 * sum(r + 1 for r in range(n))
    if not torch.equal(got, torch.full((5,), want)):
        failures.append(f"get_future().then: got {got.tolist()} want {want}")
    if not (isinstance(fut.value(), list) and fut.value()[0] is not None):
        failures.append("the future's value is not a list of tensors")
    # Waited through the future (above) or with a timeout, a task is left to
    # the group's thread; a plain wait() runs it on the caller's.
    t = torch.full((3,), float(rank))
    if dist.all_reduce(t, async_op=True).wait(timeout=timedelta(seconds=30)) is not True:
        failures.append("wait(timeout) did not return True")
    if not torch.equal(t, torch.full((3,), float(sum(range(n))))):
        failures.append(f"all_reduce waited with a timeout: got {t.tolist()}")
    # Several in flight, completed in order; the last is waited on first.
    outs = [torch.zeros(n * 4) for _ in range(4)]
    works = [dist.all_gather_into_tensor(o, torch.full((4,), float(rank * 10 + k)), async_op=True)
             for k, o in enumerate(outs)]
    works[-1].wait()
    for k, (w, o) in enumerate(zip(works, outs)):
        if not w.is_completed():
            failures.append(f"work {k} issued before the last is not completed when the last is")
        want = torch.cat([torch.full((4,), float(r * 10 + k)) for r in range(n)])
        if not torch.equal(o, want):
            failures.append(f"async all_gather_into_tensor {k} wrong")
    # Subgroups: the even ranks, then every rank but 0, each with its own timeout.
    evens = list(range(0, n, 2))
    sub = dist.new_group(evens, backend="rdmx", timeout=timedelta(seconds=30))
    if rank in evens:
        t = torch.ones(3) * rank
        dist.all_reduce(t, group=sub)
        if not torch.equal(t, torch.ones(3) * sum(evens)):
            failures.append(f"subgroup {evens}: got {t.tolist()}")
        if dist.get_rank(sub) != evens.index(rank) or dist.get_world_size(sub) != len(evens):
            failures.append("subgroup rank or size wrong")
    rest = list(range(1, n))
    sub2 = dist.new_group(rest, backend="rdmx")
    if rank in rest:
        t = torch.tensor([float(rank)])
        dist.broadcast(t, src=rest[-1], group=sub2)
        if t.item() != float(rest[-1]):
            failures.append(f"subgroup {rest}: broadcast got {t.item()}")
    if rank in evens:
        dist.destroy_process_group(sub)
    t = torch.ones(2)
    dist.all_reduce(t)
    if not torch.equal(t, torch.full((2,), float(n))):
        failures.append("the default group after destroying a subgroup")
    backend = dist.get_backend()
    dist.destroy_process_group()
    emit({"failures": failures, "backend": backend})


def raised(fn):
    """Runs fn; returns (the RuntimeError's message or None, seconds taken)."""
    start = time.monotonic()
    try:
        fn()
        message = None
    except RuntimeError as e:
        message = str(e)
    return message, time.monotonic() - start


@scenario
def mismatch(args):
    """Rank 0 all_reduces, the others broadcast: every rank must raise at once."""
    init_rdmx(args)
    rank = dist.get_rank()
    dist.all_reduce(torch.ones(4))
    if rank == 0:
        message, seconds = raised(lambda: dist.all_reduce(torch.ones(1000)))
    else:
        message, seconds = raised(lambda: dist.broadcast(torch.ones(1000), src=0))
    dist.destroy_process_group()
    emit({"message": message, "seconds": seconds})


@scenario
def missing_rank(args):
    """The last rank never calls the collective; the others must raise by the timeout."""
    init_rdmx(args)
    rank, n = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    message, seconds = None, 0.0
    if rank == n - 1:
        # Leaves only once the others have seen their error.
        store.wait([f"raised/{r}" for r in range(n - 1)], timedelta(seconds=120))
    else:
        message, seconds = raised(lambda: dist.all_reduce(torch.ones(10)))
        store.set(f"raised/{rank}", "1")
    emit({"message": message, "seconds": seconds})
    # Rank 0 serves the store: it leaves last.
    if rank == 0:
        store.wait([f"left/{r}" for r in range(1, n)], timedelta(seconds=120))
    else:
        store.set(f"left/{rank}", "1")
    os._exit(0)  # the group is unusable after the error; torch would try to tear it down


@scenario
def dead_rank(args):
    """The last rank exits without a word; the others must raise, not hang or crash."""
    init_rdmx(args)
    rank, n = dist.get_rank(), dist.get_world_size()
    store = dist.distributed_c10d._get_default_store()
    dist.all_reduce(torch.ones(4))
    if rank == n - 1:
        # Its all_reduce may end before the others' have had its confirmation:
        # dying then would fail the first call, which the test does not check.
        store.wait([f"first/{r}" for r in range(n - 1)], timedelta(seconds=120))
        os._exit(3)
    store.set(f"first/{rank}", "1")

    def three_calls():
        for _ in range(3):
            dist.all_reduce(torch.ones(100_000))
    message, seconds = raised(three_calls)
    dist.destroy_process_group()
    emit({"message": message, "seconds": seconds})


@scenario
def ddp(args):
    """A small model trained with DistributedDataParallel for `steps` steps."""
    torch.manual_seed(0)
    dist.init_process_group(args["backend"], timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    # Parameters differ per rank before DDP: its first broadcast must align them.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank * 0.01)
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05, momentum=0.9)
    # One fixed batch per rank, so that 20 steps visibly lower the loss.
    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(16, 32, generator=g)
    y = torch.randint(0, 10, (16,), generator=g)
    losses = []
    for _ in range(args.get("steps", 20)):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp_model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    dist.destroy_process_group()
    emit({"losses": losses, "params": params})


@scenario
def ddp_profiled(args):
    """DDP steps under RDMX_PROFILE: several gradient buckets per step, steps
    marked with rdmx.torch.profile_step() when args["mark"]."""
    import rdmx.torch as rdmx_torch

    torch.manual_seed(0)
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    # About 0.5 MB of gradients in 0.1 MB buckets, the first smaller (as
    # DDP's 1 MiB first bucket is against its 25 MiB ones): after DDP
    # rebuilds its buckets, two or more all_reduces a step, the first of a
    # size of its own.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 12 * 1024
    ddp_model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.1)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    rdmx_torch.profile_describe(32, sum(p.numel() for p in model.parameters()))
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(rank))
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(rank))
    for _ in range(args["steps"]):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp_model(x), y).backward()
        opt.step()
        if args["mark"]:
            rdmx_torch.profile_step()
    dist.destroy_process_group()
    emit({"rank": rank})


@scenario
def env_only(args):
    """init_process_group("rdmx") from the environment a launcher set; one all_reduce."""
    dist.init_process_group("rdmx")
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    emit({"rank": rank, "world": n, "sum": t.item()})


if __name__ == "__main__":
    name = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    SCENARIOS[name](args)
