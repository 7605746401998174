"""Slurm-controlled rolling rebuild: reboot (and patch) compute nodes without killing a job.

A hidden, root-only partition `rebuild` covers every slurmd application's node set. A
rollout submits one job per node there with `--reboot`: its priority (`PriorityJobFactor`,
the maximum) makes it the next job on the node, after the running ones; before it starts,
slurmd runs `RebootProgram` on the node (the slurmd charm's program, which applies the
pending upgrade when the job's comment asks for it, then reboots). At most
`max-unavailable` nodes of a partition reboot at once: the jobs are spread over that many
job names, and `--dependency=singleton` lets one job per name run at a time.

Everything about a rollout lives in Slurm: the job names and comments say which partition,
when it started and whether it upgrades; a node is done once its boot time is past the
start. Nothing is stored, so a new leader reads the same progress. A node that went DOWN
(or failed) during the rollout stops it: its pending jobs are held, the status names the
node with Slurm's reason.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ops
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.machine import host
from hpc_libs.slurm.base import REBOOT_PROGRAM, REBUILD_PARTITION
from hpc_libs.slurm.scontrol import Node, Timestamp
from pydantic import BaseModel, ValidationError

logger = logging.getLogger(__name__)

PARTITION = REBUILD_PARTITION
MAX_TIME_MINUTES = 10
"""The rebuild partition's `MaxTime`: the job itself runs `true` once the node is back."""
JOB_TIME = "5"  # --time of a rebuild job (minutes); within MaxTime
TIMEOUT = 60
# The comment a rebuild job carries: rebuild:<partition>:<rollout start>:<upgrade|reboot>:<node>
COMMENT = re.compile(
    r"^rebuild:(?P<partition>[^:]+):(?P<since>[0-9]+):(?P<mode>upgrade|reboot):(?P<node>[^:]+)$"
)
REBOOTING_STATES = ("REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERING_UP")
FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG")
"""A node in these failed; NOT_RESPONDING alone is every node's state while it reboots."""
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING"})


def partition_settings(partitions: Mapping[str, PartitionEntry]) -> dict[str, Any] | None:
    """Return the rebuild partition over every serving partition's node set; None without any.

    Dynamic nodes join a partition through its node set (`Feature=<app>`), so the rebuild
    partition lists the node sets, not nodes. A retiring partition's nodes are left alone.
    """
    nodesets = sorted(
        str((record.nodeset or {}).get("nodeset") or name)
        for name, record in partitions.items()
        if not record.retiring
    )
    if not nodesets:
        return None
    return {
        "partitionname": PARTITION,
        "nodes": nodesets,
        "default": False,
        "hidden": True,
        "rootonly": True,
        "disablerootjobs": False,
        "priorityjobfactor": 65533,
        "oversubscribe": "exclusive",
        "preemptmode": "off",
        "maxtime": MAX_TIME_MINUTES,
        "state": "up",
    }


PRIORITY_WEIGHT_PARTITION = 100000
"""Makes the partition factor count (multifactor weights default to 0): the rebuild
partition's jobs (`PriorityJobFactor` 65533, the maximum) get the whole weight; user
partitions (factor 1 by default) all get the same sliver, so their order is unchanged."""


def conf_settings(reboot_timeout: int) -> dict[str, Any]:
    """slurm.conf's keys for rebuilds: the reboot program, the time allowed, the priority.

    A node not back within `ResumeTimeout` (upgrade plus reboot) goes DOWN. The operator's
    `slurm-conf-parameters` can still set `PriorityWeightPartition` (they are applied after).
    """
    return {
        "rebootprogram": REBOOT_PROGRAM,
        "resumetimeout": reboot_timeout,
        "priorityweightpartition": PRIORITY_WEIGHT_PARTITION,
    }


def comment(partition: str, since: int, upgrade: bool, node: str) -> str:
    """Return the comment of one rebuild job (read by `progress` and by the RebootProgram)."""
    return f"rebuild:{partition}:{since}:{'upgrade' if upgrade else 'reboot'}:{node}"


def job_name(partition: str, group: int) -> str:
    """Return the job name of a group: jobs sharing it run one at a time (`singleton`)."""
    return f"rebuild-{partition}-{group}"


