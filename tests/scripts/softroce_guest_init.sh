#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Soft-RoCE VM's /init, sourced by tests/scripts/softroce.sh (which packs
# what guest_init prints into its initramfs).
# The guest's /init. Stage 1 runs from the initramfs (busybox sh): it mounts the host's
# / read-only over 9p as the lower layer of an overlay with a tmpfs upper, so host
# binaries run unchanged; mounts the unpacked kernel's modules over /lib/modules and
# the read-write shares at their host paths; then switch_roots (with chroot the
# kernel's module helper runs outside it and `rdma link add` fails to load crc32).
# Stage 2 runs as PID 1 of the new root under the host's /bin/sh: it makes the rxe
# device, runs the job's command, prints the exit marker and powers off. The rxe device
# sits on a dummy netdev, or, where the job sets softroce_mac (two-host mode), on the
# virtio-net NIC with that MAC; job files without it work as before.
guest_init() {
  cat <<'EOF'
#!/bin/busybox sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# softroce_job and softroce_marker come from the kernel command line (the kernel
# hands unknown name=value parameters to init as environment variables).
die() { echo "softroce-vm: $*"; echo "${softroce_marker}77"; poweroff_now; }
poweroff_now() {
  sync
  ${softroce_busybox:-busybox} poweroff -f
  echo o >/proc/sysrq-trigger
  sleep 60
}
p9="trans=virtio,version=9p2000.L,msize=262144"
# Two-host mode: names the NIC with MAC $softroce_mac $softroce_netdev, gives it MTU
# $softroce_mtu (or the most virtio-net allows) and $softroce_ip, makes $softroce_rxe on
# it, sets softroce_gid to the RoCE v2 GID of the IPv4 address and reports all that on
# a "${softroce_marker}info" line (which the host logs).
setup_nic() {
  modprobe virtio_net || return 1
  nic=""
  for _ in $(seq 50); do
    for d in /sys/class/net/*; do
      [ "$(cat "$d/address" 2>/dev/null)" = "$softroce_mac" ] && nic=${d##*/}
    done
    [ -n "$nic" ] && break
    sleep 0.1
  done
  [ -n "$nic" ] || { echo "softroce-vm: no NIC with MAC $softroce_mac"; return 1; }
  if [ "$nic" != "$softroce_netdev" ]; then ip link set "$nic" name "$softroce_netdev" || return 1; fi
  if ! ip link set "$softroce_netdev" mtu "$softroce_mtu" 2>/dev/null; then
    max=$(ip -d link show "$softroce_netdev" | sed -n 's/.* maxmtu \([0-9]*\).*/\1/p')
    if [ -n "$max" ] && [ "$max" -lt "$softroce_mtu" ]; then ip link set "$softroce_netdev" mtu "$max"; fi
  fi
  ip link set "$softroce_netdev" up && ip addr add "$softroce_ip/24" dev "$softroce_netdev" &&
    rdma link add "$softroce_rxe" type rxe netdev "$softroce_netdev" || return 1
  # First 16 entries only: reading all 1024 is slow under TCG.
  want=$(echo "$softroce_ip" | awk -F. '{printf "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", $1, $2, $3, $4}')
  g=/sys/class/infiniband/$softroce_rxe/ports/1
  softroce_gid=""
  for _ in $(seq 25); do
    for i in $(seq 0 15); do
      if [ "$(cat "$g/gids/$i" 2>/dev/null)" = "$want" ] &&
         [ "$(cat "$g/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then softroce_gid=$i; break 2; fi
    done
    sleep 0.2
  done
  [ -n "$softroce_gid" ] || { echo "softroce-vm: no RoCE v2 GID for $softroce_ip on $softroce_rxe"; return 1; }
  echo "${softroce_marker}info $softroce_rxe on $softroce_netdev ($softroce_ip/24, MTU $(cat "/sys/class/net/$softroce_netdev/mtu") for $softroce_mtu asked, GID index $softroce_gid)"
}

if [ "$1" != stage2 ]; then
  /bin/busybox --install -s /bin
  mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev || die "mounting /proc /sys /dev failed"
  for m in $(cat /modules/order); do insmod "/modules/$m" || die "insmod $m failed"; done
  job=$softroce_job
  mkdir -p /lower /rw /newroot
  mount -t 9p -o "$p9,ro" hostroot /lower || die "mounting the host's / over 9p failed"
  [ -r "/lower$job" ] || die "no job file $job"
  . "/lower$job"
  mount -t tmpfs -o mode=755 rw /rw && mkdir /rw/upper /rw/work || die "tmpfs failed"
  mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot ||
    die "overlay mount failed"
  i=0
  while [ "$i" -lt "$softroce_nshares" ]; do
    eval "dir=\$softroce_share_$i"
    mount -t 9p -o "$p9" "work$i" "/newroot$dir" || die "mounting $dir read-write failed"
    i=$((i + 1))
  done
  mkdir -p /newroot/lib/modules && mount --bind "/newroot$softroce_modules" /newroot/lib/modules ||
    die "mounting the kernel modules failed"
  for d in proc sys dev; do mount --move "/$d" "/newroot/$d"; done
  mkdir -p /newroot/run/softroce && cp /init /newroot/run/softroce/init
  exec switch_root /newroot /bin/sh /run/softroce/init stage2 "$job"
fi

job=$2
. "$job"
mkdir -p /dev/shm && mount -t tmpfs shm /dev/shm
ip link set lo up
modprobe rdma_rxe || die "modprobe rdma_rxe failed"
modprobe rdma_ucm || die "modprobe rdma_ucm failed"
if [ -n "${softroce_mac:-}" ]; then
  setup_nic || die "creating $softroce_rxe on the NIC $softroce_mac failed"
else
  ip link add "$softroce_netdev" type dummy &&
    ip link set "$softroce_netdev" mtu 9000 up &&
    ip addr add "$softroce_ip/24" dev "$softroce_netdev" &&
    rdma link add "$softroce_rxe" type rxe netdev "$softroce_netdev" || die "creating $softroce_rxe failed"
fi
echo "${softroce_marker}started"  # the host's boot watchdog stands down
(softroce_command) </dev/null
rc=$?
echo "$softroce_marker$rc"
poweroff_now
EOF
}
