"""The operator's own slurm.conf and cgroup.conf parameters.

`slurm-conf-parameters` and `cgroup-parameters` hold `key=value` lines, one per line; blank
lines and lines starting with `#` are ignored. Each line is checked on its own, and the first
bad one is refused naming its key:

* the key must be one slurmutils' model of the file knows (any case, as Slurm reads it),
  given once, not one the charm sets itself (`SLURM_CONF_OWNED`, `CGROUP_CONF_OWNED`), and
  one Slurm's grammar admits (`hpc_libs.slurm.grammar.admitted`: an allow-list of the keys
  whose values have a rule; the grammar module says which and why);
* the value must obey Slurm's grammar for the key (`hpc_libs.slurm.grammar`: one token, no
  whitespace, quote, `#` or backslash, plus the key's own rule);
* slurmutils must read it and write it back exactly as given, so what slurm.conf holds is
  what the operator wrote: a value can never become a second key, a second line, an
  `Include` or a node or partition definition.

There is no line continuation (a backslash is refused) and no way to name a node, a node
set or a partition. The accepted lines are merged into what the charm renders; the charm's
own keys always win (`with_slurm_conf_parameters`).
"""

from collections.abc import Callable, Mapping
from typing import Any

from hpc_libs.errors import ConfigError
from hpc_libs.slurm import grammar
from hpc_libs.slurm.ports import DAEMON_PORTS
from hpc_libs.slurm.text import literals_as_yes_no, yes_no_as_literals
from slurmutils import CGroupConfig, ModelError, SlurmConfig

MAX_REASON = 160
"""Characters of slurmutils' own explanation kept in a status message."""


def _owned(reason: str, *keys: str) -> dict[str, str]:
    return {key.lower(): reason for key in keys}


SLURM_CONF_OWNED: Mapping[str, str] = {
    **_owned(
        "is the charm's: it writes the node sets, partitions and nodes",
        "NodeSet",
        "PartitionName",
        "NodeName",
        "DownNodes",
        "FrontendName",
        "Include",
    ),
    **_owned(
        "is the charm's: the controllers are the slurmctld units", "SlurmctldHost", "SlurmctldAddr"
    ),
    **_owned(
        "is the charm's: it sets up authentication (auth/slurm, auth/jwt for tokens)",
        "AuthType",
        "AuthAltTypes",
        "AuthAltParameters",
        "AuthInfo",
        "CredType",
    ),
    **_owned(
        "is the charm's: the daemons' users own the key and state it writes",
        "SlurmUser",
        "SlurmdUser",
    ),
    **_owned(
        "is the charm's: it publishes and opens the daemons' ports",
        "SlurmctldPort",
        "SlurmdPort",
    ),
    **_owned(
        "is refused: only a restart applies TCP listening settings, and the charm applies "
        "slurm-conf-parameters with scontrol reconfigure",
        "CommunicationParameters",
    ),
    **_owned(
        "is the charm's: the integration with slurmdbd sets accounting",
        "AccountingStorageType",
        "AccountingStorageHost",
        "AccountingStorageBackupHost",
        "AccountingStorageExternalHost",
        "AccountingStoragePort",
        "AccountingStorageUser",
        "AccountingStoragePass",
        "AccountingStorageParameters",
    ),
    **_owned(
        "is the charm's: it keeps the state there (use-network-state)",
        "StateSaveLocation",
        "SlurmctldPrimaryOnProg",
        "SlurmctldPrimaryOffProg",
    ),
    **_owned(
        "is the charm's: the process-isolation option sets it",
        "ProctrackType",
        "TaskPlugin",
        "JobAcctGatherType",
    ),
    **_owned("is the charm's: GPU nodes need select/cons_tres", "SelectType"),
    **_owned(
        "is refused: slurm.conf is served to every node and readable by every user, so it "
        "holds no password",
        "JobCompPass",
    ),
    **_owned("is the charm's: slurmctld logs there", "SlurmctldLogFile"),
    "clustername": "is the charm's: use the cluster-name option",
    "maxnodecount": "is the charm's: use the max-node-count option",
    "slurmctldtimeout": "is the charm's: use the slurmctld-timeout option",
    "messagetimeout": "is the charm's: use the message-timeout option",
}
"""slurm.conf keys (lower case) refused from the operator, with why (most are the charm's)."""

