"""The torch.distributed backend "rdmx" on real rank processes (ranks.py).

Run from CTest (tests/CMakeLists.txt), or by hand:
    PYTHONPATH=build/python RDMX_CLI=build/tools/rdmx ~/.cache/rdmx/venv/bin/python -m pytest tests/python
"""
# SPDX-License-Identifier: MIT
import json
import math
import os

import pytest

import ranks

RDMX_CLI = os.environ.get("RDMX_CLI", "")


@pytest.mark.parametrize("world", [2, 3])
def test_every_operation_and_dtype_matches_gloo(world):
    results = ranks.run(world, "operations", timeout_s=240)
    ranks.assert_all_ok(results)
    for r in results:
        res = r.result
        assert res["failures"] == [], f"rank {r.rank}:\n" + "\n".join(res["failures"])
        assert res["cases"] > 300 and res["vs_gloo"] > 100, res
        # The refused calls name what was refused and leave the group usable.
        assert len(res["errors"]) == 2, res["errors"]
        assert "torch.int16" in res["errors"][0] and "not supported" in res["errors"][0]
        assert "ReduceOp" in res["errors"][1]


@pytest.mark.parametrize("world", [2, 3])
def test_async_work_futures_and_subgroups(world):
    results = ranks.run(world, "async_and_groups", timeout_s=120)
    ranks.assert_all_ok(results)
    for r in results:
        assert r.result["failures"] == [], f"rank {r.rank}: {r.result['failures']}"
        assert r.result["backend"] == "rdmx"


def test_ddp_trains_as_with_gloo():
    by_backend = {}
    for backend in ("gloo", "rdmx"):
        results = ranks.run(2, "ddp", {"backend": backend, "steps": 20}, timeout_s=180)
        first, second = ranks.results_without_failures(results)
        # Identical across ranks: DDP keeps replicas in step.
        assert first["params"] == second["params"], backend
        by_backend[backend] = first
    g, x = by_backend["gloo"], by_backend["rdmx"]
    assert len(x["losses"]) == 20
    for a, b in zip(g["losses"], x["losses"]):
        assert math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5), (g["losses"], x["losses"])
    worst = max(abs(a - b) for a, b in zip(g["params"], x["params"]))
    assert worst < 1e-4, f"parameters differ from gloo's by up to {worst}"
    assert x["losses"][-1] < x["losses"][0], "the model did not train"


@pytest.mark.parametrize("world", [2, 3])
def test_mismatched_collectives_raise_on_every_rank(world):
    results = ranks.run(world, "mismatch", {"timeout_s": 60}, timeout_s=90)
    ranks.assert_all_ok(results)
    for r in results:
        message = r.result["message"]
        assert message is not None, f"rank {r.rank} did not raise"
        assert "mismatched calls" in message, message
        assert "all_reduce" in message and "broadcast" in message, message
        assert r.result["seconds"] < 10, f"rank {r.rank} took {r.result['seconds']:.1f} s (timeout 60 s)"


def test_a_rank_that_never_calls_times_out_the_others():
    world = 3
    results = ranks.run(world, "missing_rank", {"timeout_s": 3}, timeout_s=90)
    ranks.assert_all_ok(results)
    for r in results[:-1]:
        message = r.result["message"]
        assert message is not None, f"rank {r.rank} did not raise"
        assert "rank 2" in message, message
        assert 2.5 < r.result["seconds"] < 30, r.result["seconds"]


def test_a_dead_rank_fails_the_survivors():
    world = 3
    results = ranks.run(world, "dead_rank", {"timeout_s": 20}, timeout_s=120)
    assert results[-1].returncode == 3, results[-1]
    ranks.assert_all_ok(results[:-1])
    for r in results[:-1]:
        message = r.result["message"]
        assert message is not None, f"rank {r.rank} did not raise"
        assert "rank 2" in message, message
        assert r.result["seconds"] < 25, r.result["seconds"]


def test_env_variables_as_torchrun_sets_them():
    results = ranks.run(3, "env_only", timeout_s=90)
    ranks.assert_all_ok(results)
    assert [r.result["sum"] for r in results] == [6.0] * 3


