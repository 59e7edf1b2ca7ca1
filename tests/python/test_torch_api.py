"""What torch 2.x hands a backend beyond the plain collectives, on the "rdmx"
backend (ranks.py runs api.py's scenarios on real rank processes): the
init_process_group forms, the coalesced forms, batch_isend_irecv, object
collectives, monitored_barrier, new_group / new_subgroups / split_group /
DeviceMesh, abort and shutdown, the errors' types, and the Work API.
Values are held against Gloo's on the same inputs where Gloo computes them.

Run from CTest (tests/CMakeLists.txt, TorchApi.*), or by hand:
    PYTHONPATH=build/python OMP_NUM_THREADS=1 PYTHON -m pytest tests/python/test_torch_api.py
"""
# SPDX-License-Identifier: MIT
import pytest
import torch

import ranks

API = ranks.os.path.join(ranks.HERE, "api.py")
NO_GPU = "no CUDA device here: torch 2.15 creates the cuda backend of the group only on a GPU"


def run(world, scenario, args=None, timeout_s=90):
    """Each rank's result; a rank's unexpected exception fails the test with its trace."""
    return ranks.results_without_failures(ranks.run(world, scenario, args, timeout_s=timeout_s, script=API))


def test_init_process_group_rdmx():
    for res in run(2, "init_forms", {"spec": "rdmx"}):
        assert res["get_backend"] == "rdmx" and res["cpu"] == "ProcessGroupRdmx", res
        assert res["new_group_cpu"] == "ProcessGroupRdmx", res


def test_per_device_cpu_rdmx_cuda_gloo():
    """The per-device form without a GPU: CPU tensors go to rdmx."""
    for res in run(2, "init_forms", {"spec": "cpu:rdmx,cuda:gloo"}):
        assert res["get_backend"] == "cpu:rdmx,cuda:gloo", res
        assert res["cpu"] == "ProcessGroupRdmx" and res["new_group_cpu"] == "ProcessGroupRdmx", res


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU + " (NCCL: 'nccl2 requires at least one CUDA device')")
def test_per_device_cpu_rdmx_cuda_nccl():
    for res in run(2, "init_forms", {"spec": "cpu:rdmx,cuda:nccl"}):
        assert res["cpu"] == "ProcessGroupRdmx", res
        assert res["cuda"] != "ProcessGroupRdmx", res


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_GPU)
def test_per_device_cpu_gloo_cuda_rdmx():
    for res in run(2, "init_forms", {"spec": "cpu:gloo,cuda:rdmx"}):
        assert res["cpu"] == "ProcessGroupGloo" and res["cuda"] == "ProcessGroupRdmx", res


@pytest.mark.parametrize("world", [2, 3])
def test_coalesced_forms_match_gloo(world):
    """all_reduce_coalesced, the coalescing manager's all_reduce / all_gather_into_tensor /
    reduce_scatter_tensor (allreduce_coalesced, allgather_into_tensor_coalesced,
    reduce_scatter_tensor_coalesced on a backend without coalescing), all_gather_coalesced:
    8 dtypes, 4 tensors of uneven sizes, contiguous, strided, offset and transposed."""
    for res in run(world, "coalesced"):
        assert res["has_all_gather_coalesced"], "torch no longer has all_gather_coalesced: drop its case"
        # Every value against Gloo's: 4 tensors in each of 4 forms, and
        # all_gather_coalesced's 4 per rank, for each of 8 dtypes.
        assert res["vs_gloo"] == 8 * (4 * 4 + 4 * world) and res["gloo_cannot"] == [], res


def test_batch_isend_irecv_ring():
    for res in run(3, "ring", timeout_s=120):
        assert res["vs_gloo"] == 2 * 3 + 2, res
        assert min(res["bytes"]) < 64 * 1024 < max(res["bytes"]) < 4 << 20, res["bytes"]


def test_object_collectives():
    run(3, "objects")


def test_monitored_barrier_names_the_late_rank():
    results = run(3, "monitored", {"late": [2], "wait_all_ranks": False})
    zero = results[0]
    assert zero["type"] == "DistBackendError", zero
    assert "Rank 2 failed to pass monitoredBarrier" in zero["message"], zero["message"]
    assert 1.9 < zero["seconds"] < 10, zero["seconds"]
    # The other rank that came raises too: rank 0's verdict, or its own
    # timeout where that runs out first.
    assert results[1]["type"] == "DistBackendError" and "monitored" in results[1]["message"], results[1]


