#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/torch/ddp_step.py: the time of one data-parallel training step (DDP, or FSDP2's
fully_shard), and how much of it communication adds, over a torch.distributed backend.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p PYTHONPATH=build/python \\
      python ddp_step.py --backend rdmx|gloo --model mlp|small-mlp
          [--batch N] [--steps N] [--warmup N] [--bucket-view | --fsdp] [--json PATH]

Models (CPU, fp32, SGD, cross-entropy on random data seeded per rank):
- mlp: 4 Linear(4096, 4096) layers with ReLU and a 4096 -> 1000 head (71.3 M
  parameters, 285 MB of gradients) at batch 16 per rank, so that
  communication dominates the step.
- small-mlp: 3 Linear(1024, 1024) layers with ReLU and a 1024 -> 10 head
  (3.2 M parameters, 12.6 MB of gradients) at batch 1024 per rank: compute
  bound, communication a few percent of a step.
DDP runs with its defaults (25 MiB buckets, all-reduce overlapped with the
backward pass, gradients copied into and out of the buckets), or with
--bucket-view, gradient_as_bucket_view=True (the gradients are views of the
buckets: no copies). --fsdp shards every Linear and the whole model with
FSDP2 (fully_shard): parameters all-gathered before use, gradients
reduce-scattered. Each rank runs one thread (torch.set_num_threads(1)).

What is timed, after `warmup` untimed steps of each kind, over `steps` steps
of each kind taken in turn (so that drift in the machine's speed falls on
both alike), each after a barrier:
- step: zero_grad, forward, backward (DDP all-reduces the buckets during it
  and waits for them at its end), optimizer step;
- compute: the same steps inside model.no_sync(), where DDP communicates
  nothing (with --fsdp: the same step of an unsharded copy of the model,
  which communicates nothing);
- exposed communication = step - compute: what communication adds to a step
  (the part of it not hidden behind the backward pass).
