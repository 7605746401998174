"""Check an action's parameters against its actions.yaml schema before the charm runs, as Juju.

Juju builds a JSON schema (draft 4) from the action's `params` (the properties), `required`
and `additionalProperties`, fills in the declared defaults and refuses `juju run` when the
parameters do not validate: the charm never sees them. This covers the parts of JSON schema
an actions.yaml uses: type, enum, minimum/maximum, minLength/maxLength, pattern, items,
required and additionalProperties (nested objects included).
"""

from __future__ import annotations

import re
from typing import Any


class ParamsError(ValueError):
    """The parameters do not match the action's schema."""


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "null":
        return value is None
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def _check(schema: dict[str, Any], value: Any, path: str) -> None:  # noqa: C901, PLR0912
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_type_ok(k, value) for k in allowed):
            raise ParamsError(
                f"{path}: Invalid type. Expected: {', '.join(allowed)}, "
                f"given: {type(value).__name__}"
            )
    if "enum" in schema and value not in schema["enum"]:
        raise ParamsError(f"{path}: {path} must be one of the following: {schema['enum']}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise ParamsError(f"{path}: Must be greater than or equal to {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ParamsError(f"{path}: Must be less than or equal to {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            raise ParamsError(
                f"{path}: String length must be greater than or equal to {schema['minLength']}"
            )
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ParamsError(
                f"{path}: String length must be less than or equal to {schema['maxLength']}"
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            raise ParamsError(f"{path}: Does not match pattern '{schema['pattern']}'")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
            _check(schema["items"], item, f"{path}.{index}")
    if isinstance(value, dict):
        _check_object(schema, value, path)  # pyright: ignore[reportUnknownArgumentType]


def _check_object(schema: dict[str, Any], value: dict[str, Any], path: str) -> None:
    properties: dict[str, Any] = schema.get("properties") or {}
    for name in schema.get("required") or []:
        if name not in value:
            raise ParamsError(f"{path}: {name} is required")
    if schema.get("additionalProperties") is False:
        for name in value:
            if name not in properties:
                raise ParamsError(f"{path}: Additional property {name} is not allowed")
    for name, item in value.items():
        if isinstance(properties.get(name), dict):
            _check(properties[name], item, f"{path}.{name}" if path != "(root)" else name)


def validate(declared: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """Return the parameters with the declared defaults filled in.

    Raises:
        ParamsError: they do not validate against the action's schema (Juju's wording).

    """
    properties: dict[str, Any] = declared.get("params") or {}
    filled = {
        name: spec["default"]
        for name, spec in properties.items()
        if isinstance(spec, dict) and "default" in spec
    }
    filled.update(params)
    schema = {
        "type": "object",
        "properties": properties,
        "required": declared.get("required") or [],
        "additionalProperties": declared.get("additionalProperties", True),
    }
    try:
        _check(schema, filled, "(root)")
    except ParamsError as e:
        raise ParamsError(f"validation failed: {e}") from None
    return filled
