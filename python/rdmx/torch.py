"""The ``"rdmx"`` backend for torch.distributed.

Importing this module registers it::

    import torch.distributed as dist
    import rdmx.torch  # noqa: F401
    dist.init_process_group("rdmx")          # env:// (torchrun, rdmx run, ...)
    dist.all_reduce(tensor)

Under torchrun and ``rdmx run`` torch's env:// variables are set already.
Under mpirun (Open MPI, MPICH) and srun, importing this module sets the ones
the launcher left out (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and
MASTER_ADDR/MASTER_PORT where they can be known) from the launcher's own,
as rdmx's C++ bootstrap reads them; what is set already is left alone.

The backend rendezvouses through the store torch gives it (no extra port),
honours the ``timeout`` given to ``init_process_group`` and ``new_group``, and
takes CPU tensors (and CUDA tensors, ordered on the current stream, where it
was built against a CUDA build of torch) of dtype float32, float64, float16,
bfloat16, int8, uint8, int32, int64 and bool. Per-device backends work as
usual: ``init_process_group("cpu:rdmx,cuda:nccl")``. Errors (mismatched
collectives, a timeout, a dead rank) are raised on every rank as
``torch.distributed.DistBackendError`` (a RuntimeError) carrying rdmx's
message; bad arguments as RuntimeError.
"""
# SPDX-License-Identifier: MIT
import os as _os
import re as _re
import zlib as _zlib

from datetime import timedelta as _timedelta

import torch as _torch_mod
import torch.distributed as _dist

from rdmx import _core, _torch

ProcessGroupRdmx = _torch.ProcessGroupRdmx
BACKEND_NAME = "rdmx"


def _create(store, rank, size, timeout):
    return ProcessGroupRdmx(store, rank, size, timeout)


def _first_slurm_host(nodelist):
    """The first host of a Slurm node list: "n1,n2", "gpu[03-05,09],cpu1" -> "n1", "gpu03"."""
    m = _re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist or "")
    if not m:
        return None
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _job_port(env):
    """A port every rank of one job derives alike from the launcher's job id, or None."""
    for name in ("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "SLURM_JOB_ID", "PMI_KVSNAME"):
        if env.get(name):
            job = env[name] + "." + env.get("SLURM_STEP_ID", "")
            return 20000 + _zlib.crc32(job.encode()) % 20000
    return None


def launcher_env(env=None):
    """torch's env:// variables this process lacks, derived from its launcher (a dict; empty under
    torchrun, rdmx run, or when no launcher is recognised)."""
    env = _os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        return {}
    try:
        info = _core.detect_launch()
    except RuntimeError:
        return {}
    out = {"RANK": str(info["rank"]), "WORLD_SIZE": str(info["world_size"])}
    if info["local_rank"] >= 0:
        out["LOCAL_RANK"] = str(info["local_rank"])
    if info["local_world_size"] > 0:
        out["LOCAL_WORLD_SIZE"] = str(info["local_world_size"])
    if "MASTER_ADDR" not in env:
        if info["store_host"]:
            out["MASTER_ADDR"] = info["store_host"]
        elif env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"):
            host = _first_slurm_host(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST"))
            if host:
                out["MASTER_ADDR"] = host
        elif info["local_world_size"] == info["world_size"]:
            out["MASTER_ADDR"] = "127.0.0.1"
    if "MASTER_PORT" not in env:
        # Beside rdmx's own store when RDMX_STORE names one, else from the job id.
        port = info["store_port"] + 1 if info["store_port"] else _job_port(env)
        if port:
            out["MASTER_PORT"] = str(port)
    return {k: v for k, v in out.items() if k not in env}


def _register():
    if BACKEND_NAME.upper() in _dist.Backend._plugins:
        return
    devices = ["cpu", "cuda"] if _torch.cuda_built else ["cpu"]
    _dist.Backend.register_backend(BACKEND_NAME, _create, devices=devices)


def _backend_of(group):
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(_torch_mod.device("cpu"))
    if not isinstance(backend, ProcessGroupRdmx):
        raise TypeError(f"the group's CPU backend is {type(backend).__name__}, not rdmx")
    return backend


def agree_failures(group=None):
    """The ranks of ``group`` (default: the world) that every survivor agrees have failed.

    Call it on every survivor after an operation raised DistBackendError for a dead or stopped rank; pass
    the list to ``torch.distributed.shrink_group``. The agreement needs no coordinator and is bounded by
    the group's timeout; a rank that the others counted failed, or that is on the smaller side of a cut,
    gets a DistBackendError saying so instead.
    """
    return list(_backend_of(group).agree_failures())


def grow(count, store, group=None):
    """Collective over ``group`` (default: the world): make room for ``count`` new processes that call
    ``join(store)``. Returns ``(rank, world_size, store)`` for the ``init_process_group`` that follows
    ``destroy_process_group()``; that init takes the grown group rdmx has connected already.

    ``store`` is one the new processes reach too (a ``TCPStore`` client of the job's store)."""
    rank, size, prefix = _backend_of(group).grow(int(count), store)
    return rank, size, _dist.PrefixStore(prefix, store)


def join(store, timeout=None):
    """In a new process: wait (``timeout``, default RDMX_TIMEOUT) for the running job to ``grow`` and take a
    place in it. Returns ``(rank, world_size, store)`` for
    ``init_process_group("rdmx", store=..., rank=..., world_size=...)``."""
    # A negative timeout is RDMX_TIMEOUT's.
    wait = timeout if timeout is not None else _timedelta(milliseconds=-1)
    rank, size, prefix = _torch.join_group(store, "rdmx", wait)
    return rank, size, _dist.PrefixStore(prefix, store)


def profile_step():
    """End the training step in the RDMX_PROFILE trace (call after optimizer.step(), on every rank).

    Without calls, rdmx finds steps by the repetition of their first collective.
    """
    _torch.profile_step()


def profile_describe(samples_per_step, parameters=0):
    """Record samples per step per rank and the parameter count for rdmx plan."""
    _torch.profile_describe(float(samples_per_step), float(parameters))


_os.environ.update(launcher_env())
_register()

__all__ = ["ProcessGroupRdmx", "BACKEND_NAME", "launcher_env", "profile_step", "profile_describe", "agree_failures",
           "grow", "join"]
