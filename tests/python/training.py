"""What each rank of a training or launcher test runs: `python training.py NAME JSON_ARGS`.

The training scenarios run one job on the backend named in args["backend"]
("gloo" or "rdmx"), from the same seeds, so that the test can hold rdmx's
losses and parameters against Gloo's. Ranks find each other through torch's
env:// variables (ranks.py, or torchrun) and report one JSON result each
(scenarios.emit).
"""
# SPDX-License-Identifier: MIT
import json
import os
import socket
import sys
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

import rdmx.torch  # noqa: F401  (registers the "rdmx" backend)
from scenarios import emit

SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def failure():
    """The trace of the exception being handled; its end names the torch call that raised it."""
    return traceback.format_exc()[-4000:]


def flat(tensors):
    return torch.cat([t.detach().flatten().float() for t in tensors]).tolist()


# ---------------------------------------------------------------------------
# DDP: gradient_as_bucket_view, communication hooks, no_sync.
def mean_hook(state, bucket):
    """A hook of one's own: average in place, then all_reduce through a Future chain."""
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size())
    return dist.all_reduce(buffer, async_op=True).get_future().then(lambda fut: fut.value()[0])


def hook_named(name):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    return {"builtin": None, "allreduce": default_hooks.allreduce_hook,
            "fp16": default_hooks.fp16_compress_hook, "custom": mean_hook}[name]


def ddp_run(hook, steps, micro_steps):
    """`steps` optimizer steps, each accumulating `micro_steps` micro-batches (all but the last under no_sync)."""
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))
    # Replicas start apart: DDP's first broadcast aligns them.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(rank * 0.01)
    # Small buckets: several per step, so hooks and the overlap see more than one.
    ddp = nn.parallel.DistributedDataParallel(model, gradient_as_bucket_view=True, bucket_cap_mb=0.002)
    if hook_named(hook) is not None:
        ddp.register_comm_hook(None, hook_named(hook))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    batches = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(micro_steps)]
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        total = 0.0
        for i, (x, y) in enumerate(batches):
            loss = nn.functional.cross_entropy(ddp(x), y) / micro_steps
            if i < micro_steps - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return {"losses": losses, "params": flat(model.parameters())}


@scenario
def ddp_hooks(args):
    """DDP with each hook in args["hooks"] in turn; an error is recorded and ends the run."""
    dist.init_process_group(args["backend"], timeout=timedelta(seconds=60))
    runs, error = {}, None
    for hook in args["hooks"]:
        try:
            runs[hook] = ddp_run(hook, args["steps"], args["micro_steps"])
        except Exception:  # noqa: BLE001  (the test shows which call failed, and how)
            error = f"hook {hook}: {failure()}"
            break
    if error is None:
        dist.destroy_process_group()
    emit({"runs": runs, "error": error})
    if error is not None:
        os._exit(0)  # the group may be unusable; torch would try to tear it down


# ---------------------------------------------------------------------------
# FSDP2 (fully_shard) of a small transformer, on a 1-D or a 2-D DeviceMesh.
class TinyTransformer(nn.Module):
    """Next-token prediction: an embedding, `layers` encoder layers, a projection back to the vocabulary."""

    def __init__(self, vocab=48, d_model=32, layers=2):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True)
            for _ in range(layers)])
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def train_sharded(model, x, y, steps, result):
    """Trains into result["losses"]; this rank's shards into result["shards"], then the full parameters,
    gathered as a checkpoint would gather them, into result["params"]."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    result["losses"] = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()
        result["losses"].append(loss.item())
    result["shards"] = flat(p.to_local() for p in model.parameters())
    result["params"] = flat(p.full_tensor() for p in model.parameters())


def fsdp_run(mesh, steps, result):
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = TinyTransformer()
    for layer in model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    g = torch.Generator().manual_seed(200 + dist.get_rank())
    tokens = torch.randint(0, 48, (4, 17), generator=g)
    train_sharded(model, tokens[:, :-1], tokens[:, 1:], steps, result)


def fsdp_tp_run(mesh, steps, result):
    """Tensor parallel within pairs of ranks (mesh["tp"]: column- then row-wise Linear pairs),
    FSDP2 across them (mesh["dp"])."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 64), nn.ReLU(),
                          nn.Linear(64, 8))
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel(),
                                           "4": ColwiseParallel(), "6": RowwiseParallel()})
    fully_shard(model, mesh=mesh["dp"])
    # Both ranks of a tensor-parallel pair take the same batch.
    g = torch.Generator().manual_seed(300 + mesh["dp"].get_local_rank())
    train_sharded(model, torch.randn(16, 16, generator=g), torch.randint(0, 8, (16,), generator=g), steps, result)


@scenario
def fsdp(args):
    """FSDP2 on a mesh of args["mesh"]: [n] shards over every rank; [2, 2] is replicate x shard (HSDP),
    or with args["tp"] data parallel x tensor parallel."""
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group(args["backend"], timeout=timedelta(seconds=60))
    shape = tuple(args["mesh"])
    names = ("shard",) if len(shape) == 1 else ("dp", "tp") if args.get("tp") else ("replicate", "shard")
    result = {"error": None}
    try:
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        (fsdp_tp_run if args.get("tp") else fsdp_run)(mesh, args["steps"], result)
    except Exception:  # noqa: BLE001
        result["error"] = failure()
    if result["error"] is None:
        dist.destroy_process_group()
    emit(result)
    if result["error"] is not None:
        os._exit(0)


# ---------------------------------------------------------------------------
# Launchers: one all_reduce under whatever started the rank.
@scenario
def launched(args):
    """init_process_group("rdmx") from the launcher's environment; an all_reduce, and how peers are reached."""
    dist.init_process_group("rdmx", timeout=timedelta(seconds=60))
    rank, n = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    providers = list(backend.peer_providers)
    env = {k: os.environ.get(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
                                          "MASTER_ADDR")}
    dist.destroy_process_group()
    emit({"rank": rank, "world": n, "sum": t[0].item(), "all_equal": bool((t == t[0]).all()),
          "backend": type(backend).__name__, "providers": providers, "host": socket.gethostname(), "env": env})


if __name__ == "__main__":
    name = sys.argv[1]
    args = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    SCENARIOS[name](args)
