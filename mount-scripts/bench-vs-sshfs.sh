#!/bin/sh
# Times `ls -lR` of many files and `cp -r` of many small files through a
# hipfs mount and through sshfs exporting the same directory, both on
# loopback, in the same run (the comparison issue 6 asks for).
#
# usage: bench-vs-sshfs.sh [FILES_FOR_LS (100000)] [FILES_FOR_CP (10000)]
# needs: root, /dev/fuse, openssh-server, sshfs, python3; HIPFS_BIN (default: hipfs)
# HIPFS_MOUNT_OPTS adds -o options to the hipfs mount (e.g. noxattr, which
# answers xattr calls with ENOSYS as sshfs does, so `ls -l` stops asking).
set -eu
HIPFS=${HIPFS_BIN:-hipfs}
N_LS=${1:-100000}
N_CP=${2:-10000}
PORT_SSH=${PORT_SSH:-22222}
PORT_HIPFS=${PORT_HIPFS:-17999}
work=$(mktemp -d /tmp/hipfs-vs-sshfs.XXXXXX)
data=$work/data
mkdir -p "$data" "$work/mnt-hipfs" "$work/mnt-sshfs" /run/sshd

cleanup() {
    fusermount3 -u "$work/mnt-sshfs" 2>/dev/null || umount -l "$work/mnt-sshfs" 2>/dev/null || true
    "$HIPFS" umount "$work/mnt-hipfs" 2>/dev/null || true
    [ -f "$work/sshd.pid" ] && kill "$(cat "$work/sshd.pid")" 2>/dev/null || true
    [ -n "${server_pid:-}" ] && kill "$server_pid" 2>/dev/null || true
    sleep 0.5
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

python3 - "$data" "$N_LS" "$N_CP" <<'PY'
import os, sys
root, n_ls, n_cp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_dir = 1000
for i in range(n_ls):
    d = os.path.join(root, "tree", "d%03d" % (i // per_dir))
    if i % per_dir == 0:
        os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "f%06d" % i), "w").close()
os.makedirs(os.path.join(root, "small"), exist_ok=True)
for i in range(n_cp):
    with open(os.path.join(root, "small", "s%05d" % i), "w") as f:
        f.write("small file %d\n" % i * 3)
PY

ssh-keygen -q -t ed25519 -N '' -f "$work/hostkey"
ssh-keygen -q -t ed25519 -N '' -f "$work/clientkey"
cat > "$work/sshd_config" <<CFG
Port $PORT_SSH
ListenAddress 127.0.0.1
HostKey $work/hostkey
AuthorizedKeysFile $work/clientkey.pub
PermitRootLogin yes
PasswordAuthentication no
StrictModes no
PidFile $work/sshd.pid
Subsystem sftp internal-sftp
CFG
/usr/sbin/sshd -f "$work/sshd_config"
sleep 0.5
sshfs -p "$PORT_SSH" -o "IdentityFile=$work/clientkey,StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null" \
    "root@127.0.0.1:$data" "$work/mnt-sshfs"

"$HIPFS" serve "$data" --listen "127.0.0.1:$PORT_HIPFS" 2>/dev/null &
server_pid=$!
sleep 0.5
"$HIPFS" mount "127.0.0.1:$PORT_HIPFS" "$work/mnt-hipfs" -o "transport=tcp${HIPFS_MOUNT_OPTS:+,$HIPFS_MOUNT_OPTS}"

secs() { python3 -c 'import time; print(time.monotonic())'; }
timed() {
    t0=$(secs)
    "$@" > /dev/null
    t1=$(secs)
    python3 -c "print('%.2f' % ($t1 - $t0))"
}

echo "bench-vs-sshfs: $N_LS files for ls -lR, $N_CP small files for cp -r (loopback, same run, hipfs -o ${HIPFS_MOUNT_OPTS:-defaults})"
printf '%-28s %10s %10s %8s\n' "operation" "hipfs s" "sshfs s" "ratio"
for op in ls cp; do
    case $op in
        ls) h=$(timed ls -lR "$work/mnt-hipfs/tree"); s=$(timed ls -lR "$work/mnt-sshfs/tree"); name="ls -lR ($N_LS files)" ;;
        cp) h=$(timed cp -r "$work/mnt-hipfs/small" "$work/out-hipfs"); s=$(timed cp -r "$work/mnt-sshfs/small" "$work/out-sshfs"); name="cp -r ($N_CP small files)" ;;
    esac
    printf '%-28s %10s %10s %7s\n' "$name" "$h" "$s" "$(python3 -c "print('%.2fx' % ($s / max($h, 1e-9)))")"
done
n1=$(ls -lR "$work/mnt-hipfs/tree" | grep -c '^-')
n2=$(ls -lR "$work/mnt-sshfs/tree" | grep -c '^-')
diff -r "$work/out-hipfs" "$data/small" && diff -r "$work/out-sshfs" "$data/small"
echo "files listed: hipfs $n1, sshfs $n2; cp -r copies identical to the source"
[ "$n1" = "$N_LS" ] && [ "$n2" = "$N_LS" ]
