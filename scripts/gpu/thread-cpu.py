#!/usr/bin/env python3
"""Runs a command and prints the CPU time its threads used, by thread name.

    python3 scripts/gpu/thread-cpu.py -- hipfs bench userspace F --gpu

Where `perf` is missing (the device machine has none), this answers the first
question of a throughput gap: which threads burn the cores (socket receivers,
readahead fetchers, staging workers, the server's senders) and which wait.
Every 20 ms it reads /proc/PID/task/*/schedstat (nanoseconds on a CPU,
nanoseconds runnable but waiting for one, times put on one) of the
command and of every process it started, keeps each thread's last figure,
and at the end sums them by thread name with digits folded (hipfs-tcp-rx3
counts as hipfs-tcp-rx#). A thread that ends between two samples loses at
most its last 20 ms.

Phases: the bench logs `begin NAME` and `end NAME` (log target
`hipfs_bench_phase`; this script turns it on in RUST_LOG) around each timed
part: the UserspaceFs reads, the OPAQUE_FD reads, each loopback ceiling.
At each mark the threads are sampled at once, and each phase gets a table
of its own: the CPU seconds spent between its marks, summed over its rounds
after the first (the bench's warm-up round, which it does not time either),
beside the phase's wall time times the CPUs. The whole run's table follows.
"""
import os
import re
import subprocess
import sys
import threading
import time

MARK = re.compile(r"hipfs_bench_phase\]\s+(begin|end)\s+(\S+)")


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


class Threads:
    """The last CPU figure seen of every thread, by (pid, tid)."""

    def __init__(self, root):
        self.root = root
        self.pids = {root}
        self.seen = {}
        self.lock = threading.Lock()

    def sample(self, rescan=False):
        """Reads every thread's name and nanoseconds on a CPU; returns a copy."""
        if rescan:
            self.pids = children_of({self.root})
        got = {}
        for pid in list(self.pids):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                base = f"/proc/{pid}/task/{tid}"
                try:
                    with open(f"{base}/comm") as f:
                        name = f.read().strip()
                    with open(f"{base}/schedstat") as f:
                        ns = tuple(int(x) for x in f.read().split()[:3])
                except (OSError, ValueError, IndexError):
                    continue
                if len(ns) == 3:
                    got[(pid, int(tid))] = (name, ns)
        with self.lock:
            self.seen.update(got)
            return dict(self.seen)


def by_name(delta):
    """{thread name with digits folded: (threads, CPU s, run-queue s, runs)}."""
    out = {}
    for name, (ns, wait, runs) in delta:
        key = re.sub(r"\d+", "#", name)
        n, total, q, r = out.get(key, (0, 0.0, 0.0, 0))
        out[key] = (n + 1, total + ns / 1e9, q + wait / 1e9, r + runs)
    return out


def table(title, wall, names):
    cpus = os.cpu_count() or 1
    total = sum(v[1] for v in names.values())
    print(
        f"== {title}: {wall:.2f} s wall x {cpus} CPUs; threads used {total:.2f} CPU s "
        f"({100 * total / max(wall * cpus, 1e-9):.0f}% of the machine)"
    )
    # runq s: runnable but waiting for a CPU; runs: times put on a CPU
    # (each wakeup or preemption).
    print(f"{'thread name':<24}{'threads':>8}{'CPU s':>9}{'of all':>8}{'runq s':>8}{'runs':>9}")
    for key, (n, secs, q, runs) in sorted(names.items(), key=lambda kv: -kv[1][1]):
        if secs < 0.005 * max(total, 1e-9):
            continue
        print(
            f"{key:<24}{n:>8}{secs:>9.2f}{100 * secs / max(total, 1e-9):>7.0f}%{q:>8.2f}{runs:>9}"
        )


def main():
    args = sys.argv[1:]
    if args and args[0] == "--":
        args = args[1:]
    if not args:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["RUST_LOG"] = ",".join(
        x for x in (env.get("RUST_LOG", "warn"), "hipfs_bench_phase=info") if x
    )
    # PERF_CTL (a perf record --control fifo) and PERF_PHASE (a phase
    # name): perf samples only while that phase runs.
    perf_ctl = open(os.environ["PERF_CTL"], "w") if os.environ.get("PERF_CTL") else None
    perf_phase = os.environ.get("PERF_PHASE", "userspace")
    start = time.monotonic()
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, text=True)
    threads = Threads(proc.pid)
    # phase name -> [rounds seen, wall seconds, {(pid, tid): (name, ns)} summed]
    phases = {}
    open_marks = {}

    def read_marks():
        for line in proc.stderr:
            m = MARK.search(line)
            if not m:
                sys.stderr.write(line)
                continue
            what, name = m.groups()
            if perf_ctl and name == perf_phase:
                # perf record --control: sample only inside this phase.
                perf_ctl.write("enable\n" if what == "begin" else "disable\n")
                perf_ctl.flush()
            now = time.monotonic()
            snap = threads.sample()
            if what == "begin":
                open_marks[name] = (now, snap)
                continue
            if name not in open_marks:
                continue
            t0, before = open_marks.pop(name)
            rec = phases.setdefault(name, [0, 0.0, {}])
            rec[0] += 1
            if rec[0] == 1:
                continue  # the warm-up round
            rec[1] += now - t0
            for key, (tname, ns) in snap.items():
                prev = before.get(key, (tname, (0, 0, 0)))[1]
                spent = tuple(a - b for a, b in zip(ns, prev))
                if spent[0] > 0:
                    old = rec[2].get(key, (tname, (0, 0, 0)))[1]
                    rec[2][key] = (tname, tuple(a + b for a, b in zip(old, spent)))

    reader = threading.Thread(target=read_marks, daemon=True)
    reader.start()
    n = 0
    while proc.poll() is None:
        threads.sample(rescan=n % 25 == 0)
        n += 1
        time.sleep(0.02)
    reader.join(timeout=5)
    wall = time.monotonic() - start
    for name, (rounds, secs, spent) in phases.items():
        if rounds > 1:
            table(f"phase {name}, {rounds - 1} rounds", secs, by_name(spent.values()))
    last = threads.sample()
    table("thread CPU, whole run", wall, by_name(last.values()))
    if os.environ.get("PERF_TIDS"):
        # Every thread's name by id, for perf samples whose thread was
        # named while perf was not recording (perf shows those as :TID).
        with open(os.environ["PERF_TIDS"], "w") as f:
            for (_, tid), (name, _) in sorted(last.items()):
                f.write(f"{tid} {name}\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
