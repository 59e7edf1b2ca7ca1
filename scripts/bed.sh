#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# A multi-host bed on one machine: H network namespaces ("hosts"), each
# joined to a bridge by its own veth link (one link and one bridge per NIC
# when hosts have several), every link shaped with `tc tbf` in both
# directions. Ranks in one namespace share memory (shm reaches them); ranks
# in different namespaces reach each other only over the shaped links, as
# hosts of a cluster do over their NICs. Needs root and iproute2.
#
#   scripts/bed.sh up NAME HOSTS [RATE] [NICS]
#                                         create the bed; RATE as tc writes it (1gbit, 10gbit;
#                                         default or "-": unshaped), NICS per host (default 1).
#                                         Host h is namespace rdmxb-NAME-h<h>; its NIC 0 is
#                                         interface rb<NAME>h<h> with address 10.203.0.<h+1>/24, NIC k
#                                         rb<NAME>h<h>n<k> with 10.203.<k>.<h+1>/24 on bridge k (one
#                                         rail per NIC, as multi-rail clusters are); the bridges live
#                                         in namespace rdmxb-NAME-sw. Ranks reach other rails through
#                                         their own NIC on that rail (reverse-path filtering is off)
#   scripts/bed.sh run NAME HxL [--time-limit S] [--port P] [--ifname auto] -- CMD..
#                                         start H*L ranks of CMD, L in each of the first H hosts,
#                                         rank = h*L + l, with RDMX_RANK, RDMX_WORLD_SIZE,
#                                         RDMX_LOCAL_RANK, RDMX_LOCAL_WORLD_SIZE, RDMX_STORE (rank 0
#                                         serves it on host 0), RDMX_SOCKET_IFNAME (NIC 0's name
#                                         prefix; not with --ifname auto, so ranks choose) and a per-job
#                                         RDMX_AUTH_KEY (unless one is set) set; each
#                                         output line is prefixed with its rank; exits with the first
#                                         failing rank's status (124 when the time limit, default
#                                         300 s, ran out)
#   scripts/bed.sh link NAME HOST RATE [NIC]
#                                         reshape one NIC's link (default NIC 0) of host HOST to RATE in
#                                         both directions: a slow cable or port among the others
#   scripts/bed.sh stray NAME HOST       give host HOST an interface rb<NAME>h<h>x (10.204.0.<h+1>/24) on a
#                                         bridge of its own that no other host joins, numbered before
#                                         the host's NICs so that it is the first one listed: a
#                                         management or storage network that does not reach the peers
#   scripts/bed.sh exec NAME HOST CMD..   run CMD in host HOST's namespace (RDMX_SOCKET_IFNAME set)
#   scripts/bed.sh show NAME              the hosts, addresses and each link's qdisc
#   scripts/bed.sh down NAME              delete the bed
#
# NAME is at most 6 characters ([a-z0-9]): interface names must fit in 15.
set -euo pipefail

die() {
  echo "bed.sh: $*" >&2
  exit 2
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "network namespaces need root"
  command -v ip >/dev/null || die "the ip command is missing (Debian package iproute2)"
}

check_name() {
  [[ "$1" =~ ^[a-z0-9]{1,6}$ ]] || die "NAME must be 1-6 characters of [a-z0-9] (got '$1')"
}

host_ns() { echo "rdmxb-$1-h$2"; }
switch_ns() { echo "rdmxb-$1-sw"; }
# NAME HOST [NIC]: NIC 0 keeps the plain name, so "rb<NAME>h<h>" as a
# prefix (RDMX_SOCKET_IFNAME) matches every NIC of the host.
host_if() { if ((${3:-0} == 0)); then echo "rb$1h$2"; else echo "rb$1h$2n$3"; fi; }
switch_if() { if ((${3:-0} == 0)); then echo "rb$1s$2"; else echo "rb$1s$2n$3"; fi; }
host_ip() { echo "10.203.${3:-0}.$(($2 + 1))"; }

