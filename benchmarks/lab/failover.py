"""Figure 4: failover, swept over `SlurmctldTimeout`. The primary controller fails one way; how
long until the first backup is in charge (its own log says so), and until a login node sees it
answer `scontrol ping` as the controller in charge and accept a job. Beside it, the cost of a
short timeout: spurious takeovers.

Three slurmctld units on network state (the cluster's one unit plus two added here). For each
`SlurmctldTimeout` of the sweep (`MessageTimeout` at half of it, the most the charm allows,
unless the setting names it),
set with `juju config` as an operator would: a calm window with no fault but a burst of
`sbatch` (the primary at its busiest; a client's failures counted), then each fault
kind of the lab's own (`slurm_lab.machines.Lab`): SIGKILL of slurmctld, power off, network
cut. Every probe runs on the login node, as a user's command would.

A spurious takeover is a backup that logs `Running as primary controller` while the primary
is alive: any time of the setting's block outside a fault's window (from the fault to every
controller answering again). A spurious fence is the fence watchdog killing the slurmctld of
a controller that can reach the share (`fence`): the primary's outside those windows, a
backup's at any time (the faults only ever hit the primary). Both are counted, as the sweep's
purpose is the smallest timeout that has neither on a loaded host. The host's load average
is sampled through each block, so a run beside CI's labs says so in its own numbers.

The comparator is Slurm's default `SlurmctldTimeout` (120 s): with it a backup waits at least
that long before it even starts to take over.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slurm_lab.machines import FaultKind

from .cluster import COMPUTE, LOGIN, Bench

KINDS: tuple[FaultKind, ...] = ("kill", "power", "network")
Timers = tuple[int, int]
"""`SlurmctldTimeout` and `MessageTimeout`, in seconds."""
TIMEOUTS: tuple[Timers, ...] = ((4, 2), (6, 3), (8, 4), (12, 6))
"""The sweep's timers (issue 41: the default is chosen from them), `MessageTimeout` at half."""
SLURM_DEFAULT_SLURMCTLD_TIMEOUT = 120
PROBE_TIMEOUT = 15
FAILOVER_LIMIT = 120
RECOVERY_LIMIT = 300
FENCE_UNIT = "slurmctld-charm-fence"
IN_CHARGE = "Running as primary controller"
"""What slurmctld logs once it serves as the controller in charge (a backup after takeover)."""
BURST_JOBS = 500
"""Submissions in each calm window: a takeover is likeliest while the primary is busiest."""


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
    stamps = journal_stamps(bench, host, "slurmctld", IN_CHARGE, since)
    return stamps[-1] if stamps else None


def one_failover(bench: Bench, kind: FaultKind) -> dict[str, float]:
    """Fail the primary one way: seconds to the backup in charge (its own log), to a login
    node served by it, and from the repair to every controller answering again; with the
    fault's window (`fault_at` to `recovered_at`, epoch s)."""
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
        "fault_at": round(fault_at, 1),
        "recovered_at": round(time.time(), 1),
    }


