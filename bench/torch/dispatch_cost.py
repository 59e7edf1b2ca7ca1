#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/torch/dispatch_cost.py: what a small collective call costs, split into torch's
Python layer and the backend beneath it.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p PYTHONPATH=build/python \\
      python dispatch_cost.py --backend rdmx|gloo [--json PATH]

On one rank no byte moves; on more, the Python layer is measured where it
runs in practice, beside the other ranks. Times, per call (median of 7 batches
of 2,000 calls each, a 4-byte fp32 all_reduce), averaged over the ranks:
- dist.all_reduce(t): the call training code makes (distributed_c10d's checks
  and group lookup, the backend's allreduce, Work.wait());
- group.allreduce([t], opts).wait(): the backend object called directly,
  without distributed_c10d's Python layer, blocking (opts.asyncOp = False,
  as dist.all_reduce passes it);
- the same with opts.asyncOp = True (what async_op=True, and DDP, issue),
  waited at once;
- their difference: what torch's own Python layer adds to every call, whatever
  the backend.
"""
import argparse
import json
import statistics
import sys
import time

BATCHES, CALLS = 7, 2000


def per_call(fn):
    samples = []
    for _ in range(BATCHES):
        start = time.perf_counter()
        for _ in range(CALLS):
            fn()
        samples.append((time.perf_counter() - start) / CALLS * 1e6)
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["rdmx", "gloo"], required=True)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if args.backend == "rdmx":
        import rdmx.torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, init_method="env://")
    n = dist.get_world_size()
    group = dist.distributed_c10d._get_default_group()
    if hasattr(group, "_get_backend"):  # torch 2.x: the ProcessGroup wraps the backend
        group = group._get_backend(torch.device("cpu"))
    t = torch.zeros(1)
    opts = dist.AllreduceOptions()
    opts.asyncOp = False
    async_opts = dist.AllreduceOptions()
    async_opts.asyncOp = True
    for _ in range(CALLS):
        dist.all_reduce(t)
    api = per_call(lambda: dist.all_reduce(t))
    direct = per_call(lambda: group.allreduce([t], opts).wait())
    direct_async = per_call(lambda: group.allreduce([t], async_opts).wait())
    both = torch.tensor([api, direct, direct_async], dtype=torch.float64)
    dist.all_reduce(both)
    api, direct, direct_async = (float(x) / n for x in both)
    row = {"bench": "dispatch", "backend": args.backend, "np": n, "op": "all_reduce", "bytes": 4, "api_us": round(api, 3),
           "direct_us": round(direct, 3), "direct_async_us": round(direct_async, 3), "python_layer_us": round(api - direct, 3), "torch": torch.__version__}
    if dist.get_rank() != 0:
        dist.destroy_process_group()
        return 0
    print(f"# dispatch_cost: {args.backend}, torch {torch.__version__}, {n} rank(s), 4 B all_reduce")
    print(f"dist.all_reduce {api:.2f} us, group.allreduce().wait() {direct:.2f} us (asyncOp: {direct_async:.2f} us), "
          f"torch's Python layer {api - direct:.2f} us", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
