#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/torch/tables.py ROWS COMMANDS ROUNDS QUICK VERSIONS: the markdown tables of
bench/torch/run.sh, from the JSON lines of its runs (bench/coll/torch_coll_perf.py,
`rdmx perf coll --json-lines`, bench/torch/ddp_step.py), each tagged with its config."""
import json
import sys

BINDING_RATIO = 1.2     # from 64 KiB up, torch rdmx within this factor of rdmx perf coll
BINDING_SMALL_US = 5.0  # below 64 KiB, within this many microseconds of it
GLOO_FACTOR = 3.0       # and at least this much faster than gloo
MLP_FACTOR = 1.5        # the communication-heavy MLP's step at least this much faster than with gloo
COMPUTE_FLOOR = 1.0     # the compute-bound step at least as fast as with gloo

rows_path, commands_path, rounds, quick, versions = sys.argv[1:]
torch_version, rdmx_version = versions.split()
best = {}   # (config, op, np, bytes, inplace) -> the fastest round's row
ddp = {}    # (model, bucket_view, mode, backend) -> [rows, one per run]
dispatch = {}  # (backend, np) -> row
wrong = 0
for line in open(rows_path):
    if not line.strip():
        continue
    row = json.loads(line)
    if row["config"] == "ddp":
        ddp.setdefault((row["model"], row.get("bucket_view", False), row.get("mode", "ddp"), row["backend"]),
                       []).append(row)
        continue
    if row["config"] == "dispatch":
        dispatch[(row["backend"], row["np"])] = row
        continue
    key = (row["config"], row["op"], row["np"], row["bytes"], row["inplace"])
    wrong += row.get("wrong") or 0
    if key not in best or row["time_us"] < best[key]["time_us"]:
        best[key] = row

out = []
w = out.append


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def us(t):
    return "-" if t is None else f"{t:.1f}" if t < 1000 else f"{t:.0f}"


def time_of(config, op, np, nbytes, inplace):
    row = best.get((config, op, np, nbytes, inplace))
    return None if row is None else row["time_us"]


# torch's calls that have an out-of-place form are timed out of place; the
# rest (all_reduce, broadcast) in place, as torch's API has them.
PLACE = {"all_reduce": True, "broadcast": True, "all_gather": False, "reduce_scatter": False}
CALL = {"all_reduce": "all_reduce", "broadcast": "broadcast", "all_gather": "all_gather_into_tensor",
        "reduce_scatter": "reduce_scatter_tensor"}
missed = []


def torch_layer_at(np):
    """What torch's Python layer (distributed_c10d) adds to every call, measured at np ranks."""
    row = dispatch.get(("rdmx", np))
    return None if row is None else row["python_layer_us"]


ops = [op for op in PLACE if any(k[1] == op for k in best)]
nps = sorted({k[2] for k in best if k[2] > 1})
w(f"torch {torch_version}, rdmx {rdmx_version}; fp32 (sum), CPU tensors, one thread per rank, local ranks; "
  f"best of {rounds} round(s){', QUICK: 5 iterations, not a measurement' if quick == '1' else ''}. "
  f"Time per call in us, nccl-tests' timing (averaged over the ranks) and sizes (the whole buffer: all_gather's "
  f"output, reduce_scatter's input). *perf coll* is `rdmx perf coll --provider auto` (what the backend picks: shm "
  f"between local ranks); *torch rdmx* and *torch gloo* are bench/coll/torch_coll_perf.py. "
  f"*less torch's layer* takes off what torch's Python layer adds to every call whatever the backend, "
  f"measured at the same number of ranks (the table *What a call costs* below), leaving what the rdmx binding "
  f"costs. Every result checked: {wrong} wrong value(s).")
w("")
for op in ops:
    inplace = PLACE[op]
    for np in nps:
        sizes = sorted({k[3] for k in best if k[1] == op and k[2] == np and k[4] == inplace})
        if not sizes:
            continue
        w(f"**{op}** (`dist.{CALL[op]}`, {'in place' if inplace else 'out of place'}, both backends), {np} ranks")
        w("")
        w("| size | perf coll | torch rdmx | torch rdmx - perf coll | less torch's layer | torch rdmx / perf coll "
          "| torch gloo | gloo / rdmx |")
        w("|---|---|---|---|---|---|---|---|")
        for nbytes in sizes:
            perf = time_of("perf-coll", op, np, nbytes, inplace)
            mine = time_of("torch-rdmx", op, np, nbytes, inplace)
            gloo = time_of("torch-gloo", op, np, nbytes, inplace)
            binding = net = ratio = speedup = "-"
            torch_layer = torch_layer_at(np)
            if perf is not None and mine is not None:
                binding = f"{mine - perf:+.1f}"
                ratio = f"{mine / perf:.2f}x"
                net_us = mine - perf - torch_layer if torch_layer is not None else None
                net = "-" if net_us is None else f"{net_us:+.1f}"
                if nbytes >= 64 << 10 and mine > BINDING_RATIO * perf:
                    missed.append(f"{op} {np} ranks {size_label(nbytes)}: torch rdmx {mine / perf:.2f}x perf coll")
                    ratio += " (miss)"
                elif nbytes < 64 << 10 and net_us is not None and net_us > BINDING_SMALL_US:
                    missed.append(f"{op} {np} ranks {size_label(nbytes)}: binding {net_us:.1f} us beyond torch's")
                    net += " (miss)"
            if gloo is not None and mine is not None:
                speedup = f"{gloo / mine:.2f}x"
                if gloo < GLOO_FACTOR * mine:
                    missed.append(f"{op} {np} ranks {size_label(nbytes)}: {gloo / mine:.2f}x gloo")
                    speedup += " (miss)"
            w(f"| {size_label(nbytes)} | {us(perf)} | {us(mine)} | {binding} | {net} | {ratio} | {us(gloo)} | "
              f"{speedup} |")
        w("")