# The hosts of bed NAME, in order.
host_count() {
  local n=0
  while ip netns list | awk '{print $1}' | grep -qx "$(host_ns "$1" "$n")"; do n=$((n + 1)); done
  echo "$n"
}

# tbf on `dev` in namespace `ns` at `rate`. The bucket holds at least one
# timer tick's worth of bytes at that rate (the kernel refills it per tick),
# and never less than 64 KiB, so segments of a GSO burst pass whole.
shape() {
  local ns=$1 dev=$2 rate=$3
  local bits
  bits=$(rate_bits "$rate")
  local burst=$((bits / 8 / 250))
  ((burst < 65536)) && burst=65536
  ip -n "$ns" link set "$dev" txqueuelen 1000
  tc -n "$ns" qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" latency 100ms
}

# "10gbit" -> 10000000000 (tc's decimal units, as tc reads them).
rate_bits() {
  local r=${1,,}
  local num=${r%%[a-z]*} unit=${r##*[0-9.]}
  [[ -n "$num" ]] || die "rate '$1' has no number"
  case "$unit" in
    bit) echo "$num" | awk '{printf "%d", $1}' ;;
    kbit) echo "$num" | awk '{printf "%d", $1 * 1e3}' ;;
    mbit) echo "$num" | awk '{printf "%d", $1 * 1e6}' ;;
    gbit) echo "$num" | awk '{printf "%d", $1 * 1e9}' ;;
    *) die "rate '$1': use bit, kbit, mbit or gbit (as tc does)" ;;
  esac
}

# One NIC's link shaped anew, on both its ends.
relink() {
  local name=$1 host=$2 rate=$3 nic=$4
  check_name "$name"
  need_root
  rate_bits "$rate" >/dev/null
  ip netns list | awk '{print $1}' | grep -qx "$(host_ns "$name" "$host")" || die "bed $name has no host $host"
  ip -n "$(host_ns "$name" "$host")" link show "$(host_if "$name" "$host" "$nic")" >/dev/null 2>&1 ||
    die "host $host of bed $name has no NIC $nic"
  shape "$(host_ns "$name" "$host")" "$(host_if "$name" "$host" "$nic")" "$rate"
  shape "$(switch_ns "$name")" "$(switch_if "$name" "$host" "$nic")" "$rate"
  echo "bed $name: host $host NIC $nic ($(host_if "$name" "$host" "$nic")) shaped to $rate both ways"
}

up() {
  local name=$1 hosts=$2 rate=${3:-} nics=${4:-1}
  [[ "$rate" != "-" ]] || rate=
  check_name "$name"
  [[ "$hosts" =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 64)) || die "HOSTS must be 1..64 (got '$hosts')"
  [[ "$nics" =~ ^[0-9]$ ]] && ((nics >= 1)) || die "NICS must be 1..9 (got '$nics')"
  [[ -z "$rate" ]] || rate_bits "$rate" >/dev/null
  need_root
  if ip netns list | awk '{print $1}' | grep -qx "$(switch_ns "$name")"; then
    die "bed $name exists already (scripts/bed.sh down $name first)"
  fi
  local sw
  sw=$(switch_ns "$name")
  trap 'down "$name" >/dev/null 2>&1 || true' ERR
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  local h k
  for ((k = 0; k < nics; ++k)); do
    ip -n "$sw" link add "br$k" type bridge
    ip -n "$sw" link set "br$k" up
  done
  for ((h = 0; h < hosts; ++h)); do
    local ns
    ns=$(host_ns "$name" "$h")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # A rank bound to its rail's address reaches another rail through the
    # host's NIC on that rail; the answers come back on its own.
    ip netns exec "$ns" sh -c 'for k in all default; do echo 0 >"/proc/sys/net/ipv4/conf/$k/rp_filter"; done'
    for ((k = 0; k < nics; ++k)); do
      local hif sif
      hif=$(host_if "$name" "$h" "$k")
      sif=$(switch_if "$name" "$h" "$k")
      ip link add "$hif" type veth peer name "$sif"
      ip link set "$hif" netns "$ns"
      ip link set "$sif" netns "$sw"
      ip -n "$sw" link set "$sif" master "br$k"
      ip -n "$sw" link set "$sif" up
      ip -n "$ns" addr add "$(host_ip "$name" "$h" "$k")/24" dev "$hif"
      ip -n "$ns" link set "$hif" up
      if [[ -n "$rate" ]]; then
        shape "$ns" "$hif" "$rate"  # host -> switch
        shape "$sw" "$sif" "$rate"  # switch -> host
      fi
    done
  done
  trap - ERR
  echo "bed.sh: bed $name: $hosts hosts (10.203.0.1-$hosts), $nics NIC(s) each, links ${rate:-unshaped}"
}