CGROUP_CONF_OWNED: Mapping[str, str] = {
    "cgroupplugin": "is the charm's: the process-isolation option sets it"
}
"""cgroup.conf keys (lower case) the charm sets itself, with why."""

SECTIONS = frozenset({"downnodes", "frontendnodes", "nodes", "nodesets", "partitions"})
"""slurmutils' SlurmConfig fields that hold whole lines of their own, not one key."""

OWNED_ITEMS: Mapping[str, Mapping[str, str]] = {
    "slurmctldparameters": {"enable_configless": "is the charm's: it serves the configuration"},
}
"""Items of option-list keys the charm sets itself: the operator may set the key's others."""


def _union(operator: Any, charm: Any) -> Any:
    """Merge an option list (a dict) or a plain list: the operator's items and the charm's."""
    if isinstance(operator, dict) and isinstance(charm, dict):
        return {**operator, **charm}
    if isinstance(operator, list) and isinstance(charm, list):
        return [*operator, *(item for item in charm if item not in operator)]
    return charm


COMBINED: Mapping[str, Callable[[Any, Any], Any]] = {
    "slurmctldparameters": _union,
    "grestypes": _union,
}
"""Keys both the charm and the operator set, merged: the charm's items are always there."""


SLURM_PORTS = DAEMON_PORTS


def slurm_conf_parameters(text: str) -> dict[str, Any]:
    """Parse `slurm-conf-parameters` into slurmutils slurm.conf fields.

    Raises:
        ConfigError: A line is refused; `key` names its key.

    """
    fields = _parse(SlurmConfig, text, SLURM_CONF_OWNED)
    first = int(fields.get("firstjobid", 1))
    last = int(fields.get("maxjobid", grammar.DEFAULT_MAX_JOB_ID))
    if first > last:
        key = "FirstJobId" if "firstjobid" in fields else "MaxJobId"
        raise ConfigError(
            f"FirstJobId {first} is above MaxJobId {last} (Slurm's default MaxJobId is "
            f"{grammar.DEFAULT_MAX_JOB_ID}): slurmctld would not start",
            key=key,
        )
    if (ports := _srun_ports(fields)) is not None:
        first, last = ports
        if first <= SLURM_PORTS[1] and last >= SLURM_PORTS[0]:
            raise ConfigError(
                f"SrunPortRange {first}-{last} holds Slurm's own ports "
                f"{SLURM_PORTS[0]}-{SLURM_PORTS[1]}, which the daemons listen on",
                key="SrunPortRange",
            )
    return fields


def srun_port_range(text: str) -> tuple[int, int] | None:
    """Return the first and last port of the operator's `SrunPortRange`, None when unset.

    `text` is a valid `slurm-conf-parameters` (the config model checked it).
    """
    return _srun_ports(slurm_conf_parameters(text))


def _srun_ports(fields: Mapping[str, Any]) -> tuple[int, int] | None:
    value = fields.get("srunportrange")
    return None if value is None else grammar.port_range_bounds(str(value))


def cgroup_parameters(text: str) -> dict[str, Any]:
    """Parse `cgroup-parameters` into slurmutils cgroup.conf fields.

    Raises:
        ConfigError: A line is refused; `key` names its key.

    """
    return _parse(CGroupConfig, text, CGROUP_CONF_OWNED)


def with_slurm_conf_parameters(conf: SlurmConfig, text: str) -> SlurmConfig:
    """Return the charm's slurm.conf with the operator's `slurm-conf-parameters` added.

    The charm's keys win; an option list both set (`COMBINED`) holds the items of both.
    """
    return SlurmConfig.from_dict(_merge(slurm_conf_parameters(text), conf.dict()))


