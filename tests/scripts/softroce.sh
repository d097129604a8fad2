#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command where a Soft-RoCE (rdma_rxe) device exists, so the verbs tests can
# run on machines without an RDMA NIC, and exits with the command's status.
#
#   softroce.sh [--selftest] [--keep-cache] [--hosts 1|2] -- COMMAND [ARGS...]
#
#   --selftest    run ibv_devinfo and ib_write_bw (plain and -R) on the device; no COMMAND
#                 (with --hosts 2: ping, a TCP exchange, ib_write_bw plain and -R and
#                 ib_write_lat between the two guests)
#   --keep-cache  use the cached kernel as it is, without asking apt for a newer one
#   --hosts 2     two Soft-RoCE hosts: two VM guests (1 vCPU each) whose virtio-net NICs
#                 are joined by a qemu stream netdev, rxe0 on eth0 in each (10.78.0.1 and
#                 10.78.0.2, MTU 9000); COMMAND runs in both at once, each output line
#                 prefixed "[g0] " or "[g1] ". VM path only: exits 77 where the host
#                 kernel has rdma_rxe (rxe routes in the initial namespace only).
#
# Host path: when the host kernel has rdma_rxe, a dummy netdev with an rxe device on
# it is made on the host and removed afterwards. VM path: otherwise Debian's kernel is
# booted under qemu (TCG) with the host's / as a read-only overlay and the repository
# shared read-write at the same path; SOFTROCE-VM.md (in shared/ beside the repository)
# records why each piece is as it is. COMMAND sees GREX_RXE_DEV, GREX_RXE_NETDEV,
# GREX_RXE_IP, GREX_IB_GID_INDEX and GREX_SOFTROCE=host|vm; with --hosts 2 also
# GREX_HOST_INDEX (0 or 1), GREX_HOST_COUNT=2 and GREX_PEER_IP (the other guest's address).
#
# Environment: SOFTROCE_CACHE (default <repo>/build-softroce-cache),
# SOFTROCE_ACCEL (tcg, default; kvm on hosts whose KVM runs a stock kernel),
# SOFTROCE_TIMEOUT (seconds for the whole VM, default 900), SOFTROCE_BOOT_TIMEOUT
# (seconds for a guest to boot and start COMMAND, default 180; past it the guest is
# killed and booted once more, within SOFTROCE_TIMEOUT; one guest only), SOFTROCE_CPU
# (qemu CPU model, default Nehalem = -march=corei7; "max" for binaries built for newer CPUs).
# Exit status: COMMAND's; 77 when Soft-RoCE cannot be provided (callers count a skip);
# 124 when the VM ran past SOFTROCE_TIMEOUT; 2 on a usage error. With --hosts 2:
# 0 when both commands exit 0, else the first non-zero status, guest 0's first (when
# one command fails, the other guest gets 60 s to end, then is stopped, and its missing
# status does not count); 124 when the run as a whole (from guest 0's start) ran past
# SOFTROCE_TIMEOUT: both qemu are then killed.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
cache=${SOFTROCE_CACHE:-$root/build-softroce-cache}
vm_timeout_s=${SOFTROCE_TIMEOUT:-900}
vm_boot_timeout_s=${SOFTROCE_BOOT_TIMEOUT:-180}
vm_mem_mib=512
vm_cpus=2
vm_cpu_model=${SOFTROCE_CPU:-Nehalem}
# kvm where the host's KVM can run a stock kernel (a real one; this machine's
# paravirtual /dev/kvm stalls it, see SOFTROCE-VM.md): several times faster.
vm_accel=${SOFTROCE_ACCEL:-tcg}
gid_index=1   # GID 0 is the fe80:: one; 1 is the IPv4-mapped RoCE v2 GID
# Two-host mode: guest i has MAC two_host_macs[i] and address two_host_ips[i]; when one
# guest's command fails, the other gets peer_grace_s to end before it is stopped.
two_host_ips=(10.78.0.1 10.78.0.2)
two_host_macs=(52:54:00:4e:00:01 52:54:00:4e:00:02)
peer_grace_s=60
# The modules the initramfs needs to mount the 9p shares and the overlay; their
# dependencies are added from modules.dep.
initramfs_modules=(virtio_pci 9pnet_virtio 9p overlay)

