"""What each rank of a stall test runs: `python stalls.py NAME JSON_ARGS`.

One rank sleeps in a function of this file, as a rank blocked in its data
loader does, while the others call all_reduce; the test reads what they
logged (RDMX_STALL_WARN) or raised (the timeout) about it.
"""
# SPDX-License-Identifier: MIT
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import rdmx.torch  # noqa: F401  (registers the "rdmx" backend)
from scenarios import reporting_scenarios

SCENARIOS, scenario = reporting_scenarios()


def load_batch(seconds):
    """Stands for a data loader that stops delivering."""
    time.sleep(seconds)  # the line a stall report names (test_torch_stalls.py finds it by this comment)
    return torch.ones(1000)


@scenario
def late_rank(args):
    """Every rank runs two steps of all_reduce; in the second, the last rank
    first sleeps args["sleep_s"] in load_batch. With a process group timeout
    of args["timeout_s"]."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=args["timeout_s"]))
    rank, n = dist.get_rank(), dist.get_world_size()
    out = {"rank": rank}
    for step in range(2):
        batch = load_batch(args["sleep_s"]) if step == 1 and rank == n - 1 else torch.ones(1000)
        start = time.monotonic()
        try:
            dist.all_reduce(batch)
            out[f"step{step}"] = {"sum": batch[0].item(), "seconds": time.monotonic() - start}
        except Exception as e:  # noqa: BLE001  (the test reads the message)
            out[f"step{step}"] = {"error": f"{type(e).__name__}: {e}", "seconds": time.monotonic() - start}
            break
    return out


if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
