#!/usr/bin/env bash
# The long fault campaign of multi-server mounts (docs/MULTI_SERVER.md;
# the short one runs in CI: cli/tests/it/remote_campaign.rs).
#
# Three `hipfs serve` processes export one directory (a size-limited tmpfs,
# so it can be filled), each in its own network namespace behind its own
# veth pair. Two multi-server mounts of them take writers and readers that
# check every byte (sha256) of files whose write was acknowledged (dd
# conv=fsync returned 0), while the campaign kills and restarts servers,
# freezes them (SIGSTOP), drops packets and delays them on their links
# (tc netem), takes links down, and fills the export's disk.
#
# It asserts: no acknowledged write lost or wrong, no read of a wrong
# byte, only clean errnos, no operation hung past 60 s; it prints what it
# did and checked, and the mount daemons' largest RSS, which must stay
# under CAMPAIGN_MAX_RSS_MB (512).
#
# Needs root, iproute2 (ip netns, tc), /dev/fuse, and tc netem or (for
# kernels without sch_netem) nftables.
# Usage: scripts/fault-campaign.sh [--duration 120] [--disk 600M]
set -euo pipefail

DURATION=120
DISK=600M
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) DURATION=$2; shift 2 ;;
        --disk) DISK=$2; shift 2 ;;
        *) echo "usage: $0 [--duration 120] [--disk 600M]" >&2; exit 2 ;;
    esac
done

. "$(dirname "$0")/lib/hipfs-bin.sh"
[ "$(id -u)" = 0 ] || { echo "needs root (network namespaces, tc, FUSE, tmpfs)" >&2; exit 1; }