def submissions(
    partition: str, nodes: Sequence[str], max_unavailable: int, upgrade: bool, since: int
) -> list[list[str]]:
    """One `sbatch` per node; node i goes to group i mod max-unavailable.

    Each group is a job name with `--dependency=singleton`, so at most `max_unavailable`
    rebuild jobs of the partition (each one node being rebooted) run at once.
    """
    groups = max(1, max_unavailable)
    return [
        [
            "sbatch",
            "--parsable",
            f"--partition={PARTITION}",
            f"--nodelist={node}",
            "--nodes=1",
            "--exclusive",
            "--reboot",
            "--no-requeue",
            "--dependency=singleton",
            f"--job-name={job_name(partition, index % groups)}",
            f"--comment={comment(partition, since, upgrade, node)}",
            f"--time={JOB_TIME}",
            "--chdir=/",
            "--output=/dev/null",
            "--wrap=true",
        ]
        for index, node in enumerate(sorted(nodes))
    ]


def submit(commands: Iterable[list[str]]) -> list[int]:
    """Run the sbatch commands; return the job ids (SlurmOpsError on the first failure)."""
    job_ids: list[int] = []
    for argv in commands:
        output = host.run(argv, timeout=TIMEOUT).stdout.strip()
        job_ids.append(int(output.split(";")[0]))
    return job_ids


@dataclasses.dataclass(frozen=True)
class RebuildJob:
    """A job of the rebuild partition, as `squeue` lists it."""

    job_id: int
    job_state: str
    comment: str

    @property
    def rollout(self) -> re.Match[str] | None:
        """Return the parsed comment when it is a rebuild job's; else None."""
        return COMMENT.match(self.comment)

    @property
    def waiting(self) -> bool:
        """Whether the job has not ended (pending, rebooting its node or running)."""
        return self.job_state in WAITING_STATES


class BootNode(Node):
    """A node with its boot time (`scontrol show nodes --json`)."""

    boot_time: Timestamp = None


class _Nodes(BaseModel):
    nodes: list[BootNode] = []


JOBS_QUERY = [
    "squeue",
    "--all",
    "--noheader",
    f"--partition={PARTITION}",
    "--states=all",
    "--format=%i|%T|%k",
]
"""The rebuild jobs Slurm knows, ended ones included (for MinJobAge): id, state, comment."""


def read_jobs() -> list[RebuildJob]:
    """Return the rollouts' jobs (one read-only `squeue`; other jobs of the partition skipped)."""
    output = host.run(JOBS_QUERY, timeout=TIMEOUT).stdout
    jobs: list[RebuildJob] = []
    for line in output.splitlines():
        fields = line.strip().split("|", 2)
        if len(fields) == 3 and fields[0].isdigit():
            job = RebuildJob(int(fields[0]), fields[1], fields[2])
            if job.rollout is not None:
                jobs.append(job)
    return jobs


def read_nodes() -> list[BootNode]:
    """Return every node with its state, reason, partitions and boot time."""
    command = ["scontrol", "show", "nodes", "--json"]
    result = host.run(command, timeout=TIMEOUT)
    try:
        return _Nodes.model_validate(json.loads(result.stdout or "{}")).nodes
    except (ValueError, ValidationError) as e:
        raise SlurmOpsError(f"cannot parse {' '.join(command)}: {e}") from e


def read_slurm() -> tuple[list[RebuildJob], list[BootNode]]:
    """Return the rollouts' jobs and, only when there are any, every node."""
    jobs = read_jobs()
    return jobs, (read_nodes() if jobs else [])


@dataclasses.dataclass
class Progress:
    """Where one partition's rollout is, from Slurm's facts."""

    partition: str
    total: int
    done: list[str]
    rebooting: list[str]
    failed: dict[str, str]  # node -> Slurm's reason
    waiting_jobs: list[int]  # pending jobs of the rollout (held when it stops)
    upgrade: bool
    open: bool = True  # whether one of its jobs has not ended yet

    @property
    def finished(self) -> bool:
        """Whether every node of the partition was rebuilt."""
        return len(self.done) == self.total

    @property
    def cancelled(self) -> bool:
        """Whether its jobs all ended before every node was rebuilt, none having failed."""
        return not self.open and not self.finished and not self.failed

    def message(self) -> str:
        """Return the status line, e.g. `rebuild compute: 3/8 done, 1 rebooting`."""
        counts = f"{len(self.done)}/{self.total} done"
        if self.failed:
            node, reason = sorted(self.failed.items())[0]
            return (
                f"rebuild {self.partition} stopped: {node} failed"
                f" ({reason or 'no reason given'}); {counts}"
            )
        if self.cancelled:
            return f"rebuild {self.partition} cancelled: {counts}"
        return f"rebuild {self.partition}: {counts}, {len(self.rebooting)} rebooting"


