"""Keeping training when a rank dies, through torch's own calls on the "rdmx" backend
(recovery.py): a DDP loop loses a rank in the middle of a step, goes on with the
survivors without restarting them, grows back with a new process, and every rank
ends with the same parameters, bit for bit. On shm (auto, one host), tcp and verbs (in the
soft-RoCE guest), with the rank killed, or stopped (found at the timeout, and refused
once it resumes).

Run from CTest (TorchRecovery.*), or by hand:
    PYTHONPATH=build/python OMP_NUM_THREADS=1 PYTHON -m pytest tests/python/test_torch_recovery.py
"""
# SPDX-License-Identifier: MIT
import os

import pytest
import ranks

RECOVERY = os.path.join(ranks.HERE, "recovery.py")
# The groups' timeout: what bounds finding a stopped rank and every wait. The emulated
# verbs guest (scripts/verbs-guest-tests.sh) sets a longer one, and a longer bound on the
# whole run: there, each process takes minutes to import torch.
TIMEOUT_S = float(os.environ.get("RDMX_TEST_RECOVERY_TIMEOUT_S", "5"))
RUN_S = float(os.environ.get("RDMX_TEST_RECOVERY_RUN_S", "180"))
# What the first step after the fault may take beyond the timeout (a second here; the
# emulated guest runs a step some thirty times slower).
SLACK_S = float(os.environ.get("RDMX_TEST_RECOVERY_SLACK_S", "1"))


def rdma_devices():
    """The kernel's RDMA devices (rxe0 in the soft-RoCE guest; none on the CI host)."""
    try:
        return os.listdir("/sys/class/infiniband")
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("provider,fault", [("auto", "kill"), ("tcp", "kill"), ("auto", "stop"), ("tcp", "stop"),
                                            ("verbs", "kill"), ("verbs", "stop")])
def test_ddp_loses_a_rank_mid_step_goes_on_and_grows_back(provider, fault):
    if provider == "verbs" and not rdma_devices():
        pytest.skip("no RDMA device (/sys/class/infiniband is empty): the verbs cases run in the soft-RoCE guest "
                    "(CTest VerbsInSoftRoceGuest, make test-torch-verbs)")
    world, victim, kill_step, steps = 4, 2, 3, 9
    results = ranks.run(world + 1, "ddp_recovery",
                        {"world": world, "victim": victim, "kill_step": kill_step, "steps": steps, "fault": fault},
                        timeout_s=RUN_S, extra_env={"RECOVERY_TIMEOUT_S": str(TIMEOUT_S), "RDMX_PROVIDER": provider},
                        script=RECOVERY)
    by_rank = {r.rank: r for r in results}
    victim_result = by_rank.pop(victim)
    if fault == "kill":
        assert victim_result.returncode == -9, f"the victim should have been killed:\n{victim_result!r}"
    else:
        # Continued after the others went on: it must say it was left out, not go on.
        assert victim_result.returncode == 0 and "refused" in (victim_result.result or {}), repr(victim_result)
        assert "losses" not in victim_result.result, victim_result.result
    for r in by_rank.values():
        assert r.returncode == 0 and r.result is not None, "\n".join(repr(x) for x in results)
        assert "error" not in r.result, f"rank {r.rank}:\n{r.result['error']}"
    survivors = [by_rank[r].result for r in range(world) if r != victim]
    spare = by_rank[world].result
    for s in survivors:
        assert s["failed"] == [victim], s
        assert s["world_after_shrink"] == world - 1
        assert len(set(s["digests_after_shrink"])) == 1, f"after the shrink, ranks differ: {s['digests_after_shrink']}"
        # From the kill to the first step done on the survivors: the timeout bounds
        # a stopped rank's discovery; a killed one's is at once.
        assert s["fault_to_next_step_s"] < TIMEOUT_S + SLACK_S, s
        assert len(s["losses"]) == steps, s["losses"]
        assert s["world_at_end"] == world
    assert spare["world_at_end"] == world
    every = survivors + [spare]
    digests = {d for r in every for d in r["digests"]}
    assert len(digests) == 1, f"the ranks' parameters differ at the end: {[r['digests'] for r in every]}"
    assert survivors[0]["losses"][-1] < survivors[0]["losses"][0], survivors[0]["losses"]
    print(f"{provider} {fault}: fault to next step (s):", [round(s["fault_to_next_step_s"], 3) for s in survivors])
