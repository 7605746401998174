"""Scenarios for validating slurmutils models with cached JSON schema validators."""

from typing import Any

import pytest
import slurmutils.core.base
from hpc_libs.slurm import schema_cache
from jsonschema import SchemaError, ValidationError, validators
from slurmutils import ModelError, Partition


def test_importing_the_managers_installs_the_cached_validator() -> None:
    schema_cache.install()  # the one explicit call every charm makes (SlurmCharm)
    assert vars(slurmutils.core.base)["validate"] is schema_cache.validate


def test_invalid_models_fail_with_the_same_message() -> None:
    with pytest.raises(ModelError, match="'YES' is not of type 'boolean'"):
        Partition.from_dict({"hidden": "YES"})


def test_each_schema_is_checked_once(monkeypatch: pytest.MonkeyPatch) -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"n": {"type": "integer"}}}
    checks: list[None] = []
    cls = validators.validator_for(schema)
    check_schema = cls.check_schema
    monkeypatch.setattr(cls, "check_schema", lambda s: checks.append(None) or check_schema(s))

    schema_cache.validate({"n": 1}, schema)
    schema_cache.validate({"n": 2}, schema)
    with pytest.raises(ValidationError, match="'x' is not of type 'integer'"):
        schema_cache.validate({"n": "x"}, schema)

    assert checks == [None]


def test_an_invalid_schema_is_refused() -> None:
    with pytest.raises(SchemaError):
        schema_cache.validate({}, {"type": 5})
