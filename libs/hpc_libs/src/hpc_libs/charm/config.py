"""The configuration every Slurm charm shares, and how a bad option is reported.

Each charm's config model subclasses `SlurmCharmConfig` with its own options. The charm
(`hpc_libs.charm.base.SlurmCharm.valid_config`) loads it once per dispatch and acts only on
valid input; its collect-status handler blocks with `describe_validation_error`, which names
the offending option as the operator spells it.

An option of Slurm `key=value` parameters is parsed once, when the model is loaded: its field
holds the parsed fields, not the text. With `refused_parameters` a refused item makes the
whole config invalid; with `parsed_parameters` the field holds the refusal instead
(`Parameters.error`), so the charm blocks on that option alone and applies the others.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pydantic
from pydantic_core import PydanticCustomError

from hpc_libs.errors import ConfigError
from hpc_libs.slurm.upgrade import DebSource, parse_major, parse_source


class SlurmCharmConfig(pydantic.BaseModel):
    """Base of the charms' config models: the options every Slurm charm has.

    See each charm's charmcraft.yaml for their meaning. The validator is built when the
    config is first read, not at import (`defer_build`), as for every model of the charms.
    """

    model_config = pydantic.ConfigDict(frozen=True, defer_build=True)

    slurm_package_source: str = "auto"
    slurm_major: str = ""

    @pydantic.field_validator("slurm_package_source")
    @classmethod
    def _valid_source(cls, value: str) -> str:
        parse_source(value)
        return value

    @pydantic.field_validator("slurm_major")
    @classmethod
    def _valid_major(cls, value: str) -> str:
        return parse_major(value)

    @property
    def package_source(self) -> str | DebSource:
        """`slurm-package-source` as checked: a base source or PPA, or a `deb` source."""
        return parse_source(self.slurm_package_source)


C = TypeVar("C", bound=SlurmCharmConfig)


def describe_validation_error(error: pydantic.ValidationError) -> str:
    """Turn a validation error into a status message that names the first bad option.

    pydantic names the field (`slurm_package_source`); the message names the option
    (`slurm-package-source`), as the operator sets it with `juju config`.
    """
    first = error.errors()[0]
    option = str(first["loc"][0]).replace("_", "-") if first["loc"] else "config"
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"invalid config option '{option}': {message}"


Parse = Callable[[str], dict[str, Any]]
"""Read an option's text as slurmutils fields; raise ConfigError naming the refused key."""


@dataclass(frozen=True)
class Parameters:
    """An option's parameters as parsed when the config was loaded: fields, or the refusal."""

    fields: Mapping[str, Any] = field(default_factory=dict[str, Any])
    error: str | None = None
    """The refusal's message, naming the key (`key`); None when the text was accepted."""
    key: str = ""

    def get(self) -> dict[str, Any]:
        """Return the fields.

        Raises:
            ConfigError: The option's text was refused.

        """
        if self.error is not None:
            raise ConfigError(self.error, key=self.key)
        return dict(self.fields)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise PydanticCustomError("string_type", "Input should be a valid string")
    return value


def refused_parameters(parse: Parse) -> pydantic.PlainValidator:
    """Validate a parameters option with `parse`; the field holds the fields it returns.

    A refused item makes the config invalid: the error names the option and the key.
    """

    def validate(value: object) -> dict[str, Any]:
        try:
            return parse(_text(value))
        except ConfigError as e:
            raise PydanticCustomError(
                "refused_parameter", "{reason}", {"reason": e.message}
            ) from e

    return pydantic.PlainValidator(validate)


def parsed_parameters(parse: Parse) -> pydantic.PlainValidator:
    """Parse a parameters option with `parse`; the field holds a `Parameters`.

    A refused item leaves the config valid: `Parameters.get` raises the refusal.
    """

    def validate(value: object) -> Parameters:
        try:
            return Parameters(parse(_text(value)))
        except ConfigError as e:
            return Parameters(error=e.message, key=e.key)

    return pydantic.PlainValidator(validate)
