"""A small base for integration interfaces over one endpoint.

Databags are read and written as pydantic models with `ops.Relation.load/save` (each
field JSON-encoded under its own key). Models have only optional fields so an empty
databag parses. Data that does not parse is logged and read as "not ready" (None): a hook
never crashes on a peer's bad data. Libraries never set status; charms decide from facts.

Each field's JSON is bounded before it is decoded (`bounded_json`): a field longer than
`MAX_FIELD_CHARS` or nested deeper than `MAX_DEPTH` is invalid data like any other, so no
related application can make a reader raise RecursionError or spend a hook decoding it.
"""

import base64
import json
import logging
import re
from collections.abc import Callable, Sequence
from functools import partial
from typing import Annotated, Any, TypeVar, cast

import ops
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
)
from slurmutils import NodeSet

from hpc_libs.errors import IntegrationError
from hpc_libs.slurm import grammar

logger = logging.getLogger(__name__)


class DatabagModel(BaseModel):
    """Base for databag models: every field optional, unknown keys ignored, frozen.

    Each model's validator is built when it first validates, not at import: a hook reads a
    few of the contracts every charm imports.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


D = TypeVar("D", bound=DatabagModel)

MAX_FIELD_CHARS = 1 << 20
"""Longest databag field read (1 MiB): every contract's data is far smaller."""
MAX_DEPTH = 32
"""Deepest nesting of lists and objects read in a field: every contract nests 5 or less."""


def bounded_json(text: str) -> Any:
    """Decode one databag field's JSON; ValueError if it is too long or nested too deeply."""
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"a field of {len(text)} characters (more than {MAX_FIELD_CHARS})")
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(f"a field nested deeper than {MAX_DEPTH} levels") from None
    if _depth(value) > MAX_DEPTH:
        raise ValueError(f"a field nested deeper than {MAX_DEPTH} levels")
    return value


def bounded_text(text: str) -> str:
    """Return a plain-text (not JSON) databag field; ValueError if it is too long."""
    if len(text) > MAX_FIELD_CHARS:
        raise ValueError(f"a field of {len(text)} characters (more than {MAX_FIELD_CHARS})")
    return text


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in a decoded JSON value (no recursion)."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, level = pending.pop()
        children: list[Any]
        if isinstance(item, dict):
            children = list(cast(dict[str, Any], item).values())
        elif isinstance(item, list):
            children = cast(list[Any], item)
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        pending.extend((child, level + 1) for child in children)
    return deepest


_Checked = TypeVar("_Checked")


def checked(rule: Callable[[_Checked], object]) -> AfterValidator:
    """Return a field validator: `rule` (a grammar rule, raising ValueError) judges the value.

    Used as `Annotated[str, checked(grammar.NAME)] | None`: an absent field is not judged.
    """

    def check(value: _Checked) -> _Checked:
        rule(value)
        return value

    return AfterValidator(check)


SlurmName = Annotated[str, checked(grammar.NAME)]
"""A Slurm name (node, partition, application): letters, digits, `_`, `.`, `-`."""
SecretId = Annotated[str, checked(grammar.token)]
"""A Juju secret's id in a databag: one word Slurm's grammar accepts (`grammar.token`)."""
NodeSetFields = Annotated[dict[str, Any], checked(partial(grammar.check_model, NodeSet))]
"""A node set's fields as slurmutils reads them, each judged by Slurm's grammar."""


SLURM_VERSION = re.compile(r"[0-9]{1,4}\.[0-9]{1,2}\.[0-9]{1,4}")
"""A published Slurm version: `major.minor.micro`, such as `24.11.5`."""


def check_slurm_version(value: str) -> None:
    """Raise ValueError unless `value` is a published Slurm version (`24.11.5`)."""
    if not SLURM_VERSION.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slurm version such as 24.11.5")


SlurmVersion = Annotated[str, checked(check_slurm_version)]
"""The Slurm release a daemon runs, as its charm publishes it: `major.minor.micro`."""


