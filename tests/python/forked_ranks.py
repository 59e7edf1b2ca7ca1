"""Runs a test job's ranks as children forked from one process that has imported torch already:
`python forked_ranks.py SCRIPT SCENARIO JSON_ARGS ENVS_JSON OUT_DIR`.

Importing torch takes seconds per process here and one to two minutes in the emulated soft-RoCE
guest: importing it once and forking the ranks costs one import instead of one per rank, and the
ranks start together. make test runs the torch cases this way (RDMX_TEST_FORK_RANKS=1).
ENVS_JSON holds each rank's whole environment (ranks.env_for); rank r's output goes to
OUT_DIR/r.out, and OUT_DIR/status.json says how each ended ({"r": exit status, or minus the
signal that ended it}). The ranks run the scenario as `python SCRIPT SCENARIO JSON_ARGS` would,
and write their results as ranks.py reads them. Nothing rdmx or torch keeps per process (a store,
a group, a thread) exists before the fork: the scripts make all of it inside the scenario.
"""
# SPDX-License-Identifier: MIT
import importlib.util
import json
import os
import sys
import traceback


def load(script):
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(script))[0], script)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(script))
    spec.loader.exec_module(module)
    return module


def run_rank(module, scenario, args, env, out_path):
    os.environ.clear()
    os.environ.update(env)
    out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    code = 0
    try:
        # A script's table (reporting_scenarios) wraps each scenario so that it reports its result.
        entry = getattr(module, "SCENARIOS", {}).get(scenario) or getattr(module, scenario)
        entry(args)
    except Exception:  # noqa: BLE001  (reported as the script's own main would)
        module.emit({"error": traceback.format_exc()[-4000:]})
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main():
    script, scenario, args, envs, out_dir = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), \
        json.loads(sys.argv[4]), sys.argv[5]
    module = load(script)
    children = {}
    for rank, env in enumerate(envs):
        pid = os.fork()
        if pid == 0:
            run_rank(module, scenario, args, env, os.path.join(out_dir, f"{rank}.out"))
        children[pid] = rank
    status = {}
    while children:
        pid, raw = os.waitpid(-1, 0)
        rank = children.pop(pid, None)
        if rank is not None:
            status[str(rank)] = -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)
    with open(os.path.join(out_dir, "status.json"), "w") as f:
        json.dump(status, f)


if __name__ == "__main__":
    main()
