#!/usr/bin/env bash
# run-in-vm.sh - run a command of this host inside a throw-away QEMU VM that
# has a real soft-RoCE (rdma_rxe) ibverbs device, and exit with its status.
#
# Why a VM: the development and CI hosts have no RDMA NIC and a kernel
# without InfiniBand support, so libibverbs finds no device there. Debian's
# stock kernel ships rdma_rxe; we boot it (never install it) under QEMU with
# a busybox initramfs, share the host's / read-only over virtio-9p, chroot
# into it, create rxe0 and run the command. Any host binary - e.g. a cargo
# test binary linked to libibverbs - runs unchanged.
#
# Usage: run-in-vm.sh [-t SECS] [-e VAR=VAL]... [-p 'PEER CMD'] [-S] [-v] [--] CMD [ARGS...]
#   -t SECS   deadline for CMD in the VM (default 300); the VM is killed at SECS+90
#   -e V=X    environment for CMD (repeatable); RUST_*/CARGO_*/HIPFS_* pass through
#   -p CMD    two-VM mode: a second VM ("peer", 10.99.0.2) runs the bash line CMD
#             while the main VM (10.99.0.1) runs the command; their virtio NICs
#             are joined by a QEMU UDP socket on 127.0.0.1 (nothing leaves the host)
#   -S        only prepare the cache (kernel, initramfs) and exit
#   -v        show the guest console on stderr
# In the VM: HIPFS_VM=1, HIPFS_VM_IP (own IPv4 of the rxe device),
# HIPFS_VM_PEER_IP (two-VM mode), HIPFS_VM_ROLE=main|peer.
# Cache: $HIPFS_VM_DIR (default <repo>/.vm, git-ignored). Shared read-write:
# /tmp (scratch) and the run directory; everything else is read-only.
# Exit: CMD's status; 124 on timeout; 125 if the VM failed before CMD ran.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
VMDIR=${HIPFS_VM_DIR:-$REPO/.vm}
TIMEOUT=300
PEER=""
SETUP_ONLY=0
VERBOSE=0
EXTRA_ENV=()

fail() { echo "run-in-vm: $*" >&2; exit 125; }

while getopts ":t:e:p:Svh" o; do
  case $o in
    t) TIMEOUT=$OPTARG ;;
    e) [[ $OPTARG == [A-Za-z_]*=* ]] || fail "-e wants VAR=VALUE, got '$OPTARG'"; EXTRA_ENV+=("$OPTARG") ;;
    p) PEER=$OPTARG ;;
    S) SETUP_ONLY=1 ;;
    v) VERBOSE=1 ;;
    h) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) fail "bad option (see -h)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[ $# -gt 0 ] || [ $SETUP_ONLY = 1 ] || fail "no command given (see -h)"
[ "$(id -u)" = 0 ] || fail "needs root (9p passthrough of /, apt-get download)"
for t in qemu-system-x86_64 busybox dpkg-deb depmod modprobe cpio python3; do
  command -v $t >/dev/null || fail "missing $t: apt-get install qemu-system-x86 busybox-static kmod cpio python3"
done

mkdir -p "$VMDIR/runs"
exec 8>"$VMDIR/.lock"

# ---- the guest kernel: Debian's, unpacked into the cache (not installed) ----
prepare_kernel() {
  [ -f "$VMDIR/kernel/.ready" ] && return 0
  local pkg deb ver
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -1)
  [ -n "$pkg" ] || { apt-get update -qq >/dev/null 2>&1 || true;
    pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -1); }
  [ -n "$pkg" ] || fail "cannot find the Debian kernel package behind linux-image-amd64"
  echo "run-in-vm: downloading $pkg (once)" >&2
  mkdir -p "$VMDIR/debs"
  (cd "$VMDIR/debs" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null) || fail "apt-get download $pkg failed"
  deb=$(ls -t "$VMDIR"/debs/"$pkg"_*.deb | head -1)
  rm -rf "$VMDIR/kernel.new"; mkdir -p "$VMDIR/kernel.new"
  dpkg-deb -x "$deb" "$VMDIR/kernel.new"
  ver=$(ls "$VMDIR/kernel.new/lib/modules" | head -1)
  depmod -b "$VMDIR/kernel.new" "$ver"
  echo "$ver" > "$VMDIR/kernel.new/.version"
  # QEMU can boot the ELF vmlinux directly (PVH entry point): that skips the
  # real-mode set-up and the in-guest xz decompression, both slow under TCG.
  python3 - "$VMDIR/kernel.new/boot/vmlinuz-$ver" "$VMDIR/kernel.new/vmlinux" <<'PY' || true
