"""Scenarios for validating slurmutils models with cached JSON schema validators."""

from typing import Any, cast

import pytest
import slurmutils
import slurmutils.core.base
from hpc_libs.slurm import schema_cache
from jsonschema import ValidationError, validators
from slurmutils import ModelError, Partition


def test_importing_the_managers_installs_the_cached_validator() -> None:
    schema_cache.install()  # the one explicit call every charm makes (SlurmCharm)
    assert vars(slurmutils.core.base)["validate"] is schema_cache.validate


def test_a_models_annotation_map_is_built_once() -> None:
    schema_cache.install()
    build = vars(slurmutils.core.base)["_make_annotation_map"]

    assert build(Partition) is build(Partition)
    assert build(Partition) == build.__wrapped__(Partition)  # slurmutils' own, uncached
    assert build(Partition, include_origin=True) == build.__wrapped__(Partition, True)


def test_invalid_models_fail_with_the_same_message() -> None:
    with pytest.raises(ModelError, match="'YES' is not of type 'boolean'"):
        Partition.from_dict({"hidden": "YES"})


def test_each_schema_gets_one_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    built: list[None] = []
    validator_for = validators.validator_for

    def counted(given: Any, *args: Any, **kwargs: Any) -> Any:
        if given is schema:
            built.append(None)
        return validator_for(given, *args, **kwargs)

    monkeypatch.setattr(validators, "validator_for", counted)

    schema_cache.validate({"n": 1}, schema)
    schema_cache.validate({"n": 2}, schema)
    with pytest.raises(ValidationError, match="'x' is not of type 'integer'"):
        schema_cache.validate({"n": "x"}, schema)

    assert built == [None]


def test_a_hook_never_checks_slurmutils_schemas(monkeypatch: pytest.MonkeyPatch) -> None:
    """The meta-schema check is most of a first validation's cost, paid again by every hook."""
    schema = cast(dict[str, Any], Partition.__model_schema__)
    cls = validators.validator_for(schema)

    def refuse(schema: Any) -> None:
        raise AssertionError("a schema was checked against the meta-schema")

    monkeypatch.setattr(cls, "check_schema", refuse)
    monkeypatch.setattr(schema_cache, "_validators", {})

    assert Partition.from_dict({"partitionname": "compute", "hidden": True})
    with pytest.raises(ModelError, match="'YES' is not of type 'boolean'"):
        Partition.from_dict({"hidden": "YES"})


@pytest.mark.parametrize(
    "model",
    [
        model
        for model in vars(slurmutils).values()
        if isinstance(model, type) and isinstance(getattr(model, "__model_schema__", None), dict)
    ],
    ids=lambda model: model.__name__,
)
def test_every_slurmutils_schema_is_valid(model: Any) -> None:
    """What `validate` trusts: a slurmutils with a broken schema fails here, not in a hook."""
    schema = model.__model_schema__
    validators.validator_for(schema).check_schema(schema)
