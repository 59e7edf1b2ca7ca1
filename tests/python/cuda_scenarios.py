"""What each rank of a CUDA-tensor test runs: `python cuda_scenarios.py NAME JSON_ARGS`.

The "rdmx" backend on CUDA tensors, held against the same calls on CPU
tensors of the same group (the default rdmx group serves both devices):
every collective, DDP and FSDP2, ordering on the current stream, the caching
allocator, and the errors. Every rank uses cuda:(rank % device_count), so
ranks share a GPU where there is one (rdmx allows that; NCCL does not).
Each rank reports {"failures": [...], ...} (scenarios.emit); an exception
nobody expected reports {"error": trace}.
"""
# SPDX-License-Identifier: MIT
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn

import rdmx.torch  # noqa: F401  (registers the "rdmx" backend)
from api import Checks, error_of
from scenarios import reporting_scenarios, values

SCENARIOS, scenario = reporting_scenarios(exit_after=True)
CPU = torch.device("cpu")


def start(timeout_s=60):
    dist.init_process_group("rdmx", timeout=timedelta(seconds=timeout_s))
    rank = dist.get_rank()
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return rank, dist.get_world_size(), device


def on(x, device, layout="contiguous"):
    """x (1-D, CPU) on `device` in a tensor of the given layout, as api.laid_out lays it out:
    contiguous, strided, offset (a view into a storage) or transposed; in row-major order,
    its values are x's."""
    n = x.numel()

    def zeros(*shape):
        return torch.zeros(*shape, dtype=x.dtype, device=device)
    if layout == "strided":
        t = zeros(2 * n + 1)[1::2][:n]
    elif layout == "offset":
        t = zeros(n + 3)[3:]
    elif layout == "transposed" and n % 2 == 0 and n > 0:
        t = zeros(n // 2, 2).t()
    else:
        t = zeros(n)
    t.copy_(x.view(t.shape).to(device))
    return t


# ---------------------------------------------------------------------------
def every_operation(device, rank, n, dtype, layout, async_op, seed):
    """Each collective and tagged message once on `device`; their outputs, on the CPU, by name."""
    out = {}
    count = 2 * n * 3  # divisible by the group size for 2 and 3 ranks, and even (transposed)
    x = values(seed + rank, count, dtype)

    def run(name, work):
        if async_op and work is not None:
            work.wait()
        sync()

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def tensor(v, lay=layout):
        return on(v, device, lay)

    summable = dtype != torch.bool
    t = tensor(x)
    run("all_reduce", dist.all_reduce(t, async_op=async_op))
    out["all_reduce"] = t.cpu()
    if dtype.is_floating_point:
        for op_name in ("AVG", "MAX", "MIN", "PRODUCT"):
            t = tensor(values(seed + 50 + rank, count, dtype, for_product=op_name == "PRODUCT"))
            run(op_name, dist.all_reduce(t, op=getattr(dist.ReduceOp, op_name), async_op=async_op))
            out["all_reduce_" + op_name] = t.cpu()
    t = tensor(x)
    run("broadcast", dist.broadcast(t, src=n - 1, async_op=async_op))
    out["broadcast"] = t.cpu()
    t = tensor(x)
    run("reduce", dist.reduce(t, dst=0, async_op=async_op))
    if rank == 0:
        out["reduce"] = t.cpu()
    outs = [tensor(torch.zeros(count, dtype=dtype)) for _ in range(n)]
    run("all_gather", dist.all_gather(outs, tensor(x), async_op=async_op))
    out["all_gather"] = torch.cat([o.cpu().reshape(-1) for o in outs])
    big = tensor(torch.zeros(count * n, dtype=dtype))
    run("all_gather_into_tensor", dist.all_gather_into_tensor(big, tensor(x), async_op=async_op))
    out["all_gather_into_tensor"] = big.cpu()
    if summable:
        small = tensor(torch.zeros(count // n, dtype=dtype), "contiguous")
        run("reduce_scatter_tensor", dist.reduce_scatter_tensor(small, tensor(x), async_op=async_op))
        out["reduce_scatter_tensor"] = small.cpu()
        ins = [tensor(values(seed + 100 * j + rank, count, dtype)) for j in range(n)]
        o = tensor(torch.zeros(count, dtype=dtype))
        run("reduce_scatter", dist.reduce_scatter(o, ins, async_op=async_op))
        out["reduce_scatter"] = o.cpu()
    a2a_out = tensor(torch.zeros(count, dtype=dtype), "contiguous")
    run("all_to_all_single", dist.all_to_all_single(a2a_out, tensor(x, "contiguous"), async_op=async_op))
    out["all_to_all_single"] = a2a_out.cpu()
    # Uneven splits: rank r sends j + 1 rows to rank j.
    rows_in = [j + 1 for j in range(n)]
    rows_out = [rank + 1] * n
    src = on(values(seed + 7 + rank, sum(rows_in) * 2, dtype), device).reshape(sum(rows_in), 2)
    dst = on(torch.zeros(sum(rows_out) * 2, dtype=dtype), device).reshape(sum(rows_out), 2)
    run("all_to_all_single_uneven", dist.all_to_all_single(dst, src, rows_out, rows_in, async_op=async_op))
    out["all_to_all_single_uneven"] = dst.cpu()
    a2a_ins = [tensor(values(seed + 300 + 10 * rank + j, count, dtype)) for j in range(n)]
    a2a_outs = [tensor(torch.zeros(count, dtype=dtype)) for _ in range(n)]
    run("all_to_all", dist.all_to_all(a2a_outs, a2a_ins, async_op=async_op))
    out["all_to_all"] = torch.cat([o.cpu().reshape(-1) for o in a2a_outs])
    gl = [tensor(torch.zeros(count, dtype=dtype)) for _ in range(n)] if rank == 0 else None
    run("gather", dist.gather(tensor(x), gl, dst=0, async_op=async_op))
    if rank == 0:
        out["gather"] = torch.cat([o.cpu().reshape(-1) for o in gl])
    sl = [tensor(values(seed + 400 + j, count, dtype)) for j in range(n)] if rank == 0 else None
    so = tensor(torch.zeros(count, dtype=dtype))
    run("scatter", dist.scatter(so, sl, src=0, async_op=async_op))
    out["scatter"] = so.cpu()
    run("barrier", dist.barrier(async_op=async_op))
    if summable:
        with dist._coalescing_manager(async_ops=async_op) as cm:
            c1, c2 = tensor(values(seed + 500 + rank, count, dtype)), tensor(values(seed + 600 + rank, 6, dtype))
            dist.all_reduce(c1)
            dist.all_reduce(c2)
        if async_op:
            cm.wait()
        sync()
        out["coalesced_all_reduce"] = torch.cat([c1.cpu().reshape(-1), c2.cpu().reshape(-1)])
    # Tagged messages around the ring, received in the other order than sent
    # (the first one is kept until its recv: the out-of-order path), then a
    # batch of 80 KB messages (written in place).
    right, left = (rank + 1) % n, (rank - 1) % n
    m1, m2 = tensor(values(seed + 700 + rank, count, dtype)), tensor(values(seed + 800 + rank, count, dtype))
    r1, r2 = tensor(torch.zeros(count, dtype=dtype)), tensor(torch.zeros(count, dtype=dtype))
    sends = [dist.isend(m1, right, tag=1), dist.isend(m2, right, tag=2)]
    dist.irecv(r2, left, tag=2).wait()
    dist.irecv(r1, left, tag=1).wait()
    for s in sends:
        s.wait()
    sync()
    out["tags_reversed"] = torch.cat([r1.cpu().reshape(-1), r2.cpu().reshape(-1)])
    bigger = 20000
    b_send = on(values(seed + 900 + rank, bigger, dtype), device)
    b_recv = on(torch.zeros(bigger, dtype=dtype), device)
    ops = [dist.P2POp(dist.isend, b_send, right), dist.P2POp(dist.irecv, b_recv, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    sync()
    out["batch_isend_irecv"] = b_recv.cpu()
    return out


@scenario
def collectives_match_cpu(args):
    """Every operation on CUDA tensors against the same calls on CPU tensors, on the same group."""
    rank, n, device = start()
    chk = Checks()
    compared = 0
    for dtype_name in args["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for layout in args["layouts"]:
            for async_op in (False, True):
                seed = 1000 * len(dtype_name) + 10 * len(layout)
                want = every_operation(CPU, rank, n, dtype, layout, async_op, seed)
                got = every_operation(device, rank, n, dtype, layout, async_op, seed)
                chk.true(f"{dtype_name} {layout} async={async_op}: operations differ "
                         f"({sorted(want)} against {sorted(got)})", sorted(want) == sorted(got))
                for name, w in want.items():
                    if name in got:
                        chk.equal(f"{name} {dtype_name} {layout} async={async_op}", got[name], w)
                        compared += 1
    dist.destroy_process_group()
    return {"failures": chk.failures, "compared": compared}


@scenario
def async_matches_blocking_on_cpu(args):
    """Every operation on CPU tensors, asynchronous against blocking: an async call keeps its
    staging tensors (dense copies of non-contiguous inputs) until it completes."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    chk = Checks()
    for dtype_name in args["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for layout in args["layouts"]:
            want = every_operation(CPU, rank, n, dtype, layout, False, 17)
            got = every_operation(CPU, rank, n, dtype, layout, True, 17)
            for name, w in want.items():
                chk.equal(f"{name} {dtype_name} {layout}", got[name], w)
    dist.destroy_process_group()
    return {"failures": chk.failures}


# ---------------------------------------------------------------------------
def ddp_losses(device, steps):
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(device)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank * 0.01)  # replicas start apart: DDP's broadcast aligns them
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                              bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    x, y = torch.randn(32, 16, generator=g).to(device), torch.randint(0, 4, (32,), generator=g).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


@scenario
def ddp_matches_cpu(args):
    rank, n, device = start()
    torch.backends.cuda.matmul.allow_tf32 = False
    cpu_losses, cpu_params = ddp_losses(CPU, args["steps"])
    cuda_losses, cuda_params = ddp_losses(device, args["steps"])
    tol = args["tolerance"]
    failures = []
    if not torch.allclose(torch.tensor(cuda_losses), torch.tensor(cpu_losses), rtol=tol, atol=tol):
        failures.append(f"losses: cuda {cuda_losses} cpu {cpu_losses}")
    diff = (cuda_params - cpu_params).abs().max().item()
    if diff > tol:
        failures.append(f"parameters differ by up to {diff} (tolerance {tol})")
    if not cuda_losses[-1] < cuda_losses[0]:
        failures.append(f"the loss did not fall: {cuda_losses}")
    # Every rank holds the same parameters.
    mine = cuda_params.to(device)
    ref = mine.clone()
    dist.broadcast(ref, src=0)
    if not torch.equal(mine, ref):
        failures.append("ranks' CUDA parameters differ")
    dist.destroy_process_group()
    return {"failures": failures, "cpu_losses": cpu_losses, "cuda_losses": cuda_losses, "max_diff": diff}


# ---------------------------------------------------------------------------
def slow_fill(t, value, rounds):
    """t = value, by many kernels on the current stream: still running when the host goes on."""
    t.zero_()
    for _ in range(rounds):
        t.add_(value / rounds)


@scenario
def stream_ordering(args):
    """Inputs written by kernels on the current (side) stream just before the call are what is
    reduced, and kernels queued after the call see the result, without a host sync in between;
    wait() orders the current stream after a call made on another one."""
    rank, n, device = start()
    elems, rounds = args["elems"], args["rounds"]
    chk = Checks()
    total = float(sum(range(1, n + 1)))
    side = torch.cuda.Stream(device)
    for async_op in (False, True):
        with torch.cuda.stream(side):
            x = torch.empty(elems, device=device)
            slow_fill(x, float(rank + 1), rounds)
            work = dist.all_reduce(x, async_op=async_op)
            y = x * 2  # queued on the side stream after the call
            # A staged result (a non-contiguous output) is copied out before later work too.
            outs = [torch.zeros(8, 2, device=device).t() for _ in range(n)]
            src = torch.empty(16, device=device)
            slow_fill(src, float(rank + 1), rounds)
            gather = dist.all_gather(outs, src, async_op=async_op)
            # The default stream busy meanwhile: copies queued there would land late.
            with torch.cuda.stream(torch.cuda.default_stream(device)):
                busy = torch.empty(elems, device=device)
                slow_fill(busy, 1.0, 4 * rounds)
            z = torch.stack([o.reshape(-1) for o in outs]) + 0
        if async_op:
            work.wait()
            gather.wait()
        side.synchronize()
        chk.true(f"async={async_op}: all_reduce gave {x[:3].tolist()}, expected {total}",
                 bool((x == total).all()))
        chk.true(f"async={async_op}: the kernel after the call saw {y[:3].tolist()}, expected {2 * total}",
                 bool((y == 2 * total).all()))
        want = torch.stack([torch.full((16,), float(r + 1)) for r in range(n)])
        chk.true(f"async={async_op}: staged all_gather then a kernel: {z[:, :3].tolist()}",
                 torch.equal(z.cpu(), want))
    # wait() on the default stream for a call made on the side stream.
    with torch.cuda.stream(side):
        x = torch.empty(elems, device=device)
        slow_fill(x, float(rank + 1), rounds)
        outs = [torch.zeros(4, 4, device=device).t() for _ in range(n)]
        src = torch.full((16,), float(rank + 1), device=device)
        works = [dist.all_reduce(x, async_op=True), dist.all_gather(outs, src, async_op=True)]
    for w in works:
        w.wait()
    y = x + 1  # the default stream, after wait()
    z = torch.stack([o.reshape(-1) for o in outs]) + 0
    chk.true(f"wait() then the default stream: {y[:3].tolist()}", bool((y == total + 1).all()))
    chk.true("wait() then the default stream, staged all_gather",
             torch.equal(z.cpu(), torch.stack([torch.full((16,), float(r + 1)) for r in range(n)])))
    # Tagged messages and a collective queued behind them, all on the stream
    # (the message runs on the executor after the collective was called).
    peer = 1 - rank if n == 2 else (rank + 1) % n
    msg = torch.empty(elems // 4, device=device)
    slow_fill(msg, float(rank + 1), rounds)
    box = torch.zeros(elems // 4, device=device)
    if rank % 2 == 0:
        p2p = dist.isend(msg, peer)
    else:
        p2p = dist.irecv(box, peer)
    after = torch.full((1000,), float(rank + 1), device=device)
    coll = dist.all_reduce(after, async_op=True)
    p2p.wait()
    coll.wait()
    torch.cuda.synchronize()
    chk.true(f"all_reduce after a tagged message: {after[:3].tolist()}", bool((after == total).all()))
    if rank % 2 == 1:
        chk.true(f"the message received: {box[:3].tolist()}", bool((box == float(peer + 1)).all()))
    dist.destroy_process_group()
    return {"failures": chk.failures}


@scenario
def allocator_reuse(args):
    """The caching allocator does not hand an operation's tensors to another allocation before the
    operation completes: inputs freed right after an async call, their memory asked for again at
    once on the stream they were allocated on, while the call runs on another stream."""
    rank, n, device = start()
    elems, rounds = args["elems"], args["rounds"]
    chk = Checks()
    total = float(sum(range(1, n + 1)))
    side = torch.cuda.Stream(device)
    reused = 0
    for trial in range(args["trials"]):
        # Allocated and written on the default stream; the call is ordered on the side stream.
        x = torch.empty(elems, device=device)
        slow_fill(x, float(rank + 1), rounds)
        strided = torch.empty(2 * elems, device=device)[::2]
        strided.fill_(float(rank + 1))
        big = torch.empty(elems * n, device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            w1 = dist.all_gather_into_tensor(big, x, async_op=True)
            w2 = dist.all_reduce(strided, async_op=True)  # non-contiguous: reduced in a staging copy
        ptrs = {x.data_ptr(), strided.data_ptr()}
        del x, strided
        # Same sizes, same (default) stream: the blocks just freed, if they were freed.
        junk = [torch.empty(elems, device=device), torch.empty(2 * elems, device=device)]
        reused += sum(1 for j in junk if j.data_ptr() in ptrs)
        for j in junk:
            j.fill_(-7.0)
        w1.wait()
        w2.wait()
        result = w2.result()[0]
        side.synchronize()
        want = torch.cat([torch.full((elems,), float(r + 1), device=device) for r in range(n)])
        chk.true(f"trial {trial}: all_gather_into_tensor of a freed input: {big[::elems][:n].tolist()}",
                 torch.equal(big, want))
        chk.true(f"trial {trial}: all_reduce of a freed strided input: {result[:3].tolist()}",
                 bool((result == total).all()))
        del junk, big, result, w1, w2
    torch.cuda.synchronize()
    dist.destroy_process_group()
    return {"failures": chk.failures, "reused_while_running": reused}


@scenario
def error_types(args):
    """The same mistakes on CPU and on CUDA tensors raise the same exception types."""
    rank, n, device = start(timeout_s=args["timeout_s"])
    out = {}
    for kind in ("cpu", "cuda"):
        dev = CPU if kind == "cpu" else device
        g = dist.new_group(backend="rdmx", timeout=timedelta(seconds=args["timeout_s"]))
        # Argument errors at the call; the group stays usable.
        out[kind + "_dtype"] = error_of(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16, device=dev),
                                                                group=g))[:2]
        out[kind + "_band"] = error_of(lambda: dist.all_reduce(torch.ones(4, device=dev), op=dist.ReduceOp.BAND,
                                                               group=g))[:2]
        out[kind + "_sizes_at_call"] = error_of(lambda: dist.all_gather_into_tensor(
            torch.zeros(3, device=dev), torch.zeros(2, device=dev), group=g))[:2]
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t, group=g)
        out[kind + "_usable_after"] = t.cpu().tolist()
        # Sizes that differ across ranks: the group is unusable after it.
        out[kind + "_mismatched"] = error_of(lambda: dist.all_reduce(torch.ones(10 + rank, device=dev),
                                                                     group=g))[:2]
    g = dist.new_group(backend="rdmx", timeout=timedelta(seconds=args["timeout_s"]))
    out["mixed"] = error_of(lambda: dist.all_gather_into_tensor(torch.zeros(4 * n, device=device),
                                                                torch.zeros(4), group=g))[:2]
    out["mixed_list"] = error_of(lambda: dist.all_gather([torch.zeros(4, device=device) for _ in range(n - 1)] +
                                                         [torch.zeros(4)], torch.zeros(4, device=device),
                                                         group=g))[:2]
    return out


@scenario
def fsdp2_matches_cpu(args):
    """fully_shard of a small MLP on a CUDA mesh against the same on a CPU mesh."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank, n, device = start()
    torch.backends.cuda.matmul.allow_tf32 = False
    results = {}
    for kind in ("cpu", "cuda"):
        dev = CPU if kind == "cpu" else device
        mesh = init_device_mesh(kind, (n,))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).to(dev)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(100 + rank)
        x, y = torch.randn(16, 16, generator=g).to(dev), torch.randint(0, 4, (16,), generator=g).to(dev)
        losses = []
        for _ in range(args["steps"]):
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        full = torch.cat([p.full_tensor().detach().cpu().reshape(-1) for p in model.parameters()])
        results[kind] = (losses, full)
    tol = args["tolerance"]
    failures = []
    (cl, cp), (gl, gp) = results["cpu"], results["cuda"]
    if not torch.allclose(torch.tensor(gl), torch.tensor(cl), rtol=tol, atol=tol):
        failures.append(f"losses: cuda {gl} cpu {cl}")
    diff = (gp - cp).abs().max().item()
    if diff > tol:
        failures.append(f"parameters differ by up to {diff} (tolerance {tol})")
    dist.destroy_process_group()
    return {"failures": failures, "cpu_losses": cl, "cuda_losses": gl, "max_diff": diff}


if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
