# SPDX-License-Identifier: MIT
# What bench/plan/validate_collectives.sh and validate_ddp.sh share, sourced
# by both: progress lines, rates as tc writes them, the bed's host count for
# a list of layouts, and calibrating a bed. Expects $bed (scripts/bed.sh) and
# $rdmx (the rdmx binary).

show() { echo "== $*" >&2; }

# "250mbit" -> 0.25, "1gbit" -> 1: the rate in Gbit/s, as --nic-gbit takes it.
gbit_of() {
  case "$1" in
    *gbit) echo "${1%gbit}" ;;
    *mbit) awk -v m="${1%mbit}" 'BEGIN { print m / 1000 }' ;;
    *) echo "$(basename "$0"): rate '$1' is not Nmbit or Ngbit" >&2; exit 2 ;;
  esac
}

# The hosts a bed needs for layouts "HxL ...": the largest H, and at least 2
# (calibration runs on 2x2).
hosts_for() {
  local most=2 layout h
  for layout in "$@"; do
    h=${layout%x*}
    ((h > most)) && most=$h
  done
  echo "$most"
}

# calibrate NAME RATE OUT: rdmx plan calibrate on 2 hosts of 2 ranks of bed
# NAME, shaped to RATE; the fabric is named bed-RATE.
calibrate() {
  local name=$1 rate=$2 out=$3
  show "bed.sh run $name 2x2 -- rdmx plan calibrate --name bed-$rate --nic-gbit $(gbit_of "$rate") --out $out"
  "$bed" run "$name" 2x2 --time-limit 600 -- "$rdmx" plan calibrate --name "bed-$rate" \
    --nic-gbit "$(gbit_of "$rate")" --out "$out" >&2
}
