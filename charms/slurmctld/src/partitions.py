"""The partitions the controller serves: one per slurmd application, and the default one.

Each slurmd application publishes its partition's keys (`ComputeData`, a `PartitionSpec`); its
names always follow the naming rule (`PartitionSpec.named`), whatever the data says. The
leader remembers every partition it serves in the peer application databag, so a new leader
keeps serving them:

* *live*: the partitions of the applications integrated now, with usable data;
* *kept*: an application still integrated whose data became invalid keeps its last valid
  partition; one whose application left while jobs ran stays, drained (*retiring*), until
  idle (`retire`);
* *unusable*: applications whose data the controller cannot serve (a status says so).

The default partition (`Default=YES`) is chosen here too (`default_partition`).
"""

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Mapping

import ops
import retire
from facts import Facts
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.interfaces.slurmd import ComputeData, SlurmdRequirer
from hpc_libs.slurm.base import REBUILD_PARTITION
from hpc_libs.slurm.partition import PartitionSpec
from hpc_libs.slurm.scontrol import Scontrol

logger = logging.getLogger(__name__)

DEFAULT_PARTITION_OPTION = "default-partition"
RESERVED_NAMES = frozenset({"default", "all", REBUILD_PARTITION})
"""Slurm gives these partition/node-set names a meaning of their own (`PartitionName=DEFAULT`
sets defaults for every partition, `Nodes=ALL` selects every node), and the charm's hidden
rebuild partition has its own name, so a slurmd application with such a name cannot become
a partition."""


def partition_record(
    app: str, spec: PartitionSpec | None, relation_id: int | None = None
) -> PartitionEntry:
    """Build the record for a slurmd application from the keys it published.

    The keys were validated when read from the databag; the names always come from the
    application's name (`PartitionSpec.named`), so one application can never overwrite
    another application's partition. Raises ValueError when the data is unusable.
    """
    if app.lower() in RESERVED_NAMES:
        raise ValueError(f"application name '{app}' is reserved by Slurm")
    if spec is None:
        raise ValueError("partition missing")
    return PartitionEntry.serving(app, spec, relation_id)


