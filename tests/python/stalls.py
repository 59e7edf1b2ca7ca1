"""What each rank of a stall test runs: `python stalls.py NAME JSON_ARGS`.

One rank sleeps in a function of this file, as a rank blocked in its data
loader does, while the others call all_reduce; the test reads what they
logged (RDMX_STALL_WARN) or raised (the timeout) about it, or what
`python -m rdmx status` showed of the job meanwhile.
"""
# SPDX-License-Identifier: MIT
import json
import os
import subprocess
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


def wait_for_observer(flag, limit_s):
    """Stands for a data loader that delivers once the observer has looked."""
    deadline = time.monotonic() + limit_s
    while not os.path.exists(flag) and time.monotonic() < deadline:
        time.sleep(0.05)  # the line rdmx status names (test_torch_stalls.py finds it by this comment)


def status_of_job(port, *options):
    out = subprocess.run([sys.executable, "-m", "rdmx", "status", f"127.0.0.1:{port}", *options],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"python -m rdmx status failed ({out.returncode}): {out.stderr}")
    return out.stdout


def observe(port, stalled, late):
    """`python -m rdmx status` until it shows the stalled rank out of the
    collective under way, with where it is, and the late rank inside it."""
    doc = None
    for _ in range(100):
        doc = json.loads(status_of_job(port, "--json"))
        comms = [c for c in doc["communicators"] if len(c["ranks"]) == 3]
        if comms:
            ranks = {r["rank"]: r for r in comms[0]["ranks"]}
            if ranks[late]["state"] == "inside" and "wait_for_observer" in ranks[stalled].get("where", ""):
                return {"json": doc, "text": status_of_job(port)}
        time.sleep(0.2)
    raise AssertionError(f"rdmx status never showed rank {stalled} stalled: {json.dumps(doc)}")


@scenario
def observed(args):
    """args["steps"] all_reduces, each entered args["late_s"] late by the
    last rank; then rank 1 waits in wait_for_observer while rank 0 reads the
    job with `python -m rdmx status`, and all call one more all_reduce."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    flag = os.path.join(os.environ["RDMX_TEST_RESULT_DIR"], "observed")
    for _ in range(args["steps"]):
        if rank == n - 1:
            time.sleep(args["late_s"])
        dist.all_reduce(torch.ones(1000))
    out = {"rank": rank}
    if rank == 1:
        wait_for_observer(flag, 60)
    elif rank == 0:
        try:
            out["status"] = observe(os.environ["MASTER_PORT"], 1, n - 1)
        finally:
            open(flag, "w").close()
    batch = torch.ones(1000)
    dist.all_reduce(batch)
    out["sum"] = batch[0].item()
    return out


if __name__ == "__main__":
    SCENARIOS[sys.argv[1]](json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})
