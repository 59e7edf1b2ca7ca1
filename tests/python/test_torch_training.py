"""Training on the "rdmx" backend as on Gloo: DDP with its options and hooks,
FSDP2 on a 1-D and a 2-D DeviceMesh (ranks.py runs training.py's scenarios).

Each test runs the same job, from the same seeds, once on Gloo and once on
rdmx, and holds rdmx's losses and parameters against Gloo's.

Run from CTest (tests/CMakeLists.txt, TorchTraining.*), or by hand:
    PYTHONPATH=build/python OMP_NUM_THREADS=1 PYTHON -m pytest tests/python/test_torch_training.py
"""
# SPDX-License-Identifier: MIT
import pytest

import ranks

HOOKS = ["builtin", "allreduce", "fp16", "custom"]
# Gloo and rdmx add the ranks' values in different orders: float32 sums
# differ in their last bits (on 4 ranks; they are equal on 2). Gloo sums
# fp16 gradients in fp16, rdmx in fp32 rounded once: more apart, and rdmx
# the nearer to the exact sum.
PARAM_TOLERANCE = {"fp16": 5e-4}
PARAM_TOLERANCE_FP32 = 1e-5
LOSS_TOLERANCE = {"fp16": 1e-4}
LOSS_TOLERANCE_FP32 = 1e-5


def on_both(world, scenario, args, timeout_s):
    """The scenario's per-rank results on Gloo, then on rdmx (Gloo's free of errors)."""
    out = {}
    for backend in ("gloo", "rdmx"):
        results = ranks.run(world, scenario, dict(args, backend=backend), timeout_s=timeout_s,
                            script=ranks.TRAINING)
        ranks.assert_all_ok(results, what=f"on {backend}")
        out[backend] = [r.result for r in results]
    assert_no_error("gloo", out["gloo"])
    return out["gloo"], out["rdmx"]


def assert_no_error(backend, results):
    """A rank's error (the torch call that raised, with its trace) fails the test."""
    errors = [(rank, r["error"]) for rank, r in enumerate(results) if r.get("error")]
    if errors:
        # The first rank's whole trace; the others' last line, which names the error.
        rank, trace = errors[0]
        others = [f"rank {r}: {e.strip().splitlines()[-1]}" for r, e in errors[1:]]
        pytest.fail(f"on {backend}, rank {rank}:\n{trace}\n" + "\n".join(others), pytrace=False)


def worst(a, b):
    assert len(a) == len(b), f"{len(a)} values against {len(b)}"
    return max(abs(x - y) for x, y in zip(a, b))


def assert_trains_as_gloo(what, gloo, rdmx, loss_tol, param_tol, key="params"):
    """Per rank: losses within loss_tol of Gloo's, falling; parameters (`key`) within param_tol."""
    if any(key not in x for x in rdmx):
        assert_no_error("rdmx", rdmx)  # what stopped the run before it had `key`
    for rank, (g, x) in enumerate(zip(gloo, rdmx)):
        assert worst(g["losses"], x["losses"]) <= loss_tol, \
            f"{what}, rank {rank}: losses {x['losses']} against gloo's {g['losses']}"
        assert x["losses"][-1] < x["losses"][0], f"{what}, rank {rank}: the loss did not fall: {x['losses']}"
        diff = worst(g[key], x[key])
        assert diff <= param_tol, f"{what}, rank {rank}: {key} differ from gloo's by up to {diff} (> {param_tol})"


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_hooks_and_no_sync_train_as_with_gloo(world):
    """DDP with gradient_as_bucket_view, no_sync over 2 micro-steps, and each of: no hook, torch's
    allreduce_hook, fp16_compress_hook, and a hook of its own chained on all_reduce's Future."""
    steps = 6
    gloo, rdmx = on_both(world, "ddp_hooks", {"hooks": HOOKS, "steps": steps, "micro_steps": 2}, timeout_s=150)
    assert_no_error("rdmx", rdmx)
    for hook in HOOKS:
        g = [r["runs"][hook] for r in gloo]
        x = [r["runs"][hook] for r in rdmx]
        assert len(x[0]["losses"]) == steps
        # DDP keeps replicas bit-identical: every rank must get the same sums.
        for rank in range(1, world):
            assert x[rank]["params"] == x[0]["params"], f"hook {hook}: rank {rank}'s parameters differ from rank 0's"
        assert_trains_as_gloo(f"hook {hook}", g, x, LOSS_TOLERANCE.get(hook, LOSS_TOLERANCE_FP32),
                              PARAM_TOLERANCE.get(hook, PARAM_TOLERANCE_FP32))


@pytest.mark.parametrize("world", [2, 4])
def test_fsdp2_transformer_trains_as_with_gloo(world):
    """fully_shard of each encoder layer and the root, on a 1-D CPU DeviceMesh of every rank."""
    gloo, rdmx = on_both(world, "fsdp", {"mesh": [world], "steps": 6}, timeout_s=150)
    assert_trains_as_gloo("FSDP2", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32, key="shards")
    assert_no_error("rdmx", rdmx)
    assert_trains_as_gloo("FSDP2", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32)


def test_hsdp_on_a_2d_mesh_trains_as_with_gloo():
    """fully_shard on a 2x2 DeviceMesh (replicate x shard): HSDP, sharded within pairs of ranks and
    all_reduced across them."""
    gloo, rdmx = on_both(4, "fsdp", {"mesh": [2, 2], "steps": 6}, timeout_s=150)
    assert_trains_as_gloo("HSDP", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32, key="shards")
    assert_no_error("rdmx", rdmx)
    assert_trains_as_gloo("HSDP", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32)


def test_tensor_parallel_with_fsdp2_on_a_2d_mesh_trains_as_with_gloo():
    """A 2x2 DeviceMesh of data parallel (FSDP2) x tensor parallel (column- and row-wise Linear pairs)."""
    gloo, rdmx = on_both(4, "fsdp", {"mesh": [2, 2], "tp": True, "steps": 6}, timeout_s=150)
    assert_trains_as_gloo("FSDP2 x TP", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32, key="shards")
    assert_no_error("rdmx", rdmx)
    assert_trains_as_gloo("FSDP2 x TP", gloo, rdmx, LOSS_TOLERANCE_FP32, PARAM_TOLERANCE_FP32)
