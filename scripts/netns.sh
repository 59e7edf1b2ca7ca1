#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The two network namespaces the NetNs test placements use, for running
# examples or benchmarks by hand the same way (needs root and iproute2).
#
#   scripts/netns.sh up [NAME]            create rdmx-NAME-a / rdmx-NAME-b joined by a veth pair:
#                                         a: 10.201.0.1/24, fd00:201::1/64   b: 10.201.0.2/24, fd00:201::2/64
#   scripts/netns.sh exec a|b [-6] CMD..  run CMD in namespace a or b with RDMX_SOCKET_IFNAME and
#                                         RDMX_SOCKET_FAMILY (AF_INET, or AF_INET6 with -6) set as the tests
#                                         set them; NETNS_NAME=NAME picks a pair other than "manual"
#   scripts/netns.sh down [NAME]          delete them
#   scripts/netns.sh clean                delete namespaces left by test processes that no longer run
#
# NAME defaults to "manual". The tests create their own pair (rdmxt-<pid>-a/b)
# and never touch these.
set -euo pipefail

cmd=${1:-}
shift || true

need_root() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "netns.sh: network namespaces need root" >&2
    exit 1
  fi
}

names() {
  local name=${1:-manual}
  ns_a="rdmx-$name-a"
  ns_b="rdmx-$name-b"
  if_a="rdmx${name:0:8}a"
  if_b="rdmx${name:0:8}b"
}

case "$cmd" in
  up)
    need_root
    names "${1:-manual}"
    ip netns add "$ns_a"
    ip netns add "$ns_b"
    ip link add "$if_a" type veth peer name "$if_b"
    ip link set "$if_a" netns "$ns_a"
    ip link set "$if_b" netns "$ns_b"
    ip -n "$ns_a" link set lo up
    ip -n "$ns_b" link set lo up
    ip -n "$ns_a" addr add 10.201.0.1/24 dev "$if_a"
    ip -n "$ns_b" addr add 10.201.0.2/24 dev "$if_b"
    ip -n "$ns_a" -6 addr add fd00:201::1/64 dev "$if_a" nodad
    ip -n "$ns_b" -6 addr add fd00:201::2/64 dev "$if_b" nodad
    ip -n "$ns_a" link set "$if_a" up
    ip -n "$ns_b" link set "$if_b" up
    echo "netns.sh: $ns_a ($if_a 10.201.0.1 fd00:201::1) <-> $ns_b ($if_b 10.201.0.2 fd00:201::2)"
    ;;
  exec)
    need_root
    side=${1:?"usage: netns.sh exec a|b [-6] CMD.."}
    shift
    family=AF_INET
    if [[ "${1:-}" == "-6" ]]; then
      family=AF_INET6
      shift
    fi
    names "${NETNS_NAME:-manual}"
    case "$side" in
      a) ns=$ns_a ifname=$if_a ;;
      b) ns=$ns_b ifname=$if_b ;;
      *) echo "netns.sh: side must be a or b" >&2; exit 2 ;;
    esac
    exec ip netns exec "$ns" env RDMX_SOCKET_IFNAME="$ifname" RDMX_SOCKET_FAMILY="$family" "$@"
    ;;
  down)
    need_root
    names "${1:-manual}"
    ip netns del "$ns_a" 2>/dev/null || true
    ip netns del "$ns_b" 2>/dev/null || true
    ;;
  clean)
    need_root
    for ns in $(ip netns list | awk '{print $1}' | grep '^rdmxt-' || true); do
      pid=${ns#rdmxt-}
      pid=${pid%%-*}
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "netns.sh: deleting $ns (test process $pid is gone)"
        ip netns del "$ns" || true
      fi
    done
    ;;
  *)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"
    exit 2
    ;;
esac