def progress(jobs: Sequence[RebuildJob], nodes: Sequence[BootNode]) -> list[Progress]:
    """Each partition's rollout, by partition name.

    A rollout exists while Slurm knows one of its jobs. A node of the partition is done once
    it booted after the rollout started and is up; rebooting while Slurm reboots it (or its
    rebuild job waits for the boot); failed when it is down or failing
    before it is done (a reboot taking longer than ResumeTimeout ends DOWN).
    """
    found: list[Progress] = []
    by_partition: dict[str, list[RebuildJob]] = {}
    for job in jobs:
        if (match := job.rollout) is not None:
            by_partition.setdefault(match["partition"], []).append(job)
    for partition, all_jobs in sorted(by_partition.items()):
        # The latest rollout only: Slurm may still remember an earlier one's ended jobs.
        since = max(int(m["since"]) for j in all_jobs if (m := j.rollout) is not None)
        its_jobs = [
            j for j in all_jobs if (m := j.rollout) is not None and int(m["since"]) == since
        ]
        matches = [m for j in its_jobs if (m := j.rollout) is not None]
        members = [n for n in nodes if partition in n.partitions]
        configuring = {
            m["node"]
            for j, m in zip(its_jobs, matches, strict=True)
            if j.job_state == "CONFIGURING"
        }
        done, rebooting, failed = [], [], {}
        for node in members:
            rebooting_now = node.name in configuring or any(map(node.has_state, REBOOTING_STATES))
            down = any(map(node.has_state, FAILED_STATES))
            if down and (node.reason_changed_at or since) >= since:  # not down before it began
                failed[node.name] = node.reason
            elif rebooting_now:
                rebooting.append(node.name)
            elif (node.boot_time or 0) >= since:
                done.append(node.name)
        found.append(
            Progress(
                partition=partition,
                total=len(members),
                done=sorted(done),
                rebooting=sorted(rebooting),
                failed=failed,
                waiting_jobs=sorted(j.job_id for j in its_jobs if j.job_state == "PENDING"),
                upgrade=any(m["mode"] == "upgrade" for m in matches),
                open=any(j.waiting for j in its_jobs),
            )
        )
    return found


def in_progress(rollouts: Iterable[Progress], partition: str) -> bool:
    """Whether a rollout of the partition still has jobs and nodes to go and has not failed.

    A cancelled one (its jobs ended, Slurm remembers them for MinJobAge) is not.
    """
    return any(
        r.partition == partition and r.open and not r.finished and not r.failed for r in rollouts
    )


def stop_failed(rollouts: Iterable[Progress]) -> list[int]:
    """Hold the pending jobs of every failed rollout, so no further node reboots; their ids.

    Held, not cancelled: the operator can `scontrol release` them after repairing the node,
    or `rebuild-cancel`.
    """
    held: list[int] = []
    for rollout in rollouts:
        if rollout.failed and rollout.waiting_jobs:
            ids = ",".join(map(str, rollout.waiting_jobs))
            host.run(["scontrol", "hold", ids], timeout=TIMEOUT)
            logger.warning(
                "rebuild %s stopped: %s failed; held jobs %s",
                rollout.partition,
                ", ".join(sorted(rollout.failed)),
                ids,
            )
            held.extend(rollout.waiting_jobs)
    return held


def cancel(
    jobs: Sequence[RebuildJob], nodes: Sequence[BootNode], partition: str | None
) -> tuple[list[int], list[str]]:
    """Cancel the rollout's jobs not started yet and the reboots not issued yet.

    Returns the cancelled job ids and the nodes whose reboot was cancelled. A node already
    rebooting (its reboot issued) finishes its reboot; its job then runs `true` and ends.
    """
    mine = [
        j
        for j in jobs
        if (m := j.rollout) is not None and (partition is None or m["partition"] == partition)
    ]
    pending = sorted(j.job_id for j in mine if j.job_state == "PENDING")
    targets = {m["node"] for j in mine if (m := j.rollout) is not None and j.waiting}
    requested = sorted(
        n.name for n in nodes if n.name in targets and n.has_state("REBOOT_REQUESTED")
    )
    if pending:
        host.run(["scancel", *map(str, pending)], timeout=TIMEOUT)
    if requested:
        host.run(["scontrol", "cancel_reboot", ",".join(requested)], timeout=TIMEOUT)
    return pending, requested


