"""What the controller retires: partitions of slurmd applications that left, departed nodes.

Nothing here waits in a hook. A partition whose application left while jobs ran stays,
drained, and a node of a departed unit stays until no job runs on it; for each, `watch` is
given the `squeue` query that prints nothing once it is idle, so the charm can be woken
within seconds of that (`hpc_libs.charm.wake`). Any later event retries as well.
"""

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import ops
from facts import Facts
from hpc_libs.charm import wake
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import (
    DepartedNode,
    PartitionEntry,
    SlurmctldPeer,
    SlurmctldPeerData,
)
from hpc_libs.slurm import queue
from hpc_libs.slurm.naming import BUSY_JOB_STATES, RETIRE_REASON, node_name
from hpc_libs.slurm.scontrol import Scontrol

logger = logging.getLogger(__name__)

SQUEUE_TIMEOUT = 60

Watch = Callable[[str, str, list[str]], None]
"""`watch(kind, name, query)`: wake the charm once `query` prints nothing."""


def watcher(unit: str, charm_dir: Path, event: str) -> Watch:
    """Return `watch`: start a watcher that dispatches `event` once `query` prints nothing.

    A watcher that cannot start is logged: the next event (update-status at the latest)
    checks again and tries to start it again.
    """

    def watch(kind: str, name: str, query: list[str]) -> None:
        try:
            service = wake.watcher_name(f"slurmctld-wake-{kind}", name)
            dispatch = wake.dispatch_command(unit, charm_dir, event)
            if wake.wake_when_silent(service, query, dispatch, f"Wake {unit}: {kind} {name} idle"):
                logger.info("watching %s %s: %s wakes the charm once idle", kind, name, service)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot watch %s %s (the next event checks again): %s", kind, name, e)

    return watch


class Retirement(ops.Object):
    """The leader's retirement of departed units' nodes, and its word on what it retires."""

    def __init__(
        self,
        charm: SlurmCharm[Any],
        endpoint: str,
        peer: SlurmctldPeer,
        scontrol: Scontrol,
        wake_event: str,
    ) -> None:
        """`endpoint` is slurmd's; `wake_event` the hook a watcher dispatches once idle."""
        super().__init__(charm, "retirement")
        self.charm, self.peer, self.scontrol = charm, peer, scontrol
        self.watch = watcher(charm.unit.name, charm.charm_dir, wake_event)
        charm.framework.observe(charm.on[endpoint].relation_departed, self._on_unit_departed)

    def _on_unit_departed(self, event: ops.RelationDepartedEvent) -> None:
        """Take a leaving compute unit's node out of the cluster, from the controller's side.

        The unit retires its node itself, but its machine may disappear before it can
        (Juju removes the machine with its last unit): the controller drains the node and
        deletes it once no job runs on it, so no node of a removed unit is left behind.
        """
        leaving = event.departing_unit
        if self.charm.unit.is_leader() and leaving is not None and leaving != self.charm.unit:
            name = node_name(leaving.name)
            drain_node(self.scontrol, name, RETIRE_REASON)
            self.peer.write(with_departed(self.peer.read(), name))
        self.charm.converge()

    def reconcile(self, facts: Facts) -> list[str]:
        """Delete the departed units' nodes that are idle; return those still to delete."""
        return delete_departed_nodes(departed_names(facts.memory), self.scontrol, self.watch)

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say which partitions the leader drains, and which nodes it deletes, once idle."""
        if not facts.leader:
            return
        if retiring := [name for name, p in facts.served.items() if p.retiring]:
            yield ops.ActiveStatus(f"draining partitions: {', '.join(retiring)}")
        if departed := departed_names(facts.memory):
            yield ops.ActiveStatus(f"deleting departed nodes once idle: {', '.join(departed)}")


def retire_partition(
    scontrol: Scontrol, entry: PartitionEntry, watch: Watch
) -> PartitionEntry | None:
    """Retire the partition of an application that left: None once idle, else kept drained."""
    name = str(entry.name)
    if not partition_has_jobs(name):
        logger.info("partition %s has no jobs left; removing it", name)
        return None
    drained = bool(entry.drained) or _drain_partition(scontrol, name)
    watch("partition", name, partition_jobs_query(name))
    return entry.model_copy(update={"retiring": True, "drained": drained})


def _drain_partition(scontrol: Scontrol, name: str) -> bool:
    try:
        scontrol.update_partition(name, state="drain")
    except SlurmOpsError as e:
        logger.warning("cannot drain partition %s: %s", name, e.stderr or e.message)
        return False
    logger.info("partition %s drained: its application left while jobs run", name)
    return True


def drain_node(scontrol: Scontrol, name: str, reason: str) -> None:
    """Drain a departed unit's node (best effort: the unit may have retired it already)."""
    try:
        scontrol.update_node(name, state="drain", reason=reason)
    except SlurmOpsError as e:
        logger.info("cannot drain departed node %s: %s", name, e.stderr or e.message)


def with_departed(memory: SlurmctldPeerData, name: str) -> SlurmctldPeerData:
    """Return the controller's memory with node `name` among the departed nodes to delete."""
    departed = set(departed_names(memory)) | {name}
    nodes = [DepartedNode(name=n) for n in sorted(departed)]
    return memory.model_copy(update={"departed_nodes": nodes})


def departed_names(memory: SlurmctldPeerData) -> list[str]:
    """Name the departed units' nodes the controller still has to delete, as remembered."""
    return [n.name for n in memory.departed_nodes or [] if n.name]


def delete_departed_nodes(names: Iterable[str], scontrol: Scontrol, watch: Watch) -> list[str]:
    """Delete the nodes no job runs on any more; return those left for later."""
    remaining: list[str] = []
    for name in names:
        try:
            if scontrol.show_node(name) is None:
                continue  # Gone already: the unit retired it.
            if node_has_jobs(name):
                remaining.append(name)
                watch("node", name, node_jobs_query(name))
                continue
            scontrol.delete_node(name)
            logger.info("deleted node %s of a departed unit", name)
        except SlurmOpsError as e:
            logger.warning("cannot delete node %s yet: %s", name, e.stderr or e.message)
            remaining.append(name)
    return remaining


def partition_has_jobs(name: str) -> bool:
    """Whether jobs are still running (or finishing) in a partition.

    Pending jobs do not count: nothing will run them once the partition's nodes leave. When
    Slurm cannot be asked, assume there are jobs: removing a busy partition is the worse error.
    """
    return _has_jobs(partition_jobs_query(name), f"partition {name}")


def node_has_jobs(name: str) -> bool:
    """Whether jobs are still running (or finishing) on a node; True when Slurm cannot say."""
    return _has_jobs(node_jobs_query(name), f"node {name}")


def partition_jobs_query(name: str) -> list[str]:
    """`squeue` listing a partition's busy jobs: it prints nothing once the partition is idle."""
    return _jobs_query(f"--partition={name}")


def node_jobs_query(name: str) -> list[str]:
    """`squeue` listing the busy jobs of a node: it prints nothing once the node is idle."""
    return _jobs_query(f"--nodelist={name}")


def _jobs_query(selection: str) -> list[str]:
    return queue.busy_jobs_query(selection, BUSY_JOB_STATES)


def _has_jobs(argv: list[str], what: str) -> bool:
    try:
        return queue.has_jobs(argv, timeout=SQUEUE_TIMEOUT)
    except SlurmOpsError as e:
        logger.warning("cannot list jobs of %s: %s", what, e.stderr or e)
        return True
