#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/coll/torch_coll_perf.py: torch.distributed's collectives timed as `rdmx perf coll` times
its own (the Gloo peer of bench/run_coll.sh, and the binding benchmark of bench/torch/run.sh).

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p GLOO_SOCKET_IFNAME=lo \\
      python torch_coll_perf.py [--backend gloo|rdmx]
          --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|gather|scatter|barrier
          [--sizes 4,4K,64K,1M,16M,64M] [--type fp32] [--redop sum|prod|min|max|avg]
          [--root 0] [--iters N] [--warmup N] [--check 0|1] [--device cpu|cuda] [--json PATH]

torch.distributed with backend "gloo" (the default) or "rdmx" (this project's
backend, python/rdmx/torch.py; PYTHONPATH must reach the built package),
init_method env://, one thread per process (torch.set_num_threads(1)), CPU
tensors, or with --device cuda tensors on GPU LOCAL_RANK modulo the GPU
count (several ranks may share one; the timed calls end with
torch.cuda.synchronize(), so a backend that returns before its work is done
is timed to the end of it). Run it with the interpreter of the pinned torch (scripts/deps.sh's
virtual environment).

The three collective benchmarks (`rdmx perf coll`, mpi_coll_perf.c, this
file) measure the same way and print the same table (the two peers take the
same flags; `rdmx perf coll` spells them as nccl-tests does),
after nccl-tests; see the header of mpi_coll_perf.c for the details: size per
rank and count, algbw = size / time (GB = 1e9), busbw factors, the timing
(barrier, `iters` back-to-back calls, per-call time averaged over the ranks),
the iteration rule (5 untimed calls, a barrier, 3 timed calls: iters = 0.2 s /
rank 0's time per call, 5..10000, broadcast; warm-up max(5, iters / 10)), the
in-place conventions, the check patterns and the JSON lines.

Which call each operation times (anything a backend lacks is "n/a" in the
table, or exit status 3 when nothing of the operation is there):
- all_reduce, broadcast, reduce: in place only (torch's API reduces into the
  tensor passed), so their out-of-place column is n/a.
- all_gather: dist.all_gather_into_tensor. In place, the input is this
  rank's block of the output.
- reduce_scatter: dist.reduce_scatter_tensor (in place, the output is this
  rank's block of the input).
- all_to_all: all_to_all_single, out of place only.
- gather, scatter: out of place, and in place with the root's own block as a
  view of the gathered / scattered buffer.
- Types: int8 uint8 int32 int64 fp16 bf16 fp32 fp64 (rdmx's backend takes no
  uint32 or uint64 tensors); redops sum prod min max, and avg with rdmx on
  floating types.
Exit status: 0; 1 an error; 2 a bad argument; 3 unsupported; 4 wrong results.
"""

import datetime
import json
import math
import os
import sys
import time

TARGET_SECONDS = 0.2
MIN_ITERS = 5
MAX_ITERS = 10000
CALIBRATION_WARMUP = 5
CALIBRATION_ITERS = 3
EXIT_USAGE, EXIT_UNSUPPORTED, EXIT_WRONG = 2, 3, 4

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "gather", "scatter",
       "barrier"]
TYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "fp16", "bf16", "fp32", "fp64"]
TYPE_SIZES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "fp16": 2, "bf16": 2,
              "fp32": 4, "fp64": 8}
REDOPS = ["sum", "prod", "min", "max", "avg"]
REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")
ROOTED = ("broadcast", "reduce", "gather", "scatter")

BACKENDS = ["gloo", "rdmx"]

USAGE = """usage: torch_coll_perf.py [--backend gloo|rdmx] --op all_reduce|all_gather|reduce_scatter|broadcast|reduce|all_to_all|gather|scatter|barrier
         [--sizes 4,4K,64K,1M,16M,64M] [--type int8|uint8|int32|int64|fp16|fp32|fp64]
         [--redop sum|prod|min|max|avg] [--root 0] [--iters N] [--warmup N] [--check 0|1]
         [--device cpu|cuda] [--json PATH]
  ranks from RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torch's env://)
"""


class UsageError(Exception):
    pass


def env_rank():
    return int(os.environ.get("RANK", "0") or 0)


def quit_with(status, message):
    # Every rank parses the same command line: rank 0 says it.
    if env_rank() == 0:
        print(f"torch_coll_perf: {message}", file=sys.stderr)
    sys.exit(status)


def parse_size(text, spec):
    shift = {"K": 10, "M": 20, "G": 30}.get(text[-1:].upper(), 0)
    digits = text[:-1] if shift else text
    if not digits.isdigit():
        raise UsageError(f"bad size in --sizes '{spec}'")
    value = int(digits) << shift
    if not 1 <= value <= 1 << 32:
        raise UsageError(f"size out of [1, 4G] in --sizes '{spec}'")
    return value


def parse_count(text, option):
    if not text.isdigit():
        raise UsageError(f"{option} needs a non-negative number, not '{text}'")
    return int(text)


def parse_options(argv):
    o = {"backend": "gloo", "op": "all_reduce", "sizes": [parse_size(s, "") for s in "4,4K,64K,1M,16M,64M".split(",")],
         "type": "fp32", "redop": "sum", "root": 0, "iters": 0, "warmup": -1, "check": True, "json": None,
         "device": "cpu"}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--help", "-h"):
            if env_rank() == 0:
                sys.stdout.write(USAGE)
            sys.exit(0)
        if i + 1 >= len(argv):
            raise UsageError(f"{arg} needs a value")
        value = argv[i + 1]
        if arg == "--backend":
            if value not in BACKENDS:
                raise UsageError(f"unknown --backend '{value}'")
            o["backend"] = value
        elif arg == "--op":
            if value not in OPS:
                raise UsageError(f"unknown --op '{value}'")
            o["op"] = value
        elif arg in ("--sizes", "--size"):
            o["sizes"] = [parse_size(s, value) for s in value.split(",")]
        elif arg == "--type":
            value = "fp32" if value == "float" else value
            if value not in TYPES:
                raise UsageError(f"unknown --type '{value}'")
            o["type"] = value
        elif arg == "--redop":
            if value not in REDOPS:
                raise UsageError(f"unknown --redop '{value}'")
            o["redop"] = value
        elif arg == "--root":
            o["root"] = parse_count(value, arg)
        elif arg == "--iters":
            o["iters"] = parse_count(value, arg)
            if o["iters"] < 1:
                raise UsageError("--iters must be at least 1")
        elif arg == "--warmup":
            o["warmup"] = parse_count(value, arg)
        elif arg == "--check":
            o["check"] = parse_count(value, arg) != 0
        elif arg == "--device":
            if value not in ("cpu", "cuda"):
                raise UsageError(f"unknown --device '{value}' (cpu or cuda)")
            o["device"] = value
        elif arg == "--json":
            o["json"] = value
        else:
            raise UsageError(f"unknown option '{arg}'")
        i += 2
    return o


def layout_for(op, nbytes, esize, n):
    """(count passed to the call, send elements, receive elements, size reported in bytes)."""
    per_rank = nbytes // esize // n
    if op in ("all_reduce", "broadcast", "reduce"):
        count = nbytes // esize
        send = recv = count
    elif op in ("all_gather", "gather"):
        count, send, recv = per_rank, per_rank, per_rank * n
    elif op in ("reduce_scatter", "scatter"):
        count, send, recv = per_rank, per_rank * n, per_rank
    elif op == "all_to_all":
        count, send, recv = per_rank, per_rank * n, per_rank * n
    else:  # barrier
        count = send = recv = 0
    return count, send, recv, max(send, recv) * esize


def bus_factor(op, n):
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"):
        return (n - 1) / n
    return 1.0


def has_mode(op, inplace, backend):
    """Which rows the backend's calls have (see the module docstring)."""
    if op == "reduce_scatter" and backend == "gloo":
        return not inplace
    if op == "barrier":
        return not inplace
    if op in ("all_reduce", "broadcast", "reduce"):
        return inplace
    if op == "all_to_all":
        return not inplace
    return True


def format_time(us):
    if us < 10:
        return f"{us:.3f}"
    if us < 100:
        return f"{us:.2f}"
    if us < 10000:
        return f"{us:.1f}"
    return f"{us:.0f}"


def format_bw(gbps):
    return f"{gbps:.3f}" if gbps < 10 else f"{gbps:.2f}"


CALLS = {"all_gather": "dist.all_gather_into_tensor", "reduce_scatter": "dist.reduce_scatter_tensor",
         "all_to_all": "dist.all_to_all_single"}


def rdmx_transport(dist):
    """The providers the rdmx group reaches its peers over, as "shm" or "shm+tcp"."""
    group = dist.distributed_c10d._get_default_group()
    if hasattr(group, "_get_backend"):  # torch 2.x wraps the backend in a ProcessGroup
        import torch
        group = group._get_backend(torch.device("cpu"))
    providers = sorted({p for p in getattr(group, "peer_providers", []) if p})
    return "+".join(providers) or "self"


def main():
    try:
        o = parse_options(sys.argv[1:])
    except UsageError as e:
        quit_with(EXIT_USAGE, f"{e}\n{USAGE}")
    backend, op, type_name, redop_name = o["backend"], o["op"], o["type"], o["redop"]
    gloo = backend == "gloo"
    if type_name in ("uint32", "uint64"):
        quit_with(EXIT_UNSUPPORTED, f"unsupported: the rdmx backend takes no {type_name} tensors")
    if op in REDUCTIONS and redop_name == "avg":
        # Gloo has no avg; rdmx's is not checked here, since n-way averages are inexact.
        quit_with(EXIT_UNSUPPORTED, "unsupported: avg is not benchmarked here")

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dtypes = {"int8": torch.int8, "uint8": torch.uint8, "int32": torch.int32, "int64": torch.int64,
              "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
    redops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
              "max": dist.ReduceOp.MAX}
    dtype = dtypes[type_name]
    esize = TYPE_SIZES[type_name]

    if not gloo:
        import rdmx.torch  # noqa: F401  registers the backend
    timeout = datetime.timedelta(seconds=float(os.environ.get("TORCH_BENCH_TIMEOUT", "300")))
    cuda = o["device"] == "cuda"
    if cuda and not torch.cuda.is_available():
        quit_with(EXIT_UNSUPPORTED, f"unsupported: --device cuda, but torch {torch.__version__} sees no CUDA device")
    dist.init_process_group(backend, init_method="env://", timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)

    def settle():
        if cuda:
            torch.cuda.synchronize(device)
    transport = "tcp" if gloo else rdmx_transport(dist)
    root = o["root"]
    if root >= n:
        quit_with(EXIT_USAGE, f"--root {root} is not a rank of {n}")
    redop = redops.get(redop_name, dist.ReduceOp.SUM)

    sizes = [0] if op == "barrier" else o["sizes"]
    send_max = recv_max = 0
    for size in sizes:
        _, send, recv, _ = layout_for(op, size, esize, n)
        send_max, recv_max = max(send_max, send), max(recv_max, send, recv)
    # Zeroed, so every page is touched before timing.
    send_buf = torch.zeros(send_max + 64, dtype=dtype, device=device)
    recv_buf = torch.zeros(recv_max + 64, dtype=dtype, device=device)

    def make_call(count, send_elems, recv_elems, inplace):
        """The call for one row, with its views built beforehand, and where its input and output are."""
        if op == "barrier":
            return dist.barrier, None, None
        send = send_buf[:send_elems]
        recv = recv_buf[:max(send_elems, recv_elems)]
        # Views are made here, not in the timed call: slicing costs a Python call.
        target = recv[:count]
        if op == "all_reduce":
            return (lambda: dist.all_reduce(target, op=redop)), target, target
        if op == "broadcast":
            return (lambda: dist.broadcast(target, src=root)), target, target
        if op == "reduce":
            return (lambda: dist.reduce(target, dst=root, op=redop)), target, target
        if op == "all_gather":
            output = recv[:n * count]
            source = output[rank * count:(rank + 1) * count] if inplace else send[:count]
            return (lambda: dist.all_gather_into_tensor(output, source)), source, output
        if op == "reduce_scatter":
            source = recv[:n * count] if inplace else send[:n * count]
            output = source[rank * count:(rank + 1) * count] if inplace else recv[:count]
            return (lambda: dist.reduce_scatter_tensor(output, source, op=redop)), source, output
        if op == "all_to_all":
            output = recv[:n * count]
            return (lambda: dist.all_to_all_single(output, send)), send, output
        if op == "gather":
            chunks = list(recv[:n * count].chunk(n))
            source = chunks[rank] if inplace else send[:count]
            gather_list = chunks if rank == root else None
            return (lambda: dist.gather(source, gather_list, dst=root)), source, recv[:n * count]
        if op == "scatter":
            source = recv[:n * count] if inplace else send[:n * count]
            scatter_list = list(source.chunk(n)) if rank == root else None
            output = recv[rank * count:(rank + 1) * count] if inplace else recv[:count]
            return (lambda: dist.scatter(output, scatter_list, src=root)), source, output
        raise AssertionError(op)

    def iterations_for(call):
        if o["iters"] > 0:
            return o["iters"]
        for _ in range(CALIBRATION_WARMUP):
            call()
        settle()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(CALIBRATION_ITERS):
            call()
        settle()
        per_call = (time.perf_counter() - start) / CALIBRATION_ITERS
        iters = torch.zeros(1, dtype=torch.int64)
        if rank == 0:
            want = math.ceil(TARGET_SECONDS / per_call) if per_call > 0 else MAX_ITERS
            iters[0] = min(MAX_ITERS, max(MIN_ITERS, want))
        dist.broadcast(iters, src=0)
        return int(iters[0])

    def time_calls(call, iters):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            call()
        settle()
        mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
        dist.all_reduce(mine)
        return float(mine[0]) / n

    sentinel = torch.tensor(-1, dtype=torch.int64).to(dtype)

    def reduce_input(r, index):
        base = ((r + 1) * (index % 7 + 1)) % 16
        return 1 + base % 2 if redop_name == "prod" else base

    def move_input(r, index):
        return (r * 17 + (index % 101) * 5 + 3) % 101

    def expected_reduction(index):
        acc = reduce_input(0, index)
        for r in range(1, n):
            v = reduce_input(r, index)
            if redop_name == "sum":
                acc = acc + v
            elif redop_name == "prod":
                acc = acc * v
            elif redop_name == "min":
                acc = torch.minimum(acc, v)
            else:
                acc = torch.maximum(acc, v)
        return acc

    def count_wrong(got, want):
        # Integers wrap and floats round as the type does; every value is exact.
        return int((got.cpu().to(torch.float64) != want.to(dtype).to(torch.float64)).sum())

    def check_once(count, send_elems, recv_elems, inplace):
        if op == "barrier":
            dist.barrier()
            return 0
        call, source, output = make_call(count, send_elems, recv_elems, inplace)
        send_buf[:send_elems].fill_(sentinel)
        recv_buf[:max(send_elems, recv_elems)].fill_(sentinel)
        is_root = rank == root
        if op in REDUCTIONS:
            source.copy_(reduce_input(rank, torch.arange(source.numel(), dtype=torch.int64)).to(dtype))
        elif op in ("all_gather", "gather", "all_to_all") or (op in ("broadcast", "scatter") and is_root):
            source.copy_(move_input(rank, torch.arange(source.numel(), dtype=torch.int64)).to(dtype))
        call()
        settle()
        wrong = 0
        index = torch.arange(count, dtype=torch.int64)
        if op == "all_reduce" or (op == "reduce" and is_root):
            wrong = count_wrong(output[:count], expected_reduction(index))
        elif op == "reduce_scatter":
            wrong = count_wrong(output[:count], expected_reduction(rank * count + index))
        elif op == "all_gather" or (op == "gather" and is_root):
            want = torch.cat([move_input(r, index) for r in range(n)])
            wrong = count_wrong(output[:n * count], want)
        elif op == "broadcast":
            wrong = count_wrong(output[:count], move_input(root, index))
        elif op == "all_to_all":
            want = torch.cat([move_input(r, rank * count + index) for r in range(n)])
            wrong = count_wrong(output[:n * count], want)
        elif op == "scatter":
            wrong = count_wrong(output[:count], move_input(root, rank * count + index))
        total = torch.tensor([wrong], dtype=torch.int64)
        dist.all_reduce(total)
        return int(total[0])

    json_file = open(o["json"], "a") if rank == 0 and o["json"] else None
    redop_col = redop_name if op in REDUCTIONS else "none"
    root_col = root if op in ROOTED else -1
    if rank == 0:
        env_name = "GLOO_SOCKET_IFNAME" if gloo else "RDMX_SOCKET_IFNAME"
        print(f"# torch_coll_perf: {op} ({CALLS.get(op, 'dist.' + op)}), {n} ranks, transport {transport} "
              f"(torch {torch.__version__} {backend}, {env_name}={os.environ.get(env_name, '')}), "
              f"{'CUDA tensors on ' + str(device) if cuda else 'CPU tensors'}")
        iters_text = f"iters {o['iters']}" if o["iters"] > 0 else \
            f"iters: per size, {TARGET_SECONDS:.1f} s worth ({MIN_ITERS}..{MAX_ITERS})"
        warmup_text = f"warmup {o['warmup']}" if o["warmup"] >= 0 else "warmup max(5, iters/10)"
        print(f"# {iters_text}, {warmup_text}, check {int(o['check'])}; time = per call, averaged over ranks;"
              " GB = 1e9 B\n#")
        print("# %10s  %12s  %6s  %6s  %6s  %32s  %32s" % ("", "", "", "", "", "out-of-place", "in-place"))
        print("# %10s  %12s  %6s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s" % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong", "iters"))
        print("# %10s  %12s  %6s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s  %7s" % (
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", ""),
            flush=True)

    all_wrong = 0
    bw_sum, bw_count = 0.0, 0
    for size in sizes:
        count, send_elems, recv_elems, nbytes = layout_for(op, size, esize, n)
        if op != "barrier" and count == 0:
            if rank == 0:
                print(f"# {size} B: less than one {type_name} per rank, skipped")
            continue
        first = False if has_mode(op, False, backend) else True
        iters = iterations_for(make_call(count, send_elems, recv_elems, first)[0])
        warmup = o["warmup"] if o["warmup"] >= 0 else max(5, iters // 10)
        cells = []
        for inplace in (False, True):
            if not has_mode(op, inplace, backend):
                cells.append("  %8s  %7s  %7s  %6s" % ("n/a", "n/a", "n/a", "n/a"))
                continue
            call = make_call(count, send_elems, recv_elems, inplace)[0]
            for _ in range(warmup):
                call()
            settle()
            seconds = time_calls(call, iters)
            wrong = check_once(count, send_elems, recv_elems, inplace) if o["check"] else None
            all_wrong += wrong or 0
            us = seconds * 1e6
            algbw = nbytes / 1e9 / seconds if seconds > 0 else 0.0
            busbw = algbw * bus_factor(op, n)
            bw_sum += busbw
            bw_count += 1
            cells.append("  %8s  %7s  %7s  %6s" % (format_time(us), format_bw(algbw), format_bw(busbw),
                                                    "n/a" if wrong is None else wrong))
            if json_file is not None:
                json_file.write(json.dumps({
                    "bench": "torch-" + backend, "transport": transport, "device": device.type, "op": op, "np": n, "bytes": nbytes, "count": count,
                    "type": type_name, "redop": redop_col, "root": root_col, "inplace": inplace,
                    "time_us": round(us, 4), "algbw_GBps": round(algbw, 6), "busbw_GBps": round(busbw, 6),
                    "wrong": wrong, "iters": iters}, separators=(",", ":")) + "\n")
                json_file.flush()
        if rank == 0:
            print("  %10d  %12d  %6s  %6s  %6d%s%s  %7d" % (nbytes, count, type_name, redop_col, root_col, cells[0],
                                                          cells[1], iters), flush=True)
    if rank == 0:
        verdict = ("OK" if all_wrong == 0 else "FAILED") if o["check"] else "(not checked)"
        print(f"# Out of bounds values : {all_wrong} {verdict}")
        print(f"# Avg bus bandwidth    : {bw_sum / bw_count if bw_count else 0.0:.4g}\n#", flush=True)
    if json_file is not None:
        json_file.close()
    dist.barrier()
    dist.destroy_process_group()
    return EXIT_WRONG if all_wrong > 0 else 0


if __name__ == "__main__":
    sys.exit(main())