class Rebuild(ops.Object):
    """The rebuild actions, the rollouts' statuses, and stopping a failed rollout (leader)."""

    def __init__(self, charm: ops.CharmBase, partitions: Callable[[], list[str]]) -> None:
        super().__init__(charm, "rebuild")
        self._charm = charm
        self._partitions = partitions
        self._read: tuple[list[RebuildJob], list[BootNode]] | None = None
        charm.framework.observe(charm.on.rebuild_nodes_action, self._on_rebuild_nodes)
        charm.framework.observe(charm.on.rebuild_status_action, self._on_rebuild_status)
        charm.framework.observe(charm.on.rebuild_cancel_action, self._on_rebuild_cancel)

    def _partition_param(self, event: ops.ActionEvent, required: bool) -> str | None:
        """Return `partition` if it names one of the cluster's partitions; else fail."""
        value = event.params.get("partition")
        if value is None and not required:
            return None
        known = self._partitions()
        if value not in known:
            event.fail(
                f"partition: {value!r} is not a partition of this cluster"
                f" (one of: {', '.join(known) or 'none'})"
            )
            raise _RefusedError
        return str(value)

    def _on_rebuild_nodes(self, event: ops.ActionEvent) -> None:
        try:
            partition = self._partition_param(event, required=True)
        except _RefusedError:
            return
        assert partition is not None
        upgrade = bool(event.params.get("upgrade", False))
        max_unavailable = int(event.params.get("max-unavailable", 1))
        try:
            jobs, nodes = read_jobs(), read_nodes()
            if in_progress(progress(jobs, nodes), partition):
                event.fail(f"a rebuild of {partition} is in progress: rebuild-cancel it first")
                return
            members = [n.name for n in nodes if partition in n.partitions]
            if not members:
                event.fail(f"partition {partition} has no nodes")
                return
            since = int(time.time())
            job_ids = submit(submissions(partition, members, max_unavailable, upgrade, since))
        except SlurmOpsError as e:
            event.fail(f"cannot start the rebuild of {partition}: {e.stderr or e.message}")
            return
        logger.info("rebuild %s: jobs %s", partition, job_ids)
        event.set_results(
            {
                "partition": partition,
                "nodes": ",".join(sorted(members)),
                "jobs": ",".join(map(str, job_ids)),
                "upgrade": upgrade,
                "max-unavailable": max_unavailable,
            }
        )

    def _on_rebuild_status(self, event: ops.ActionEvent) -> None:
        try:
            rollouts = progress(*read_slurm())
        except SlurmOpsError as e:
            event.fail(f"cannot read the rebuild jobs: {e.stderr or e.message}")
            return
        event.set_results(
            {
                r.partition: {
                    "status": r.message(),
                    "done": ",".join(r.done),
                    "rebooting": ",".join(r.rebooting),
                    "failed": ", ".join(f"{n}: {why}" for n, why in sorted(r.failed.items())),
                    "upgrade": r.upgrade,
                }
                for r in rollouts
            }
            or {"status": "no rebuild known to Slurm"}
        )

    def _on_rebuild_cancel(self, event: ops.ActionEvent) -> None:
        try:
            partition = self._partition_param(event, required=False)
        except _RefusedError:
            return
        try:
            job_ids, nodes = cancel(*read_slurm(), partition)
        except SlurmOpsError as e:
            event.fail(f"cannot cancel the rebuild: {e.stderr or e.message}")
            return
        event.set_results(
            {
                "cancelled-jobs": ",".join(map(str, job_ids)) or "none",
                "cancelled-reboots": ",".join(nodes) or "none",
            }
        )

    def _slurm(self) -> tuple[list[RebuildJob], list[BootNode]]:
        """Read the rollouts once per dispatch (reconcile and status see the same facts)."""
        if self._read is None:
            self._read = read_slurm()
        return self._read

    def stop_failed(self) -> None:
        """Hold the pending jobs of any rollout with a failed node (leader, each reconcile)."""
        try:
            stop_failed(progress(*self._slurm()))
        except SlurmOpsError as e:
            logger.warning("cannot check the rebuilds: %s", e.stderr or e.message)

    def statuses(self) -> Iterable[ops.StatusBase]:
        """One status per rollout Slurm knows: blocked when it stopped on a failed node."""
        try:
            rollouts = progress(*self._slurm())
        except SlurmOpsError as e:
            logger.warning("cannot read the rebuilds: %s", e.stderr or e.message)
            return
        for rollout in rollouts:
            if rollout.failed:
                yield ops.BlockedStatus(rollout.message())
            elif not rollout.finished and not rollout.cancelled:
                yield ops.MaintenanceStatus(rollout.message())
            else:
                yield ops.ActiveStatus(rollout.message())


class _RefusedError(Exception):
    """An action's input was refused (the action already failed, naming the key)."""
