"""A rank that stops calling (asleep in its data loader) is named, with the
file, line and function it is in, by the ranks that wait for it: in one
warning after RDMX_STALL_WARN (5 s by default), long before the timeout,
and again in the timeout's error (stalls.py runs on real rank processes).

Run from CTest (tests/CMakeLists.txt, TorchStalls.*), or by hand:
    PYTHONPATH=build/python OMP_NUM_THREADS=1 PYTHON -m pytest tests/python/test_torch_stalls.py
"""
# SPDX-License-Identifier: MIT
import os
import re

import ranks

STALLS = os.path.join(ranks.HERE, "stalls.py")


def marked_line(mark="the line a stall report names"):
    with open(STALLS) as f:
        for number, line in enumerate(f, 1):
            if mark in line:
                return number
    raise AssertionError(f"stalls.py lost its line marked {mark!r}")


def sleep_line():
    return marked_line()


def test_a_rank_asleep_in_its_loader_is_named_with_file_and_line_before_the_timeout():
    results = ranks.run(3, "late_rank", {"timeout_s": 60, "sleep_s": 9}, timeout_s=120, script=STALLS,
                        extra_env={"RDMX_STALL_WARN": "5s"})
    ranks.assert_all_ok(results)
    where = f"stalls.py:{sleep_line()} in load_batch"
    for res in results[:2]:
        assert res.result["step1"].get("sum") == 3.0, res
        warnings = [line for line in res.output.splitlines() if "RDMX_STALL_WARN" in line]
        assert len(warnings) == 1, f"one stall warning on rank {res.rank}:\n{res.output}"
        waited = re.search(r"has waited ([0-9.]+) s on rank", warnings[0])
        assert waited and 5.0 <= float(waited.group(1)) < 7.0, warnings[0]
        assert "rank 2 has not called it" in warnings[0], warnings[0]
        assert where in res.output, f"rank {res.rank} does not name {where}:\n{res.output}"
        assert "last collectives: all_reduce #" in res.output, res.output
    assert "RDMX_STALL_WARN" not in results[2].output, results[2].output


def test_the_timeout_names_where_the_late_rank_is():
    results = ranks.run(2, "late_rank", {"timeout_s": 8, "sleep_s": 14}, timeout_s=120, script=STALLS,
                        extra_env={"RDMX_STALL_WARN": "0"})
    assert results[0].result is not None, results[0]
    error = results[0].result["step1"].get("error", "")
    assert "timed out" in error and "rank 1 has not called it" in error, results[0]
    assert f"stalls.py:{sleep_line()} in load_batch" in error, error
    assert "RDMX_STALL_WARN" not in results[0].output, results[0].output


def test_rdmx_status_shows_the_stalled_rank_where_it_is_and_the_straggler():
    results = ranks.run(3, "observed", {"steps": 6, "late_s": 0.15}, timeout_s=120, script=STALLS,
                        extra_env={"RDMX_STALL_WARN": "2s", "RDMX_STATUS_INTERVAL": "200ms"})
    ranks.assert_all_ok(results)
    assert all(res.result["sum"] == 3.0 for res in results), results
    status = results[0].result["status"]
    comm = [c for c in status["json"]["communicators"] if len(c["ranks"]) == 3][0]
    assert comm["tag"].endswith("/rdmx"), comm["tag"]  # the group's store prefix, then the backend's tag
    by_rank = {r["rank"]: r for r in comm["ranks"]}
    where = f"stalls.py:{marked_line('the line rdmx status names')} in wait_for_observer"
    assert by_rank[1]["state"] == "outside" and by_rank[1]["where"].endswith(where), by_rank[1]
    assert by_rank[2]["state"] == "inside" and by_rank[2]["current"]["call"].startswith("all_reduce #"), by_rank[2]
    assert 1 in comm["under_way"]["not_called"] and comm["under_way"]["in_it"] == [2], comm["under_way"]
    assert comm["slowest"]["rank"] == 2 and comm["slowest"]["entered_last"] >= 4, comm["slowest"]
    text = status["text"]
    assert f"at {by_rank[1]['where']}" in text, text
    assert "slowest rank of the last" in text and "collectives: rank 2 (" in text, text
