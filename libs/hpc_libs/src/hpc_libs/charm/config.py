"""The configuration every Slurm charm shares, and how a bad option is reported.

Each charm's config model subclasses `SlurmCharmConfig` with its own options. Handlers read
the config with `load_valid_config` and act only on valid input; the collect-status handler
blocks with `config_problem`, which names the offending option as the operator spells it.
"""

import logging
from typing import TypeVar

import ops
import pydantic

from hpc_libs.slurm.base import PackageSource

logger = logging.getLogger(__name__)


class SlurmCharmConfig(pydantic.BaseModel):
    """Base of the charms' config models: the options every Slurm charm has.

    See each charm's charmcraft.yaml for their meaning.
    """

    model_config = pydantic.ConfigDict(frozen=True)

    slurm_package_source: PackageSource = "auto"


C = TypeVar("C", bound=SlurmCharmConfig)


def describe_validation_error(error: pydantic.ValidationError) -> str:
    """Turn a validation error into a status message that names the first bad option.

    pydantic names the field (`slurm_package_source`); the message names the option
    (`slurm-package-source`), as the operator sets it with `juju config`.
    """
    first = error.errors()[0]
    option = str(first["loc"][0]).replace("_", "-") if first["loc"] else "config"
    return f"invalid config option '{option}': {first['msg']}"


def load_valid_config(charm: ops.CharmBase, model: type[C]) -> C | None:
    """Return the charm's config as `model`, or None (logged) when an option is invalid.

    Handlers skip their work on None; the collect-status handler reports the bad option
    (see `config_problem`).
    """
    try:
        return charm.load_config(model)
    except pydantic.ValidationError as e:
        logger.warning("not acting on invalid config: %s", describe_validation_error(e))
        return None


def config_problem(charm: ops.CharmBase, model: type[SlurmCharmConfig]) -> str | None:
    """Return a status message naming the first invalid option, or None if all are valid."""
    try:
        charm.load_config(model)
    except pydantic.ValidationError as e:
        return describe_validation_error(e)
    return None