With --profile-steps K (rdmx backend, RDMX_PROFILE=path), K more synchronised
steps follow the timing back to back, each marked with
rdmx.torch.profile_step(): the profile rdmx plan replays (docs/ADVISOR.md).
Times are per step: each rank's mean, then the slowest rank's. The run ends by comparing a checksum
of the parameters over the ranks: DDP keeps them identical, so a difference
means the backend summed gradients wrongly (exit 4); with --fsdp the
checksum is of the full (all-gathered) parameters.
"""
import argparse
import datetime
import json
import os
import sys
import time


MODELS = {"mlp": (4096, 4, 1000, 16), "small-mlp": (1024, 3, 10, 1024)}  # width, layers, classes, batch


def build_model(name, torch):
    width, depth, classes, _ = MODELS[name]
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(width, classes))
    return torch.nn.Sequential(*layers), (width,), classes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backend", choices=["rdmx", "gloo"], required=True)
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--batch", type=int, default=0, help="per rank (default: 16 mlp, 1024 small-mlp)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--bucket-view", action="store_true", help="gradient_as_bucket_view=True")
    parser.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard) instead of DDP")
    parser.add_argument("--json", default=None)
    parser.add_argument("--profile-steps", type=int, default=0,
                        help="with --backend rdmx and RDMX_PROFILE set: after the timing, run this many "
                             "synchronised steps back to back, each marked for the profile (rdmx plan)")
    args = parser.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.batch < 0 or args.profile_steps < 0:
        parser.error("--steps must be at least 1, --warmup, --batch and --profile-steps not negative")
    if args.fsdp and (args.bucket_view or args.profile_steps):
        parser.error("--fsdp goes with neither --bucket-view nor --profile-steps")
    if args.profile_steps and args.backend != "rdmx":
        parser.error("--profile-steps records through the rdmx backend's RDMX_PROFILE: use --backend rdmx")

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    if args.backend == "rdmx":
        import rdmx.torch  # noqa: F401  registers the backend
    timeout = datetime.timedelta(seconds=float(os.environ.get("TORCH_BENCH_TIMEOUT", "600")))
    dist.init_process_group(args.backend, init_method="env://", timeout=timeout)
    rank, n = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model, input_shape, classes = build_model(args.model, torch)
    params = sum(p.numel() for p in model.parameters())
    batch = args.batch or MODELS[args.model][3]
    if args.profile_steps:
        import rdmx.torch as rdmx_torch
        # Before DDP's first broadcast: the profile's header is written with the first step.
        rdmx_torch.profile_describe(batch, params)
    if args.fsdp:
        import copy

        from torch.distributed.fsdp import fully_shard
        local = copy.deepcopy(model)  # the compute-only baseline
        local_optimizer = torch.optim.SGD(local.parameters(), lr=0.01)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        ddp = fully_shard(model)
    else:
        ddp = DistributedDataParallel(model, gradient_as_bucket_view=args.bucket_view)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(1 + rank)
    inputs = torch.randn((batch,) + input_shape, generator=generator)
    targets = torch.randint(0, classes, (batch,), generator=generator)

    def step():
        optimizer.zero_grad(set_to_none=False)
        loss = loss_fn(ddp(inputs), targets)
        loss.backward()
        optimizer.step()

    def local_step():
        local_optimizer.zero_grad(set_to_none=False)
        loss_fn(local(inputs), targets).backward()
        local_optimizer.step()

    def one_step(sync):
        dist.barrier()
        start = time.perf_counter()
        if sync:
            step()
        elif args.fsdp:
            local_step()
        else:
            with ddp.no_sync():
                step()
        return time.perf_counter() - start

    for _ in range(args.warmup):
        one_step(False)
        one_step(True)
    totals = torch.zeros(2, dtype=torch.float64)  # compute only, full step
    for _ in range(args.steps):
        totals[0] += one_step(False)
        totals[1] += one_step(True)
    totals /= args.steps
    dist.all_reduce(totals, op=dist.ReduceOp.MAX)
    compute, full = float(totals[0]), float(totals[1])

    if args.profile_steps:
        # The profile keeps the marked steps: the first mark closes
        # everything above (barriers, no_sync steps), then one mark per step.
        import rdmx.torch as rdmx_torch
        dist.barrier()
        rdmx_torch.profile_step()
        for _ in range(args.profile_steps):
            step()
            rdmx_torch.profile_step()

    # no_sync steps let the ranks' weights drift apart; the synchronised
    # steps after them do not bring them back, so compare a fresh synchronised run.
    if not args.fsdp:
        with torch.no_grad():
            for p in ddp.parameters():
                dist.broadcast(p, src=0)
    for _ in range(2):
        step()
    full_params = [p.full_tensor() if args.fsdp else p for p in ddp.parameters()]
    checksum = torch.tensor([sum(float(p.detach().double().sum()) for p in full_params)], dtype=torch.float64)
    sums = [torch.zeros(1, dtype=torch.float64) for _ in range(n)]
    dist.all_gather(sums, checksum)
    same = all(float(s[0]) == float(sums[0][0]) for s in sums)

    row = {"bench": "ddp", "backend": args.backend, "model": args.model, "bucket_view": args.bucket_view,
           "mode": "fsdp2" if args.fsdp else "ddp",
           "np": n, "batch": batch,
           "params": params, "grad_bytes": params * 4, "steps": args.steps, "step_ms": round(full * 1e3, 3),
           "compute_ms": round(compute * 1e3, 3), "exposed_comm_ms": round((full - compute) * 1e3, 3),
           "identical_params": same, "torch": torch.__version__}
    if rank == 0:
        mode = " (FSDP2)" if args.fsdp else " (gradient_as_bucket_view)" if args.bucket_view else ""
        print(f"# ddp_step: {args.model}{mode} "
              f"({params / 1e6:.1f} M parameters, {params * 4 / 1e6:.1f} MB of "
              f"gradients), batch {batch} per rank, {n} ranks, backend {args.backend} (torch {torch.__version__})")
        print(f"step {full * 1e3:.1f} ms, compute only {compute * 1e3:.1f} ms, exposed communication "
              f"{(full - compute) * 1e3:.1f} ms; parameters identical over the ranks: {same}", flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(row, separators=(",", ":")) + "\n")
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 4


if __name__ == "__main__":
    sys.exit(main())