@pytest.mark.skipif(not RDMX_CLI, reason="RDMX_CLI (the rdmx command) not given")
def test_under_rdmx_run():
    cmd = [RDMX_CLI, "run", "-n", "3", "--time-limit", "90", "--", ranks.PYTHON, ranks.SCENARIOS, "env_only"]
    r = ranks.run_command(cmd, timeout_s=120)
    assert r.returncode == 0, r
    records = ranks.results_in(r.output)
    assert sorted(x["rank"] for x in records) == [0, 1, 2] and all(x["sum"] == 6.0 for x in records), r.output


def test_under_slurm_variables():
    """srun's variables alone (no RANK/MASTER_*): import rdmx.torch derives torch's."""
    port = ranks.free_port()

    def slurm(rank):
        return {"SLURM_PROCID": str(rank), "SLURM_NTASKS": "2", "SLURM_LOCALID": str(rank), "SLURM_NODEID": "0",
                "SLURM_TASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "localhost", "SLURM_JOB_ID": str(port)}
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    procs = []
    for rank in range(2):
        e = dict(env, **slurm(rank))
        procs.append(ranks.subprocess.Popen([ranks.PYTHON, ranks.SCENARIOS, "env_only"], env=e,
                                            stdout=ranks.subprocess.PIPE, stderr=ranks.subprocess.STDOUT, text=True,
                                            start_new_session=True))
    results = ranks.collect(procs, 90)
    ranks.assert_all_ok(results)
    assert [r.result["sum"] for r in results] == [3.0, 3.0]


@pytest.mark.skipif(not os.path.exists("/usr/bin/mpirun"), reason="Open MPI's mpirun is not installed")
def test_under_mpirun():
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "-x", "PYTHONPATH", ranks.PYTHON,
           ranks.SCENARIOS, "env_only"]
    r = ranks.run_command(cmd, timeout_s=120, env=env)
    assert r.returncode == 0, r
    records = ranks.results_in(r.output)
    assert sorted(x["rank"] for x in records) == [0, 1] and all(x["sum"] == 3.0 for x in records), r.output


@pytest.mark.parametrize("mark", [True, False])
def test_a_profile_of_ddp_steps_is_planned(mark, tmp_path):
    profile = tmp_path / "ddp.jsonl"
    steps = 8
    results = ranks.run(2, "ddp_profiled", {"steps": steps, "mark": mark}, timeout_s=180,
                        extra_env={"RDMX_PROFILE": str(profile)})
    ranks.assert_all_ok(results)
    lines = [json.loads(line) for line in profile.read_text().splitlines()]
    header, recorded = lines[0], lines[1:]
    assert header["rdmx_profile"] == 1 and header["ranks"] == 2, header
    assert header["samples_per_step"] == 32 and header["parameters"] == 256 * 256 * 2 + 256 * 2 + 2570, header
    complete = [s for s in recorded if not s.get("partial")]
    # Marked: one line per step. Found by repetition: every step after the
    # first (DDP's broadcasts come first) but the last, which ends with the job.
    assert len(complete) >= (steps if mark else steps - 2), [s["duration_us"] for s in recorded]
    for s in complete[1:]:
        buckets = [c for c in s["collectives"] if c["op"] == "all_reduce"]
        assert len(buckets) >= 2, s
        assert sum(c["bytes"] for c in buckets) == 4 * header["parameters"], s
        for c in buckets:
            assert c["ranks"] == 2 and c["type"] == "fp32", c
            assert c["done_us"] >= c["issue_us"], c
    if not RDMX_CLI:
        pytest.skip("RDMX_CLI is not set: the plan half needs the rdmx command")
    out = tmp_path / "plan.json"
    r = ranks.run_command([RDMX_CLI, "plan", "--model", str(profile), "--nodes", "2,4", "--gpus-per-node", "1",
                           "--fabrics", "tcp-25,ib-ndr", "--json", str(out)], timeout_s=60)
    assert r.returncode == 0, r.output
    plan = json.loads(out.read_text())
    assert plan["model"]["origin"] == "captured" and len(plan["rows"]) == 4, plan
    assert plan["model"]["samples_per_step_per_gpu"] == 32
