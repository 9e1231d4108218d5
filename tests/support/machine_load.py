"""What else used this machine's CPUs while a timed run ran, read from /proc.

A timed test on 2 shared cores can be slowed by the other lane's work; when its
measurements disagree, the failure message should say who else was busy. A process's
figure includes the children it waited for (a Go build's compilers), so a parent that
reaps a long-lived child in the window counts that child's whole life; one that starts and
ends between two snapshots with its parent gone is not seen, the machine-wide figure
counts it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Snapshot:
    at: float  # time.monotonic()
    busy_s: float  # the machine's non-idle CPU seconds since boot (/proc/stat)
    # (pid, start time in ticks) -> (command line, CPU seconds); the start time tells a
    # reused pid apart
    by_pid: dict[tuple[int, int], tuple[str, float]]


def _machine_busy_s() -> float:
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(f) for f in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return (sum(ticks[:8]) - idle) / TICKS


def snapshot() -> Snapshot:
    by_pid: dict[tuple[int, int], tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # ended meanwhile
            continue
        rest = stat[stat.rindex(")") + 2:].split()  # fields from the 3rd (state) on
        # utime, stime, cutime, cstime (fields 14-17): with the children it waited for, so
        # that short-lived ones (a Go build's compilers, a benchmark client) count too
        cpu = sum(int(f) for f in rest[11:15]) / TICKS
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        started = int(rest[19])  # field 22
        by_pid[(int(entry.name), started)] = (" ".join(cmd.split()) or f"[{comm}]", cpu)
    return Snapshot(time.monotonic(), _machine_busy_s(), by_pid)


def describe(before: Snapshot, after: Snapshot, top: int = 4) -> str:
    """One line: the machine's average busy cores between the snapshots and the
    processes that used the most CPU in that time (with their ended children)."""
    span = max(after.at - before.at, 1e-6)
    used = []
    for key, (cmd, cpu) in after.by_pid.items():
        start = before.by_pid.get(key)
        delta = cpu - (start[1] if start is not None else 0.0)
        if delta >= 0.5:
            used.append((delta, cmd[:70]))
    used.sort(reverse=True)
    busiest = "; ".join(f"{d:.0f} s {c}" for d, c in used[:top]) or "none over 0.5 s"
    return (f"{(after.busy_s - before.busy_s) / span:.2f} cores busy on average over "
            f"{span:.0f} s; most CPU: {busiest}")
