"""The slurmctld charm's configuration options, validated."""

from typing import Annotated, Any, Literal

import overrides
import pydantic
from future_nodes import check_room as check_future_room
from future_nodes import parse as parse_future_nodes
from hpc_libs.charm.config import SlurmCharmConfig, refused_parameters
from hpc_libs.slurm import grammar
from hpc_libs.slurm.accounts import Document, DocumentError
from pydantic_core import PydanticCustomError

# slurmctld refuses a MaxNodeCount above MAX_SLURM_NODES (64 * 1024, slurm.h), and slurmutils
# renders MaxNodeCount as a uint16 below Slurm's NO_VAL16 and INFINITE16 markers: 65533 at most.
MAX_NODE_COUNT = 65533
# SlurmctldTimeout is a uint16 as well; Slurm warns that a MessageTimeout above 100 s is too
# high for effective fault tolerance.
MAX_SLURMCTLD_TIMEOUT = 65533
MAX_MESSAGE_TIMEOUT = 100


def _accounts_document(value: object) -> Document | None:
    """Parse the `accounts` option: None when empty, else the checked document.

    Raises:
        PydanticCustomError: The document is refused, naming its key
            (`users.alice.default-account`): the unit blocks and nothing is applied.

    """
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    if not value.strip():
        return None
    try:
        return Document.parse(value)
    except DocumentError as e:
        raise PydanticCustomError(
            "accounts_document", "{key}: {reason}", {"key": e.key, "reason": e.reason}
        ) from e


class SlurmctldConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    cluster_name: Annotated[str, pydantic.AfterValidator(grammar.returning(grammar.token))] = (
        pydantic.Field("charmed-hpc", pattern=r"^[a-z0-9_-]{1,40}$")
    )
    max_node_count: int = pydantic.Field(1024, ge=1, le=MAX_NODE_COUNT, strict=True)
    process_isolation: Literal["cgroup", "none"] = "cgroup"
    use_network_state: bool = pydantic.Field(False, strict=True)
    slurmctld_timeout: int = pydantic.Field(4, ge=2, le=MAX_SLURMCTLD_TIMEOUT, strict=True)
    message_timeout: int = pydantic.Field(2, ge=1, le=MAX_MESSAGE_TIMEOUT, strict=True)
    # The operator's parameters, parsed (slurmutils fields): see `overrides`.
    slurm_conf_parameters: Annotated[
        dict[str, Any], refused_parameters(overrides.slurm_conf_parameters)
    ] = pydantic.Field(default_factory=dict[str, Any])
    cgroup_parameters: Annotated[
        dict[str, Any], refused_parameters(overrides.cgroup_parameters)
    ] = pydantic.Field(default_factory=dict[str, Any])
    # A slurmd application's name (Juju's application name grammar), or empty for none.
    default_partition: str = pydantic.Field("", pattern=r"^([a-z][a-z0-9-]{0,62})?$")
    reboot_timeout: int = pydantic.Field(1800, ge=60, le=86400, strict=True)
    health_check_interval: int = pydantic.Field(300, ge=0, le=86400, strict=True)
    health_check_node_state: str = pydantic.Field(
        "any", pattern=r"^(alloc|any|idle|mixed|nondrained_idle)(,cycle)?$"
    )
    metrics_interval: int = pydantic.Field(30, ge=5, le=3600, strict=True)
    metrics_per_user: bool = pydantic.Field(False, strict=True)
    native_metrics: Literal["auto", "on", "off"] = "auto"
    # Application → placeholder count and shape, parsed: see `future_nodes`.
    future_nodes: Annotated[dict[str, dict[str, int]], refused_parameters(parse_future_nodes)] = (
        pydantic.Field(default_factory=dict[str, dict[str, int]])
    )
    # Slurm's associations as code, parsed and checked: see `associations`.
    accounts: Annotated[Document | None, pydantic.PlainValidator(_accounts_document)] = None
    accounts_prune_unmanaged: bool = pydantic.Field(False, strict=True)

    @pydantic.field_validator("future_nodes")
    @classmethod
    def _room_for_units(
        cls, value: dict[str, dict[str, int]], info: pydantic.ValidationInfo
    ) -> dict[str, dict[str, int]]:
        """Leave `max-node-count` room for the units beside the placeholders (`future_nodes`)."""
        if (max_node_count := info.data.get("max_node_count")) is not None:
            check_future_room(value, max_node_count)
        return value

    @pydantic.field_validator("message_timeout")
    @classmethod
    def _one_slow_ping_is_no_failover(cls, value: int, info: pydantic.ValidationInfo) -> int:
        """Keep MessageTimeout at most half of SlurmctldTimeout.

        A backup pings the primary every SlurmctldTimeout/3 s and each ping may take
        MessageTimeout s: with this bound a single slow answer never lets SlurmctldTimeout
        pass without a successful ping, so only a primary that misses two pings in a row is
        replaced.
        """
        slurmctld_timeout = info.data.get("slurmctld_timeout")
        if slurmctld_timeout is not None and 2 * value > slurmctld_timeout:
            raise ValueError(
                f"must be at most half of slurmctld-timeout ({slurmctld_timeout}), so one slow "
                "ping cannot cause a failover"
            )
        return value
