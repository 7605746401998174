"""The slurmctld charm's configuration options, validated."""

from typing import Literal

import pydantic


class SlurmctldConfig(pydantic.BaseModel):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    model_config = pydantic.ConfigDict(frozen=True)

    slurm_package_source: Literal["ppa", "archive"] = "ppa"
    cluster_name: str = pydantic.Field("charmed-hpc", pattern=r"^[a-z0-9_-]{1,40}$")
    max_node_count: int = pydantic.Field(1024, ge=1)
    process_isolation: Literal["cgroup", "none"] = "cgroup"


def describe_error(error: pydantic.ValidationError) -> str:
    """Turn a validation error into a status message that names the bad option."""
    first = error.errors()[0]
    option = str(first["loc"][0]).replace("_", "-") if first["loc"] else "config"
    return f"invalid config option '{option}': {first['msg']}"
