"""The slurmctld charm's configuration options, validated."""

from typing import Annotated, Literal

import pydantic
from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.slurm import grammar

# slurmctld refuses a MaxNodeCount above MAX_SLURM_NODES (64 * 1024, slurm.h), and slurmutils
# renders MaxNodeCount as a uint16 below Slurm's NO_VAL16 and INFINITE16 markers: 65533 at most.
MAX_NODE_COUNT = 65533


class SlurmctldConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    cluster_name: Annotated[str, pydantic.AfterValidator(grammar.returning(grammar.token))] = (
        pydantic.Field("charmed-hpc", pattern=r"^[a-z0-9_-]{1,40}$")
    )
    max_node_count: int = pydantic.Field(1024, ge=1, le=MAX_NODE_COUNT, strict=True)
    process_isolation: Literal["cgroup", "none"] = "cgroup"
