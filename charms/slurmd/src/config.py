"""The slurmd charm's configuration: options and operator-supplied Slurm parameters."""

from typing import Annotated, Any, Literal

import pydantic
from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.errors import ConfigError
from hpc_libs.interfaces.slurmd import ComputeData, named_partition
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import parse_config_line
from slurmutils import Node, Partition

# Keys the charm sets itself, or that a dynamic node cannot take through `--conf`.
PARTITION_MANAGED_KEYS = frozenset({"partitionname", "nodes"})
NODE_MANAGED_KEYS = frozenset({"nodename", "port", "state", "reason"})


class SlurmdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    partition_config: str = ""
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

    @property
    def retire_timeout_seconds(self) -> int | None:
        """The `retire-timeout` in seconds; None to wait as long as jobs run."""
        if self.retire_timeout.lower() in grammar.UNLIMITED_WORDS:
            return None
        return int(self.retire_timeout)


def parse_partition_config(text: str) -> dict[str, Any]:
    """Validate `partition-config` and return it as slurmutils partition fields.

    Raises ConfigError naming the first bad key.
    """
    return _parse(Partition, text, PARTITION_MANAGED_KEYS, "partition-config")


def partition_data(app: str, text: str) -> ComputeData:
    """Return the application's partition and node set, with `partition-config`'s settings.

    Raises ConfigError naming the first bad key; the result passes the same grammar check
    slurmctld applies when it reads it.
    """
    settings = parse_partition_config(text)
    partition, nodeset = named_partition(app, settings)
    try:
        return ComputeData(partition=partition, nodeset=nodeset)
    except ValueError as e:  # pydantic's ValidationError, raised by the grammar check.
        raise ConfigError(f"partition-config: {e}") from e


def parse_node_parameters(text: str) -> dict[str, Any]:
    """Validate node parameters given to the `node-config` action.

    Raises ConfigError naming the first bad key.
    """
    return _parse(Node, text, NODE_MANAGED_KEYS, "node-config")


def _parse(
    model: type[Partition] | type[Node], text: str, managed: frozenset[str], what: str
) -> dict[str, Any]:
    """Parse `key=value` text as `model` fields, refusing the keys the charm manages."""
    try:
        fields = parse_config_line(model, text).dict()
    except ConfigError as e:
        raise _named(e, what) from e
    for key in fields:
        if key in managed:
            raise ConfigError(f"{what}: key '{key}' is set by the charm", key=key)
    return fields


def _named(error: ConfigError, what: str) -> ConfigError:
    """Reword a parse error briefly, naming the bad key (slurmutils lists every field)."""
    if "unrecognized" in error.message:
        problem = "unknown key"
    elif "not key=value" in error.message:
        problem = "no value for key"
    else:
        problem = "invalid value for key"
    return ConfigError(f"{what}: {problem} '{error.key}'", key=error.key)
