"""Starts real rank processes for the torch backend tests.

Each rank is `python3 scenarios.py <scenario> <json args>` with the env://
variables torchrun sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE). A rank writes its result as JSON into
RDMX_TEST_RESULT_DIR/<rank>.json (or prints one `RESULT <json>` line when
started by a launcher); every run is bounded in time and kills what is left.
"""
# SPDX-License-Identifier: MIT
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios.py")
TRAINING = os.path.join(HERE, "training.py")
FORKED_RANKS = os.path.join(HERE, "forked_ranks.py")
PYTHON = os.environ.get("RDMX_TEST_PYTHON", sys.executable)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reserved_port():
    """A port for a job's store and the socket that holds it: bound with
    SO_REUSEADDR and never listening, so rank 0's store (which binds with
    SO_REUSEADDR too) can listen on it, while the kernel hands it to no other
    connect() or bind(0) meanwhile. A port that free_port() closed could be
    taken by another test's socket before rank 0 bound it; the job's ranks
    then met a stranger's listener and waited out their timeout. Close the
    socket once the job is over."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


class RankResult:
    def __init__(self, rank, returncode, output, result_dir=None):
        self.rank = rank
        self.returncode = returncode
        self.output = output
        self.result = None
        path = os.path.join(result_dir, f"{rank}.json") if result_dir else None
        if path and os.path.exists(path):
            with open(path) as f:
                self.result = json.load(f)
            return
        for line in output.splitlines():
            if line.startswith("RESULT "):
                try:
                    self.result = json.loads(line[len("RESULT "):])
                except ValueError:
                    self.result = None

    def __repr__(self):
        return f"rank {self.rank}: exit {self.returncode}\n{self.output}"


def env_for(rank, world, port, extra=None):
    env = dict(os.environ)
    env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(world)})
    env.setdefault("RDMX_TIMEOUT", "60")
    if extra:
        env.update(extra)
    return env


def collect(procs, deadline_s, result_dir=None):
    """Waits for every process until the deadline, then kills the rest."""
    deadline = time.monotonic() + deadline_s
    results = []
    for rank, p in enumerate(procs):
        left = max(0.1, deadline - time.monotonic())
        try:
            out, _ = p.communicate(timeout=left)
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    os.killpg(q.pid, signal.SIGKILL)
            out, _ = p.communicate()
            out += f"\n[killed: rank {rank} still running after {deadline_s} s]"
        results.append(RankResult(rank, p.returncode, out, result_dir))
    return results


def rank_envs(world, result_dir, port, extra_env=None, per_rank_env=None):
    """Each rank's environment for a job whose store is on `port` that writes its results into `result_dir`."""
    envs = []
    for rank in range(world):
        extra = dict(extra_env or {}, RDMX_TEST_RESULT_DIR=result_dir)
        if per_rank_env:
            extra.update(per_rank_env(rank))
        envs.append(env_for(rank, world, port, extra))
    return envs


def run(world, scenario, args=None, timeout_s=120, extra_env=None, per_rank_env=None, script=SCENARIOS):
    """Runs `scenario` of `script` (scenarios.py, training.py) on `world` ranks under env://
    variables; returns one RankResult per rank. With RDMX_TEST_FORK_RANKS=1 the ranks are forked
    from one process that imported torch first (forked_ranks.py), as make test runs them."""
    if os.environ.get("RDMX_TEST_FORK_RANKS") == "1":
        return run_forked(world, scenario, args, timeout_s, extra_env, per_rank_env, script)
    result_dir = tempfile.mkdtemp(prefix="rdmx-torch-test.")
    holder, port = reserved_port()
    try:
        procs = [subprocess.Popen([PYTHON, script, scenario, json.dumps(args or {})], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
                 for env in rank_envs(world, result_dir, port, extra_env, per_rank_env)]
        return collect(procs, timeout_s, result_dir)
    finally:
        holder.close()
        shutil.rmtree(result_dir, ignore_errors=True)


def run_forked(world, scenario, args, timeout_s, extra_env, per_rank_env, script):
    """run() with the ranks forked from one process (forked_ranks.py), bounded alike."""
    result_dir = tempfile.mkdtemp(prefix="rdmx-torch-test.")
    holder, port = reserved_port()
    try:
        envs = rank_envs(world, result_dir, port, extra_env, per_rank_env)
        # The forking process reads rdmx's settings as rank 0 would (the ranks' differ only in their numbers).
        parent = subprocess.Popen([PYTHON, FORKED_RANKS, script, scenario, json.dumps(args or {}), json.dumps(envs),
                                   result_dir], env=envs[0], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        forker = collect([parent], timeout_s)[0]
        status_path = os.path.join(result_dir, "status.json")
        status = {}
        if os.path.exists(status_path):
            with open(status_path) as f:
                status = json.load(f)
        results = []
        for rank in range(world):
            out_path = os.path.join(result_dir, f"{rank}.out")
            output = ""
            if os.path.exists(out_path):
                with open(out_path, errors="replace") as f:
                    output = f.read()
            code = status.get(str(rank))
            if code is None:  # the forking process did not see it end: killed at the deadline, or it failed itself
                code = -signal.SIGKILL
                output += f"\n[the forking process (exit {forker.returncode}) said:]\n{forker.output}"
            results.append(RankResult(rank, code, output, result_dir))
        return results
    finally:
        holder.close()
        shutil.rmtree(result_dir, ignore_errors=True)


def run_command(cmd, timeout_s=120, env=None):
    """Runs one launcher command (rdmx run, mpirun) in its own session, bounded."""
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    return collect([p], timeout_s)[0]


def results_in(output):
    """Every `RESULT <json>` record in a launcher's merged output. mpirun
    forwards each rank's bytes as they come, so one rank's record may end up
    glued to the other's on one line; records are found by decoding, not by
    lines."""
    decoder = json.JSONDecoder()
    found = []
    at = output.find("RESULT ")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(output, at + len("RESULT "))
            found.append(value)
        except ValueError:
            end = at + len("RESULT ")
        at = output.find("RESULT ", end)
    return found


def assert_all_ok(results, what=""):
    """Every rank exited 0 with a result that is not an unexpected exception's
    ({"error": trace}: scenarios put what they expect under other names);
    `what` ("on gloo") says which run failed."""
    bad = [r for r in results if r.returncode != 0 or r.result is None]
    assert not bad, (what + ":\n" if what else "") + "\n".join(repr(r) for r in results)
    raised = [f"rank {r.rank}:\n{r.result['error']}" for r in results
              if isinstance(r.result, dict) and r.result.get("error")]
    assert not raised, (what + ":\n" if what else "") + "\n".join(raised)


def results_without_failures(results):
    """Each rank's result dict, once every rank exited cleanly, raised nothing
    unexpected ({"error": trace}) and reported no failures."""
    assert_all_ok(results)
    for r in results:
        assert "error" not in r.result, f"rank {r.rank}:\n{r.result['error']}"
        assert r.result.get("failures", []) == [], f"rank {r.rank}:\n" + "\n".join(r.result["failures"])
    return [r.result for r in results]