import lzma, sys
blob = open(sys.argv[1], "rb").read()
at = blob.find(b"\xfd7zXZ\x00")
if at >= 0:
    elf = lzma.LZMADecompressor().decompress(blob[at:])
    if elf.startswith(b"\x7fELF"):
        open(sys.argv[2], "wb").write(elf)
PY
  touch "$VMDIR/kernel.new/.ready"
  rm -rf "$VMDIR/kernel"; mv "$VMDIR/kernel.new" "$VMDIR/kernel"
}

# Modules the guest loads, in dependency order (crc32_generic: rxe's ICRC
# needs a crc32 implementation, without it `rdma link add` fails; fuse: for
# hipfs mounts in the guest, the host's /dev/fuse is not shared; vgem: a DRM
# device whose dumb buffers export as dmabufs, for the dmabuf registration
# probe, since this kernel has no udmabuf).
MODULES="virtio_pci virtio_net 9pnet_virtio 9p crc32_generic ib_core ib_uverbs rdma_rxe rdma_cm rdma_ucm dummy fuse vgem"

prepare_initramfs() {
  local ver stamp tmp
  ver=$(cat "$VMDIR/kernel/.version")
  stamp="$ver|$MODULES|$(sha1sum "$0" | cut -c1-16)"
  [ -f "$VMDIR/initramfs.gz" ] && [ "$(cat "$VMDIR/initramfs.stamp" 2>/dev/null)" = "$stamp" ] && return 0
  tmp=$(mktemp -d "$VMDIR/initramfs.XXXX")
  mkdir -p "$tmp"/{bin,proc,sys,dev,mnt/root,mnt/run,lib/modules}
  cp "$(command -v busybox)" "$tmp/bin/busybox"
  ldd "$tmp/bin/busybox" >/dev/null 2>&1 && fail "busybox is dynamically linked: apt-get install busybox-static"
  for m in $MODULES; do
    modprobe -d "$VMDIR/kernel" -S "$ver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
  done | awk '!seen[$0]++' > "$tmp/mods.txt"
  while read -r f; do
    cp "$f" "$tmp/lib/modules/"
    # Signature and debug info stripped: the signature check is slow under TCG.
    strip --strip-debug "$tmp/lib/modules/$(basename "$f")" 2>/dev/null || true
    basename "$f" >> "$tmp/lib/modules/load-order"
  done < "$tmp/mods.txt"
  rm "$tmp/mods.txt"
  cat > "$tmp/init" <<'INIT'
#!/bin/busybox sh
# PID 1: modules, 9p mounts, chroot into the host's root, run the job, power off.
/bin/busybox --install -s /bin
mount -t proc none /proc; mount -t sysfs none /sys; mount -t devtmpfs none /dev
exec >/dev/console 2>&1 </dev/console
off() { sync; poweroff -f; }
for m in $(cat /lib/modules/load-order); do insmod /lib/modules/$m 2>/dev/null; done
# devtmpfs makes /dev/fuse when fuse loads; the node by hand if it did not.
[ -e /dev/fuse ] || mknod -m 666 /dev/fuse c 10 229
P="trans=virtio,version=9p2000.L,msize=1048576"
mount -t 9p -o $P,cache=none run /mnt/run || { echo "vm-init: no run dir"; off; }
mount -t 9p -o $P,ro,cache=loose host /mnt/root || { echo "vm-init: no host root"; off; }
mount -t 9p -o $P,cache=none scratch /mnt/root/tmp || echo "vm-init: no /tmp share"
for d in proc sys dev; do mount --bind /$d /mnt/root/$d; done
mkdir -p /mnt/root/dev/pts /mnt/root/dev/shm
mount -t devpts none /mnt/root/dev/pts 2>/dev/null
mount -t tmpfs none /mnt/root/dev/shm 2>/dev/null
mount -t tmpfs none /mnt/root/run
mkdir -p /mnt/root/run/vm && mount --bind /mnt/run /mnt/root/run/vm
chroot /mnt/root /bin/bash /run/vm/job.sh
off
INIT
  chmod 755 "$tmp/init"
  (cd "$tmp" && find . | cpio -o -H newc --quiet | gzip -1) > "$VMDIR/initramfs.gz.new"
  mv "$VMDIR/initramfs.gz.new" "$VMDIR/initramfs.gz"
  echo "$stamp" > "$VMDIR/initramfs.stamp"
  rm -rf "$tmp"
}