work=$(mktemp -d /tmp/hipfs-campaign.XXXXXX)
tag=hfc$$
export_dir=$work/export
declare -a spid
bg=()
cleanup() {
    for p in "${bg[@]}"; do kill "$p" 2>/dev/null || true; done
    for i in 1 2 3; do
        [ -n "${spid[$i]:-}" ] && { kill -CONT "${spid[$i]}" 2>/dev/null; kill "${spid[$i]}" 2>/dev/null; } || true
    done
    for m in "$work/m1" "$work/m2"; do umount -l "$m" 2>/dev/null || true; done
    sleep 0.5
    umount -l "$export_dir" 2>/dev/null || true
    for i in 1 2 3; do ip netns del "$tag$i" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$export_dir" "$work/m1" "$work/m2" "$work/src" "$work/log"
mount -t tmpfs -o size="$DISK" hipfs-campaign "$export_dir"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
chmod 600 "$work/token"

start_server() {
    local i=$1
    ip netns exec "$tag$i" "$bin" serve "$export_dir" --listen "10.78.$i.2:7471" \
        --token-file "$work/token" --transport tcp --local-socket "$work/serve$i.sock" \
        > "$work/serve$i.out" 2>> "$work/serve$i.err" &
    spid[$i]=$!
    wait_listening "$work/serve$i.out" && return 0
    echo "server $i did not start" >&2
    cat "$work/serve$i.err" >&2
    return 1
}

for i in 1 2 3; do
    ip netns add "$tag$i"
    ip link add "${tag}h$i" type veth peer name "${tag}s$i"
    ip link set "${tag}s$i" netns "$tag$i"
    ip addr add "10.78.$i.1/24" dev "${tag}h$i"
    ip link set "${tag}h$i" up
    ip netns exec "$tag$i" ip addr add "10.78.$i.2/24" dev "${tag}s$i"
    ip netns exec "$tag$i" ip link set "${tag}s$i" up
    ip netns exec "$tag$i" ip link set lo up
    start_server "$i"
done
# tc netem where the kernel has it (sch_netem); else packet loss through
# nftables (numgen) and slow links through tc tbf.
netem=0
if ip netns exec "${tag}1" tc qdisc add dev lo root netem delay 1ms 2>/dev/null; then
    netem=1
    ip netns exec "${tag}1" tc qdisc del dev lo root
elif ! command -v nft > /dev/null; then
    echo "neither tc netem (sch_netem) nor nft: install nftables for the packet-loss faults" >&2
    exit 1
fi
src="10.78.1.2:7471,10.78.2.2:7471,10.78.3.2:7471"
for m in m1 m2; do
    "$bin" mount "$src:/" "$work/$m" -o "token_file=$work/token,transport=tcp,soft,timeout=5"
done
echo "campaign: ${DURATION}s, 3 servers (netns), 2 mounts, 2 writers, 2 readers, export on a $DISK tmpfs"

# Errno texts a client may see while servers and links fail.
clean='Input/output error|Transport endpoint is not connected|Connection timed out|No space left on device|Stale file handle|Interrupted system call'

writer() {  # writer K MOUNT
    local k=$1 mnt=$2 n=0
    while [ ! -e "$work/stop" ]; do
        n=$((n + 1))
        local name="w$k-$n" size=$(( (RANDOM * 32768 + RANDOM) % (2 << 20) + 1 ))
        head -c "$size" /dev/urandom > "$work/src/$name"
        local sum; sum=$(sha256sum < "$work/src/$name" | cut -c1-64)
        local t0=$SECONDS
        rc=0
        timeout 60 dd if="$work/src/$name" of="$mnt/$name" bs=256k conv=fsync status=none 2> "$work/log/w$k.err" || rc=$?
        if [ $rc = 0 ]; then
            echo "$name $sum $size" >> "$work/acked.$k"
        else
            if [ $rc = 124 ]; then echo "HUNG write $name" >> "$work/bad"; fi
            echo "write (rc $rc) $(head -c 300 "$work/log/w$k.err" | tr '\n' ' ')" >> "$work/errors"
        fi
        [ $((SECONDS - t0)) -gt 60 ] && echo "SLOW write $name" >> "$work/bad"
        rm -f "$work/src/$name"
    done
}

reader() {  # reader K MOUNT
    local k=$1 mnt=$2
    while [ ! -e "$work/stop" ]; do
        local line; line=$(cat "$work"/acked.* 2>/dev/null | shuf -n 1 || true)
        if [ -z "$line" ]; then sleep 0.2; continue; fi
        set -- $line
        local got
        rc=0
        got=$(timeout 60 sha256sum "$mnt/$1" 2> "$work/log/r$k.err") || rc=$?
        if [ $rc = 0 ]; then
            if [ "${got:0:64}" = "$2" ]; then
                echo "$3" >> "$work/checked.$k"
            else
                echo "WRONG read $1 through $mnt" >> "$work/bad"
            fi
        else
            # Pruned (see below) while this reader picked it: not a loss.
            grep -q "^$1 " "$work"/acked.* 2>/dev/null || continue
            if [ $rc = 124 ]; then echo "HUNG read $1" >> "$work/bad"; fi
            echo "read (rc $rc) $(head -c 300 "$work/log/r$k.err" | tr '\n' ' ')" >> "$work/errors"
        fi
    done
}

rss_watch() {
    while [ ! -e "$work/stop" ]; do
        for p in $(pgrep -f "hipfs mount $src" || true); do
            ps -o rss= -p "$p" 2>/dev/null >> "$work/rss" || true
        done
        sleep 1
    done
}

writer 1 "$work/m1" & bg+=($!)
writer 2 "$work/m2" & bg+=($!)
reader 1 "$work/m2" & bg+=($!)
reader 2 "$work/m1" & bg+=($!)
rss_watch & bg+=($!)

fault() { echo "$(( SECONDS - t_start ))s $*" >> "$work/faults"; }
t_start=$SECONDS
while [ $((SECONDS - t_start)) -lt "$DURATION" ]; do
    sleep $(( RANDOM % 3 + 1 ))
    i=$(( RANDOM % 3 + 1 ))
    dev=${tag}s$i
    case $(( RANDOM % 6 )) in
        0) fault "server $i: kill -9, restart 2 s later"
           kill -9 "${spid[$i]}"; wait "${spid[$i]}" 2>/dev/null || true
           sleep 2; start_server "$i" ;;
        1) fault "server $i: SIGSTOP 3 s"
           kill -STOP "${spid[$i]}"; sleep 3; kill -CONT "${spid[$i]}" ;;
        2) if [ "$netem" = 1 ]; then
               fault "server $i: 20% packet loss, 50 ms delay for 5 s (tc netem)"
               ip netns exec "$tag$i" tc qdisc replace dev "$dev" root netem loss 20% delay 50ms
               sleep 5; ip netns exec "$tag$i" tc qdisc del dev "$dev" root || true
           else
               fault "server $i: 20% packet loss for 5 s (nft numgen drop)"
               ip netns exec "$tag$i" nft -f - <<NFT || true
