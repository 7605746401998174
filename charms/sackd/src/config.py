"""The sackd charm's configuration options, validated."""

from typing import Literal

import pydantic


class SackdConfig(pydantic.BaseModel):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    model_config = pydantic.ConfigDict(frozen=True)

    slurm_package_source: Literal["ppa", "archive"] = "ppa"


def describe_error(error: pydantic.ValidationError) -> str:
    """Turn a validation error into a status message that names the bad option."""
    first = error.errors()[0]
    option = str(first["loc"][0]).replace("_", "-") if first["loc"] else "config"
    return f"invalid config option '{option}': {first['msg']}"