def with_cgroup_parameters(cgroup: CGroupConfig, text: str) -> CGroupConfig:
    """Return the charm's cgroup.conf with the operator's `cgroup-parameters` added."""
    return CGroupConfig.from_dict(_merge(cgroup_parameters(text), cgroup.dict()))


def _merge(operator: Mapping[str, Any], charm: Mapping[str, Any]) -> dict[str, Any]:
    """Return the charm's fields, then the operator's others: a key both set is the charm's.

    Unless it is in `COMBINED`: then it holds the items of both.
    """
    merged = dict(charm)
    for key, value in operator.items():
        if key not in charm:
            merged[key] = value
        elif key in COMBINED:
            merged[key] = COMBINED[key](value, charm[key])
    return merged


Conf = type[SlurmConfig] | type[CGroupConfig]


def _parse(model: Conf, text: str, owned: Mapping[str, str]) -> dict[str, Any]:
    """Check every line of `text` and return the fields they set, as slurmutils holds them."""
    known = _known_keys(model)
    fields: dict[str, Any] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.isalnum() or not key.isascii():
            name = line.split()[0].partition("=")[0]
            raise ConfigError(f"{name}: line {number} is not one key=value", key=name)
        lower = key.lower()
        _check_key(model, key, owned, known)
        if lower in fields:
            raise ConfigError(f"{key} is given twice", key=key)
        if any(char.isspace() for char in value):
            raise ConfigError(
                f"{key}: one key=value per line, no whitespace in the value", key=key
            )
        fields[lower] = _field(model, key, value)
        for item, reason in OWNED_ITEMS.get(lower, {}).items():
            if isinstance(fields[lower], dict) and item in fields[lower]:
                raise ConfigError(f"{key} item {item} {reason}", key=key)
    return fields


def _check_key(model: Conf, key: str, owned: Mapping[str, str], known: frozenset[str]) -> None:
    """Refuse a key the charm owns, one slurmutils does not know, or one without a rule.

    Raises:
        ConfigError: Naming the key and why.

    """
    lower = key.lower()
    if lower in owned:
        raise ConfigError(f"{key} {owned[lower]}", key=key)
    if lower not in known:
        raise ConfigError(f"unknown key {key}", key=key)
    if not grammar.admitted(model, key):
        raise ConfigError(
            f"{key} is not admitted: no rule here checks its values (see the option's "
            "description)",
            key=key,
        )


def _field(model: Conf, key: str, value: str) -> Any:
    """Check one `key=value` and return its value as slurmutils holds it.

    Raises:
        ConfigError: The value breaks Slurm's grammar, slurmutils refuses it, or slurmutils
            would not write it back exactly as given.

    """
    try:
        grammar.check_value(model, key, value)
    except grammar.GrammarError as e:
        raise ConfigError(f"invalid {key}: {e.reason}", key=key) from e
    try:
        parsed = model.from_str(yes_no_as_literals(f"{key}={value}")).dict()
        written = literals_as_yes_no(str(model.from_dict(parsed)))
    except (ModelError, ValueError, TypeError) as e:
        raise ConfigError(f"invalid {key}: {_short(str(e))}", key=key) from e
    written_key, _, written_value = written.partition("=")
    same = yes_no_as_literals(written) == yes_no_as_literals(f"{key.lower()}={value}")
    if len(parsed) != 1 or written_key != key.lower() or not same:
        raise ConfigError(
            f"invalid {key}: {value!r} would be written as {written_value!r}", key=key
        )
    return next(iter(parsed.values()))


def _known_keys(model: Conf) -> frozenset[str]:
    """Return the keys slurmutils' model knows: lower case, no underscores, as Slurm matches.

    Without slurm.conf's sections (nodes, node sets, partitions...), which are no keys.
    """
    names = {name.replace("_", "").lower() for name in model.__annotations__}
    return frozenset(names - SECTIONS)


def _short(reason: str) -> str:
    first = reason.splitlines()[0] if reason else "not a valid value"
    return first if len(first) <= MAX_REASON else first[: MAX_REASON - 3] + "..."
