"""The slurmctld charm's configuration options, validated."""

from typing import Literal

import pydantic
from hpc_libs.charm.config import SlurmCharmConfig


class SlurmctldConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    cluster_name: str = pydantic.Field("charmed-hpc", pattern=r"^[a-z0-9_-]{1,40}$")
    max_node_count: int = pydantic.Field(1024, ge=1)
    process_isolation: Literal["cgroup", "none"] = "cgroup"
