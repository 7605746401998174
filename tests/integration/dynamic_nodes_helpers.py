"""Helpers for the integration tests: bounded polling and Slurm queries through `juju exec`."""

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


def poll(
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 2.0,
    what: str = "condition",
) -> T:
    """Call `probe` until it returns something other than None/False, within `timeout` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        last = probe()
        if last is not None and last is not False:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def sh(juju: jubilant.Juju, command: str, *, unit: str = CONTROLLER, wait: float = 120) -> str:
    """Run a shell command on a unit; return its stdout (raise if it fails)."""
    return juju.exec(command, unit=unit, wait=wait).stdout


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
    """The names of the cluster's partitions, from `sinfo`."""
    out = sh(juju, "sinfo --noheader --format=%R")
    return {line.strip() for line in out.splitlines() if line.strip()}


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


def all_nodes_idle(juju: jubilant.Juju, names: list[str]) -> bool:
    """Whether every named node is registered, idle and schedulable."""
    known = nodes(juju)
    return all(is_idle(known.get(n)) for n in names)


def job_state(juju: jubilant.Juju, job_id: str) -> str | None:
    """A job's state from squeue, falling back to sacct-less `scontrol show job`."""
    out = try_sh(juju, f"scontrol show job {job_id} --json")
    if out is None:
        return None
    jobs = json.loads(out).get("jobs", [])
    if not jobs:
        return None
    state = jobs[0].get("job_state", [])
    return ",".join(state) if isinstance(state, list) else str(state)


def submit_sleep(juju: jubilant.Juju, node_name: str, seconds: int) -> str:
    """Submit `sleep <seconds>` pinned to `node_name`; wait until it runs; return its id.

    The job goes to the node's partition (its application, the name before the unit number).
    """
    partition = node_name.rsplit("-", 1)[0]
    out = sh(
        juju,
        f"sbatch --parsable -p {partition} -w {node_name} -N1 -o /dev/null"
        f" --wrap 'sleep {seconds}'",
    )
    job_id = out.strip().split(";")[0]
    poll(
        lambda: job_state(juju, job_id) == "RUNNING",
        timeout=60,
        what=f"job {job_id} running on {node_name}",
    )
    return job_id
