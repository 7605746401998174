"""Slurm-controlled rolling rebuild: reboot (and patch) compute nodes without killing a job.

A hidden, root-only partition `rebuild` covers every slurmd application's node set. A
rollout submits one job per node there with `--reboot`: its priority (`PriorityJobFactor`,
the maximum) makes it the next job on the node, after the running ones; before it starts,
slurmd runs `RebootProgram` on the node (the slurmd charm's program, which applies the
pending upgrade when the job's comment asks for it, then reboots). At most
`max-unavailable` nodes of a partition reboot at once: the jobs are spread over that many
job names, and `--dependency=singleton` lets one job per name run at a time.

`EnforcePartLimits=ALL` makes Slurm refuse a user's job that names the partition at all,
alone or in a list (`-p compute,rebuild`): with Slurm's default a root-only partition in a
list is skipped, and the job is queued there.

The leader records each rollout in the peer application databag (`Rollout`: the partition,
its start, whether it upgrades, and the ids of the jobs it submitted as root), so a new
leader reads the same rollout. Progress joins that record with two facts no user can write:
the state of those job ids (root's jobs of the partition, `squeue --user=root`, id and state
only) and the nodes' boot times. A node is done once it booted after the start. The charm
holds and cancels recorded ids only: job comments, names and accounts are users' text and a
newline in them forges lines, so nothing read from them picks a job. A node that went DOWN
(or failed) during the rollout stops it: its pending jobs are held, the status names the
node with Slurm's reason. Once Slurm forgets every job of a rollout (`MinJobAge`), the
leader forgets the rollout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import ops
from facts import Facts
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import (
    PartitionEntry,
    Rollout,
    RolloutJob,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from hpc_libs.machine import host
from hpc_libs.slurm import queue
from hpc_libs.slurm.base import REBOOT_PROGRAM, REBUILD_PARTITION
from hpc_libs.slurm.partition import PartitionSpec, node_set
from hpc_libs.slurm.scontrol import Node, Timestamp, parse_answer
from pydantic import BaseModel, ConfigDict, ValidationError
from slurmutils import Partition

logger = logging.getLogger(__name__)

PARTITION = REBUILD_PARTITION
MAX_TIME_MINUTES = 10
"""The rebuild partition's `MaxTime`: the job itself runs `true` once the node is back."""
HEALTH_REASON_PREFIX = "health: "
HEALTH_SETTER = "root"
"""The slurmd charm's health check drains as root, with reasons of this prefix."""
JOB_TIME = "5"  # --time of a rebuild job (minutes); within MaxTime
TIMEOUT = 60
REBOOTING_STATES = ("REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERING_UP")
FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG")
"""A node in these failed; NOT_RESPONDING alone is every node's state while it reboots."""
WAITING_STATES = frozenset({"PENDING", "CONFIGURING", "RUNNING"})


