"""The "rdmx" backend on CUDA tensors (cuda_scenarios.py on real rank processes):
every collective against the same call on CPU tensors, DDP and FSDP2 against
the same runs on CPU tensors, ordering on torch's current stream, the caching
allocator, and the errors' types. Ranks share cuda:0 where there is one GPU.

Skips, saying why, without a CUDA device or without the backend's CUDA side.
Run from CTest (tests/CMakeLists.txt, TorchCuda.*), or on a GPU machine without
CTest, from the repository root:
    PYTHONPATH=BUILD/python OMP_NUM_THREADS=1 PYTHON -m pytest -v tests/python/test_torch_cuda.py
"""
# SPDX-License-Identifier: MIT
import pytest
import torch

import ranks

CUDA = ranks.os.path.join(ranks.HERE, "cuda_scenarios.py")


def cuda_side_built():
    from rdmx import _torch
    return bool(_torch.cuda_built)


def skip_reason():
    if not torch.cuda.is_available():
        return f"no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False)"
    if not cuda_side_built():
        return "the rdmx backend was built without its CUDA side (configure: 'CPU tensors only')"
    return None


needs_cuda = pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")


def run(world, scenario, args=None, timeout_s=180):
    """Each rank's result; a rank's unexpected exception fails the test with its trace."""
    return ranks.results_without_failures(ranks.run(world, scenario, args, timeout_s=timeout_s, script=CUDA))


def test_async_calls_on_cpu_tensors_match_blocking_ones():
    """Runs everywhere: what an async call stages (a dense copy of a non-contiguous input, the
    send buffer of a reduce on every rank) lives until the call completes."""
    run(2, "async_matches_blocking_on_cpu", {"dtypes": ["float32", "int64"], "layouts": ["transposed", "strided"]})


@needs_cuda
def test_every_collective_on_cuda_tensors_matches_cpu_tensors():
    """(a) Each collective, tagged send/recv (tags out of order) and batch_isend_irecv, blocking
    and async, on contiguous and transposed CUDA tensors, against the same calls on CPU tensors."""
    for res in run(2, "collectives_match_cpu", {"dtypes": ["float32", "bfloat16", "int64", "bool"],
                                                  "layouts": ["contiguous", "transposed"]}):
        assert res["compared"] > 100, res


@needs_cuda
def test_ddp_on_cuda_tensors_matches_cpu_tensors():
    """(b) DDP of a small MLP, same seeds, 5 steps: losses and parameters within 1e-4 of the CPU run."""
    for res in run(2, "ddp_matches_cpu", {"steps": 5, "tolerance": 1e-4}):
        assert len(res["cuda_losses"]) == 5, res


@needs_cuda
def test_work_is_ordered_on_the_current_stream():
    """(c) Inputs written on the current (side) stream just before the call are what is reduced;
    kernels queued after the call see the results (staged ones included) without a host sync;
    wait() orders another stream after it; a tagged message then a collective on one stream."""
    run(2, "stream_ordering", {"elems": 16 << 20, "rounds": 100})


@needs_cuda
def test_freed_inputs_are_not_reused_before_the_operation_completes():
    """(d) Inputs deleted right after an async call on another stream, their sizes allocated
    again at once on their own stream and overwritten: the results are still right."""
    run(2, "allocator_reuse", {"elems": 16 << 20, "rounds": 50, "trials": 3})


@needs_cuda
def test_errors_on_cuda_tensors_raise_as_on_cpu_tensors():
    """(e) The same mistakes raise the same exception types on CUDA and CPU tensors; one call's
    tensors on the CPU and a GPU are refused, naming both devices."""
    for res in run(2, "error_types", {"timeout_s": 20}):
        for what in ("dtype", "band", "sizes_at_call", "mismatched"):
            cpu, cuda = res["cpu_" + what], res["cuda_" + what]
            assert cpu[0] is not None and cpu[0] == cuda[0], (what, cpu, cuda)
        assert res["cuda_dtype"][0] == "RuntimeError" and "torch.int16" in res["cuda_dtype"][1], res
        assert res["cuda_mismatched"][0] == "DistBackendError", res
        assert res["cpu_usable_after"] == res["cuda_usable_after"] == [3.0] * 4, res
        for what in ("mixed", "mixed_list"):
            kind, message = res[what]
            assert kind is not None and "cpu" in message and "cuda" in message, (what, res[what])


@needs_cuda
def test_fsdp2_on_cuda_tensors_matches_cpu_tensors():
    """(f) fully_shard of a small MLP on a 1-D CUDA mesh, 3 steps, against the same on a CPU mesh."""
    for res in run(2, "fsdp2_matches_cpu", {"steps": 3, "tolerance": 1e-4}):
        assert len(res["cuda_losses"]) == 3, res
