"""The operator's `key=value` Slurm parameters: one parser, a policy per file.

Every option that takes Slurm parameters (slurmctld's `slurm-conf-parameters` and
`cgroup-parameters`, slurmd's `partition-config` and `node-config`, slurmdbd's
`slurmdbd-conf-parameters`) is read by `parse` with the `Policy` of its file. Each
`key=value` is checked on its own, in this order, and the first bad one is refused naming
its key (`ConfigError.key`):

* it is one `key=value` (`Policy.separator`: one per line, or separated by blanks);
* the key is not one the charm sets itself (`Policy.owned`, refused as `<Key> <reason>`);
* slurmutils' model of the file knows the key (any case, as Slurm reads it), and Slurm's
  grammar has a rule for it (`hpc_libs.slurm.grammar.admitted`: the rule tables are
  allow-lists);
* the key is given once;
* the value obeys the key's rule (`hpc_libs.slurm.grammar.check_value`: one token, no
  whitespace, quote, `#`, `=` or backslash, plus the key's own rule);
* slurmutils reads it as one field of its model, and writes it back as that key
  (`Policy.exact`: as exactly the value given).

So a value can never become a second key, a second line or a section of its own.
"""

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from slurmutils import Model, ModelError, SlurmConfig

from hpc_libs.errors import ConfigError
from hpc_libs.slurm import grammar
from hpc_libs.slurm.text import literals_as_yes_no, yes_no_as_literals

Separator = Literal["line", "blank"]
"""`line`: one `key=value` a line, blank and `#` lines skipped; `blank`: any whitespace."""

MAX_REASON = 160
"""Characters of slurmutils' own explanation kept in a message."""

SECTIONS = frozenset({"downnodes", "frontendnodes", "nodes", "nodesets", "partitions"})
"""slurmutils' SlurmConfig fields that hold whole lines of their own, not one key."""


def owned_by(reason: str, *keys: str) -> dict[str, str]:
    """`keys` (as Slurm spells them) refused with one `reason` (`is the charm's: ...`)."""
    return dict.fromkeys(keys, reason)


@dataclass(frozen=True)
class Policy:
    """How one file's operator parameters are read.

    Attributes:
        model: slurmutils' model of the file (or of its line: a partition, a node).
        separator: How the `key=value` items are separated.
        owned: Keys the charm sets itself, as Slurm spells them, with why an operator may
            not: the message is `<Key> <reason>` (`is the charm's: ...`, `is refused: ...`).
        owned_items: Items of option-list keys the charm sets itself (lower-case key).
        exact: slurmutils must write each value back exactly as given (slurm.conf's
            parameters), not only as the same key.
        spelling: Per lower-case key, the value's spelling slurmutils reads, where it reads
            fewer spellings than Slurm (slurmdbd.conf's booleans and purge ages).
        text_values: A value is first given to slurmutils as text, and read with the file's
            syntax only where the schema takes another type (a QOS named `5` stays a name).

    """

    model: type[Model]
    separator: Separator = "blank"
    owned: Mapping[str, str] = field(default_factory=dict[str, str])
    owned_items: Mapping[str, Mapping[str, str]] = field(
        default_factory=dict[str, Mapping[str, str]]
    )
    exact: bool = False
    spelling: Mapping[str, Callable[[str], str]] = field(
        default_factory=dict[str, Callable[[str], str]]
    )
    text_values: bool = False

    def owned_reason(self, key: str) -> tuple[str, str] | None:
        """Return the owned key as Slurm spells it and the reason, or None if not owned."""
        lower = key.lower()
        return next(((k, r) for k, r in self.owned.items() if k.lower() == lower), None)


