#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Collectives on the multi-host bed (scripts/bed.sh, docs/BED.md), side by
# side in one run: rdmx hierarchical, rdmx flat, Open MPI with its tuned
# collectives, on the same namespaces and shaped links.
#
#   bench/run_bed.sh BUILD_DIR [LAYOUTS] [RATES] [SIZES]
#     LAYOUTS  default "2x2 4x2"      RATES  default "1gbit"
#     SIZES    default "1M,16M,64M,256M"
#   BED_OPS: the operations (default all_reduce; any of all_reduce
#   all_gather reduce_scatter broadcast reduce). BED_FLAT: rdmx's flat
#   algorithms to compare with (default ring; e.g. "ring rd"); "auto" runs
#   without RDMX_ALGO, the library's own choice. BED_BASELINE: another
#   build directory whose own choice runs too, as rdmx-auto-base, after
#   this build's rdmx-auto (compares two versions' selection in one run).
#   BED_HIER=0 leaves out the forced hier rows.
#   Output: one line per row, "<rate> <layout> <op> <who> <size> <out-of-place
#   us> <in-place us>".
#   BED_MPI_COLLS="tuned han" adds Open MPI's han (coll_han_priority 100); in
#   Open MPI 4.1.4 it crashes in vader here (docs/PERFORMANCE.md).
#   BED_NICS: NICs per host, one bed each (default 1; "1 2" compares): local
#   rank l takes NIC l mod NICS, and Open MPI's tcp btl stripes over all of
#   them. A layout of several NICs prints as <layout>/<n>nic.
#
# Open MPI starts its daemons in the hosts' namespaces through a launch
# agent (plm_rsh_agent) that runs each under its host's name, so Open MPI
# sees separate nodes: vader within a host, tcp over the links between.
# Needs root, iproute2 and Open MPI with mpicc (scripts/deps.sh --bench).
set -euo pipefail
build=$(cd "${1:?usage: bench/run_bed.sh BUILD_DIR [LAYOUTS] [RATES] [SIZES]}" && pwd)
layouts=${2:-"2x2 4x2"}
rates=${3:-"1gbit"}
sizes=${4:-"1M,16M,64M,256M"}
here=$(cd "$(dirname "$0")" && pwd)
bed=$here/../scripts/bed.sh
name="p$(($$ % 10000))"
work=$(mktemp -d "${TMPDIR:-/tmp}/rdmx-bedbench.XXXXXX")
trap '"$bed" down "$name" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

show() { echo "+ $*" >&2; }

mpicc -O2 -std=c11 -o "$work/mpi_coll_perf" "$here"/coll/mpi_coll_perf.c "$here"/coll/mpi_coll_args.c \
  "$here"/coll/mpi_coll_model.c -lm
cat >"$work/agent.sh" <<'AGENT'
#!/bin/bash
while [[ "$1" == -* ]]; do shift; done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"
AGENT
chmod +x "$work/agent.sh"

# Prints "<who> <size> <out-of-place us> <in-place us>" per row of a table.
rows() { awk -v who="$1" '/^[# ]*$/ {next} /^#/ {next} {sub(/^\[0\] +/, ""); if ($1 ~ /^[0-9]+$/) print who, $1, $6, $10}'; }

for rate in $rates; do
  for nics in ${BED_NICS:-1}; do
    for layout in $layouts; do
      H=${layout%x*}
      L=${layout#*x}
      label=$layout
      mpi_nets=10.203.0.0/24
      if ((nics > 1)); then
        label=$layout/${nics}nic
        mpi_nets=10.203.0.0/16
      fi
      "$bed" down "$name" >/dev/null 2>&1 || true
      "$bed" up "$name" "$H" "$rate" "$nics" >&2
      hosts=""
      for ((h = 0; h < H; ++h)); do hosts+="${hosts:+,}rdmxb-$name-h$h:$L"; done
      for op in ${BED_OPS:-all_reduce}; do
        algos=(${BED_FLAT:-ring})
        [[ ${BED_HIER:-1} == 0 ]] || algos=(hier "${algos[@]}")
        for algo in "${algos[@]}"; do
          runs=("$build auto")
          [[ $algo != auto || -z ${BED_BASELINE:-} ]] || runs+=("$(cd "$BED_BASELINE" && pwd) auto-base")
          for run in "${runs[@]}"; do
            bin=${run% *}/tools/rdmx
            who=rdmx-$algo
            [[ $algo != auto ]] || who=rdmx-${run#* }
            setting=RDMX_ALGO=$op:$algo
            [[ $algo != auto ]] || setting=BED_CHOICE=auto  # no RDMX_ALGO: the library's choice
            show "$setting bed.sh run $name $layout -- $bin perf coll $op --sizes $sizes -n 5"
            env "$setting" "$bed" run "$name" "$layout" --time-limit 600 -- \
              "$bin" perf coll "$op" --sizes "$sizes" -n 5 2>&1 | grep '^\[0\]' |
              rows "$rate $label $op $who" || echo "$rate $label $op $who failed"
          done
        done
        for coll in ${BED_MPI_COLLS:-tuned}; do
          extra=()
          [[ $coll == han ]] && extra=(--mca coll_han_priority 100)
          show "mpirun ($coll) --host $hosts mpi_coll_perf --op $op --sizes $sizes --iters 5"
          ip netns exec "rdmxb-$name-h0" timeout -k 5 600 mpirun --allow-run-as-root --oversubscribe --bind-to none \
            --host "$hosts" -np $((H * L)) --mca plm_rsh_agent "$work/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
            --mca pml ob1 --mca btl self,vader,tcp --mca btl_tcp_if_include "$mpi_nets" \
            --mca oob_tcp_if_include 10.203.0.0/24 "${extra[@]}" \
            "$work/mpi_coll_perf" --op "$op" --sizes "$sizes" --iters 5 2>&1 | rows "$rate $label $op mpi-$coll" ||
            echo "$rate $label $op mpi-$coll failed (exit ${PIPESTATUS[0]})"
        done
      done
    done
  done
done