def merge_partitions(
    known: dict[str, PartitionEntry],
    live: dict[str, PartitionEntry],
    integrated: Iterable[str],
    scontrol: Scontrol,
    watch: retire.Watch,
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
        if (retiring := retire.retire_partition(scontrol, entry, watch)) is not None:
            served[name] = retiring
    served.update(live)
    return dict(sorted(served.items()))


def _forced(name: str, remembered: PartitionEntry) -> PartitionEntry | None:
    """Return the remembered partition, checked as a live one is (`partition_record`).

    The peer databag is data like any other: its keys were validated as it was read, and its
    names come from the application's name as a live partition's do, so a remembered entry
    can never name another partition or every node. None (logged) if it cannot be served.
    """
    try:
        forced = partition_record(name, remembered.partition, remembered.relation_id)
    except ValueError as e:
        logger.warning("dropping the remembered partition %s: %s", name, e)
        return None
    return forced.model_copy(
        update={"retiring": remembered.retiring, "drained": remembered.drained}
    )


def default_partition(partitions: dict[str, PartitionEntry], wanted: str = "") -> str | None:
    """Pick the partition the charm marks `Default=YES`, or None to leave `Default` alone.

    Jobs submitted without `-p` need a default partition. The `default-partition` option
    (`wanted`) outranks everything while it names a serving partition (`explicit_default`).
    Otherwise: when a serving (not retiring) partition asks for `Default=YES` itself, it is
    the default and the charm adds none. Otherwise the oldest slurmd application's partition
    (lowest relation id, so the choice is stable while applications come and go) is the
    default, unless it set `Default=NO`.
    """
    if (explicit := explicit_default(wanted, partitions)) is not None:
        return explicit
    serving = {name: r for name, r in partitions.items() if not r.retiring}
    if any(r.spec.fields.get("default") is True for r in serving.values()):
        return None
    candidates = [
        (r.relation_id, name) for name, r in serving.items() if r.relation_id is not None
    ]
    if not candidates:
        return None
    oldest = min(candidates)[1]
    return None if "default" in serving[oldest].spec.fields else oldest


def explicit_default(wanted: str, partitions: Mapping[str, PartitionEntry]) -> str | None:
    """Return the partition `default-partition` names when it can be the default, else None.

    It can while the named slurmd application's partition is served (not retiring). It then
    outranks every application's own `Default=YES` (partition-config) and the oldest
    application's implicit default: the controller's operator decides for the cluster.
    Otherwise the implicit choice applies (`default_partition`) and a status says why.
    """
    record = partitions.get(wanted) if wanted else None
    return wanted if record is not None and not record.retiring else None


def default_partition_status(
    wanted: str, partitions: Iterable[PartitionEntry], integrated: Iterable[str]
) -> ops.StatusBase | None:
    """Say why `default-partition` cannot be the default now; None when it is (or unset).

    `partitions` are the controller's partitions, `integrated` the names of the slurmd
    applications integrated now.
    """
    if not wanted:
        return None
    record = next((p for p in partitions if p.name == wanted), None)
    fallback = "the implicit default applies meanwhile"
    if wanted not in set(integrated):
        return ops.BlockedStatus(
            f"{DEFAULT_PARTITION_OPTION} '{wanted}' is no integrated slurmd application; "
            f"{fallback}"
        )
    if record is None:
        return ops.WaitingStatus(
            f"{DEFAULT_PARTITION_OPTION}: waiting for application '{wanted}' to publish its "
            f"partition; {fallback}"
        )
    if record.retiring:
        return ops.BlockedStatus(
            f"{DEFAULT_PARTITION_OPTION} '{wanted}' is being removed; {fallback}"
        )
    return None


@dataclasses.dataclass(frozen=True)
class Partitions:
    """The slurmd applications' partitions, as the controller reads and serves them."""

    slurmd: SlurmdRequirer
    scontrol: Scontrol
    watch: retire.Watch

    def integrated(self) -> list[str]:
        """Name the slurmd applications integrated now."""
        return [r.app.name for r in self.slurmd.relations if r.app is not None]

    def _published(self) -> Iterator[tuple[int, str, ComputeData]]:
        """Yield each integrated slurmd application's relation id, name and complete data."""
        for relation in self.slurmd.relations:
            data = self.slurmd.compute_data(relation)
            if relation.app is not None and data is not None and data.is_complete:
                yield relation.id, relation.app.name, data

    def live(self) -> dict[str, PartitionEntry]:
        """Partitions of the slurmd applications integrated now, with usable data."""
        live: dict[str, PartitionEntry] = {}
        for relation_id, app, data in self._published():
            try:
                live[app] = partition_record(app, data.partition, relation_id)
            except ValueError as e:
                logger.warning("ignoring partition of %s: %s", app, e)
        return live

    def unusable(self) -> list[str]:
        """List the slurmd applications whose partition data the controller cannot serve."""
        unusable: list[str] = []
        for _, app, data in self._published():
            try:
                partition_record(app, data.partition)
            except ValueError:
                unusable.append(app)
        return unusable

    def reconcile(self, facts: Facts) -> dict[str, PartitionEntry]:
        """Return the partitions to serve now, from the live ones and those remembered.

        The applications in `future-nodes` are served before their first unit (`awaited`).
        """
        known = facts.served
        live = self.awaited(facts.config.future_nodes, known) | self.live()
        return merge_partitions(known, live, self.integrated(), self.scontrol, self.watch)

    def awaited(
        self, future: Mapping[str, object], known: Mapping[str, PartitionEntry]
    ) -> dict[str, PartitionEntry]:
        """Partitions for applications in `future-nodes` never served before (no data yet).

        A slurmd application deployed with 0 units has no leader, so no partition data: its
        partition is served with Slurm's defaults (`PartitionName=<app> Nodes=<app>`) so that
        jobs can pend in it before its first unit, whose data then replaces it.
        """
        relations = {r.app.name: r.id for r in self.slurmd.relations if r.app is not None}
        return {
            app: partition_record(app, PartitionSpec(), relations[app])
            for app in future
            if app in relations and app not in known
        }

    def problems(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Block on data from slurmd applications the controller cannot use."""
        for relation in self.slurmd.relations:
            if problem := self.slurmd.compute_data_problem(relation):
                yield ops.BlockedStatus(problem)
        for app in self.unusable():
            yield ops.BlockedStatus(f"cannot serve partition of application '{app}'")

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say why `default-partition` is not the default partition (leader, when it is set)."""
        wanted, served = facts.config.default_partition, facts.served.values()
        if facts.leader and (
            status := default_partition_status(wanted, served, self.integrated())
        ):
            yield status
