#!/bin/bash
# Where the CPU time of timed phases of `hipfs bench userspace --gpu` goes,
# by thread and kernel/user symbol: for each phase named in PERF_PHASES one
# bench run, perf sampling every CPU only while that phase runs
# (scripts/gpu/thread-cpu.py switches it through perf's control fifo at
# the bench's phase marks). The GPU machine has no perf, so this one's
# travels in .gpu/perf with the libraries it links and its own loader
# (scripts/gpu/pack-perf.sh, run here first).
#   PERF_PHASES="userspace ceiling-sendfile-16x-into-4m" bash scripts/gpu/perf-phase.sh
set -u
cd "$(dirname "$0")/../.."
P=$PWD/.gpu/perf
perf() { "$P/ld-linux-x86-64.so.2" --library-path "$P" "$P/perf" "$@"; }
G=$PWD/.gpu/bin/hipfs
W=/var/tmp/hipfs-profile; mkdir -p "$W"
F=${PERF_FILE:-$W/us-4G.bin}
O=${OUT:-/tmp/perf-phase}; mkdir -p "$O"
[ -f "$F" ] || "$G" bench userspace "$F" --create 4G --repeats 1 >/dev/null 2>&1 || head -c 4G /dev/urandom > "$F"
for phase in ${PERF_PHASES:-userspace ceiling-sendfile-16x-into-4m}; do
    data=/tmp/perf-$phase.data
    ctl=$(mktemp -u); mkfifo "$ctl"
    more=(); case $phase in ceiling-*) more=(--more-ceilings) ;; esac
    echo "######## $phase"
    perf record -q -a -g -F "${PERF_FREQ:-1999}" -e cpu-clock -D -1 --control "fifo:$ctl" -o "$data" -- \
        env PERF_CTL="$ctl" PERF_PHASE="$phase" PERF_TIDS="$O/$phase-tids.txt" python3 scripts/gpu/thread-cpu.py -- \
        "$G" bench userspace "$F" ${PERF_GPU---gpu} --repeats "${PERF_REPEATS:-5}" "${more[@]}" 2>&1 |
        grep -vE 'WARN|^\s*$' | grep -E "GiB/s|^== phase $phase|^thread|^hipfs|^ceiling" | head -40
    rm -f "$ctl"
    rep() { perf report -i "$data" --no-children -q --percent-limit "${PERF_LIMIT:-0.2}" "$@" 2>/dev/null; }
    # Threads by id, named from thread-cpu.py's map (perf knows only the
    # names of threads named while it recorded), digits folded.
    rep -g none --sort pid > "$O/$phase-by-tid.txt"
    named() {
        awk 'NR == FNR {name[$1] = $2; next}
             {match($2, /[0-9]+/); tid = substr($2, RSTART, RLENGTH); n = (tid in name) ? name[tid] : $2; sub(/[0-9]+$/, "#", n); print $1, tid, n}' \
            "$O/$phase-tids.txt" "$O/$phase-by-tid.txt"
    }
    echo "== $phase: samples by thread (percent of all CPUs' samples, idle included)"
    named | awk '{s[$3] += $1} END {for (k in s) printf "%7.2f%%  %s\n", s[k], k}' | sort -rn | head -15
    for group in hipfs-srv-tx hipfs-srv-rx hipfs-tcp-tx hipfs-tcp-rx hipfs-ahead hipfs-io hipfs-worker ceiling-tx ceiling-rx; do
        tids=$(named | awk -v g="$group" 'index($3, g) == 1 {print $2}' | paste -sd, -)
        [ -n "$tids" ] || continue
        echo "== $phase: $group threads, by symbol"
        rep -g none --tid "$tids" --sort dso,sym | head -"${PERF_TOP:-18}"
        PERF_LIMIT=0.5 rep -G --tid "$tids" --sort sym > "$O/$phase-$group-callers.txt"
    done
done