def test_monitored_barrier_wait_all_ranks_names_every_late_rank():
    results = run(4, "monitored", {"late": [2, 3], "wait_all_ranks": True})
    zero = results[0]
    assert zero["type"] == "DistBackendError", zero
    assert "Ranks 2, 3 failed to pass monitoredBarrier" in zero["message"], zero["message"]
    assert 1.9 < zero["seconds"] < 10, zero["seconds"]


def test_new_group_subgroups_split_group_and_device_mesh():
    for rank, res in enumerate(run(4, "groups")):
        assert res["split"] == "ProcessGroupRdmx" and res["mesh"] == ["ProcessGroupRdmx"] * 2, res
        if rank % 2:
            assert res["new_group"] == "ProcessGroupRdmx", res


def test_split_group_leaves_the_other_ranks_out():
    run(4, "split_outside", timeout_s=60)


def test_destroy_process_group_with_pending_async_work():
    for res in run(2, "destroy_pending"):
        assert res["seconds"] < 10, res
        # A call after destroy is torch's own error: no group.
        assert res["after"][0] == "ValueError" and "not been initialized" in res["after"][1], res


def test_abort_after_a_rank_died():
    results = ranks.run(3, "abort_after_death", {"timeout_s": 20}, timeout_s=90, script=API)
    assert results[-1].returncode == 3, results[-1]
    ranks.assert_all_ok(results[:-1])
    for r in results[:-1]:
        res = r.result
        assert "error" not in res, res["error"]
        kind, message, seconds = res["death"]
        assert kind == "DistBackendError" and "rank 2" in message and message.startswith("rdmx"), res["death"]
        assert seconds < 25, res["death"]
        assert res["sub_sum"] == 2.0, res
        # The group's backend abort(): prompt, and later calls name it.
        assert res["backend_abort_seconds"] < 5, res
        kind, message, _ = res["after_backend_abort"]
        assert kind == "DistBackendError" and "aborted" in message, res["after_backend_abort"]
        # torch 2.x's abort path over every group.
        assert res["has_abort_process_group"], "torch has no _abort_process_group: the backend's abort() was used"
        assert res["abort_seconds"] < 5, res
        kind, message, _ = res["after_abort"]
        assert kind in ("ValueError", "DistBackendError", "RuntimeError") and message, res["after_abort"]


def test_errors_raise_as_torch_raises_backend_errors():
    results = run(3, "errors")
    for rank, res in enumerate(results):
        assert res["is_dist_backend_error_runtime"], res
        # Bad arguments: RuntimeError (not DistBackendError), rdmx's text; the group stays usable.
        kind, message, _ = res["dtype"]
        assert kind == "RuntimeError" and "torch.int16" in message and "rdmx" in message, res["dtype"]
        kind, message, _ = res["reduce_op"]
        assert kind == "RuntimeError" and "ReduceOp" in message, res["reduce_op"]
        assert res["sum_after_bad_arguments"] == 3.0, res
        kind, message, _ = res["mismatch"]
        assert kind == "DistBackendError" and "mismatched calls" in message, res["mismatch"]
        if rank == 2:
            continue
        kind, message, seconds = res["timeout"]
        assert kind == "DistBackendError" and "timed out" in message and "rank 2" in message, res["timeout"]
        assert 1.9 < seconds < 10, res["timeout"]
        kind, message, _ = res["after_timeout"]
        assert kind == "DistBackendError" and "rdmx" in message, res["after_timeout"]


def test_work_api():
    results = run(2, "work_api")
    kind, message, seconds = results[0]["short_wait"]
    assert kind == "DistBackendError" and "still running" in message, results[0]["short_wait"]
    assert 0.25 < seconds < 5, seconds
    for res in results:
        for key in ("failed_wait", "failed_future"):
            kind, message = res[key][0], res[key][1]
            assert kind == "DistBackendError" and "mismatched calls" in message, (key, res[key])
        assert res["failed_exception"] and res["failed_exception"][0] == "DistBackendError", res
