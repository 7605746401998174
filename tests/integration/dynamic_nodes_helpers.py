"""Helpers for the integration tests: bounded polling, Slurm queries through `juju exec`, and
what the model says about units, leaders and machines.

Only the jubilant API is used, so the helpers work on real Juju and on the lab. Where the lab
can tell more than `juju status` (its machines), the check is guarded by `lab_machine_names`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

import jubilant

T = TypeVar("T")

CONTROLLER = "slurmctld/0"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
RECONFIGURE_LINE = "Processing Reconfiguration Request"
UNREACHABLE = "Unable to contact slurm controller"
CONTROLLER_GAP = 15.0
"""Seconds a Slurm client retries while slurmctld restarts or hands over (reconfigure)."""


def poll(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 2.0,
    what: str = "condition",
) -> T:
    """Call `probe` until it returns something other than None/False, within `timeout` s.

    A command that fails on a unit (`jubilant.TaskError`) counts as "not yet"; the last such
    failure is part of the timeout's message.
    """
    deadline = time.monotonic() + timeout
    failure = ""
    while True:
        try:
            last = probe()
        except jubilant.TaskError as e:
            last, failure = None, f"; last failure: {e.task.stderr.strip() or e}"
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}{failure}")
        time.sleep(interval)


def sh(juju: jubilant.Juju, command: str, *, unit: str = CONTROLLER, wait: float = 120) -> str:
    """Run a shell command on a unit; return its stdout (raise if it fails).

    A Slurm client that cannot reach slurmctld is retried for `CONTROLLER_GAP` seconds:
    `scontrol reconfigure` makes slurmctld hand over to a new process, and clients that
    connect in between fail.
    """
    deadline = time.monotonic() + CONTROLLER_GAP
    while True:
        try:
            return juju.exec(command, unit=unit, wait=wait).stdout
        except jubilant.TaskError as e:
            if UNREACHABLE not in (e.task.stderr or "") or time.monotonic() >= deadline:
                raise
        time.sleep(1)


def try_sh(juju: jubilant.Juju, command: str, *, unit: str = CONTROLLER) -> str | None:
    """Run a shell command on a unit; None if it fails."""
    try:
        return sh(juju, command, unit=unit)
    except jubilant.TaskError:
        return None


def nodes(juju: jubilant.Juju) -> dict[str, dict[str, Any]]:
    """Every node slurmctld knows, by name (`scontrol show nodes --json`)."""
    data = json.loads(sh(juju, "scontrol show nodes --json"))
    return {node["name"]: node for node in data.get("nodes", [])}


def node(juju: jubilant.Juju, name: str) -> dict[str, Any] | None:
    """One node's record, or None when slurmctld does not know it."""
    return nodes(juju).get(name)


def partition(juju: jubilant.Juju, name: str) -> str:
    """`scontrol show partition <name>` (one-liner form)."""
    return sh(juju, f"scontrol show partition {name} --oneliner")


def partitions(juju: jubilant.Juju) -> set[str]:
    """The names of the slurmd applications' partitions, from `sinfo`.

    `sh` runs as root, who also sees the charm's hidden `rebuild` partition (users do not):
    it is left out.
    """
    out = sh(juju, "sinfo --noheader --format=%R")
    return {line.strip() for line in out.splitlines() if line.strip()} - {"rebuild"}


def reconfigure_count(juju: jubilant.Juju) -> int:
    """How many `scontrol reconfigure` requests slurmctld logged so far."""
    out = sh(juju, f"grep -c '{RECONFIGURE_LINE}' {SLURMCTLD_LOG} || true")
    return int(out.strip() or 0)


def slurm_conf_fingerprint(juju: jubilant.Juju) -> str:
    """slurm.conf's modification time and checksum on the controller."""
    return sh(juju, "stat -c %Y.%y /etc/slurm/slurm.conf; sha256sum /etc/slurm/slurm.conf")


def node_states(record: dict[str, Any]) -> set[str]:
    """A node's state flags (IDLE, DRAIN, ...), from its JSON record."""
    return {str(s).upper() for s in record.get("state", [])}