def parse_timers(text: str) -> Timers:
    """`6` or `6:2`: `SlurmctldTimeout`, and `MessageTimeout` (half of it when not given)."""
    slurmctld_timeout, _, message_timeout = text.partition(":")
    return int(slurmctld_timeout), int(message_timeout or int(slurmctld_timeout) // 2)


def set_timeouts(bench: Bench, timers: Timers, hosts: list[str]) -> dict[str, Any]:
    """`juju config` the timers; seconds until the controller in charge runs with them, every
    unit is active and every controller answers."""
    started = time.monotonic()
    slurmctld_timeout, message_timeout = timers
    bench.juju.config(
        "slurmctld",
        {"slurmctld-timeout": slurmctld_timeout, "message-timeout": message_timeout},
    )
    bench.wait_active(timeout=900, blocked_for=300)
    wanted = re.compile(rf"^SlurmctldTimeout\s*=\s*{slurmctld_timeout} sec$", re.MULTILINE)
    _poll(
        lambda: bool(wanted.search(bench.sh(LOGIN, "scontrol show config || true", 30))),
        RECOVERY_LIMIT,
        f"SlurmctldTimeout {slurmctld_timeout} in charge",
        interval=2,
    )
    _poll(lambda: all_up(bench, hosts), RECOVERY_LIMIT, "every controller answering", 1)
    return {"applied_s": round(time.monotonic() - started, 1)}


def burst(bench: Bench, jobs: int) -> dict[str, Any]:
    """`jobs` held `sbatch`es from the login node, 16 at a time (the primary at its busiest);
    how many a client saw fail (`MessageTimeout` is every RPC's bound too); then cancelled."""
    started = time.monotonic()
    out = bench.sh(
        LOGIN,
        f"seq {jobs} | xargs -P 16 -I{{}} sh -c 'sbatch --parsable --hold -p {COMPUTE} -N1 "
        "--mem=1 -o /dev/null --wrap true >/dev/null 2>&1 && echo ok || echo failed'",
        timeout=1200,
    )
    seconds = time.monotonic() - started
    bench.sh(LOGIN, "scancel --state=PENDING --user=root || true", timeout=600)
    return {"jobs": jobs, "failed": out.split().count("failed"), "s": round(seconds, 1)}


def calm(bench: Bench, seconds: float, jobs: int, load: list[float]) -> dict[str, Any]:
    """No fault for `seconds`, a burst of `jobs` submissions in it: the lab's hooks run as
    Juju's would meanwhile, and the host's load is sampled."""
    deadline = time.monotonic() + seconds
    with ThreadPoolExecutor(max_workers=1) as pool:
        submitted = pool.submit(burst, bench, jobs)
        while time.monotonic() < deadline or not submitted.done():
            load.append(os.getloadavg()[0])
            bench.tick()
            time.sleep(2)
        return submitted.result()


def journal_stamps(bench: Bench, host: str, unit: str, pattern: str, since: float) -> list[float]:
    """Epoch stamps of a host's journal lines of `unit` matching `pattern` since `since`."""
    out = bench.sh(
        bench.lab.get(host),
        f"journalctl -u {unit} --no-pager -o short-unix --since=@{int(since)} "
        f"| grep -e {pattern!r} || true",
    )
    return [float(line.split(" ", 1)[0]) for line in out.splitlines() if line.strip()]


def outside(stamps: list[float], windows: list[tuple[float, float]]) -> list[float]:
    """The stamps in no fault window (a second of slack: the journal's resolution)."""
    return [t for t in stamps if not any(a - 1 <= t <= b + 1 for a, b in windows)]


def spurious(
    bench: Bench, hosts: list[str], since: float, windows: list[tuple[float, float]]
) -> dict[str, list[float]]:
    """A backup's takeovers outside the faults' windows; the faulted primary's fences outside
    them, and every fence of a backup (none is ever faulted)."""
    takeovers = [
        t for host in hosts[1:] for t in journal_stamps(bench, host, "slurmctld", IN_CHARGE, since)
    ]
    primary_fences = journal_stamps(bench, hosts[0], FENCE_UNIT, "fenced:", since)
    backup_fences = [
        t for host in hosts[1:] for t in journal_stamps(bench, host, FENCE_UNIT, "fenced:", since)
    ]
    return {
        "takeovers": outside(takeovers, windows),
        "fences": sorted(outside(primary_fences, windows) + backup_fences),
    }


def summarize(
    results: dict[str, list[dict[str, float]]],
) -> dict[str, dict[str, dict[str, float]]]:
    """Median and max per fault kind and measure."""
    return {
        kind: {
            measure: {
                "median": statistics.median(r[measure] for r in runs_of_kind),
                "max": max(r[measure] for r in runs_of_kind),
            }
            for measure in ("in_charge_s", "served_s", "recovery_s")
        }
        for kind, runs_of_kind in results.items()
    }


def one_setting(
    bench: Bench, timers: Timers, runs: int, calm_s: float, burst_jobs: int
) -> dict[str, Any]:
    """One timeout of the sweep: apply it, a calm window with a burst of submissions, then
    `runs` faults of each kind."""
    hosts = [h for h, _ in controllers(bench) or []]
    if len(hosts) < 2:
        raise RuntimeError(f"no backup to fail over to: {hosts}")
    block: dict[str, Any] = {
        "slurmctld_timeout": timers[0],
        "message_timeout": timers[1],
        **set_timeouts(bench, timers, hosts),
    }
    since, started, load = time.time(), time.monotonic(), [os.getloadavg()[0]]
    block["burst"] = calm(bench, calm_s, burst_jobs, load)
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for _ in range(runs):
        for kind in KINDS:
            results[kind].append(one_failover(bench, kind))
            load.append(os.getloadavg()[0])
    windows = [(r["fault_at"], r["recovered_at"]) for rs in results.values() for r in rs]
    faulted = sum(b - a for a, b in windows)
    block.update(
        results=results,
        summary=summarize(results),
        spurious=spurious(bench, hosts, since, windows),
        unfaulted_s=round(time.monotonic() - started - faulted, 1),
        load_1min={"min": min(load), "median": statistics.median(load), "max": max(load)},
    )
    return block


def failover(
    bench: Bench,
    runs: int,
    timeouts: tuple[Timers, ...] = TIMEOUTS,
    calm_s: float = 120,
    *,
    burst_jobs: int = BURST_JOBS,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The sweep: each timeout in turn (`one_setting`), then the charm's defaults again."""
    sweep: list[dict[str, Any]] = []
    for timers in timeouts:
        log(f"failover: SlurmctldTimeout {timers[0]}, MessageTimeout {timers[1]}")
        sweep.append(one_setting(bench, timers, runs, calm_s, burst_jobs))
    bench.juju.config("slurmctld", reset=["slurmctld-timeout", "message-timeout"])
    bench.wait_active(timeout=900, blocked_for=300)
    return {
        "runs": runs,
        "calm_s": calm_s,
        "sweep": sweep,
        "comparator_s": SLURM_DEFAULT_SLURMCTLD_TIMEOUT,
    }
