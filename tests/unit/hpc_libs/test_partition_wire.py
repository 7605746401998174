"""The partition on the wire, between releases: raw databags of the previous and this release.

`nodeset` leaves the wire in two steps (`hpc_libs.interfaces.slurmd`): this release's
slurmctld no longer needs it, while its slurmd still sends it, so either charm may be upgraded
first. The previous release's readers are kept here as they were (`OldComputeData`,
`OldPartitionEntry`, `old_served`): what this release writes must still read there as the
same partition.
"""

import json
from functools import partial
from typing import Annotated, Any

import pytest
from hpc_libs.interfaces.base import DatabagModel, NodeSetFields, checked, saved_text
from hpc_libs.interfaces.slurmctld_peer import PartitionEntry
from hpc_libs.interfaces.slurmd import ComputeData
from hpc_libs.slurm import grammar
from hpc_libs.slurm.partition import PartitionSpec
from slurmutils import NodeSet, Partition

# The previous release's contract, as its readers were.

OldPartitionFields = Annotated[dict[str, Any], checked(partial(grammar.check_model, Partition))]


class OldComputeData(DatabagModel):
    """The previous slurmctld's model of slurmd's databag: both fields required."""

    partition: OldPartitionFields | None = None
    nodeset: NodeSetFields | None = None

    @property
    def is_complete(self) -> bool:
        return self.partition is not None and self.nodeset is not None


class OldPartitionEntry(PartitionEntry):
    """The previous slurmctld's model of one partition in its peer memory (other fields same)."""

    partition: OldPartitionFields | None = None  # pyright: ignore[reportIncompatibleVariableOverride]


def old_served(app: str, partition: dict[str, Any] | None, nodeset: dict[str, Any] | None):
    """The previous slurmctld's `partition_record`: what it rendered for an application."""
    if partition is None or nodeset is None:
        raise ValueError("partition or nodeset missing")
    settings = {**Partition.from_dict(dict(partition)).dict(), "partitionname": app}
    settings["nodes"] = [app]
    return Partition.from_dict(settings), NodeSet.from_dict({"nodeset": app, "feature": app})


# The raw databags.

OLD_SLURMD = {
    "partition": '{"maxtime": 60, "default": true, "partitionname": "compute", '
    '"nodes": ["compute"]}',
    "nodeset": '{"nodeset": "compute", "feature": "compute"}',
}
"""What a slurmd of the previous release sends (its names appended after the keys)."""
NEW_SLURMD = {
    "partition": '{"maxtime": 60, "default": true}',
    "nodeset": '{"nodeset": "compute", "feature": "compute"}',
}
"""What a slurmd of this release sends: the keys, and the node set for one release more."""
OLD_PEER_ENTRY = {
    "name": "compute",
    "partition": {"maxtime": 60, "partitionname": "compute", "nodes": ["compute"]},
    "nodeset": {"nodeset": "compute", "feature": "compute"},
    "relation_id": 4,
    "retiring": True,
    "drained": True,
}
"""One partition in the peer memory, as the previous release's leader wrote it."""


def read(model: type[DatabagModel], databag: dict[str, str]) -> Any:
    """Read a raw databag as `ops.Relation.load` does: each key's JSON, into the model."""
    return model.model_validate({key: json.loads(text) for key, text in databag.items()})


def rendered(partition: Partition, nodeset: NodeSet) -> tuple[str, str]:
    return str(partition), str(nodeset)


def test_this_releases_slurmd_sends_the_keys_and_still_the_node_set() -> None:
    spec = PartitionSpec.of({"maxtime": 60, "default": True})

    assert saved_text(ComputeData.published("compute", spec)) == NEW_SLURMD


@pytest.mark.parametrize("nodeset", [True, False], ids=["with-nodeset", "without-nodeset"])
def test_this_releases_slurmctld_serves_an_old_slurmds_partition_with_or_without_nodeset(
    nodeset: bool,
) -> None:
    databag = OLD_SLURMD if nodeset else {"partition": OLD_SLURMD["partition"]}

    data = read(ComputeData, databag)

    assert data.is_complete
    assert rendered(*data.partition.named("compute")) == (
        "partitionname=compute nodes=compute maxtime=60 default=True",
        "nodeset=compute feature=compute",
    )


def test_the_previous_slurmctld_serves_this_releases_slurmd_as_it_served_its_own() -> None:
    new, old = read(OldComputeData, NEW_SLURMD), read(OldComputeData, OLD_SLURMD)

    assert new.is_complete
    assert rendered(*old_served("compute", new.partition, new.nodeset)) == rendered(
        *old_served("compute", old.partition, old.nodeset)
    )


def test_this_releases_leader_remembers_what_the_previous_release_reads_back() -> None:
    entry = PartitionEntry.serving("compute", PartitionSpec.of({"maxtime": 60}), 4)

    old = OldPartitionEntry.model_validate(entry.model_dump(mode="json"))

    assert old.name == "compute"
    assert old.relation_id == 4
    assert rendered(*old_served("compute", old.partition, old.nodeset)) == (
        "partitionname=compute maxtime=60 nodes=compute",
        "nodeset=compute feature=compute",
    )


def test_this_release_reads_the_previous_leaders_memory() -> None:
    entry = PartitionEntry.model_validate(OLD_PEER_ENTRY)

    assert (entry.name, entry.relation_id, entry.retiring, entry.drained) == (
        "compute",
        4,
        True,
        True,
    )
    assert rendered(*entry.spec.named("compute")) == (
        "partitionname=compute nodes=compute maxtime=60",
        "nodeset=compute feature=compute",
    )
