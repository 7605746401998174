"""Make slurmutils check each of its JSON schemas once instead of on every validation.

slurmutils 1.3 validates every model it builds, parses or renders with
`jsonschema.validate`, which first checks the *schema* against the JSON Schema meta-schema.
slurmutils' schemas are constants, yet that check is redone on every call and is nearly all
of the cost: reading and writing a slurm.conf with a few partitions took seconds, growing
with each partition (see benchmarks/README.md). `install` swaps in `validate`, which
checks each schema once and keeps its validator; instances are validated exactly as before
and errors are the same.

It is installed by one explicit call, `install`, which every Slurm charm makes when it is
built (`hpc_libs.charm.base.SlurmCharm`): importing hpc_libs changes nothing in slurmutils.
Other users (benchmarks, tools) call `install` themselves if they want the speed.
"""

from collections.abc import Callable, Iterable
from typing import Any, cast

import slurmutils.core.base
from jsonschema import ValidationError, exceptions, protocols, validators

_MAX_SCHEMAS = 256

_validators: dict[int, tuple[dict[str, Any], protocols.Validator]] = {}

# jsonschema's own choice of the most relevant error, as `jsonschema.validate` raises.
_best_match = cast(
    Callable[[Iterable[ValidationError]], ValidationError | None],
    exceptions.best_match,  # pyright: ignore[reportUnknownMemberType]
)


def validate(instance: Any, schema: dict[str, Any]) -> None:
    """Validate `instance` like `jsonschema.validate`, checking `schema` only the first time.

    Raises:
        jsonschema.ValidationError: `instance` does not match `schema`.
        jsonschema.SchemaError: `schema` itself is invalid.

    """
    cached = _validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        cls = validators.validator_for(schema)
        cls.check_schema(schema)
        if len(_validators) >= _MAX_SCHEMAS:
            _validators.clear()
        cached = (schema, cls(schema))
        _validators[id(schema)] = cached
    error = _best_match(cached[1].iter_errors(instance))
    if error is not None:
        raise error


def install() -> None:
    """Make slurmutils validate its models with `validate` (idempotent)."""
    # slurmutils imports `validate` from jsonschema into this module and calls it from there.
    slurmutils.core.base.validate = validate  # pyright: ignore[reportPrivateImportUsage]