UNAVAILABLE = frozenset({"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "MAINTENANCE", "RESERVED"})


def is_idle(record: dict[str, Any] | None) -> bool:
    """Whether a node is idle and schedulable (dynamic nodes also carry `DYNAMIC_NORM`)."""
    states = node_states(record or {})
    return "IDLE" in states and not states & UNAVAILABLE


def wait_idle(juju: jubilant.Juju, name: str, *, timeout: float) -> dict[str, Any]:
    """Wait until node `name` is idle and schedulable.

    A timeout says its last state and reason.
    """
    last: dict[str, Any] = {}

    def probe() -> dict[str, Any] | None:
        record = node(juju, name)
        last.update(record or {"state": ["UNKNOWN TO SLURMCTLD"]})
        return record if is_idle(record) else None

    try:
        return poll(probe, timeout=timeout, what=f"{name} idle")
    except AssertionError as e:
        seen = f"state {sorted(node_states(last))}, reason {last.get('reason', '')!r}"
        raise AssertionError(f"{e}; {name} was {seen}") from None


def all_nodes_idle(juju: jubilant.Juju, names: list[str]) -> bool:
    """Whether every named node is registered, idle and schedulable."""
    known = nodes(juju)
    return all(is_idle(known.get(n)) for n in names)


def wait_all_idle(juju: jubilant.Juju, names: list[str], *, timeout: float = 60) -> None:
    """Wait until every named node is registered, idle and schedulable (`all_nodes_idle`)."""
    poll(lambda: all_nodes_idle(juju, names), timeout=timeout, what=f"{' and '.join(names)} idle")


def reboot_node(juju: jubilant.Juju, name: str, *, unit: str, timeout: float) -> None:
    """Reboot node `name`'s machine (a command on `unit`); wait until Slurm sees a new boot."""
    booted = job_time(nodes(juju)[name], "boot_time")
    # A timer's default accuracy is a minute: without its own, the reboot comes 1-61 s later.
    reboot = "systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot"
    juju.exec(reboot, unit=unit, wait=120)
    poll(
        lambda: job_time(nodes(juju)[name], "boot_time") != booted,
        timeout=timeout,
        what=f"{name} rebooted",
    )


def job_words(out: str) -> dict[str, str]:
    """`scontrol show job -o` output as a dict of its `key=value` words (the first of a key)."""
    fields: dict[str, str] = {}
    for word in out.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def job(juju: jubilant.Juju, job_id: str) -> dict[str, Any] | None:
    """A job's record from `scontrol show job --json` (kept MinJobAge, 300 s, after it ends).

    There is no accounting (sacct) in these clusters.
    """
    out = try_sh(juju, f"scontrol show job {job_id} --json")
    if out is None:
        return None
    jobs = json.loads(out).get("jobs", [])
    return jobs[0] if jobs else None


def job_state(juju: jubilant.Juju, job_id: str) -> str | None:
    """A job's state (`RUNNING`, `COMPLETED`, `PENDING`, ...), None when Slurm forgot it."""
    record = job(juju, job_id)
    if record is None:
        return None
    state = record.get("job_state", [])
    return ",".join(state) if isinstance(state, list) else str(state)


def job_time(record: dict[str, Any], field: str) -> float | None:
    """A job's time field (`end_time`, `start_time`, ...) in epoch seconds, if set."""
    value = record.get(field) or {}
    return float(value["number"]) if value.get("set") and not value.get("infinite") else None


def submit(
    juju: jubilant.Juju,
    partition: str,
    seconds: int,
    *,
    node_name: str | None = None,
    requeue: bool | None = None,
) -> str:
    """Submit batch job `sleep <seconds>` to `partition` (pinned to `node_name` if given).

    `requeue` adds `--requeue` or `--no-requeue` (the cluster's JobRequeue default otherwise).
    The job asks for 1 MB of memory so that several share a node (memory is a consumable
    resource, and a job without `--mem` takes the whole node). Returns the job id at once.
    """
    options = [f"-p {partition}", "-N1", "--mem=1", "-o /dev/null"]
    if node_name is not None:
        options.append(f"-w {node_name}")
    if requeue is not None:
        options.append("--requeue" if requeue else "--no-requeue")
    out = sh(juju, f"sbatch --parsable {' '.join(options)} --wrap 'sleep {seconds}'")
    return out.strip().split(";")[0]


def wait_job(
    juju: jubilant.Juju,
    job_id: str,
    done: Callable[[dict[str, Any]], bool],
    *,
    timeout: float,
    what: str,
) -> dict[str, Any]:
    """Wait until job `job_id`'s record satisfies `done`; return that record."""

    def probe() -> dict[str, Any] | None:
        record = job(juju, job_id)
        return record if record is not None and done(record) else None

    return poll(probe, timeout=timeout, interval=1, what=f"job {job_id} {what}")


def wait_running(juju: jubilant.Juju, job_id: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until job `job_id` runs; return its record."""
    return wait_job(
        juju, job_id, lambda r: "RUNNING" in r["job_state"], timeout=timeout, what="running"
    )


def submit_sleep(juju: jubilant.Juju, node_name: str, seconds: int) -> str:
    """Submit `sleep <seconds>` pinned to `node_name`; wait until it runs; return its id.

    The job goes to the node's partition (its application, the name before the unit number).
    """
    job_id = submit(juju, node_name.rsplit("-", 1)[0], seconds, node_name=node_name)
    wait_running(juju, job_id)
    return job_id


def unit_of_node(node_name: str) -> str:
    """The unit whose node this is (`compute-3` -> `compute/3`), as the charms name nodes."""
    app, number = node_name.rsplit("-", 1)
    return f"{app}/{number}"


def leader(status: jubilant.Status, app: str) -> str | None:
    """The application's leader unit, if any."""
    return next((name for name, u in status.apps[app].units.items() if u.leader), None)


def lab_machine_names(juju: jubilant.Juju) -> set[str] | None:
    """On the lab: the names of the machines that exist (a status lists only units' ones).

    None on real Juju, whose `juju status` lists every machine of the model.
    """
    lab = getattr(juju, "lab", None)
    if lab is None:
        return None
    return {machine.name for machine in lab.machines()}


def machine_exists(juju: jubilant.Juju, machine_id: str, instance_id: str) -> bool:
    """Whether the machine is still in the model (on the lab: still exists at all)."""
    if machine_id in juju.status().machines:
        return True
    names = lab_machine_names(juju)
    return names is not None and instance_id in names


def machines_without_units(juju: jubilant.Juju) -> set[str]:
    """Instance ids of machines that host no unit: machines left waiting for nothing."""
    status = juju.status()
    used = {
        status.machines[unit.machine].instance_id
        for app in status.apps.values()
        for unit in app.units.values()
        if unit.machine in status.machines
    }
    names = lab_machine_names(juju)
    existing = names if names is not None else {m.instance_id for m in status.machines.values()}
    return existing - used