def hidden_partition(partitions: Mapping[str, PartitionEntry]) -> Partition | None:
    """Return the rebuild partition over every serving partition's node set; None without any.

    Dynamic nodes join a partition through its node set (`Feature=<app>`, named after the
    application: `hpc_libs.slurm.partition`), so the rebuild partition lists the node sets,
    not nodes. A retiring partition's nodes are left alone.
    """
    nodesets = sorted(
        node_set(name)["nodeset"] for name, record in partitions.items() if not record.retiring
    )
    if not nodesets:
        return None
    keys = {
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
    return PartitionSpec.of(keys).over(PARTITION, nodesets)


PRIORITY_WEIGHT_PARTITION = 100000
"""Makes the partition factor count (multifactor weights default to 0): the rebuild
partition's jobs (`PriorityJobFactor` 65533, the maximum) get the whole weight; user
partitions (factor 1 by default) all get the same sliver, so their order is unchanged."""


ENFORCE_PART_LIMITS = "all"
"""A job naming a partition it may not use is refused, even in a list of partitions."""


def conf_settings(reboot_timeout: int) -> dict[str, Any]:
    """slurm.conf's keys for rebuilds: the reboot program, the time allowed, the priority.

    A node not back within `ResumeTimeout` (upgrade plus reboot) goes DOWN. All four are the
    charm's: `slurm-conf-parameters` refuses them (`overrides.SLURM_CONF_OWNED`).
    """
    return {
        "rebootprogram": REBOOT_PROGRAM,
        "resumetimeout": reboot_timeout,
        "priorityweightpartition": PRIORITY_WEIGHT_PARTITION,
        "enforcepartlimits": ENFORCE_PART_LIMITS,
    }


def comment(partition: str, since: int, upgrade: bool, node: str) -> str:
    """Return the comment of one rebuild job, read by the node's RebootProgram.

    The program reads it only from root's jobs (`squeue --user=root`), so no user writes it.
    """
    return f"rebuild:{partition}:{since}:{'upgrade' if upgrade else 'reboot'}:{node}"


def job_name(partition: str, group: int) -> str:
    """Return the job name of a group: jobs sharing it run one at a time (`singleton`)."""
    return f"rebuild-{partition}-{group}"


def submissions(
    partition: str, nodes: Sequence[str], max_unavailable: int, upgrade: bool, since: int
) -> list[list[str]]:
    """One `sbatch`'s options per node; node i goes to group i mod max-unavailable.

    Each group is a job name with `--dependency=singleton`, so at most `max_unavailable`
    rebuild jobs of the partition (each one node being rebooted) run at once.
    """
    groups = max(1, max_unavailable)
    return [
        [
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


def submit(submitted: Iterable[list[str]]) -> list[int]:
    """Submit the jobs (`submissions`, sbatch's options each) as root; return their ids.

    On the first failure the jobs already submitted are cancelled (a job the charm cannot
    record would reboot its node unseen), then SlurmOpsError is raised.
    """
    job_ids: list[int] = []
    try:
        for options in submitted:
            job_ids.append(queue.sbatch(options, timeout=TIMEOUT))
    except SlurmOpsError:
        if job_ids:
            with contextlib.suppress(SlurmOpsError):
                queue.scancel(job_ids, timeout=TIMEOUT)
        raise
    return job_ids


class BootNode(Node):
    """A node with its boot time (`scontrol show nodes --json`)."""

    boot_time: Timestamp = None


class _Nodes(BaseModel):
    model_config = ConfigDict(defer_build=True)
    nodes: list[BootNode] = []


def read_jobs() -> dict[int, str]:
    """Return the state of each of root's rebuild jobs Slurm knows, by job id.

    Ended ones included (for MinJobAge): id and state, two fields no user can write, so no
    line of the answer can be forged (`queue.root_jobs`).
    """
    return queue.root_jobs(PARTITION, timeout=TIMEOUT)


def read_nodes() -> list[BootNode]:
    """Return every node with its state, reason, partitions and boot time."""
    command = ["scontrol", "show", "nodes", "--json"]
    result = host.run(command, timeout=TIMEOUT)
    try:
        return parse_answer(result.stdout, _Nodes).nodes
    except (ValueError, ValidationError) as e:
        raise SlurmOpsError(f"cannot parse {' '.join(command)}: {e}") from e


def read_slurm(rollouts: Sequence[Rollout]) -> tuple[dict[int, str], list[BootNode]]:
    """Return the rebuild jobs' states and every node; nothing is read without a rollout."""
    if not rollouts:
        return {}, []
    states = read_jobs()
    known = any(job_id in states for rollout in rollouts for job_id, _ in rollout.submitted())
    return states, (read_nodes() if known else [])


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


def failed_the_gate(node: BootNode, since: int) -> bool:
    """Whether the node came back from this rollout's reboot and its health check drained it.

    The slurmd charm's health check runs when slurmd starts, before the node registers, and
    drains a failing node with `health: <check>: ...` as root (its own proof, checked the same
    way here). Such a node is no node done: the rollout stops with the check's reason.
    """
    return (
        (node.boot_time or 0) >= since
        and node.has_state("drain")
        and node.reason.startswith(HEALTH_REASON_PREFIX)
        and node.reason_set_by_user == HEALTH_SETTER
    )


def progress(
    rollouts: Sequence[Rollout], states: Mapping[int, str], nodes: Sequence[BootNode]
) -> list[Progress]:
    """Each recorded rollout Slurm still knows a job of, by partition name.

    A node of the partition is done once it booted after the rollout started and is up;
    rebooting while Slurm reboots it (or its rebuild job waits for the boot); failed when it
    is down or failing before it is done (a reboot taking longer than ResumeTimeout ends
    DOWN). Job states come from `states` for the recorded ids only.
    """
    found: list[Progress] = []
    for rollout in sorted(rollouts, key=lambda r: r.partition or ""):
        jobs = rollout.submitted()
        if rollout.partition is None or not any(job_id in states for job_id, _ in jobs):
            continue
        partition, since = rollout.partition, rollout.since or 0
        members = [n for n in nodes if partition in n.partitions]
        configuring = {node for job_id, node in jobs if states.get(job_id) == "CONFIGURING"}
        done, rebooting, failed = [], [], {}
        for node in members:
            rebooting_now = node.name in configuring or any(map(node.has_state, REBOOTING_STATES))
            down = any(map(node.has_state, FAILED_STATES)) or failed_the_gate(node, since)
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
                waiting_jobs=sorted(j for j, _ in jobs if states.get(j) == "PENDING"),
                upgrade=bool(rollout.upgrade),
                open=any(states.get(job_id) in WAITING_STATES for job_id, _ in jobs),
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
            queue.hold(rollout.waiting_jobs, timeout=TIMEOUT)
            logger.warning(
                "rebuild %s stopped: %s failed; held jobs %s",
                rollout.partition,
                ", ".join(sorted(rollout.failed)),
                ",".join(map(str, rollout.waiting_jobs)),
            )
            held.extend(rollout.waiting_jobs)
    return held


def cancel(
    rollouts: Sequence[Rollout],
    states: Mapping[int, str],
    nodes: Sequence[BootNode],
    partition: str | None,
) -> tuple[list[int], list[str]]:
    """Cancel the recorded jobs not started yet and the reboots not issued yet.

    Returns the cancelled job ids and the nodes whose reboot was cancelled. A node already
    rebooting (its reboot issued) finishes its reboot; its job then runs `true` and ends.
    """
    jobs = [
        job
        for rollout in rollouts
        if partition is None or rollout.partition == partition
        for job in rollout.submitted()
    ]
    pending = sorted(job_id for job_id, _ in jobs if states.get(job_id) == "PENDING")
    targets = {node for job_id, node in jobs if states.get(job_id) in WAITING_STATES}
    requested = sorted(
        n.name for n in nodes if n.name in targets and n.has_state("REBOOT_REQUESTED")
    )
    if pending:
        queue.scancel(pending, timeout=TIMEOUT)
    if requested:
        queue.cancel_reboot(requested, timeout=TIMEOUT)
    return pending, requested


def forget_ended(rollouts: Sequence[Rollout], states: Mapping[int, str]) -> list[Rollout]:
    """Return the rollouts Slurm still knows a job of (it forgets ended jobs after MinJobAge)."""
    return [r for r in rollouts if any(job_id in states for job_id, _ in r.submitted())]


class Rebuild(ops.Object):
    """The rebuild actions, the rollouts' statuses, and stopping a failed rollout (leader)."""

    def __init__(
        self, charm: ops.CharmBase, peer: SlurmctldPeer, partitions: Callable[[], list[str]]
    ) -> None:
        super().__init__(charm, "rebuild")
        self._charm = charm
        self._peer = peer
        self._partitions = partitions
        self._read: tuple[dict[int, str], list[BootNode]] | None = None
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

    def _rollouts(self) -> list[Rollout]:
        """Return the rollouts the leader recorded."""
        return list(self._peer.read().rollouts or [])

    def _on_rebuild_nodes(self, event: ops.ActionEvent) -> None:
        if not self._charm.unit.is_leader() or self._peer.relation is None:
            event.fail(
                "rebuild-nodes runs on the leader, which records the rollout: "
                "juju run slurmctld/leader rebuild-nodes"
            )
            return
        try:
            partition = self._partition_param(event, required=True)
        except _RefusedError:
            return
        assert partition is not None
        upgrade = bool(event.params.get("upgrade", False))
        max_unavailable = int(event.params.get("max-unavailable", 1))
        memory = self._peer.read()
        rollouts = list(memory.rollouts or [])
        try:
            states = read_jobs() if rollouts else {}
            nodes = read_nodes()
            if in_progress(progress(rollouts, states, nodes), partition):
                event.fail(f"a rebuild of {partition} is in progress: rebuild-cancel it first")
                return
            members = sorted(n.name for n in nodes if partition in n.partitions)
            if not members:
                event.fail(f"partition {partition} has no nodes")
                return
            since = int(time.time())
            job_ids = submit(submissions(partition, members, max_unavailable, upgrade, since))
        except SlurmOpsError as e:
            event.fail(f"cannot start the rebuild of {partition}: {e.stderr or e.message}")
            return
        rollout = Rollout(
            partition=partition,
            since=since,
            upgrade=upgrade,
            jobs=[RolloutJob(id=i, node=n) for i, n in zip(job_ids, members, strict=True)],
        )
        others = [r for r in rollouts if r.partition != partition]
        self._peer.write(memory.model_copy(update={"rollouts": [*others, rollout]}))
        logger.info("rebuild %s: jobs %s", partition, job_ids)
        event.set_results(
            {
                "partition": partition,
                "nodes": ",".join(members),
                "jobs": ",".join(map(str, job_ids)),
                "upgrade": upgrade,
                "max-unavailable": max_unavailable,
            }
        )

    def _on_rebuild_status(self, event: ops.ActionEvent) -> None:
        rollouts = self._rollouts()
        try:
            found = progress(rollouts, *read_slurm(rollouts))
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
                for r in found
            }
            or {"status": "no rebuild known to Slurm"}
        )

    def _on_rebuild_cancel(self, event: ops.ActionEvent) -> None:
        try:
            partition = self._partition_param(event, required=False)
        except _RefusedError:
            return
        rollouts = self._rollouts()
        try:
            job_ids, nodes = cancel(rollouts, *read_slurm(rollouts), partition)
        except SlurmOpsError as e:
            event.fail(f"cannot cancel the rebuild: {e.stderr or e.message}")
            return
        event.set_results(
            {
                "cancelled-jobs": ",".join(map(str, job_ids)) or "none",
                "cancelled-reboots": ",".join(nodes) or "none",
            }
        )

    def _slurm(self, rollouts: Sequence[Rollout]) -> tuple[dict[int, str], list[BootNode]]:
        """Read the rollouts once per dispatch (reconcile and status see the same facts)."""
        if self._read is None:
            self._read = read_slurm(rollouts)
        return self._read

    def reconcile(self, facts: Facts) -> SlurmctldPeerData | None:
        """Hold the pending jobs of any rollout with a failed node; forget ended rollouts.

        Leader only, each reconcile: returns the peer memory to remember when a rollout
        ended. A failure to read Slurm is logged; the next event retries.
        """
        memory = facts.memory
        rollouts = list(memory.rollouts or [])
        if not rollouts:
            return None
        try:
            states, nodes = self._slurm(rollouts)
            stop_failed(progress(rollouts, states, nodes))
        except SlurmOpsError as e:
            logger.warning("cannot check the rebuilds: %s", e.stderr or e.message)
            return None
        if len(kept := forget_ended(rollouts, states)) != len(rollouts):
            return memory.model_copy(update={"rollouts": kept})
        return None

    def statuses(self, facts: Facts) -> Iterable[ops.StatusBase]:
        """One status per rollout Slurm knows (leader): blocked once stopped on a failed node."""
        if not facts.leader:
            return
        rollouts = list(facts.memory.rollouts or [])
        try:
            found = progress(rollouts, *self._slurm(rollouts))
        except SlurmOpsError as e:
            logger.warning("cannot read the rebuilds: %s", e.stderr or e.message)
            return
        for rollout in found:
            if rollout.failed:
                yield ops.BlockedStatus(rollout.message())
            elif not rollout.finished and not rollout.cancelled:
                yield ops.MaintenanceStatus(rollout.message())
            else:
                yield ops.ActiveStatus(rollout.message())


class _RefusedError(Exception):
    """An action's input was refused (the action already failed, naming the key)."""
