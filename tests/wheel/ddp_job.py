# SPDX-License-Identifier: MIT
"""A few DDP steps of a tiny model on CPU with backend="rdmx", as a user of
the installed wheel runs them under torchrun; every rank checks that its
parameters equal every other rank's after the steps and writes its verdict
to ddp_job.rank<N> (tests/wheel/wheel_test.sh)."""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import rdmx.torch  # noqa: F401  registers the "rdmx" backend

STEPS = 5


def main():
    dist.init_process_group("rdmx")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = model(torch.randn(8, 16, generator=data)).square().mean()
        loss.backward()
        optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    for peer, theirs in enumerate(gathered):
        if not torch.equal(theirs, flat):
            print(f"ddp_job: rank {rank}: parameters differ from rank {peer}'s after {STEPS} steps "
                  f"(max difference {(theirs - flat).abs().max().item()})", file=sys.stderr)
            sys.exit(1)
    verdict = (f"rank {rank} of {world}: {STEPS} DDP steps on backend {dist.get_backend()}, "
               f"parameters equal on every rank (rdmx from {os.path.dirname(rdmx.__file__)})")
    print(f"ddp_job: {verdict}")
    # One file a rank, in the working directory: the caller checks each
    # without parsing the ranks' interleaved output.
    with open(f"ddp_job.rank{rank}", "w") as f:
        f.write(verdict + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