if dispatch:
    w("**What a call costs**, a 4 B all_reduce (bench/torch/dispatch_cost.py; on 1 rank no byte moves). "
      "*binding* = the backend called directly - `rdmx perf coll` at the same size and ranks:")
    w("")
    w("| ranks | backend | `dist.all_reduce(t)` | `group.allreduce([t], opts).wait()` | the same, asyncOp | "
      "torch's Python layer (the difference) | perf coll | binding |")
    w("|---|---|---|---|---|---|---|---|")
    for np in sorted({k[1] for k in dispatch}):
        perf = time_of("perf-coll", "all_reduce", np, 4, True)
        for backend in ("rdmx", "gloo"):
            row = dispatch.get((backend, np))
            if row:
                bind = f"{row['direct_us'] - perf:+.2f}" if perf is not None else "-"
                w(f"| {np} | {backend} | {row['api_us']:.2f} | {row['direct_us']:.2f} | "
                  f"{row.get('direct_async_us', float('nan')):.2f} | {row['python_layer_us']:.2f} | {us(perf)} | {bind} |")
    w("")

if ddp:
    w("**Training steps**, 2 ranks (bench/torch/ddp_step.py; ms per step, the slowest rank's; *exposed "
      "communication* = step - the same step without communication: under `no_sync()` for DDP, on an unsharded "
      "local copy of the model for FSDP2). Each run on its own line; a run of rdmx and one of gloo alternate:")
    w("")
    w("| model | mode | gradients | batch/rank | backend | step | compute only | exposed communication | "
      "params identical | gloo / rdmx step |")
    w("|---|---|---|---|---|---|---|---|---|---|")
    for model, view, mode in (("small-mlp", False, "ddp"), ("mlp", False, "ddp"), ("mlp", True, "ddp"),
                              ("mlp", False, "fsdp2")):
        mine, theirs = ddp.get((model, view, mode, "rdmx"), []), ddp.get((model, view, mode, "gloo"), [])
        label = "DDP, gradient_as_bucket_view" if view else "FSDP2 (fully_shard)" if mode == "fsdp2" else "DDP"
        ratios = []
        for i in range(max(len(mine), len(theirs))):
            for backend, rows in (("rdmx", mine), ("gloo", theirs)):
                if i >= len(rows):
                    w(f"| {model} | {label} | | | {backend} | failed | | | | |")
                    continue
                row = rows[i]
                speed = ""
                if backend == "rdmx" and i < len(theirs):
                    ratio = theirs[i]["step_ms"] / row["step_ms"]
                    ratios.append(ratio)
                    speed = f"{ratio:.2f}x"
                w(f"| {model} | {label} | {row['grad_bytes'] / 1e6:.1f} MB | {row['batch']} | {backend} | "
                  f"{row['step_ms']:.1f} | {row['compute_ms']:.1f} | {row['exposed_comm_ms']:.1f} "
                  f"({100 * row['exposed_comm_ms'] / row['step_ms']:.0f}%) | {row['identical_params']} | {speed} |")
        floor = COMPUTE_FLOOR if model == "small-mlp" else MLP_FACTOR
        if ratios and min(ratios) < floor:
            missed.append(f"{model} {label} step: {min(ratios):.2f}x gloo (target {floor:g}x)")
    w("")

w(f"Targets: torch rdmx >= {GLOO_FACTOR:g}x faster than gloo at every size; within {BINDING_RATIO:g}x of perf coll "
  f"from 64 KiB, and below it within {BINDING_SMALL_US:g} us beyond torch's own layer; the communication-heavy MLP's DDP "
  f"and FSDP2 steps >= {MLP_FACTOR:g}x faster than gloo's; the compute-bound step at least as fast as gloo's "
  f"(>= {COMPUTE_FLOOR:g}x) in every run. "
  + ("Missed: " + "; ".join(missed) + "." if missed else "All met."))
w("")
w("<details><summary>The commands (each rank bounded by <code>timeout</code>)</summary>")
w("")
w("```sh")
out.extend(line.rstrip("\n") for line in open(commands_path) if line.strip())
w("```")
w("")
w("</details>")
print("\n".join(out))