table inet hfc {
    chain out {
        type filter hook output priority 0;
        meta l4proto tcp numgen random mod 100 < 20 drop
    }
}
NFT
               sleep 5; ip netns exec "$tag$i" nft delete table inet hfc || true
           fi ;;
        3) if [ "$netem" = 1 ]; then
               fault "server $i: 400 ms delay for 5 s (tc netem)"
               ip netns exec "$tag$i" tc qdisc replace dev "$dev" root netem delay 400ms
           else
               fault "server $i: link slowed to 2 Mbit/s, 2 s queue, for 5 s (tc tbf)"
               ip netns exec "$tag$i" tc qdisc replace dev "$dev" root tbf rate 2mbit burst 32kb latency 2s
           fi
           sleep 5; ip netns exec "$tag$i" tc qdisc del dev "$dev" root || true ;;
        4) fault "server $i: link down 4 s"
           ip netns exec "$tag$i" ip link set "$dev" down
           sleep 4; ip netns exec "$tag$i" ip link set "$dev" up ;;
        5) fault "export disk full for 5 s"
           avail=$(df -B1 --output=avail "$export_dir" | tail -1)
           fallocate -l $(( avail > 65536 ? avail - 65536 : 1 )) "$export_dir/.filler" 2>/dev/null || true
           sleep 5; rm -f "$export_dir/.filler" ;;
    esac
    # Keep the disk from filling with acknowledged files: drop the oldest
    # half of them once it is half full (each checked before it goes).
    used=$(df --output=pcent "$export_dir" | tail -1 | tr -dc 0-9)
    if [ "$used" -gt 50 ]; then
        for f in "$work"/acked.*; do
            half=$(( $(wc -l < "$f") / 2 ))
            # Out of the list first, then deleted: a reader that fails on
            # one of them finds it gone from the list and ignores it.
            head -n "$half" "$f" > "$work/prune"
            tail -n +"$((half + 1))" "$f" > "$f.new"; mv "$f.new" "$f"
            # Each is checked in the export before it goes: every
            # acknowledged file is checked at least once.
            while read -r name sum _; do
                got=$(sha256sum "$export_dir/$name" 2>&1 | cut -c1-64) || true
                [ "$got" = "$sum" ] || echo "LOST or WRONG before pruning: $name" >> "$work/bad"
                rm -f "$export_dir/$name"
            done < "$work/prune"
            echo "$half" >> "$work/pruned"
        done
    fi
done
touch "$work/stop"
for p in "${bg[@]}"; do wait "$p" 2>/dev/null || true; done
bg=()

# Everything back; every acknowledged file is checked in the export and
# through both mounts.
for i in 1 2 3; do
    kill -CONT "${spid[$i]}" 2>/dev/null || true
    ip netns exec "$tag$i" tc qdisc del dev "${tag}s$i" root 2>/dev/null || true
    ip netns exec "$tag$i" nft delete table inet hfc 2>/dev/null || true
    ip netns exec "$tag$i" ip link set "${tag}s$i" up
    kill -0 "${spid[$i]}" 2>/dev/null || start_server "$i"
done
rm -f "$export_dir/.filler"
sleep 2
final=0; final_bytes=0
while read -r name sum size; do
    for f in "$export_dir/$name" "$work/m1/$name" "$work/m2/$name"; do
        got=$(timeout 60 sha256sum "$f" 2>&1 | cut -c1-64) || true
        if [ "$got" != "$sum" ]; then echo "LOST or WRONG at the end: $f" >> "$work/bad"; fi
        final_bytes=$((final_bytes + size))
    done
    final=$((final + 1))
done < <(cat "$work"/acked.* 2>/dev/null)

acked=$(cat "$work"/acked.* 2>/dev/null | wc -l)
pruned=$(cat "$work/pruned" 2>/dev/null | paste -sd+ | bc 2>/dev/null || echo 0)
checked=$(cat "$work"/checked.* 2>/dev/null | wc -l)
checked_bytes=$(cat "$work"/checked.* 2>/dev/null | paste -sd+ | bc 2>/dev/null || echo 0)
echo "faults injected: $(wc -l < "$work/faults")"
sed 's/^[0-9]*s //; s/server [0-9]: //' "$work/faults" | sort | uniq -c | sed 's/^/  /'
echo "writes acknowledged: $((acked + ${pruned:-0})) (${pruned:-0} of them checked in the export and deleted on the way, to keep the disk from filling)"
echo "reads checked during the campaign: $checked ($checked_bytes bytes)"
echo "final check: $final files, each in the export and through both mounts ($final_bytes bytes)"
echo "errors seen by clients:"
if [ -s "$work/errors" ]; then
    while IFS= read -r l; do
        e=$(grep -oE "$clean" <<< "$l" | head -1 || true)
        echo "${l%% *}: ${e:-other: ${l:0:100}}"
    done < "$work/errors" | sort | uniq -c | sort -rn | sed 's/^/  /'
else
    echo "  none"
fi
unclean=$(grep -vcE "$clean" "$work/errors" 2>/dev/null || true)
echo "unclean errors: ${unclean:-0}"
max_rss=$(sort -n "$work/rss" 2>/dev/null | tail -1)
echo "mount daemons' largest RSS: ${max_rss:-?} KiB (bound: ${CAMPAIGN_MAX_RSS_MB:-512} MiB)"
if [ -n "$max_rss" ] && [ "$max_rss" -gt $(( ${CAMPAIGN_MAX_RSS_MB:-512} * 1024 )) ]; then
    echo "FAILED: a mount daemon grew past ${CAMPAIGN_MAX_RSS_MB:-512} MiB (memory must stay bounded under faults)"
    exit 1
fi
if [ -s "$work/bad" ]; then
    echo "FAILED:"; sort "$work/bad" | uniq -c | head -20
    exit 1
fi
if [ "${unclean:-0}" != 0 ]; then
    echo "FAILED: unclean errors:"; grep -vE "$clean" "$work/errors" | head -10
    exit 1
fi
echo "PASSED: no acknowledged write lost or wrong, no wrong byte read, only clean errnos, memory within its bound"
