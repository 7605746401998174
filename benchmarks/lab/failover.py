"""Figure 4: failover. The primary controller fails one way; how long until the first backup
is in charge (its own log says so), and until a login node sees it answer `scontrol ping` as
the controller in charge and accept a job.

Three slurmctld units on network state (the cluster's one unit plus two added here), the
charm's default timers. Each fault kind is the lab's own (`slurm_lab.machines.Lab`): SIGKILL
of slurmctld, power off, network cut. Every probe runs on the login node, as a user's
command would. The comparator is Slurm's default `SlurmctldTimeout` (120 s): with it a backup
waits at least that long before it even starts to take over.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from slurm_lab.machines import FaultKind

from .cluster import COMPUTE, LOGIN, Bench

KINDS: tuple[FaultKind, ...] = ("kill", "power", "network")
SLURM_DEFAULT_SLURMCTLD_TIMEOUT = 120
PROBE_TIMEOUT = 15
FAILOVER_LIMIT = 120
RECOVERY_LIMIT = 300


def _poll(check: Callable[[], bool], limit: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {limit:.0f} s")
        time.sleep(interval)


def controllers(bench: Bench) -> list[tuple[str, bool]] | None:
    """Each controller's hostname and whether it answers, in `SlurmctldHost` order."""
    try:
        out = bench.sh(LOGIN, f"timeout {PROBE_TIMEOUT} scontrol ping --json", PROBE_TIMEOUT + 10)
        pings = json.loads(out).get("pings", [])
    except (RuntimeError, TimeoutError, json.JSONDecodeError):
        return None
    return [(str(p["hostname"]), _answers(p)) for p in pings]


def _answers(ping: dict[str, Any]) -> bool:
    return str(ping.get("pinged", "")).upper() == "UP" and bool(ping.get("responding", True))


def all_up(bench: Bench, hosts: list[str]) -> bool:
    """Whether `scontrol ping` lists exactly `hosts`, in order, every one answering."""
    found = controllers(bench)
    return found is not None and [h for h, _ in found] == hosts and all(up for _, up in found)


def backup_serves(bench: Bench, primary: str, backup: str) -> bool:
    """The primary does not answer, the backup does, and the backup takes a job."""
    found = dict(controllers(bench) or [])
    if found.get(primary, True) or not found.get(backup, False):
        return False
    try:
        bench.sh(
            LOGIN,
            f"timeout {PROBE_TIMEOUT} sbatch --parsable -p {COMPUTE} -N1 --mem=1 -o /dev/null "
            "--wrap true",
            PROBE_TIMEOUT + 10,
        )
    except (RuntimeError, TimeoutError):
        return False
    return True


def inject(bench: Bench, kind: FaultKind, machine: str) -> None:
    """Take a controller's machine down one way (`Lab.fault`)."""
    bench.lab.fault(kind, machine)


def repair(bench: Bench, kind: FaultKind, machine: str) -> None:
    """Undo `inject`."""
    bench.lab.repair(kind, machine)


def add_backups(bench: Bench, count: int = 2) -> dict[str, Any]:
    """Add `count` slurmctld units (backups, in join order); seconds until all answer."""
    started = time.monotonic()
    bench.juju.add_unit("slurmctld", num_units=count)
    bench.wait_active(timeout=900, blocked_for=300)
    _poll(
        lambda: (
            (found := controllers(bench)) is not None
            and len(found) == count + 1
            and all(up for _, up in found)
        ),
        RECOVERY_LIMIT,
        "every controller answering",
        interval=2,
    )
    return {"controllers": count + 1, "active_s": round(time.monotonic() - started, 1)}


def took_control_at(bench: Bench, host: str, since: float) -> float | None:
    """When a controller's slurmctld last logged `Running as primary controller` (epoch s)."""
    out = bench.sh(
        bench.lab.get(host),
        f"journalctl -u slurmctld --no-pager -o short-unix --since=@{int(since)} "
        "| grep 'Running as primary controller' | tail -n 1",
    )
    stamp = out.split(" ", 1)[0]
    return float(stamp) if stamp else None


def one_failover(bench: Bench, kind: FaultKind) -> dict[str, float]:
    """Fail the primary one way: seconds to the backup in charge (its own log), to a login
    node served by it, and from the repair to every controller answering again."""
    hosts = [h for h, _ in controllers(bench) or []]
    if len(hosts) < 2:
        raise RuntimeError(f"no backup to fail over to: {hosts}")
    primary, backup = hosts[0], hosts[1]
    fault_at, started = time.time(), time.monotonic()
    inject(bench, kind, primary)
    _poll(lambda: backup_serves(bench, primary, backup), FAILOVER_LIMIT, f"failover ({kind})")
    served = time.monotonic() - started
    took_control = took_control_at(bench, backup, fault_at)
    if took_control is None:
        raise RuntimeError(f"{backup} served but never logged taking control")
    started = time.monotonic()
    repair(bench, kind, primary)
    _poll(lambda: all_up(bench, hosts), RECOVERY_LIMIT, f"recovery from {kind}", 1)
    return {
        "in_charge_s": round(took_control - fault_at, 1),
        "served_s": round(served, 1),
        "recovery_s": round(time.monotonic() - started, 1),
    }


def failover(bench: Bench, runs: int, kinds: tuple[FaultKind, ...] = KINDS) -> dict[str, Any]:
    """`runs` failovers of each kind, interleaved; median and max per kind and measure."""
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for _ in range(runs):
        for kind in kinds:
            results[kind].append(one_failover(bench, kind))
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for kind, runs_of_kind in results.items():
        summary[kind] = {
            measure: {
                "median": statistics.median(r[measure] for r in runs_of_kind),
                "max": max(r[measure] for r in runs_of_kind),
            }
            for measure in ("in_charge_s", "served_s", "recovery_s")
        }
    return {
        "runs": runs,
        "results": results,
        "summary": summary,
        "comparator_s": SLURM_DEFAULT_SLURMCTLD_TIMEOUT,
    }
