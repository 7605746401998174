"""Make slurmutils validate its models without re-checking its own JSON schemas.

slurmutils 1.3 validates every model it builds, parses or renders with
`jsonschema.validate`, which first checks the *schema* against the JSON Schema meta-schema.
slurmutils' schemas are constants, yet that check is redone on every call and is nearly all
of the cost: reading and writing a slurm.conf with a few partitions took seconds, growing
with each partition (see benchmarks/README.md). `install` swaps in `validate`, which keeps
one validator per schema and never checks the schema itself: instances are validated
exactly as before and errors are the same.

Not even once per process: every hook is a new process, and the first check of a schema is
its whole cost: on a lab machine (Python 3.13) 127 ms of CPU for SlurmConfig's schema, paid
by every slurmctld hook that reads or renders slurm.conf, and 20 ms for Node's, Partition's
and NodeSet's, paid by every slurmd hook that reads slurmctld's data. The schemas ship
inside slurmutils, pinned by uv.lock; the unit tests check each of them against the
meta-schema (`tests/unit/hpc_libs/test_schema_cache.py`), so a slurmutils whose schema is
broken fails there, not in a hook.

`install` also keeps each model class's annotation map: slurmutils builds it with
`typing.get_type_hints` on every parse and every render (`_make_annotation_map`, a pure function
of the class whose result its callers only read), a third of the time of parsing a partition.

It is installed by one explicit call, `install`, which every Slurm charm makes when it is
built (`hpc_libs.charm.base.SlurmCharm`): importing hpc_libs changes nothing in slurmutils.
Other users (benchmarks, tools) call `install` themselves if they want the speed.
"""

import functools
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
    """Validate `instance` like `jsonschema.validate`, trusting `schema` (slurmutils' own).

    Raises:
        jsonschema.ValidationError: `instance` does not match `schema`.

    """
    cached = _validators.get(id(schema))
    if cached is None or cached[0] is not schema:
        cls = validators.validator_for(schema)
        if len(_validators) >= _MAX_SCHEMAS:
            _validators.clear()
        cached = (schema, cls(schema))
        _validators[id(schema)] = cached
    error = _best_match(cached[1].iter_errors(instance))
    if error is not None:
        raise error


_annotation_map = functools.cache(
    slurmutils.core.base._make_annotation_map  # pyright: ignore[reportPrivateUsage]
)


def install() -> None:
    """Make slurmutils validate with `validate` and keep its annotation maps (idempotent)."""
    # slurmutils imports `validate` from jsonschema into this module and calls it from there.
    slurmutils.core.base.validate = validate  # pyright: ignore[reportPrivateImportUsage]
    slurmutils.core.base._make_annotation_map = (  # pyright: ignore[reportPrivateUsage]
        _annotation_map
    )
