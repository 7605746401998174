"""The slurmd charm's configuration: options and operator-supplied Slurm parameters."""

import re
from typing import Annotated, Any, Literal

import pydantic
from hpc_libs.charm.config import Parameters, SlurmCharmConfig, parsed_parameters
from hpc_libs.errors import ConfigError
from hpc_libs.interfaces.slurmd import ComputeData
from hpc_libs.slurm import grammar, parameters
from hpc_libs.slurm.parameters import Policy, owned_by
from hpc_libs.slurm.partition import PartitionSpec
from slurmutils import Node, Partition

PARTITION_PARAMETERS = Policy(
    Partition,
    owned=owned_by(
        "is the charm's: it names the partition and its nodes after the application",
        "PartitionName",
        "Nodes",
    ),
)
"""`partition-config`: blank-separated partition keys; the partition's name and nodes are the
charm's."""

NODE_PARAMETERS = Policy(
    Node,
    owned={
        "NodeName": "is the charm's: it names the node after the unit",
        **owned_by(
            "is refused: a dynamic node cannot take it through --conf", "Port", "State", "Reason"
        ),
    },
)
"""The `node-config` action's parameters: blank-separated node keys, not the node's name nor
what a dynamic node cannot take through `--conf`."""


def parse_partition_config(text: str) -> dict[str, Any]:
    """Validate `partition-config` and return it as slurmutils partition fields.

    Raises ConfigError naming the first bad key.
    """
    return _parse(PARTITION_PARAMETERS, text, "partition-config")


def parse_node_parameters(text: str) -> dict[str, Any]:
    """Validate node parameters given to the `node-config` action.

    Raises ConfigError naming the first bad key.
    """
    return _parse(NODE_PARAMETERS, text, "node-config")


def _parse(policy: Policy, text: str, what: str) -> dict[str, Any]:
    """Parse `key=value` text with `policy`; the error names the option and the key."""
    try:
        return parameters.parse(policy, text)
    except ConfigError as e:
        raise ConfigError(f"{what}: {e.message}", key=e.key) from e


_HEALTH_PATH = re.compile(r"/(?:[A-Za-z0-9_.@+-]+/?)*")
"""An absolute path of plain names (no blanks, quotes or controls: it goes into drain reasons)."""
_MINIMUM = re.compile(r"([0-9]{1,6})([%MGT])")
_MIB = {"M": 1, "G": 1024, "T": 1024 * 1024}


def _health_path(path: str) -> str:
    if not _HEALTH_PATH.fullmatch(path) or ".." in path.split("/"):
        raise ValueError(f"{path!r} is not an absolute path of plain names")
    return path.rstrip("/") or "/"


def health_paths(value: str) -> str:
    """Validate `health-mounts`: blank-separated absolute paths."""
    for path in value.split():
        _health_path(path)
    return value


def health_minimums(value: str) -> str:
    """Validate `health-free-space`: blank-separated `<path>=<n>%|<n>M|<n>G|<n>T`."""
    for item in value.split():
        path, _, minimum = item.partition("=")
        _health_path(path)
        match = _MINIMUM.fullmatch(minimum)
        if match is None or (match[2] == "%" and int(match[1]) > 100):
            raise ValueError(f"{item!r}: the minimum is a percentage or a size (10%, 512M, 20G)")
    return value


def free_space_minimums(value: str) -> dict[str, str]:
    """Return `health-free-space` as the health program reads it: path → `<n>%` or MiB."""
    minimums: dict[str, str] = {}
    for item in value.split():
        path, _, minimum = item.partition("=")
        number, unit = minimum[:-1], minimum[-1]
        minimums[_health_path(path)] = minimum if unit == "%" else str(int(number) * _MIB[unit])
    return minimums


class SlurmdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    # Parsed when the config is loaded; a refusal blocks with its reason (`partition_data`).
    partition_config: Annotated[Parameters, parsed_parameters(parse_partition_config)] = (
        Parameters()
    )
    default_node_state: Literal["idle", "down"] = "idle"
    # One `scontrol update ... reason=<text>` argument: spaces allowed, no quotes or controls.
    default_node_reason: Annotated[
        str, pydantic.AfterValidator(grammar.returning(grammar.free_text))
    ] = pydantic.Field(default="new node: resume when ready", max_length=1024)
    # Seconds a departing unit waits for its node's jobs: a uint32, or UNLIMITED/INFINITE.
    retire_timeout: Annotated[
        str, pydantic.AfterValidator(grammar.returning(grammar.uint(32, unlimited=True)))
    ] = "unlimited"
    nvidia_driver: bool = False
    # The node health check's parameters (see `health`): paths, never commands.
    health_mounts: Annotated[str, pydantic.AfterValidator(health_paths)] = ""
    health_free_space: Annotated[str, pydantic.AfterValidator(health_minimums)] = ""
    health_time_sync: Annotated[bool, pydantic.Field(strict=True)] = False
    health_max_drain: Annotated[int, pydantic.Field(ge=0, le=100, strict=True)] = 50

    @property
    def retire_timeout_seconds(self) -> int | None:
        """The `retire-timeout` in seconds; None to wait as long as jobs run."""
        if self.retire_timeout.lower() in grammar.UNLIMITED_WORDS:
            return None
        return int(self.retire_timeout)


def partition_data(app: str, partition_config: Parameters) -> ComputeData:
    """Return what the application publishes: `partition-config`'s keys, and its node set.

    Raises ConfigError naming the first bad key; the keys pass the same check slurmctld
    applies when it reads them (`PartitionSpec`).
    """
    fields = partition_config.get()
    try:
        spec = PartitionSpec.of(fields)
    except ValueError as e:  # A GrammarError names the key.
        raise ConfigError(f"partition-config: {e}") from e
    return ComputeData.published(app, spec)