flock 8
prepare_kernel
prepare_initramfs
flock -u 8
[ $SETUP_ONLY = 1 ] && { echo "run-in-vm: ready ($(cat "$VMDIR/kernel/.version"), $VMDIR)"; exit 0; }

KERNEL=$VMDIR/kernel/vmlinux
[ -f "$KERNEL" ] || KERNEL=$VMDIR/kernel/boot/vmlinuz-$(cat "$VMDIR/kernel/.version")

# job.sh: runs in the VM after chroot. $1 = own IP, $2 = peer IP, $3 = role,
# $4 = netdev for rxe (dummy "rdma0" or the virtio NIC "eth0").
write_job() {  # DIR IP PEER_IP ROLE NETDEV -- ARGV...
  local dir=$1 ip=$2 peer=$3 role=$4 dev=$5; shift 6
  {
    echo '#!/bin/bash'
    echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8'
    echo "export HIPFS_VM=1 HIPFS_VM_IP=$ip HIPFS_VM_PEER_IP=$peer HIPFS_VM_ROLE=$role"
    local v
    for v in $(compgen -e | grep -E '^(RUST_|CARGO_|HIPFS_RDMA)' || true); do echo "export $v=$(printf %q "${!v}")"; done
    for v in "${EXTRA_ENV[@]}"; do echo "export ${v%%=*}=$(printf %q "${v#*=}")"; done
    echo 'ulimit -l unlimited; ip link set lo up'
    if [ "$dev" = rdma0 ]; then echo 'ip link add rdma0 type dummy'; fi
    echo "ip addr add $ip/24 dev $dev && ip link set $dev up"
    echo "rdma link add rxe0 type rxe netdev $dev || echo 'run-in-vm: rdma link add failed' >&2"
    # Ready = port ACTIVE and GID 1 (the IPv4-mapped RoCE v2 one) filled in.
    echo 'for i in $(seq 200); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && ! grep -q "^0000:0000:0000:0000:0000:0000:0000:0000$" /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null && break; sleep 0.05; done'
    echo "cd $(printf %q "$PWD")"
    printf 'timeout -k 5 %s' "$TIMEOUT"
    local a; for a in "$@"; do printf ' %q' "$a"; done
    echo ' </dev/null >/run/vm/out 2>/run/vm/err'
    echo 'echo $? > /run/vm/rc; sync'
  } > "$dir/job.sh"
}

PIDS=(); TAILS=(); DIRS=()
cleanup() {
  local p
  for p in "${PIDS[@]}" "${TAILS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "${DIRS[@]}"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

boot() {  # ROLE IP PEER_IP NETDEV NET-ARGS... -- ARGV...
  local role=$1 ip=$2 peer=$3 dev=$4; shift 4
  local net=(); while [ "$1" != -- ]; do net+=("$1"); shift; done
  local dir; dir=$(mktemp -d "$VMDIR/runs/$role.XXXX"); DIRS+=("$dir")
  write_job "$dir" "$ip" "$peer" "$role" "$dev" "$@"
  : > "$dir/out"; : > "$dir/err"
  timeout -k 5 $((TIMEOUT + 90)) qemu-system-x86_64 \
    -M pc -accel tcg,thread=multi,tb-size=256 -cpu max -m 2048 -smp "$CPUS" \
    -nographic -nodefaults -no-reboot -monitor none -serial "file:$dir/console" \
    "${net[@]}" -kernel "$KERNEL" -initrd "$VMDIR/initramfs.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 mitigations=off tsc=reliable" \
    -virtfs "local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=/tmp,mount_tag=scratch,security_model=none,multidevs=remap" \
    -virtfs "local,path=$dir,mount_tag=run,security_model=none" \
    </dev/null >"$dir/qemu.log" 2>&1 &
  PIDS+=($!)
  VM_DIR=$dir; VM_PID=$!
}

follow() {  # DIR PID PREFIX
  local pre=$3
  if [ -z "$pre" ]; then
    tail -s 0.2 --pid="$2" -n +1 -f "$1/out" & TAILS+=($!)
    tail -s 0.2 --pid="$2" -n +1 -f "$1/err" >&2 & TAILS+=($!)
  else
    tail -s 0.2 --pid="$2" -n +1 -f "$1/out" "$1/err" 2>/dev/null | grep --line-buffered -v '^==> ' | sed -u "s/^/[$pre] /" >&2 & TAILS+=($!)
  fi
  [ $VERBOSE = 1 ] && { tail -s 0.2 --pid="$2" -n +1 -f "$1/console" 2>/dev/null | sed -u "s/^/[${pre:-main} console] /" >&2 & TAILS+=($!); }
  return 0
}

status_of() {  # DIR QEMU_RC
  if [ -s "$1/rc" ]; then cat "$1/rc"; return; fi
  { echo "run-in-vm: no exit status from the VM (qemu status $2); console:"; tail -n 20 "$1/console" 2>/dev/null; tail -n 5 "$1/qemu.log"; } >&2
  case $2 in 124|137) echo 124 ;; *) echo 125 ;; esac
}

