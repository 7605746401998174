"""What the controller retires: partitions of slurmd applications that left, departed nodes.

Nothing here waits in a hook. A partition whose application left while jobs ran stays,
drained, and a node of a departed unit stays until no job runs on it; for each, `watch` is
given the `squeue` query that prints nothing once it is idle, so the charm can be woken
within seconds of that (`hpc_libs.charm.wake`). Any later event retries as well.
"""

import logging
from collections.abc import Callable, Iterable

import cluster
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.slurm.scontrol import Scontrol

logger = logging.getLogger(__name__)

Watch = Callable[[str, str, list[str]], None]
"""`watch(kind, name, query)`: wake the charm once `query` prints nothing."""


def merge_partitions(
    known: dict[str, PartitionEntry],
    live: dict[str, PartitionEntry],
    integrated: Iterable[str],
    scontrol: Scontrol,
    watch: Watch,
) -> dict[str, PartitionEntry]:
    """Return the partitions to serve: the live ones, plus those kept from `known`.

    `live` holds the partitions of integrated applications with valid data now; an
    application still `integrated` whose data became invalid keeps its last valid partition.
    A partition whose application left is removed when idle, else drained and kept (retiring).
    """
    present = set(integrated)
    served: dict[str, PartitionEntry] = {}
    for name, remembered in known.items():
        if name in live or (entry := _forced(name, remembered)) is None:
            continue
        if name in present and not entry.retiring:
            served[name] = entry  # Its application sent bad data: the last valid value stays.
            continue
        if not cluster.partition_has_jobs(name):
            logger.info("partition %s has no jobs left; removing it", name)
            continue
        drained = bool(entry.drained) or _drain_partition(scontrol, name)
        served[name] = entry.model_copy(update={"retiring": True, "drained": drained})
        watch("partition", name, cluster.partition_jobs_query(name))
    served.update(live)
    return dict(sorted(served.items()))


def _forced(name: str, remembered: PartitionEntry) -> PartitionEntry | None:
    """Return the remembered partition, its names forced from its application's name again.

    The peer databag is data like any other: `PartitionName`, `Nodes` and the node set are
    forced as for a live partition (`cluster.partition_record`), so a remembered entry can
    never name another partition or every node. None (logged) if it cannot be served.
    """
    try:
        forced = cluster.partition_record(
            name, remembered.partition, remembered.nodeset, remembered.relation_id
        )
    except ValueError as e:
        logger.warning("dropping the remembered partition %s: %s", name, e)
        return None
    return forced.model_copy(
        update={"retiring": remembered.retiring, "drained": remembered.drained}
    )


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


def delete_departed_nodes(names: Iterable[str], scontrol: Scontrol, watch: Watch) -> list[str]:
    """Delete the nodes no job runs on any more; return those left for later."""
    remaining: list[str] = []
    for name in names:
        try:
            if scontrol.show_node(name) is None:
                continue  # Gone already: the unit retired it.
            if cluster.node_has_jobs(name):
                remaining.append(name)
                watch("node", name, cluster.node_jobs_query(name))
                continue
            scontrol.delete_node(name)
            logger.info("deleted node %s of a departed unit", name)
        except SlurmOpsError as e:
            logger.warning("cannot delete node %s yet: %s", name, e.stderr or e.message)
            remaining.append(name)
    return remaining