down() {
  local name=$1
  check_name "$name"
  need_root
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^rdmxb-$name-" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

show() {
  local name=$1
  check_name "$name"
  need_root
  local hosts h k
  hosts=$(host_count "$name")
  ((hosts > 0)) || die "no bed named $name"
  for ((h = 0; h < hosts; ++h)); do
    local ns hif
    ns=$(host_ns "$name" "$h")
    for ((k = 0; k < 10; ++k)); do
      hif=$(host_if "$name" "$h" "$k")
      ip -n "$ns" link show "$hif" >/dev/null 2>&1 || break
      echo "host $h NIC $k: $ns $hif $(host_ip "$name" "$h" "$k") qdisc: $(tc -n "$ns" qdisc show dev "$hif" | head -1)"
    done
  done
}

# An interface on a network without the job's peers, listed first.
stray() {
  local name=$1 host=$2
  check_name "$name"
  need_root
  local ns sw
  ns=$(host_ns "$name" "$host")
  sw=$(switch_ns "$name")
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "bed $name has no host $host"
  ip -n "$sw" link show brx >/dev/null 2>&1 || {
    ip -n "$sw" link add brx type bridge
    ip -n "$sw" link set brx up
  }
  local hif="rb${name}h${host}x" sif="rb${name}s${host}x"
  # The lowest free index after loopback's: getifaddrs lists by index.
  ip -n "$ns" link add "$hif" index 2 type veth peer name "$sif" netns "$sw"
  ip -n "$sw" link set "$sif" master brx
  ip -n "$sw" link set "$sif" up
  ip -n "$ns" addr add "10.204.0.$((host + 1))/24" dev "$hif"
  ip -n "$ns" link set "$hif" up
  echo "bed $name: host $host has $hif (10.204.0.$((host + 1))/24) first, on a bridge without peers"
}

exec_in() {
  local name=$1 host=$2
  shift 2
  check_name "$name"
  need_root
  local ns
  ns=$(host_ns "$name" "$host")
  ip netns list | awk '{print $1}' | grep -qx "$ns" || die "bed $name has no host $host"
  exec ip netns exec "$ns" env RDMX_SOCKET_IFNAME="$(host_if "$name" "$host")" "$@"
}

run() {
  local name=$1 layout=$2
  shift 2
  check_name "$name"
  [[ "$layout" =~ ^([0-9]+)x([0-9]+)$ ]] || die "layout must be HxL, e.g. 2x4 (got '$layout')"
  local H=${BASH_REMATCH[1]} L=${BASH_REMATCH[2]}
  ((H >= 1 && L >= 1)) || die "layout $layout: H and L must be at least 1"
  local limit=300 port=29500 ifname_auto=0
  while [[ $# -gt 0 && "$1" != "--" ]]; do
    case "$1" in
      --time-limit) limit=${2:?}; shift 2 ;;
      --port) port=${2:?}; shift 2 ;;
      --ifname) [[ ${2:-} == auto ]] || die "--ifname takes auto"; ifname_auto=1; shift 2 ;;
      *) die "unknown option $1 (the command goes after --)" ;;
    esac
  done
  [[ "${1:-}" == "--" ]] || die "usage: bed.sh run NAME HxL [--time-limit S] [--port P] -- CMD.."
  shift
  [[ $# -gt 0 ]] || die "no command given"
  need_root
  local hosts
  hosts=$(host_count "$name")
  ((hosts >= H)) || die "layout $layout needs $H hosts; bed $name has $hosts (scripts/bed.sh up $name $H)"
  local world=$((H * L)) store
  store="$(host_ip "$name" 0):$port"
  # One secret per job, as rdmx run makes (docs/SECURITY.md), unless the caller set one.
  if [[ -z ${RDMX_AUTH_KEY:-} && -z ${RDMX_AUTH_KEY_FILE:-} ]]; then
    RDMX_AUTH_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    export RDMX_AUTH_KEY
  fi
  local pids=() h
  for ((h = 0; h < H; ++h)); do
    ip netns exec "$(host_ns "$name" "$h")" unshare --uts bash -c "$HOST_LAUNCHER" bed-host "$name" "$h" "$L" \
      "$world" "$store" "$( ((ifname_auto)) || host_if "$name" "$h")" "$limit" "$@" &
    pids+=($!)
  done
  local status=0 pid got
  for pid in "${pids[@]}"; do
    got=0
    wait "$pid" || got=$?
    if ((status == 0 && got != 0)); then status=$got; fi
  done
  return "$status"
}

# One host's L ranks, run inside its network namespace and a mount namespace
# of its own (ip netns exec makes one). The shm provider's socket directory
# gets a private tmpfs there: ranks of one host find each other's sockets,
# ranks of other hosts do not, so they connect over the shaped links as on
# separate machines. The UTS namespace gives the host its own name.
HOST_LAUNCHER='
set -u
name=$1 h=$2 L=$3 world=$4 store=$5 ifname=$6 limit=$7
shift 7
hostname "bed-$name-h$h"
dir=${RDMX_SHM_DIR:-/tmp/rdmx-shm-$(id -u)}
mkdir -p "$dir"
mount -t tmpfs -o mode=0700 "rdmx-bed-$name-h$h" "$dir" || { echo "bed.sh: cannot mount a tmpfs on $dir" >&2; exit 2; }
pids=()
for ((l = 0; l < L; ++l)); do
  rank=$((h * L + l))
  RDMX_RANK=$rank RDMX_WORLD_SIZE=$world RDMX_LOCAL_RANK=$l RDMX_LOCAL_WORLD_SIZE=$L RDMX_STORE=$store \
    env ${ifname:+"RDMX_SOCKET_IFNAME=$ifname"} timeout -k 5 "$limit" "$@" > >(sed -u "s/^/[$rank] /") 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  got=0
  wait "$pid" || got=$?
  if ((status == 0 && got != 0)); then status=$got; fi
done
wait
exit $status
'

cmd=${1:-}
shift || true
case "$cmd" in
  up) up "${1:?usage: bed.sh up NAME HOSTS [RATE] [NICS]}" "${2:?usage: bed.sh up NAME HOSTS [RATE] [NICS]}" "${3:-}" "${4:-}" ;;
  down) down "${1:?usage: bed.sh down NAME}" ;;
  show) show "${1:?usage: bed.sh show NAME}" ;;
  stray) stray "${1:?usage: bed.sh stray NAME HOST}" "${2:?usage: bed.sh stray NAME HOST}" ;;
  exec) exec_in "${1:?usage: bed.sh exec NAME HOST CMD..}" "${2:?usage: bed.sh exec NAME HOST CMD..}" "${@:3}" ;;
  link) relink "${1:?usage: bed.sh link NAME HOST RATE [NIC]}" "${2:?usage: bed.sh link NAME HOST RATE [NIC]}" \
    "${3:?usage: bed.sh link NAME HOST RATE [NIC]}" "${4:-0}" ;;
  run) run "${1:?usage: bed.sh run NAME HxL -- CMD..}" "${2:?usage: bed.sh run NAME HxL -- CMD..}" "${@:3}" ;;
  *) die "usage: bed.sh up|run|link|stray|exec|show|down ... (see the comment at the top)" ;;
esac
