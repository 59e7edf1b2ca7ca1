"""What each rank of a recovery test runs: `python recovery.py NAME JSON_ARGS`.

DDP training that loses a rank in the middle of a step and goes on, on the
survivors, without restarting them, then grows back with a new process,
following docs/TORCH.md's recipe with torch's own calls:
rdmx.torch.agree_failures(), torch.distributed.shrink_group(), and, to grow,
rdmx.torch.grow()/join() then destroy_process_group() and init_process_group().
Ranks 0..world-1 train; rank `world` (the spare) waits until the job needs
it. Rank 0 serves torch's TCPStore, so the victim is never rank 0. The victim
is killed, or stopped (fault "stop") and continued by rank 0 once the others
are done: it must then find that it was left out.
"""
# SPDX-License-Identifier: MIT
import hashlib
import importlib
import json
import os
import signal
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import rdmx.torch
from scenarios import emit

TIMEOUT = timedelta(seconds=float(os.environ.get("RECOVERY_TIMEOUT_S", "5")))
# The store waits for ranks still starting (importing torch takes minutes in the emulated verbs guest).
STORE_TIMEOUT = max(timedelta(seconds=60), 10 * TIMEOUT)


def model_and_data(seed_rank):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    g = torch.Generator().manual_seed(1000 + seed_rank)
    data = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(4)]
    return model, data


def digest(model):
    """SHA-256 of the parameters' bytes: equal digests are equal bits."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def digests_agree(model):
    """Every rank's digest, gathered over the current group."""
    mine = digest(model)
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    return everyone


def train_step(ddp, opt, data, step):
    x, y = data[step % len(data)]
    opt.zero_grad()
    loss = nn.functional.cross_entropy(ddp(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def ddp_recovery(args):
    world, victim, kill_step, steps = args["world"], args["victim"], args["kill_step"], args["steps"]
    rank = int(os.environ["RANK"])
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    result = {"rank": rank, "events": []}
    if rank == world:
        # The spare: a new process started once the job lost a rank.
        # Ready before it is needed, as a replacement would be: the first DDP
        # construction imports torch._dynamo (about 900 modules, 3-9 s on two
        # busy cores), which would hold up the others in the grown group's
        # first collective past its timeout.
        importlib.import_module("torch._dynamo")
        store = dist.TCPStore(host, port, is_master=False, timeout=STORE_TIMEOUT)
        store.wait(["need-replacement"], STORE_TIMEOUT)
        new_rank, size, group_store = rdmx.torch.join(store)
        dist.init_process_group("rdmx", store=group_store, rank=new_rank, world_size=size, timeout=TIMEOUT)
        model, data = model_and_data(new_rank)
        ddp = nn.parallel.DistributedDataParallel(model)  # takes rank 0's parameters
        opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
        start = int(store.get("grown-at-step"))
        result["losses"] = [train_step(ddp, opt, data, s) for s in range(start, steps)]
        result["digests"] = digests_agree(model)
        result["world_at_end"] = dist.get_world_size()
        dist.destroy_process_group()
        emit(result)
        return

    store = dist.TCPStore(host, port, world_size=None, is_master=(rank == 0), timeout=STORE_TIMEOUT)
    dist.init_process_group("rdmx", store=store, rank=rank, world_size=world, timeout=TIMEOUT)
    model, data = model_and_data(rank)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses = []
    step = 0
    grown = False
    while step < steps:
        # What a survivor returns to if this step fails: plain SGD keeps no
        # other state (a stateful optimizer's state_dict() is kept alike).
        snapshot = {k: v.clone() for k, v in model.state_dict().items()}
        try:
            if rank == victim and step == kill_step:
                x, y = data[0]
                nn.functional.cross_entropy(ddp(x), y)  # in the middle of the step
                store.set("victim-pid", str(os.getpid()))
                store.set("killed-at", repr(time.time()))
                # Killed, or stopped until the others are done (rank 0 continues it).
                os.kill(os.getpid(), signal.SIGSTOP if args["fault"] == "stop" else signal.SIGKILL)
            losses.append(train_step(ddp, opt, data, step))
        except Exception as e:  # noqa: BLE001  (DistBackendError names the dead rank)
            caught = time.time()
            result["events"].append({"step": step, "error": str(e).splitlines()[0][:300]})
            try:
                failed = rdmx.torch.agree_failures()
            except Exception as refused:  # noqa: BLE001  (a stopped rank the others went on without)
                if rank != victim:
                    raise
                result["refused"] = str(refused).splitlines()[0][:300]
                emit(result)
                return
            dist.shrink_group(failed)
            model.load_state_dict(snapshot)
            ddp = nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            losses.append(train_step(ddp, opt, data, step))  # the same step again, on the survivors
            killed_at = float(store.get("killed-at"))
            result["failed"] = failed
            result["world_after_shrink"] = dist.get_world_size()
            result["fault_to_next_step_s"] = time.time() - killed_at
            result["error_to_next_step_s"] = time.time() - caught
            result["digests_after_shrink"] = digests_agree(model)
        step += 1
        if not grown and "failed" in result and step == kill_step + 2:
            # Grow back: a replacement joins; every rank makes the new group.
            grown = True
            if dist.get_rank() == 0:
                store.set("grown-at-step", str(step))
                store.set("need-replacement", "1")
            new_rank, size, group_store = rdmx.torch.grow(1, store)
            dist.destroy_process_group()
            dist.init_process_group("rdmx", store=group_store, rank=new_rank, world_size=size, timeout=TIMEOUT)
            ddp = nn.parallel.DistributedDataParallel(model)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            result["rank_after_grow"] = new_rank
    result["losses"] = losses
    result["digests"] = digests_agree(model)
    result["world_at_end"] = dist.get_world_size()
    dist.destroy_process_group()
    if rank == 0 and args["fault"] == "stop":
        os.kill(int(store.get("victim-pid")), signal.SIGCONT)
    emit(result)


if __name__ == "__main__":
    name, args = sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    try:
        {"ddp_recovery": ddp_recovery}[name](args)
    except Exception:  # noqa: BLE001
        emit({"error": traceback.format_exc()[-4000:]})
        os._exit(0)