log() { echo "softroce: $*" >&2; }
skip() { log "SKIP: $*"; exit 77; }
usage() {
  echo "usage: softroce.sh [--selftest] [--keep-cache] [--hosts 1|2] -- COMMAND [ARGS...]" >&2
  exit 2
}
help() { awk 'NR > 2 && /^#/ {sub(/^# ?/, ""); print} /^set -euo/ {exit}' "${BASH_SOURCE[0]}"; }

# --- state removed by cleanup --------------------------------------------------
tmp=""          # per-run temp dir (job file, initramfs staging, qemu pid file)
host_rxe=""     # rxe device made on the host
host_netdev=""  # dummy netdev made on the host
vm_pipe_pids=() # background pipelines around qemu (one per guest)
vm_pidfiles=()  # their qemu pid files
# shellcheck disable=SC2317  # called from the EXIT trap
cleanup() {
  local f p
  if ((${#vm_pipe_pids[@]})); then
    # Interrupted while a VM runs: stop qemu by its pid (it writes the pid file
    # first thing), then let the console pipelines end before their files go.
    for f in "${vm_pidfiles[@]}"; do
      for _ in $(seq 50); do [[ -s "$f" ]] && break; sleep 0.1; done
      kill "$(cat "$f" 2>/dev/null)" 2>/dev/null || true
    done
    for p in "${vm_pipe_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  fi
  teardown_host_rxe
  [[ -n "$tmp" ]] && rm -rf "$tmp"
  return 0
}
teardown_host_rxe() {
  if [[ -n "$host_rxe" ]]; then rdma link delete "$host_rxe" 2>/dev/null || true; fi
  if [[ -n "$host_netdev" ]]; then ip link delete "$host_netdev" 2>/dev/null || true; fi
  host_rxe="" host_netdev=""
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- packages ------------------------------------------------------------------
# Installs the given Debian packages that are missing; fails if it cannot.
install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  command -v apt-get >/dev/null || { log "no apt-get to install ${missing[*]}"; return 1; }
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Try the existing package lists first: an update is slow and needs the network.
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >"$tmp/apt.log" 2>&1; then
    apt-get update -q >>"$tmp/apt.log" 2>&1 || true
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$tmp/apt.log" 2>&1; then
      tail -5 "$tmp/apt.log" >&2
      return 1
    fi
  fi
}

# --- host path -----------------------------------------------------------------
# Picks 10.77.N.1/24 with N the first /24 no host interface uses yet.
free_ipv4() {
  local n used
  used=$(ip -4 -o addr show | awk '{print $4}')
  for n in $(seq 0 254); do
    grep -q "^10\.77\.$n\." <<<"$used" || { echo "10.77.$n.1"; return 0; }
  done
  return 1
}

# Index of the RoCE v2 GID that holds IPv4 address $2 on rxe device $1 (first 16 only:
# reading all 1024 entries is slow, and the GID shows up right after the link).
find_gid_index() {
  local dev=$1 ip=$2 want i a b c d
  IFS=. read -r a b c d <<<"$ip"
  want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$a" "$b" "$c" "$d")
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    for i in $(seq 0 15); do
      if [[ "$(cat "/sys/class/infiniband/$dev/ports/1/gids/$i" 2>/dev/null)" == "$want" &&
            "$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null)" == "RoCE v2" ]]; then
        echo "$i"; return 0
      fi
    done
    sleep 0.2
  done
  return 1
}

# Makes a dummy netdev + rxe device on the host; fails (leaving nothing) if the host
# cannot, e.g. rdma_rxe missing or no CAP_NET_ADMIN in this namespace.
setup_host_rxe() {
  [[ -d /sys/module/rdma_rxe ]] || modprobe -q rdma_rxe 2>/dev/null || return 1
  modprobe -q rdma_ucm 2>/dev/null || true
  local ip
  ip=$(free_ipv4) || return 1
  # Unique names: another run (or a VM path run nested in a guest) may hold rxe0.
  host_netdev=gxdum$$
  ip link add "$host_netdev" type dummy || { host_netdev=""; return 1; }
  # MTU 9000 gives rxe an active MTU of 4096 (1500 gives 1024).
  ip link set "$host_netdev" mtu 9000 up || return 1
  ip addr add "$ip/24" dev "$host_netdev" || return 1
  rdma link add "gxrxe$$" type rxe netdev "$host_netdev" || return 1
  host_rxe=gxrxe$$
  gid_index=$(find_gid_index "$host_rxe" "$ip") || gid_index=1
  export GREX_RXE_DEV=$host_rxe GREX_RXE_NETDEV=$host_netdev GREX_RXE_IP=$ip
  export GREX_IB_GID_INDEX=$gid_index GREX_SOFTROCE=host
}

# --- VM path: cached kernel -----------------------------------------------------
# Prints the version (e.g. 6.1.0-56-amd64) of the kernel linux-image-amd64 depends on.
apt_kernel_version() {
  local pkg
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ {print $2; exit}')
  [[ -n "$pkg" ]] && echo "${pkg#linux-image-}"
}

# Newest kernel already unpacked in the cache, if any.
cached_kernel_version() {
  local d
  d=$(find "$cache" -maxdepth 2 -name .complete -path '*/kernel-*' -printf '%h\n' 2>/dev/null | sort -V | tail -1)
  [[ -n "$d" ]] && basename "$d" | sed 's/^kernel-//'
}

# Downloads and unpacks kernel $1 into $cache/kernel-$1 with modules.dep and vmlinux.
fetch_kernel() {
  local ver=$1 dir=$cache/kernel-$1 deb off
  local part=$dir.partial
  rm -rf "$part" && mkdir -p "$part" "$tmp/dl"
  log "downloading linux-image-$ver (once; cached in $cache)"
  # The sandbox user cannot write to our private temp dir; download as root.
  if ! (cd "$tmp/dl" && apt-get download -q -o APT::Sandbox::User=root "linux-image-$ver") >"$tmp/dl.log" 2>&1; then
    tail -3 "$tmp/dl.log" >&2
    return 1
  fi
  deb=$(echo "$tmp"/dl/linux-image-*.deb)
  # Unpack beside, never install over, the host's kernel. (Each step checks its
  # status: callers run this as `fetch_kernel || ...`, where set -e is off.)
  dpkg -x "$deb" "$part" || return 1
  rm -f "$deb"
  # Drop the hardware drivers a VM never loads: halves the cache (~440 -> ~215 MB).
  (cd "$part/lib/modules/$ver/kernel" &&
    rm -rf sound drivers/{gpu,media,net/wireless,net/ethernet,scsi,usb,iio,staging,infiniband/hw}) || return 1
  # The .deb has no modules.dep (the postinst makes it); modprobe needs it.
  depmod -b "$part" "$ver" || return 1
  # Under TCG the stock kernel boots in ~3 s from the uncompressed ELF (PVH entry)
  # against ~6 s from the bzImage: cut the xz payload out of the bzImage.
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$part/boot/vmlinuz-$ver" | head -1 | cut -d: -f1)
  [[ -n "$off" ]] || { log "no xz payload in vmlinuz-$ver"; return 1; }
  tail -c +$((off + 1)) "$part/boot/vmlinuz-$ver" | xz -dc --single-stream >"$part/vmlinux" 2>/dev/null || true
  [[ "$(head -c 4 "$part/vmlinux" | od -An -c | tr -d ' ')" == '177ELF' ]] ||
    { log "could not extract vmlinux from vmlinuz-$ver"; return 1; }
  touch "$part/.complete" && rm -rf "$dir" && mv "$part" "$dir"
}

# Sets kver to the kernel to boot, downloading it on the first run. Without
# --keep-cache a newer linux-image-amd64 dependency replaces the cached kernel.
ensure_kernel() {
  local want
  kver=$(cached_kernel_version || true)
  [[ -n "$kver" && $keep_cache == 1 ]] && return 0
  want=$(apt_kernel_version || true)
  # No package lists yet (fresh machine): fetch them once, only when nothing is cached.
  if [[ -z "$want" && -z "$kver" ]]; then
    apt-get update -q >"$tmp/apt-update.log" 2>&1 || true
    want=$(apt_kernel_version || true)
  fi
  if [[ -n "$want" && "$want" != "$kver" ]]; then
    fetch_kernel "$want" || { [[ -n "$kver" ]] || return 1; log "keeping cached kernel $kver"; return 0; }
    # Drop the kernel it replaces so the cache does not grow with every update.
    [[ -n "$kver" ]] && rm -rf "$cache/kernel-$kver" "$cache"/initramfs-"$kver"-*.cpio
    kver=$want
  fi
  [[ -n "$kver" ]]
}

# --- VM path: guest init ----------------------------------------------------------
# guest_init prints the guest's /init; it lives beside this script.
# shellcheck source=tests/scripts/softroce_guest_init.sh
source "$(dirname "${BASH_SOURCE[0]}")/softroce_guest_init.sh"

# Sets initramfs to a cached cpio archive holding a static busybox, the modules
# stage 1 loads (in dependency order) and guest_init as /init.
ensure_initramfs() {
  local key stage moddir m dep line deps order=()
  # Rebuilt when the init, the module list or busybox changes.
  key=$( { guest_init; echo "${initramfs_modules[*]}"; stat -Lc %s.%Y "$(command -v busybox)"; } | sha256sum | cut -c1-12)
  initramfs=$cache/initramfs-$kver-$key.cpio
  [[ -s "$initramfs" ]] && return 0
  log "building initramfs for $kver"
  stage=$tmp/initramfs
  moddir=$cache/kernel-$kver/lib/modules/$kver
  mkdir -p "$stage"/{bin,dev,proc,sys,modules} && cp "$(command -v busybox)" "$stage/bin/busybox" || return 1
  ldd "$stage/bin/busybox" >/dev/null 2>&1 && { log "busybox is not static (install busybox-static)"; return 1; }
  # The kernel opens /dev/console before /init can mount devtmpfs.
  mknod "$stage/dev/console" c 5 1 && guest_init >"$stage/init" && chmod 755 "$stage/init" || return 1
  # modules.dep lists every dependency, deepest last: load them in reverse, then the module.
  for m in "${initramfs_modules[@]}"; do
    line=$(grep -E "(^|/)$m\.ko:" "$moddir/modules.dep") || { log "module $m not in $kver"; return 1; }
    deps=$(echo "${line#*:}" | tr ' ' '\n' | tac)
    for dep in $deps ${line%%:*}; do
      [[ " ${order[*]} " == *" ${dep##*/} "* ]] && continue
      cp "$moddir/$dep" "$stage/modules/" || return 1
      order+=("${dep##*/}")
    done
  done
  printf '%s\n' "${order[@]}" >"$stage/modules/order"
  (cd "$stage" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$initramfs.partial" &&
    mv "$initramfs.partial" "$initramfs"
}

# --- VM path: run -------------------------------------------------------------------
# Quotes $1 for a POSIX shell (the guest's stage 2 runs under /bin/sh).
shq() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

# Writes job file $1 for guest $2 ("" in the one-guest mode, else the guest's index in
# the two-host mode), which the guest reads through the read-only host share: the
# read-write shares, the rxe names and the command ($3...) with its environment.
write_job() {
  local file=$1 idx=$2 i var
  shift 2
  {
    echo "softroce_busybox=$(shq "$(command -v busybox)")"
    echo "softroce_modules=$(shq "$cache/kernel-$kver/lib/modules")"
    if [[ -z "$idx" ]]; then
      echo "softroce_netdev=dum0 softroce_rxe=rxe0 softroce_ip=10.77.0.1"
    else
      echo "softroce_netdev=eth0 softroce_rxe=rxe0 softroce_ip=${two_host_ips[idx]}"
      echo "softroce_mac=${two_host_macs[idx]} softroce_mtu=9000"
    fi
    echo "softroce_nshares=${#shares[@]}"
    for i in "${!shares[@]}"; do echo "softroce_share_$i=$(shq "${shares[$i]}")"; done
    echo "softroce_command() {"
    # Pass the test settings through; set ours last so they win.
    for var in $(compgen -e | grep -E '^(GREX_|GTEST_|ASAN_OPTIONS$|UBSAN_OPTIONS$)' || true); do
      echo "  export $var=$(shq "${!var}")"
    done
    echo "  export PATH=$(shq "$PATH") HOME=$(shq "${HOME:-/root}")"
    if [[ -z "$idx" ]]; then
      echo "  export GREX_RXE_DEV=rxe0 GREX_RXE_NETDEV=dum0 GREX_RXE_IP=10.77.0.1"
      echo "  export GREX_IB_GID_INDEX=$gid_index GREX_SOFTROCE=vm"
    else
      echo "  export GREX_RXE_DEV=rxe0 GREX_RXE_NETDEV=eth0 GREX_RXE_IP=${two_host_ips[idx]}"
      # shellcheck disable=SC2016  # softroce_gid is the guest's: setup_nic finds it
      echo '  export GREX_IB_GID_INDEX="$softroce_gid" GREX_SOFTROCE=vm'
      echo "  export GREX_HOST_INDEX=$idx GREX_HOST_COUNT=2 GREX_PEER_IP=${two_host_ips[1 - idx]}"
    fi
    echo "  cd $(shq "$cwd") || exit 1"
    printf '  exec'; for var in "$@"; do printf ' %s' "$(shq "$var")"; done; echo
    echo "}"
  } >"$file"
}

# Sets the caller's cwd and shares: the repository (build outputs, result files) and,
# if elsewhere, the working directory are shared read-write at the same paths as on
# the host.
vm_shares() {
  cwd=$(pwd -P)
  shares=("$root")
  [[ "$cwd/" != "$root/"* && "$cwd" != / ]] && shares+=("$cwd")
  return 0
}

# Sets the caller's qemu to the command line of a guest with $1 vCPUs, qemu pid file
# $2 and job file $3 (marker and shares are the caller's).
qemu_command() {
  local i
  # TCG (this /dev/kvm cannot run a stock kernel). Host binaries are built with
  # -march=corei7 (SSE4.2, POPCNT), which the default qemu64 model lacks: Nehalem is
  # that ISA; "max" runs newer ISAs too but halves rxe bandwidth (PCLMUL/AVX emulation).
  local cpu=$vm_cpu_model
  [[ $vm_accel == kvm && -z ${SOFTROCE_CPU:-} ]] && cpu=host
  qemu=(qemu-system-x86_64 -accel "$vm_accel" -cpu "$cpu" -m "$vm_mem_mib" -smp "$1"
    -nodefaults -nic none -display none -serial stdio -no-reboot
    -pidfile "$2"
    -kernel "$cache/kernel-$kver/vmlinux" -initrd "$initramfs"
    -append "console=ttyS0 quiet panic=-1 softroce_job=$3 softroce_marker=$marker"
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap")
  for i in "${!shares[@]}"; do  # (qemu reads ",," as a comma inside an option value)
    qemu+=(-virtfs "local,path=${shares[$i]//,/,,},mount_tag=work$i,security_model=none,multidevs=remap")
  done
}

# Starts the caller's qemu command line under `timeout $4` in the background and adds
# the pipeline's pid to vm_pipe_pids. The console goes through a filter that drops
# the carriage returns of the serial line, prefixes each line with $3, takes the exit
# marker out (the command's status goes to file $2; qemu's own status to file $1) and
# logs the guest's "info" reports to stderr. In the background so that a signal
# reaches our trap (which kills qemu by its pid) without waiting for it. (mawk reads
# a pipe in blocks unless -W interactive: without it lines would show up late.)
start_vm() {
  local qemu_rc_file=$1 guest_rc_file=$2 prefix=$3 limit_s=$4 qemu_rc awk=(awk)
  [[ "$(awk -W version 2>/dev/null </dev/null)" == *mawk* ]] && awk=(awk -W interactive)
  # shellcheck disable=SC2016  # the $ are awk's
  {
    qemu_rc=0
    timeout -k 10 "$limit_s" "${qemu[@]}" </dev/null 2>&1 || qemu_rc=$?
    echo "$qemu_rc" >"$qemu_rc_file"
  } | "${awk[@]}" -v m="$marker" -v out="$guest_rc_file" -v p="$prefix" -v go="$guest_rc_file.started" '
      { sub(/\r$/, "") }
      $0 ~ m "started$" { printf "" > go; close(go); next }
      (i = index($0, m "info ")) > 0 {
        if (i > 1) print p substr($0, 1, i - 1)
        print "softroce: " p substr($0, i + length(m) + 5) > "/dev/stderr"; fflush("/dev/stderr"); next
      }
      match($0, m "[0-9]+$") {
        if (RSTART > 1) print p substr($0, 1, RSTART - 1)
        print substr($0, RSTART + length(m)) > out; close(out); next
      }
      /reboot: Power down$/ { next }
      { print p $0; fflush() }' &
  vm_pipe_pids+=("$!")
}

run_in_vm() {
  local cwd marker start qemu_rc guest_rc shares qemu attempt left
  vm_shares
  marker="softroce-exit-$RANDOM$RANDOM="
  write_job "$tmp/job" "" "$@"
  qemu_command "$vm_cpus" "$tmp/qemu.pid" "$tmp/job"
  log "path=vm: kernel $kver under qemu ${vm_accel^^} ($vm_cpus vCPU $vm_cpu_model, $vm_mem_mib MiB), rxe0 on dum0 (10.77.0.1), shared rw: ${shares[*]}"
  start=$SECONDS
  vm_pidfiles=("$tmp/qemu.pid")
  # A guest boots and starts the command in 5-20 s under TCG. One that has not
  # within SOFTROCE_BOOT_TIMEOUT (a boot that hung: seen once, with no console
  # output at all) is killed and booted once more, within SOFTROCE_TIMEOUT.
  for attempt in 1 2; do
    rm -f "$tmp/qemu.rc" "$tmp/guest.rc" "$tmp/guest.rc.started" "$tmp/qemu.pid"
    left=$((vm_timeout_s - (SECONDS - start)))
    ((left > 0)) || left=1
    start_vm "$tmp/qemu.rc" "$tmp/guest.rc" "" "$left"
    while [[ ! -e "$tmp/guest.rc.started" ]] && kill -0 "${vm_pipe_pids[0]}" 2>/dev/null; do
      if ((attempt == 1 && SECONDS - start >= vm_boot_timeout_s)); then
        log "the guest did not start the command within SOFTROCE_BOOT_TIMEOUT=$vm_boot_timeout_s s: booting it once more"
        kill_guests TERM 0
        break
      fi
      sleep 1
    done
    wait "${vm_pipe_pids[0]}"
    vm_pipe_pids=()
    [[ -e "$tmp/guest.rc.started" || $attempt == 2 ]] && break
    [[ -s "$tmp/guest.rc" ]] && break  # ended (e.g. a die() in the guest) before starting: no retry
  done
  qemu_rc=$(cat "$tmp/qemu.rc" 2>/dev/null || echo 1)
  guest_rc=$(cat "$tmp/guest.rc" 2>/dev/null || true)
  if [[ "$qemu_rc" == 124 || "$qemu_rc" == 137 ]]; then
    log "VM killed after SOFTROCE_TIMEOUT=$vm_timeout_s s"
    return 124
  fi
  if [[ -z "$guest_rc" ]]; then
    log "VM ended (qemu status $qemu_rc) without the command's exit status"
    return 1
  fi
  log "VM finished in $((SECONDS - start)) s; command exit status $guest_rc"
  return "$guest_rc"
}

# Sends signal $1 to the qemu of each guest index that follows (by its pid file).
kill_guests() {
  local sig=$1 i
  shift
  for i in "$@"; do kill "-$sig" "$(cat "${vm_pidfiles[i]}" 2>/dev/null)" 2>/dev/null || true; done
}

# Two-host mode: guest 0 (stream server) and guest 1 (stream client), their virtio-net
# NICs joined by a qemu stream netdev over a unix socket; the command runs in both.
# SOFTROCE_TIMEOUT counts from guest 0's start; past it both qemu are killed (124).
# When one guest's command fails (or its VM ends without a status), the other may be
# waiting on it: it gets peer_grace_s to end on its own, then is stopped, and its
# missing status does not count.
run_in_vm2() {
  local cwd marker start shares qemu i sock rc now ended timed_out=0 grace_at="" kill_at=""
  local running=() stopped=(0 0) status=() qemu_rc guest_rc
  vm_shares
  marker="softroce-exit-$RANDOM$RANDOM="
  sock=$tmp/net.sock
  for i in 0 1; do write_job "$tmp/job$i" "$i" "$@"; done
  log "path=vm, 2 hosts: kernel $kver under qemu ${vm_accel^^} (2 guests of 1 vCPU $vm_cpu_model, $vm_mem_mib MiB), rxe0 on eth0 (${two_host_ips[0]} | ${two_host_ips[1]}) joined by a qemu stream netdev, shared rw: ${shares[*]}"
  start=$SECONDS
  for i in 0 1; do
    qemu_command 1 "$tmp/qemu$i.pid" "$tmp/job$i"
    qemu+=(-netdev "stream,id=n0,server=$( ((i == 0)) && echo on || echo off),addr.type=unix,addr.path=${sock//,/,,}"
      -device "virtio-net-pci,netdev=n0,mac=${two_host_macs[i]}")
    if ((i == 1)); then
      # The client connects once, at its start: wait for guest 0's socket.
      for _ in $(seq 300); do
        [[ -S "$sock" ]] && break
        kill -0 "${vm_pipe_pids[0]}" 2>/dev/null || break
        sleep 0.1
      done
      [[ -S "$sock" ]] || { log "guest 0's qemu did not open its socket $sock"; return 1; }
    fi
    vm_pidfiles+=("$tmp/qemu$i.pid")
    # (The watchdog below kills both at SOFTROCE_TIMEOUT; `timeout` is a backstop.)
    start_vm "$tmp/qemu$i.rc" "$tmp/guest$i.rc" "[g$i] " $((vm_timeout_s + 30))
  done
  while :; do
    running=()
    for i in 0 1; do kill -0 "${vm_pipe_pids[i]}" 2>/dev/null && running+=("$i"); done
    ((${#running[@]})) || break
    now=$SECONDS
    if ((!timed_out && now - start >= vm_timeout_s)); then
      timed_out=1
      log "SOFTROCE_TIMEOUT=$vm_timeout_s s reached (guest ${running[*]} still running): killing both VMs"
      kill_guests TERM 0 1
      kill_at=$((now + 10))
    elif ((!timed_out)) && [[ -z "$grace_at" && ${#running[@]} == 1 ]]; then
      ended=$((1 - running[0]))
      rc=$(cat "$tmp/guest$ended.rc" 2>/dev/null || true)
      if [[ "$rc" != 0 ]]; then
        log "guest $ended ended with status ${rc:-(none)}: guest ${running[0]} gets $peer_grace_s s to end"
        grace_at=$((now + peer_grace_s))
      else
        grace_at=never
      fi
    elif [[ "$grace_at" =~ ^[0-9]+$ && -z "$kill_at" ]] && ((now >= grace_at)); then
      log "stopping guest ${running[0]}: its peer failed $peer_grace_s s ago"
      stopped[running[0]]=1
      kill_guests TERM "${running[0]}"
      kill_at=$((now + 10))
    fi
    if [[ -n "$kill_at" ]] && ((now >= kill_at)); then kill_guests KILL "${running[@]}"; fi
    sleep 0.5
  done
  for i in 0 1; do wait "${vm_pipe_pids[i]}" || true; done
  vm_pipe_pids=()
  for i in 0 1; do
    qemu_rc=$(cat "$tmp/qemu$i.rc" 2>/dev/null || echo 1)
    guest_rc=$(cat "$tmp/guest$i.rc" 2>/dev/null || true)
    if [[ "$qemu_rc" == 124 || "$qemu_rc" == 137 ]]; then
      timed_out=1
    fi
    if [[ -n "$guest_rc" ]]; then
      status[i]=$guest_rc
    elif ((stopped[i] || timed_out)); then
      status[i]=none
    else
      log "guest $i's VM ended (qemu status $qemu_rc) without the command's exit status"
      status[i]=1
    fi
  done
  if ((timed_out)); then
    log "VMs killed after SOFTROCE_TIMEOUT=$vm_timeout_s s (command exit status: guest 0 ${status[0]}, guest 1 ${status[1]})"
    return 124
  fi
  log "VMs finished in $((SECONDS - start)) s; command exit status: guest 0 ${status[0]}, guest 1 ${status[1]}"
  for i in 0 1; do
    [[ "${status[i]}" == none || "${status[i]}" == 0 ]] || return "${status[i]}"
  done
  return 0
}

# --- selftest ------------------------------------------------------------------------
# The --selftest commands (perftest on the device) live beside this script.
# shellcheck source=tests/scripts/softroce_selftest.sh
source "$(dirname "${BASH_SOURCE[0]}")/softroce_selftest.sh"

# --- main ------------------------------------------------------------------------------
selftest=0
keep_cache=0
hosts=1
while (($#)); do
  case "$1" in
    --selftest) selftest=1 ;;
    --keep-cache) keep_cache=1 ;;
    --hosts) (($# >= 2)) || usage; hosts=$2; shift ;;
    --hosts=*) hosts=${1#*=} ;;
    -h|--help) help; exit 0 ;;
    --) shift; break ;;
    -*) usage ;;
    *) break ;;
  esac
  shift
done
[[ "$hosts" == 1 || "$hosts" == 2 ]] || usage
if ((selftest)); then
  (($# == 0)) || usage
  if ((hosts == 2)); then set -- sh -c "$(selftest2_script)"; else set -- sh -c "$(selftest_script)"; fi
fi
(($# > 0)) || usage

[[ $(id -u) == 0 ]] || skip "needs root (rxe devices, modules and packages need it)"
tmp=$(mktemp -d -t softroce.XXXXXX)
chmod 755 "$tmp"   # the guest reads the job file through the host share as root

# What both paths need: modprobe, ip/rdma, the rxe provider, the device tools, and
# the development files the verbs backend builds against.
pkgs=(kmod iproute2 ibverbs-providers ibverbs-utils libibverbs-dev librdmacm-dev)
((selftest)) && pkgs+=(perftest)
install_missing "${pkgs[@]}" || skip "cannot install ${pkgs[*]}"

if ((hosts == 2)); then
  # rxe routes in the initial network namespace only, so two namespaces on one kernel
  # are not two hosts (SOFTROCE-VM.md); this script does not boot VMs where the host
  # path works.
  if setup_host_rxe; then
    teardown_host_rxe
    skip "--hosts 2 needs the VM path (two guests), and this host's kernel has rdma_rxe (the host path): no two-host Soft-RoCE here"
  fi
elif setup_host_rxe; then
  log "path=host: $GREX_RXE_DEV on $GREX_RXE_NETDEV ($GREX_RXE_IP, GID index $GREX_IB_GID_INDEX)"
  rc=0
  "$@" || rc=$?
  exit "$rc"
fi
teardown_host_rxe   # a half-made one
log "host kernel has no usable rdma_rxe: using a VM"

install_missing qemu-system-x86 busybox-static xz-utils cpio ||
  skip "cannot install qemu-system-x86 busybox-static xz-utils cpio"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
mkdir -p "$cache"
# One run at a time fills the cache; others wait for it.
exec {lock_fd}>"$cache/.lock"
flock -w 900 "$lock_fd" || skip "cache $cache is locked by another run"
ensure_kernel || skip "cannot download the kernel (linux-image-amd64's dependency); no network?"
ensure_initramfs || skip "cannot build the initramfs"
flock -u "$lock_fd"
rc=0
if ((hosts == 2)); then run_in_vm2 "$@" || rc=$?; else run_in_vm "$@" || rc=$?; fi
exit "$rc"