def without_none(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    """Leave `keys` out of serialized `data` while they are None: added fields read as before."""
    for key in keys:
        if data.get(key) is None:
            data.pop(key, None)
    return data


class HostEntry(DatabagModel):
    """A daemon's host: `hostname` as Slurm names it, `address` (IP or name) to connect to.

    `version` is the Slurm release the daemon on that host runs (`24.11.5`): the other
    daemons' charms wait for it in a major upgrade (`hpc_libs.slurm.upgrade`). A daemon's
    charm publishes it once the daemon runs that release.
    """

    hostname: Annotated[str, checked(grammar.hostname)] | None = None
    address: Annotated[str, checked(grammar.host)] | None = None
    version: SlurmVersion | None = None

    @model_serializer(mode="wrap")
    def _without_unknown_version(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave `version` out until it is known: the entry reads as it did before it existed."""
        return without_none(handler(self), "version")


class ServiceEntry(HostEntry):
    """A daemon's host and the TCP port it listens on (None: the daemon's default port)."""

    port: int | None = Field(default=None, ge=1, le=grammar.MAX_PORT, strict=True)
    """A JSON integer only: `true`, `6819.0`, `"6819"` or `"6_819"` are refused."""


def join_order(recorded: Sequence[str], present: Sequence[str]) -> list[str]:
    """Keep the recorded join order: known units first, newcomers appended by unit number.

    The peers of slurmctld and slurmdbd keep their units in this order (primary first).

    `recorded` is the order kept so far, `present` the units of the application now. A unit
    that left is dropped, so the next one moves up; nothing else ever reorders the units.
    """

    def unit_number(name: str) -> int:
        return int(name.rsplit("/", 1)[-1])

    kept = [name for name in dict.fromkeys(recorded) if name in present]
    newcomers = sorted((name for name in set(present) if name not in kept), key=unit_number)
    return kept + newcomers


def get_or_create_app_secret(
    charm: ops.CharmBase, label: str, field: str, generate: Callable[[], str], what: str
) -> ops.Secret:
    """Return the application's secret `label`, created once by the leader: `{field: generate()}`.

    Raises:
        IntegrationError: The secret does not exist and this unit is not the leader.

    """
    try:
        return charm.model.get_secret(label=label)
    except ops.SecretNotFoundError:
        if not charm.unit.is_leader():
            raise IntegrationError(f"the {what} secret does not exist yet") from None
    return charm.app.add_secret({field: generate()}, label=label)


def read_granted_secret(model: ops.Model, secret_id: str, field: str, what: str) -> str:
    """Return `field` of the key secret another application granted, in one `secret-get`.

    The revision read is the one this unit tracks. A new revision reaches the unit in the
    hook of the secret-changed event Juju fires for it, where `hpc_libs.charm.base.SlurmCharm`
    moves the tracking to the newest revision before reconciling: every other hook reads the
    secret once, where refreshing on each read cost a second `secret-get`.

    Every key the charms share (the auth key, the JWT key) is base64 text, as Slurm's key
    files hold it; anything else is refused before it can reach a file.

    Raises:
        IntegrationError: The secret cannot be read, it has no such field, or the field is
            not base64 text (the message names the secret, never its content).

    """
    try:
        content = model.get_secret(id=secret_id).get_content()
    except (ops.SecretNotFoundError, ops.ModelError) as e:
        raise IntegrationError(f"cannot read the {what} secret: {e}") from e
    value = content.get(field)
    if not value:
        raise IntegrationError(f"the {what} secret has no {field!r} field")
    try:
        base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, or a plain ValueError for text that is not ASCII
        raise IntegrationError(f"the {what} secret does not hold base64 text") from None
    return value


_Outcome = DatabagModel | ValueError | ops.RelationDataError
"""What parsing a databag gave: a model, or why it could not."""
_Parsed = tuple[dict[str, str], _Outcome]
"""A databag's content when it was parsed, and what parsing it gave."""


class Interface(ops.Object):
    """One side (provider or requirer) of an integration over `endpoint`.

    Each databag is parsed once per dispatch (the charm, and so this object, lives for one),
    however many times it is read: `load` and `problem` keep what parsing gave, keyed by
    relation, source, model and decoder, with the content it was parsed from. A read whose
    databag no longer holds that content (a write by this unit, through `save` or not)
    parses again.
    """

    def __init__(self, charm: ops.CharmBase, endpoint: str) -> None:
        super().__init__(charm, endpoint)
        self.charm = charm
        self.endpoint = endpoint
        self._parsed: dict[tuple[int, str, str, type, Callable[[str], Any]], _Parsed] = {}

    @property
    def relations(self) -> list[ops.Relation]:
        """Every relation on the endpoint."""
        return list(self.model.relations[self.endpoint])

    @property
    def relation(self) -> ops.Relation | None:
        """The first relation on the endpoint (for endpoints limited to one), or None."""
        relations = self.relations
        return relations[0] if relations else None

    def is_joined(self) -> bool:
        """Whether the endpoint has at least one relation."""
        return bool(self.relations)

    def _parse(
        self,
        model: type[D],
        relation: ops.Relation,
        source: ops.Application | ops.Unit,
        decoder: Callable[[str], Any],
    ) -> D | ValueError | ops.RelationDataError:
        """Return `source`'s databag parsed as `model`, or why it cannot be (parsed once)."""
        try:
            content = dict(relation.data[source])
        except ops.RelationDataError as e:  # Not readable by this unit: nothing to keep.
            return e
        key = (relation.id, type(source).__name__, source.name, model, decoder)
        kept = self._parsed.get(key)
        if kept is None or kept[0] != content:
            try:
                outcome: _Outcome = relation.load(model, source, decoder=decoder)
            except (ValueError, ops.RelationDataError) as e:
                outcome = e
            kept = self._parsed[key] = (content, outcome)
        return cast(D | ValueError | ops.RelationDataError, kept[1])

    def load(
        self,
        model: type[D],
        relation: ops.Relation,
        source: ops.Application | ops.Unit | None,
        decoder: Callable[[str], Any] = bounded_json,
    ) -> D | None:
        """Parse `source`'s databag in `relation` as `model`; None if it cannot be read.

        An empty databag gives a model with every field None. Invalid data is logged with
        what `problem` says. `decoder` reads each field (JSON, bounded, unless told).
        """
        if source is None:
            return None
        parsed = self._parse(model, relation, source, decoder)
        if isinstance(parsed, Exception):
            logger.warning(
                "ignoring invalid %s data in relation %s:%d: %s",
                model.__name__,
                self.endpoint,
                relation.id,
                describe_invalid(source, parsed),
            )
            return None
        return parsed

    def problem(
        self,
        model: type[D],
        relation: ops.Relation,
        source: ops.Application | ops.Unit | None,
        decoder: Callable[[str], Any] = bounded_json,
    ) -> str | None:
        """Say what is wrong with `source`'s data, naming `source` and the key; None if valid.

        Libraries never set status: a charm puts this text in its own status.
        """
        if source is None:
            return None
        parsed = self._parse(model, relation, source, decoder)
        return describe_invalid(source, parsed) if isinstance(parsed, Exception) else None

    def save(self, data: DatabagModel, relation: ops.Relation, target: ops.Application) -> bool:
        """Write `data` to this app's databag if it differs; return whether it was written.

        Only the leader writes application data; on other units this does nothing. What
        is compared is the databag's text, not the model read back from it: a key that
        reads the same but is written differently (a field renamed on the wire, read
        under its old name too) is written again.
        """
        if not self.model.unit.is_leader():
            logger.debug("not the leader: not publishing %s", type(data).__name__)
            return False
        published = relation.data[target]
        if all(published.get(key, "") == text for key, text in saved_text(data).items()):
            return False
        relation.save(data, target)
        return True


def saved_text(data: DatabagModel) -> dict[str, str]:
    """Return what `ops.Relation.save` writes for `data`: each key's JSON, "" to erase it."""
    values = data.model_dump(mode="json", by_alias=True)
    keys = [field.alias or name for name, field in type(data).model_fields.items()]
    return {key: json.dumps(values[key]) if key in values else "" for key in keys}


def describe_invalid(source: ops.Application | ops.Unit, error: Exception) -> str:
    """`<source> sent an invalid <field>: <why>`, from a databag parsing error."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "databag"
        why = str(first["msg"]).removeprefix("Value error, ")
        return f"{source.name} sent an invalid {field}: {why}"
    return f"{source.name} sent unreadable data: {error}"
