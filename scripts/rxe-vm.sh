#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Runs a command inside a qemu guest that has real kernel RDMA verbs: Debian's
# own kernel with soft-RoCE (rdma_rxe) on a dummy netdev, and this machine's
# filesystem visible read-only at the same paths (with a throwaway tmpfs
# overlay on top), so host-built binaries run unchanged.
#
#   scripts/rxe-vm.sh CMD [ARGS...]
#
# CMD runs in the current directory with the caller's RDMX_* and GTEST_*
# variables; its stdout and stderr come back on this script's stdout, and its
# exit status is this script's. 124 means the guest ran past RXE_VM_TIMEOUT
# seconds (default 600); 125 means the guest failed before CMD ran.
#
# Why a guest: this kernel has no RDMA (CONFIG_INFINIBAND unset) and KVM does
# not boot here, so qemu emulates (TCG). Boot to CMD takes about 5 s. The
# guest has no NIC: rxe loops packets back inside its kernel and nothing
# leaves it. See ../shared/notes/soft-roce-vm.md and docs/TESTING.md.
#
# Environment:
#   RXE_VM_CACHE    where the kernel and initramfs are kept (default: build/rxe-vm)
#   RXE_VM_TIMEOUT  wall-clock bound in seconds (default 600)
#   RXE_VM_MTU      MTU of the guest's netdev (default 4500: rxe's active MTU 4096)
#   RXE_VM_CPUS     guest CPUs (default: this machine's cores, at most 4)
#   RXE_VM_MEMORY   guest memory (default 8G: the conformance suite moves 2 GiB messages, max_msg_size)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
cache=${RXE_VM_CACHE:-$repo/build/rxe-vm}
limit=${RXE_VM_TIMEOUT:-600}
mtu=${RXE_VM_MTU:-4500}
cpus=${RXE_VM_CPUS:-$(nproc)}
memory=${RXE_VM_MEMORY:-8G}
((cpus > 4)) && cpus=4
log() { echo "rxe-vm: $*" >&2; }

if [[ $# -eq 0 ]]; then
  echo "usage: scripts/rxe-vm.sh CMD [ARGS...]" >&2
  exit 2
fi

bash "$here/deps.sh" --verbs-vm

# --- kernel: Debian's own, unpacked (not installed) into the cache ---------
kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[[ -n "$kpkg" ]] || { log "cannot tell which kernel package linux-image-amd64 depends on (apt-cache depends)"; exit 125; }
kver=${kpkg#linux-image-}
kroot=$cache/$kpkg
if [[ ! -f "$kroot/boot/vmlinuz-$kver" ]]; then
  log "fetching $kpkg (once; kept in $cache)"
  rm -rf "$kroot" && mkdir -p "$kroot"
  (cd "$cache" && apt-get download -q -o APT::Sandbox::User=root "$kpkg" >/dev/null) || { log "apt-get download $kpkg failed"; exit 125; }
  dpkg -x "$cache/${kpkg}"_*.deb "$kroot"
  rm -f "$cache/${kpkg}"_*.deb
  depmod -b "$kroot" "$kver"
fi

# --- initramfs: static busybox and the modules that mount the 9p root ------
initrd=$cache/initrd-$kver.cpio.gz
if [[ ! -f "$initrd" || "$here/rxe-vm.sh" -nt "$initrd" ]]; then
  log "building the initramfs"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"/{bin,dev,proc,sys,mod,newroot}
  cp /bin/busybox "$work/bin/busybox"
  : >"$work/mod/order"
  for m in virtio_pci 9pnet_virtio 9p overlay; do modprobe -d "$kroot" -S "$kver" --show-depends "$m"; done |
    awk '$1 == "insmod" {print $2}' | while read -r ko; do
      name=$(basename "$ko")
      if ! grep -qx "$name" "$work/mod/order"; then
        cp "$ko" "$work/mod/$name"
        echo "$name" >>"$work/mod/order"
      fi
    done
  cat >"$work/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in $(cat /mod/order); do insmod "/mod/$m" || echo "initramfs: insmod $m failed" >/dev/ttyS0; done
fail() { echo "initramfs: $*" >/dev/ttyS0; echo o >/proc/sysrq-trigger; sleep 10; }
mkdir -p /lower /rw
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /lower || fail "mounting the host's / over 9p failed"
mount -t tmpfs -o size=2g tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot || fail "overlay mount failed"
stage2=$(sed -n 's/.*rxe_stage2=\([^ ]*\).*/\1/p' /proc/cmdline)
exec switch_root /newroot /bin/bash "$stage2"
EOF
  chmod +x "$work/init"
  (cd "$work" && find . | cpio -o -H newc --quiet | gzip -1) >"$initrd.tmp"
  mv "$initrd.tmp" "$initrd"
  rm -rf "$work"
  trap - EXIT
fi

# --- the run: CMD, its directory and environment, through a writable share --
share=$(mktemp -d /tmp/rxe-vm.XXXXXX)
trap 'rm -rf "$share"' EXIT
{
  echo "cd $(printf %q "$PWD")"
  while IFS='=' read -r name _; do
    [[ "$name" =~ ^(RDMX_|GTEST_) ]] && echo "export $name=$(printf %q "${!name}")"
  done < <(env)
  printf 'exec'
  printf ' %q' "$@"
  echo
} >"$share/cmd.sh"
cat >"$share/env" <<EOF
kver=$kver
modules=$kroot/lib/modules/$kver
mtu=$mtu
EOF

accel="tcg,thread=multi"
start=$(date +%s.%N)
set +e
timeout --kill-after=5 "$limit" qemu-system-x86_64 -nodefaults -no-user-config -no-reboot -display none \
  -accel "$accel" -cpu max -m "$memory" -smp "$cpus" \
  -kernel "$kroot/boot/vmlinuz-$kver" -initrd "$initrd" \
  -append "console=ttyS1 quiet panic=-1 rxe_stage2=$here/rxe-vm-guest.sh rxe_share=/run/rxe-share" \
  -chardev stdio,id=out,signal=off -serial chardev:out -serial "file:$share/console.log" \
  -fsdev local,id=hostroot,path=/,security_model=none,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot \
  -fsdev local,id=share,path="$share",security_model=none,multidevs=remap \
  -device virtio-9p-pci,fsdev=share,mount_tag=share </dev/null
qemu_rc=$?
set -e
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}')
if [[ $qemu_rc -eq 124 || $qemu_rc -eq 137 ]]; then
  log "the guest ran past ${limit} s (RXE_VM_TIMEOUT) and was stopped; kernel console:"
  tail -n 20 "$share/console.log" >&2 || true
  exit 124
fi
if [[ ! -f "$share/rc" ]]; then
  log "the guest stopped before CMD finished (qemu exit $qemu_rc after ${elapsed} s); last kernel console lines:"
  tail -n 30 "$share/console.log" >&2 || true
  [[ -f "$share/setup.log" ]] && { log "guest setup log:"; cat "$share/setup.log" >&2; }
  exit 125
fi
rc=$(cat "$share/rc")
log "guest finished in ${elapsed} s; command exit status $rc"
exit "$rc"
