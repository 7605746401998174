"""Scenarios for Slurm's YES/NO booleans at the slurmutils boundary."""

import typing
from pathlib import Path

import pytest
from hpc_libs.errors import ConfigError
from hpc_libs.interfaces.slurmd import ComputeData
from hpc_libs.slurm.partition import PartitionSpec
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.text import YES_NO_KEYS, literals_as_yes_no, yes_no_as_literals
from hpc_libs_fakes import parse_config_line
from slurmutils import Model, Node, NodeSet, Partition, SlurmConfig
from slurmutils.core.callback import DefaultCallback

Owners = dict[str, tuple[str, str | None]]

PARTITION_BOOLEANS = [
    "Default",
    "DisableRootJobs",
    "ExclusiveTopo",
    "ExclusiveUser",
    "Hidden",
    "LLN",
    "PowerDownOnIdle",
    "ReqResv",
    "RootOnly",
]


def plain_boolean_keys(model: type[Model]) -> set[str]:
    """Keys slurmutils types as bool but reads and writes as Python literals."""
    keys: set[str] = set()
    for field, hint in typing.get_type_hints(model, include_extras=True).items():
        metadata = getattr(hint, "__metadata__", ())
        callback = metadata[0].callback if metadata else DefaultCallback
        base = hint.__origin__ if metadata else hint
        if bool in typing.get_args(base) and callback is DefaultCallback:
            keys.add(field.replace("_", "").lower())
    return keys


def test_yes_no_keys_are_exactly_slurmutils_plain_booleans() -> None:
    assert plain_boolean_keys(Partition) == {key.lower() for key in PARTITION_BOOLEANS}
    assert plain_boolean_keys(Partition) | plain_boolean_keys(SlurmConfig) == YES_NO_KEYS


def test_nodes_and_nodesets_have_no_booleans() -> None:
    assert plain_boolean_keys(Node) == set()
    assert plain_boolean_keys(NodeSet) == set()


@pytest.mark.parametrize("key", PARTITION_BOOLEANS)
@pytest.mark.parametrize(("word", "value"), [("YES", True), ("NO", False)])
def test_partition_boolean_round_trips_through_slurm_conf(
    key: str, word: str, value: bool, tmp_path: Path, owners: Owners
) -> None:
    partition = parse_config_line(Partition, f"PartitionName=p Nodes=p {key}={word}")
    assert partition.dict()[key.lower()] is value

    config = SlurmctldManager(tmp_path).config
    conf = config.load()
    conf.partitions["p"] = partition
    config.write(conf)

    assert (tmp_path / "etc/slurm/slurm.conf").read_text() == (
        f"partitionname=p nodes=p {key.lower()}={word}\n"
    )
    assert config.load().partitions["p"].dict()[key.lower()] is value
    assert config.write(config.load()) is False


@pytest.mark.parametrize(
    ("word", "value"),
    [
        *[("yes", True), ("Up", True), ("true", True), ("1", True)],
        *[("no", False), ("DOWN", False), ("False", False), ("0", False)],
    ],
)
def test_every_spelling_slurm_accepts_is_accepted(word: str, value: bool) -> None:
    assert parse_config_line(Partition, f"Hidden={word}").hidden is value


def test_a_value_slurm_rejects_names_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_line(Partition, "MaxTime=60 Hidden=maybe")

    assert caught.value.key == "Hidden"


def test_an_unknown_key_is_still_refused_by_name() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config_line(Partition, "Default=YES Colour=blue")

    assert caught.value.key == "Colour"
    assert "unknown key" in caught.value.message


def test_operator_partition_config_reaches_slurm_conf_as_yes(
    tmp_path: Path, owners: Owners
) -> None:
    """`juju config slurmd partition-config=...` -> databag -> slurmctld's slurm.conf."""
    fields = parse_config_line(Partition, "Default=YES MaxTime=1-00:00:00").dict()
    data = ComputeData.published("batch", PartitionSpec.of(fields))
    assert data.partition is not None
    partition, _ = data.partition.named("batch")

    config = SlurmctldManager(tmp_path).config
    conf = config.load()
    conf.partitions["batch"] = partition
    config.write(conf)

    assert (tmp_path / "etc/slurm/slurm.conf").read_text() == (
        "partitionname=batch nodes=batch default=YES maxtime=1-00:00:00\n"
    )


def test_models_built_with_booleans_are_written_yes_no(tmp_path: Path, owners: Owners) -> None:
    config = SlurmctldManager(tmp_path).config
    conf = SlurmConfig(clustername="hpc", disablerootjobs=True, allowspecresourcesusage=False)
    conf.partitions["p"] = Partition(partitionname="p", default=True, lln=False)

    config.write(conf)

    assert (tmp_path / "etc/slurm/slurm.conf").read_text() == (
        "clustername=hpc\n"
        "disablerootjobs=YES\n"
        "allowspecresourcesusage=NO\n"
        "partitionname=p default=YES lln=NO\n"
    )


def test_a_hand_written_slurm_conf_with_yes_no_loads(tmp_path: Path, owners: Owners) -> None:
    path = tmp_path / "etc/slurm/slurm.conf"
    path.parent.mkdir(parents=True)
    path.write_text(
        "ClusterName=hpc\n"
        "DisableRootJobs=yes  # no root jobs\n"
        "PartitionName=batch Nodes=batch Default=YES State=up\n"
    )

    conf = SlurmctldManager(tmp_path).config.load()

    assert conf.disable_root_jobs is True
    assert conf.partitions["batch"].default is True
    assert conf.partitions["batch"].state == "up"


def test_other_files_are_not_rewritten(tmp_path: Path, owners: Owners) -> None:
    manager = SlurmctldManager(tmp_path)

    assert manager.config.yes_no_booleans is True
    assert manager.cgroup_config.yes_no_booleans is False


# The text rewriting itself.


def test_only_boolean_keys_outside_quotes_and_comments_change() -> None:
    text = 'DownNodes=n1 Reason="Default=YES"\nHidden=YES  MaxTime=YES # Default=YES\n'

    assert yes_no_as_literals(text) == (
        'DownNodes=n1 Reason="Default=YES"\nHidden=True  MaxTime=YES # Default=YES\n'
    )


def test_only_python_literals_become_yes_no() -> None:
    assert literals_as_yes_no("default=True lln=False hidden=yes weight=True\n") == (
        "default=YES lln=NO hidden=yes weight=True\n"
    )
