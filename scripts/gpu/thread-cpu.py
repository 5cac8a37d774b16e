#!/usr/bin/env python3
"""Runs a command and prints the CPU time its threads used, by thread name.

    python3 scripts/gpu/thread-cpu.py -- hipfs bench userspace F --gpu

Where `perf` is missing (the device machine has none), this answers the first
question of a throughput gap: which threads burn the cores (socket receivers,
readahead fetchers, staging workers, the server's senders) and which wait.
Every 50 ms it reads /proc/PID/task/*/stat of the command and of every
process it started, keeps each thread's last user+system time, and at the
end sums them by thread name with digits folded (hipfs-tcp-rx3 counts as
hipfs-tcp-rx#). A thread that ends between two samples loses at most its
last 50 ms. The whole run is one table: the bench's ceilings, FUSE and
direct phases are mixed, so compare tables of runs that differ in one
setting.
"""
import os
import re
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def children_of(roots):
    """Every live process under `roots` (the roots included)."""
    parent = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                s = f.read()
        except OSError:
            continue
        # The name may hold spaces and parentheses: fields follow the last ')'.
        parent[int(d)] = int(s[s.rindex(")") + 2 :].split()[1])
    found = set(roots)
    grew = True
    while grew:
        grew = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return found


def sample(pids, seen):
    """Updates seen[(pid, tid)] = (name, cpu seconds) for every thread."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    s = f.read()
            except OSError:
                continue
            name = s[s.index("(") + 1 : s.rindex(")")]
            rest = s[s.rindex(")") + 2 :].split()
            # utime and stime: fields 14 and 15 of stat, 12 and 13 after the name.
            secs = (int(rest[11]) + int(rest[12])) / TICK
            seen[(pid, int(tid))] = (name, secs)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    seen = {}
    start = time.monotonic()
    proc = subprocess.Popen(args)
    while proc.poll() is None:
        sample(children_of({proc.pid}), seen)
        time.sleep(0.05)
    wall = time.monotonic() - start
    by_name = {}
    for name, secs in seen.values():
        key = re.sub(r"\d+", "#", name)
        n, total = by_name.get(key, (0, 0.0))
        by_name[key] = (n + 1, total + secs)
    cpus = os.cpu_count() or 1
    total = sum(t for _, t in by_name.values())
    print(f"== thread CPU: {wall:.1f} s wall x {cpus} CPUs; threads used {total:.1f} CPU s ({100 * total / (wall * cpus):.0f}% of the machine)")
    print(f"{'thread name':<24}{'threads':>8}{'CPU s':>9}{'of all':>8}")
    for key, (n, secs) in sorted(by_name.items(), key=lambda kv: -kv[1][1]):
        if secs < 0.005 * max(total, 1e-9):
            continue
        print(f"{key:<24}{n:>8}{secs:>9.2f}{100 * secs / max(total, 1e-9):>7.0f}%")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
