#!/bin/bash
# SPDX-License-Identifier: MIT
# PID 1 of the soft-RoCE guest (started by scripts/rxe-vm.sh, never by hand):
# mounts what a system needs, brings up rxe0 on a dummy netdev, runs the
# command the host left in the share, writes its exit status back and powers
# off. Kept lean: every process start costs tens of ms under emulation.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
out=/dev/ttyS0
share=/run/rxe-share

mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# /tmp stays the host's (through the overlay): a build tree under /tmp must stay visible.
mount -t tmpfs tmpfs /run
mkdir -p "$share"
mount -t 9p -o trans=virtio,version=9p2000.L,cache=none share "$share"
stty -F "$out" raw -echo 2>/dev/null

poweroff_now() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}
fail() {
  echo "rxe-vm guest: $*" >>"$share/setup.log"
  poweroff_now
}

. "$share/env"
mkdir -p "/lib/modules/$kver"
mount --bind "$modules" "/lib/modules/$kver" || fail "cannot bind $modules onto /lib/modules/$kver"

# A dummy netdev with a fixed MAC: rxe needs a netdev, and loops packets to its
# own MAC back inside the kernel, so no NIC is needed. An IPv4 address gives
# the RoCE v2 IPv4-mapped GID (index 1) beside the link-local one (index 0).
ip link set lo up
ip link add eth0 address 02:00:00:00:00:01 mtu "$mtu" type dummy || fail "ip link add eth0 type dummy failed"
echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad 2>/dev/null
ip link set eth0 up
ip addr add 10.77.0.1/24 dev eth0
modprobe rdma_rxe || fail "modprobe rdma_rxe failed"
modprobe rdma_ucm || fail "modprobe rdma_ucm failed"
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 failed"
for _ in $(seq 200); do
  state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
  [[ "$state" == *ACTIVE* ]] && break
  sleep 0.05
done
[[ "$state" == *ACTIVE* ]] || fail "rxe0 port 1 did not become ACTIVE (state: ${state:-none})"
# rxe fills the IPv4-mapped GID when the address event arrives; wait for it.
for _ in $(seq 100); do
  grep -q "0000:0000:0000:0000:0000:ffff" /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null && break
  sleep 0.05
done

ulimit -l unlimited
ulimit -n 65536
export HOME=/root
bash "$share/cmd.sh" >"$out" 2>&1 </dev/null
echo $? >"$share/rc"
poweroff_now