def parse(policy: Policy, text: str) -> dict[str, Any]:
    """Check every `key=value` of `text` and return the fields they set, as slurmutils holds them.

    The keys are slurmutils' (lower case, no underscores); see the module for the checks.

    Raises:
        ConfigError: An item is refused; `key` names its key.

    """
    known = _known_keys(policy.model)
    fields: dict[str, Any] = {}
    for key, value in _items(policy.separator, text):
        name = _check_key(policy, key, known)
        if key.lower() in fields:
            raise ConfigError(f"{name} is given twice", key=name)
        if any(char.isspace() for char in value):
            raise ConfigError(
                f"{key}: one key=value per line, no whitespace in the value", key=key
            )
        parsed = _field(policy, name, value)
        fields |= parsed
        for item, reason in policy.owned_items.get(key.lower(), {}).items():
            value_read = next(iter(parsed.values()))
            if isinstance(value_read, dict) and item in value_read:
                raise ConfigError(f"{name} item {item} {reason}", key=name)
    try:
        policy.model.from_dict(fields)
    except (ModelError, ValueError, TypeError) as e:
        raise ConfigError(f"invalid parameters: {_short(str(e))}") from e
    return fields


def _items(separator: Separator, text: str) -> Iterator[tuple[str, str]]:
    """Split `text` into `(key, value)` pairs, one at a time (the first bad item is refused).

    Raises:
        ConfigError: An item is not one `key=value`.

    """
    if separator == "blank":
        for item in text.split():
            key, sep, value = item.partition("=")
            if not sep or not key or not value:
                raise ConfigError(f"{item!r} is not key=value", key=key)
            yield key, value
        return
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.isalnum() or not key.isascii():
            name = line.split()[0].partition("=")[0]
            raise ConfigError(f"{name}: line {number} is not one key=value", key=name)
        yield key, value


def _check_key(policy: Policy, key: str, known: frozenset[str]) -> str:
    """Return `key` as Slurm spells it; refuse one the charm owns, or one without a rule.

    Raises:
        ConfigError: Naming the key and why.

    """
    if (owned := policy.owned_reason(key)) is not None:
        name, reason = owned
        raise ConfigError(f"{name} {reason}", key=name)
    if key.lower() not in known:
        raise ConfigError(f"unknown key {key}", key=key)
    if not grammar.admitted(policy.model, key):
        raise ConfigError(
            f"{key} is not admitted: no rule here checks its values (see the option's "
            "description)",
            key=key,
        )
    return grammar.spelling(policy.model, key)


def _field(policy: Policy, name: str, value: str) -> dict[str, Any]:
    """Check one `name=value` and return it as the one slurmutils field it sets.

    Raises:
        ConfigError: The value breaks Slurm's grammar, slurmutils refuses it, or slurmutils
            would not write it back as given (see `Policy.exact`).

    """
    try:
        grammar.check_value(policy.model, name, value)
    except grammar.GrammarError as e:
        raise ConfigError(str(e), key=name) from e
    lower = name.lower()
    spelled = policy.spelling.get(lower, _same)(value)
    try:
        parsed = _read(policy, name, spelled)
        written = literals_as_yes_no(str(policy.model.from_dict(parsed)))
    except (ModelError, ValueError, TypeError) as e:
        raise ConfigError(f"invalid {name}: {_short(str(e))}", key=name) from e
    written_key, _, written_value = written.partition("=")
    same = not policy.exact or yes_no_as_literals(written) == yes_no_as_literals(
        f"{lower}={value}"
    )
    if list(parsed) != [lower] or written_key != lower or not same:
        raise ConfigError(
            f"invalid {name}: {value!r} would be written as {written_value!r}", key=name
        )
    return parsed


def _read(policy: Policy, name: str, value: str) -> dict[str, Any]:
    """Read `name=value` as slurmutils does from the file (see `Policy.text_values`)."""
    if policy.text_values:
        try:
            return policy.model.from_dict({name.lower(): value}).dict()
        except (ModelError, ValueError):
            pass
    return policy.model.from_str(yes_no_as_literals(f"{name}={value}")).dict()


def _same(value: str) -> str:
    return value


def _known_keys(model: type[Model]) -> frozenset[str]:
    """Return the keys slurmutils' model knows: lower case, no underscores, as Slurm matches.

    Without slurm.conf's sections (nodes, node sets, partitions...), which are no keys.
    """
    names = {name.replace("_", "").lower() for name in model.__annotations__}
    return frozenset(names - SECTIONS if model is SlurmConfig else names)


def _short(reason: str) -> str:
    first = reason.splitlines()[0] if reason else "not a valid value"
    return first if len(first) <= MAX_REASON else first[: MAX_REASON - 3] + "..."
