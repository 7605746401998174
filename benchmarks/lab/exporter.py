"""The Slurm exporter beside a naive one, at a cluster's size (issue 22).

The cluster is sized without a machine per node: `scontrol create` adds the missing dynamic
nodes with the compute partition's feature, so they join its NodeSet, in state FUTURE (24.11
refuses State=CLOUD there: "Requested GRES option unsupported by configured SelectType
plugin"), then `scontrol update State=DOWN Reason=...` makes them visible: `sinfo` prints
them, with their reason, as it prints real nodes; `jobs` held jobs are queued
from the login node (one `sbatch --hold` each, 16 at a time; MaxJobCount is raised above them
first). Then, on the controller's machine, `runs` times each:

* the charm's exporter: one collection pass (`SlurmCollector.collect_once`, the service's own
  code, Python and import path) and the scrape of the running service (`curl` of
  127.0.0.1:9341/metrics: it answers from its last pass);
* a naive exporter: `squeue --json` then `sinfo --json`, serially, as exporters that read
  Slurm on each scrape do (the commands alone: its JSON parsing is not counted, so it is a
  lower bound of its scrape).

For each: wall seconds (median, max), slurmctld's CPU seconds per pass (utime + stime of its
process, with the service stopped so only the measured pass runs) and the RPCs one pass
adds to slurmctld (sdiag's per-message-type counts, before and after; sdiag's own RPC left
out).
"""

from __future__ import annotations

import json
import shlex
import statistics
import time
from typing import Any

from .cluster import COMPUTE, CONTROLLER, LOGIN, Bench

SERVICE = "slurmctld-charm-exporter.service"
ONE_PASS = """\
import socket, time
from slurm_exporter.exporter import SlurmCollector
collector = SlurmCollector(socket.gethostname())
started = time.monotonic()
ok = collector.collect_once()
print(time.monotonic() - started, ok)
"""
NAIVE_PASS = (
    "s=$(date +%s.%N); squeue --json >/dev/null && sinfo --json >/dev/null; "
    'e=$(date +%s.%N); awk "BEGIN {print $e - $s}"'
)
SDIAG_ITSELF = {"REQUEST_STATS_INFO"}


def _exporter_command(bench: Bench) -> str:
    """The service's Python and import path, running one pass (`ONE_PASS`)."""
    machine = bench.machine(CONTROLLER)
    path = machine.exec(["systemctl", "show", "-P", "Environment", SERVICE]).stdout.strip()
    argv = machine.exec(["systemctl", "show", "-P", "ExecStart", SERVICE]).stdout
    python = argv.split("argv[]=", 1)[1].split()[0]
    return f"env {shlex.quote(path)} {shlex.quote(python)} -c {shlex.quote(ONE_PASS)}"


def slurmctld_cpu_seconds(bench: Bench) -> float:
    """slurmctld's user and system CPU seconds so far (/proc/<pid>/stat, in clock ticks)."""
    stat = bench.sh(
        CONTROLLER, 'cat "/proc/$(systemctl show -P MainPID slurmctld)/stat"; getconf CLK_TCK'
    ).split()
    utime, stime, ticks = int(stat[13]), int(stat[14]), int(stat[-1])  # fields 14, 15
    return (utime + stime) / ticks


def _rpcs(bench: Bench) -> dict[str, int]:
    stats = json.loads(bench.sh(CONTROLLER, "sdiag --json"))["statistics"]
    return {
        r["message_type"]: int(r["count"])
        for r in stats.get("rpcs_by_message_type", [])
        if r["message_type"] not in SDIAG_ITSELF
    }


def _measure(bench: Bench, command: str, runs: int) -> dict[str, Any]:
    walls: list[float] = []
    cpu: list[float] = []
    added: dict[str, int] = {}
    for _ in range(runs):
        before_rpcs, before_cpu = _rpcs(bench), slurmctld_cpu_seconds(bench)
        out = bench.sh(CONTROLLER, command, timeout=1800)
        after_cpu, after_rpcs = slurmctld_cpu_seconds(bench), _rpcs(bench)
        walls.append(float(out.split()[0]))
        cpu.append(after_cpu - before_cpu)
        added = {
            kind: count - before_rpcs.get(kind, 0)
            for kind, count in after_rpcs.items()
            if count != before_rpcs.get(kind, 0)
        }
    return {
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_max": round(max(walls), 3),
        "slurmctld_cpu_s_median": round(statistics.median(cpu), 3),
        "rpcs_per_pass": added,
    }


def _scrape_seconds(bench: Bench, runs: int) -> dict[str, Any]:
    out = bench.sh(
        CONTROLLER,
        f"for i in $(seq {runs}); do curl -s -o /dev/null "
        "-w '%{time_total} %{size_download}\\n' http://127.0.0.1:9341/metrics; done",
    )
    rows = [line.split() for line in out.splitlines() if line.strip()]
    return {
        "scrape_s_median": round(statistics.median(float(r[0]) for r in rows), 4),
        "scrape_bytes": int(rows[-1][1]),
    }


def size_cluster(bench: Bench, nodes: int, jobs: int, prefix: str = "bench") -> dict[str, Any]:
    """Add down nodes (`<prefix>-<i>`) to the compute partition up to `nodes` nodes shown
    by sinfo, and queue `jobs` held jobs."""
    feature = bench.sh(CONTROLLER, f"sinfo -h -N -p {COMPUTE} -o %f | head -1").strip()
    feature = feature.split(",")[0]
    real = len(bench.sh(CONTROLLER, "sinfo -h -N -o %N | sort -u").split())
    extra = max(0, nodes - real)
    if extra:
        bench.sh(
            CONTROLLER,
            f"scontrol create NodeName={prefix}-[1-{extra}] CPUs=4 RealMemory=1000 "
            f"Features={shlex.quote(feature)} State=FUTURE && "
            f"scontrol update NodeName={prefix}-[1-{extra}] State=DOWN Reason='bench: no slurmd'",
        )
    started = time.monotonic()
    bench.sh(
        LOGIN,
        f"seq {jobs} | xargs -P 16 -I{{}} sbatch --hold -p {COMPUTE} -o /dev/null --wrap true "
        ">/dev/null",
        timeout=3600,
    )
    return {
        "nodes": len(bench.sh(CONTROLLER, "sinfo -h -N -o %N | sort -u").split()),
        "down_nodes_created": extra,
        "node_partition_lines": len(bench.sh(CONTROLLER, "sinfo -h -N -o %N").split()),
        "pending_jobs": int(bench.sh(CONTROLLER, "squeue -h -t pending -o %i | wc -l").strip()),
        "submit_s": round(time.monotonic() - started, 1),
    }


def exporter_vs_naive(bench: Bench, nodes: int, jobs: int, runs: int) -> dict[str, Any]:
    """Size the cluster, then measure both exporters (see the module doc).

    The held jobs stay queued for the autoscaler's figure, which cancels them.
    """
    juju = bench.juju
    juju.config("slurmctld", {"slurm-conf-parameters": f"MaxJobCount={max(10000, 2 * jobs)}\n"})
    bench.wait_active()
    sized = size_cluster(bench, nodes, jobs)
    scrape = _scrape_seconds(bench, runs)
    command = _exporter_command(bench)
    bench.sh(CONTROLLER, f"systemctl stop {SERVICE}")
    try:
        ours = _measure(bench, command, runs)
        naive = _measure(bench, NAIVE_PASS, runs)
    finally:
        bench.sh(CONTROLLER, f"systemctl start {SERVICE}")
    return {**sized, "runs": runs, "exporter": {**ours, **scrape}, "naive": naive}