# Busy-polling verbs programs need 2 vCPUs each (1 vCPU is ~20x slower).
NCPU=$(nproc)
if [ -z "$PEER" ]; then
  CPUS=$(( NCPU < 2 ? 2 : NCPU ))
  boot main 10.99.0.1 "" rdma0 -nic none -- "$@"
  MAIN_DIR=$VM_DIR; MAIN_PID=$VM_PID
  follow "$MAIN_DIR" "$MAIN_PID" ""
else
  CPUS=2
  PORT=$((30000 + RANDOM % 20000))
  boot peer 10.99.0.2 10.99.0.1 eth0 \
    -netdev "socket,id=n,udp=127.0.0.1:$PORT,localaddr=127.0.0.1:$((PORT + 1))" \
    -device virtio-net-pci,netdev=n,mac=52:54:00:12:00:02,romfile= -- bash -c "$PEER"
  PEER_DIR=$VM_DIR; PEER_PID=$VM_PID
  follow "$PEER_DIR" "$PEER_PID" peer
  boot main 10.99.0.1 10.99.0.2 eth0 \
    -netdev "socket,id=n,udp=127.0.0.1:$((PORT + 1)),localaddr=127.0.0.1:$PORT" \
    -device virtio-net-pci,netdev=n,mac=52:54:00:12:00:01,romfile= -- "$@"
  MAIN_DIR=$VM_DIR; MAIN_PID=$VM_PID
  follow "$MAIN_DIR" "$MAIN_PID" ""
fi

set +e
wait "$MAIN_PID"; qrc=$?
rc=$(status_of "$MAIN_DIR" $qrc)
if [ -n "$PEER" ]; then
  for _ in $(seq 75); do kill -0 "$PEER_PID" 2>/dev/null || break; sleep 0.2; done
  kill "$PEER_PID" 2>/dev/null; wait "$PEER_PID"
  prc=$(cat "$PEER_DIR/rc" 2>/dev/null || echo none)
  if [ "$rc" = 0 ] && [ "$prc" != 0 ]; then
    echo "run-in-vm: peer VM ended with status $prc" >&2
    [[ $prc =~ ^[0-9]+$ ]] && rc=$prc || rc=125
  fi
fi
sleep 0.3
exit "$rc"
