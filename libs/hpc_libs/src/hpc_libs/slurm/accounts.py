r"""Slurm's associations as code: a YAML document of QoS, accounts and users, and sacctmgr.

The API (issue 40, shared with the slurmctld charm)::

    AccountsError(SlurmOpsError)              sacctmgr or squeue failed (command, stderr)
    DocumentError(AccountsError, ValueError)  .key ("users.alice.default-account"), .reason
    Document.parse(text) -> Document          YAML -> checked model (raises DocumentError)
    Document.managed() -> Managed             the names the document manages
    Managed(qos, accounts, users)             frozensets of names; to_json(), from_json(), union()
    State(qos, accounts, users)               what slurmdbd holds (Sacctmgr.read), canonical:
                                              qos: name -> settings; accounts: name ->
                                              AccountState(parent, settings, description);
                                              users: name -> UserState(default_account,
                                              admin_level, associations: account -> settings)
    desired(document) -> State                what the document describes, in that form
    Busy(associations)                        (account, user) pairs with running/pending jobs
    Change(argv, summary)                     one command: `sacctmgr --immediate --parsable2 *argv`
    Plan(changes, held)                       changes in the safe order; removals held for jobs
    Plan.managed_after(document, previously_managed) -> Managed   what to record after apply
    plan(document, state, previously_managed, *, busy, prune_unmanaged=False) -> Plan
    drift(document, state, previously_managed) -> tuple[str, ...]   lines for accounts-diff
    Sacctmgr(timeout=...).read() -> State, .busy() -> Busy, .apply(plan) -> None
                                              (SLURM_CONF from the environment, as sacctmgr)

A name is never touched by `plan` unless the document or `previously_managed` names it, or
`prune_unmanaged` (which still never touches the root account or user, and only resets
`normal`). The charm records `plan.managed_after(document, previously_managed)` once `apply`
succeeded: the document's names, and the previous ones too while removals are held.

The document (every key optional; an empty document manages nothing)::

    qos:
      short: {priority: 100, max-wall: "00:10:00", max-tres-per-user: "cpu=8",
              preempt: [scavenger], preempt-mode: requeue}
    accounts:
      physics: {description: "Physics dept", fairshare: 100, qos: [normal, short],
                default-qos: normal, max-wall: "1-00:00:00", grp-tres: "cpu=64"}
      theory: {parent: physics, fairshare: 50}
    users:
      alice: {accounts: [physics, theory], default-account: physics, admin-level: none}
      bob: {accounts: [theory]}

Keys. QoS: `priority`, `max-wall`, `max-tres-per-user`, `max-tres-per-job`,
`max-jobs-per-user`, `max-submit-jobs-per-user`, `grp-tres`, `grp-jobs`, `preempt`,
`preempt-mode`. Accounts: `parent` (an account of the document, or `root`, the default),
`description`, `fairshare`, `qos`, `default-qos`, `max-wall`, `grp-tres`, `max-tres-per-job`,
`max-jobs`, `max-submit-jobs`, `grp-jobs`. Users: `accounts` (at least one),
`default-account` (the first account unless given), `admin-level` (none, operator,
administrator), `fairshare` (of each of the user's associations).

A key left out means Slurm's default, and a reconcile puts it back: no limit, priority 0,
fairshare 1, preempt-mode cluster, no preempt, no default QoS, an account's QoS list
`[normal]`, admin level none, an account's description its name (as sacctmgr sets it;
sacctmgr keeps descriptions in lower case, and they are compared so).
Times are strings (YAML reads `10:00` unquoted as a number) in whole minutes; TRES are
`name=count` lists (`cpu=8,mem=16G,gres/gpu=2`). Account and QoS names are lower case (Slurm
lowers them). Slurm's `normal` QoS may be referenced without being defined; it is never
removed: a document that manages it no more gives it Slurm's defaults back.

What it never does: remove an association with running or pending jobs (the removal is held,
`Plan.held`, and done by a later reconcile), or touch a name neither this document nor the
previous one (`previously_managed`) managed, unless `prune_unmanaged`. Commands are batched
(`add user name=a,b,c account=x`): one per group of objects that need the same change.

Slurm's output is untrusted (an account's description may hold `|` and newlines; job
accounts are users' text): queries use `--parsable2 --noheader` and fixed `format=` field
lists, are split on "\n" only, and a line that is not a whole record of names and numbers is
skipped. The only free text read, account descriptions, is last on its line, and a
description that cannot be read exactly (its account named twice, a line after it that is no
record of an account the association query found) reads as unknown, so a reconcile sets it
again. A forged line can cost a command; what it can hide is only the rest of a hand-made
description after its first line.

Slurm shows an account's unset Max limits and default QoS as its parent's (GrpTRES, GrpJobs
and fairshare are its own): the document's values are compared so (`desired`), and an
inherited value is set again when the account moves or an ancestor changes it.

Not managed: clusters (slurmdbd's associations of every cluster are read as one), partition
associations, organisations, QoS flags, user-level QoS.
"""

import json
import logging
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
)

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm import grammar

logger = logging.getLogger(__name__)

TIMEOUT = 120
"""Seconds one sacctmgr or squeue command may take."""
ROOT = "root"
"""Slurm's root account: the parent of top-level accounts, never managed."""
NORMAL = "normal"
"""The QoS slurmdbd creates: accounts get it by default; referenced freely, never removed."""
SACCTMGR = ("sacctmgr", "--immediate", "--parsable2")
"""What every `Change.argv` follows."""


class AccountsError(SlurmOpsError):
    """sacctmgr or squeue failed, or printed what cannot be read (carries its stderr)."""


class DocumentError(AccountsError, ValueError):
    """The document (or a recorded `Managed`) is invalid.

    Attributes:
        key: The offending key, dotted ("users.alice.default-account"); empty for the whole.
        reason: Why it is refused.

    """

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}" if key else reason)
        self.key = key
        self.reason = reason


# Grammar of the document's values.

_LOWER_NAME_RE = re.compile(r"[a-z0-9_][a-z0-9_.-]{0,63}")
_USER_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_TRES_RE = re.compile(
    r"(?P<name>[a-z]+(/[A-Za-z0-9_.:-]+)?)=(?P<count>[0-9]{1,15})(?P<unit>[KMGT]?)"
)
_DESCRIPTION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.,:;()/+-]{0,127}")
_MEMORY_UNITS = {"": 1, "K": 1, "M": 1, "G": 1024, "T": 1024 * 1024}
"""Multipliers to MB (Slurm's unit for `mem`), by suffix; K rounds up to 1 MB."""

LOWER_NAME = grammar.pattern(_LOWER_NAME_RE, "a lower-case name of letters, digits, '_', '.', '-'")
USER_NAME = grammar.pattern(_USER_NAME_RE, "a user name of letters, digits, '_', '.', '-'")


def TRES(value: str) -> None:  # noqa: N802 (a rule, named as grammar's are)
    """Check a TRES limit list, `name=count[,...]` (`cpu=8,mem=16G,gres/gpu=2`).

    Not `grammar.token`: the `=` is the TRES's own. The pattern admits no other syntax.
    """
    for item in value.split(","):
        if not _TRES_RE.fullmatch(item):
            raise ValueError(f"{item!r} is not a TRES limit name=count (cpu=8, mem=16G)")


def DESCRIPTION(value: str) -> None:  # noqa: N802 (a rule, named as grammar's are)
    """Check a description: one line of plain text that sacctmgr keeps as given."""
    grammar.free_text(value)
    if not _DESCRIPTION_RE.fullmatch(value):
        raise ValueError("not up to 128 letters, digits, spaces and _.,:;()/+- (no '|' or quote)")


def _whole_minutes(value: str) -> None:
    grammar.time_value(value)
    if value.lower() in grammar.UNLIMITED_WORDS:
        raise ValueError("leave the key out for no limit")
    if grammar.time_seconds(value) % 60:
        raise ValueError(f"{value!r} is not whole minutes (Slurm keeps minutes)")


def _checked(rule: grammar.Validator) -> Callable[[str], str]:
    return grammar.returning(rule)


def _names_checked(rule: grammar.Validator) -> Callable[[tuple[str, ...]], tuple[str, ...]]:
    def check(values: tuple[str, ...]) -> tuple[str, ...]:
        for value in values:
            rule(value)
        if len(set(values)) != len(values):
            raise ValueError("a name is listed twice")
        return values

    return check


Time = Annotated[StrictStr, AfterValidator(_checked(_whole_minutes))]
TresLimit = Annotated[StrictStr, AfterValidator(_checked(TRES))]
Count = Annotated[StrictInt, Field(ge=0, le=2**32 - 3)]
Priority = Annotated[StrictInt, Field(ge=0, le=2**32 - 3)]
Fairshare = Annotated[StrictInt, Field(ge=1, le=2**32 - 3)]
QosNames = Annotated[tuple[StrictStr, ...], AfterValidator(_names_checked(LOWER_NAME))]
AccountName = Annotated[StrictStr, AfterValidator(_checked(LOWER_NAME))]
QosName = Annotated[StrictStr, AfterValidator(_checked(LOWER_NAME))]
UserName = Annotated[StrictStr, AfterValidator(_checked(USER_NAME))]
Description = Annotated[StrictStr, AfterValidator(_checked(DESCRIPTION))]


def _yaml_off(value: object) -> object:
    """YAML 1.1 reads an unquoted `off` as false: it means Slurm's `off` here."""
    return "off" if value is False else value


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=False,
        alias_generator=lambda n: n.replace("_", "-"),
        defer_build=True,
    )


class QosSpec(_Spec):
    """One QoS of the document."""

    priority: Priority | None = None
    max_wall: Time | None = None
    max_tres_per_user: TresLimit | None = None
    max_tres_per_job: TresLimit | None = None
    max_jobs_per_user: Count | None = None
    max_submit_jobs_per_user: Count | None = None
    grp_tres: TresLimit | None = None
    grp_jobs: Count | None = None
    preempt: QosNames = ()
    preempt_mode: Annotated[
        Literal["off", "cancel", "requeue", "suspend", "cluster"] | None,
        BeforeValidator(_yaml_off),
    ] = None


class AccountSpec(_Spec):
    """One account of the document."""

    parent: AccountName = ROOT
    description: Description | None = None
    fairshare: Fairshare | None = None
    qos: QosNames = (NORMAL,)
    default_qos: QosName | None = None
    max_wall: Time | None = None
    grp_tres: TresLimit | None = None
    max_tres_per_job: TresLimit | None = None
    max_jobs: Count | None = None
    max_submit_jobs: Count | None = None
    grp_jobs: Count | None = None


class UserSpec(_Spec):
    """One user of the document: their associations are (account, user) for each account."""

    accounts: Annotated[
        tuple[StrictStr, ...], Field(min_length=1), AfterValidator(_names_checked(LOWER_NAME))
    ]
    default_account: AccountName | None = None
    admin_level: Literal["none", "operator", "administrator"] = "none"
    fairshare: Fairshare | None = None

    @property
    def default(self) -> str:
        """The default account: as given, else the first listed."""
        return self.default_account or self.accounts[0]


@dataclass(frozen=True)
class Managed:
    """The names a document manages (recorded by the charm after each successful apply)."""

    qos: frozenset[str] = frozenset()
    accounts: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()

    def union(self, other: "Managed") -> "Managed":
        """Both sets of names."""
        return Managed(
            self.qos | other.qos, self.accounts | other.accounts, self.users | other.users
        )

    def to_json(self) -> str:
        """Compact, sorted JSON, for a databag."""
        return json.dumps(
            {
                "qos": sorted(self.qos),
                "accounts": sorted(self.accounts),
                "users": sorted(self.users),
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> "Managed":
        """Read `to_json`'s output back, checking every name ("" reads as nothing managed).

        Raises:
            DocumentError: Not JSON of that shape, or a name Slurm's grammar refuses.

        """
        try:
            record = _ManagedRecord.model_validate_json(text or "{}")
        except ValidationError as e:
            error = e.errors()[0]
            key = ".".join(["managed", *(str(part) for part in error["loc"])])
            raise DocumentError(key, _reason(error["msg"])) from e
        return cls(frozenset(record.qos), frozenset(record.accounts), frozenset(record.users))


class _ManagedRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    qos: tuple[Annotated[StrictStr, AfterValidator(_checked(LOWER_NAME))], ...] = ()
    accounts: tuple[Annotated[StrictStr, AfterValidator(_checked(LOWER_NAME))], ...] = ()
    users: tuple[Annotated[StrictStr, AfterValidator(_checked(USER_NAME))], ...] = ()


class Document(_Spec):
    """The checked document: build it with `parse`."""

    qos: dict[QosName, QosSpec] = Field(default_factory=dict[str, QosSpec])
    accounts: dict[AccountName, AccountSpec] = Field(default_factory=dict[str, AccountSpec])
    users: dict[UserName, UserSpec] = Field(default_factory=dict[str, UserSpec])

    @classmethod
    def parse(cls, text: str) -> "Document":
        """Read and check a YAML document; an empty text is the empty document.

        Raises:
            DocumentError: naming the first offending key; nothing of the document is usable.

        """
        try:
            data: Any = yaml.safe_load(text) if text.strip() else {}
        except yaml.YAMLError as e:
            raise DocumentError("", f"not YAML: {e}") from e
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise DocumentError("", "not a mapping of qos, accounts and users")
        try:
            document = cls.model_validate(data)
        except ValidationError as e:
            error = e.errors()[0]
            key = ".".join(str(part) for part in error["loc"] if part != "[key]")
            raise DocumentError(key, _reason(error["msg"])) from e
        document.check_references()
        return document

    def check_references(self) -> None:
        """Check what names name: preempted QoS, parents, QoS lists, accounts and defaults.

        Raises:
            DocumentError: naming the key.

        """
        if ROOT in self.accounts:
            raise DocumentError(f"accounts.{ROOT}", "is Slurm's root account, not managed")
        qos = set(self.qos) | {NORMAL}
        for name, spec in self.qos.items():
            _among(
                f"qos.{name}.preempt", spec.preempt, qos - {name}, "another QoS of the document"
            )
        for name, account in self.accounts.items():
            key = f"accounts.{name}"
            _among(
                f"{key}.parent",
                (account.parent,),
                {*self.accounts, ROOT},
                "an account of the document or root",
            )
            _among(f"{key}.qos", account.qos, qos, "a QoS of the document or normal")
            if account.default_qos is not None:
                _among(
                    f"{key}.default-qos",
                    (account.default_qos,),
                    set(account.qos),
                    "in the account's qos",
                )
            self._check_no_cycle(name)
        for name, user in self.users.items():
            _among(
                f"users.{name}.accounts",
                user.accounts,
                set(self.accounts),
                "an account of the document",
            )
            _among(
                f"users.{name}.default-account",
                (user.default,),
                set(user.accounts),
                "among the user's accounts",
            )

    def _check_no_cycle(self, name: str) -> None:
        seen = {name}
        parent = self.accounts[name].parent
        while parent != ROOT:
            if parent in seen:
                raise DocumentError(f"accounts.{name}.parent", "accounts are their own ancestors")
            seen.add(parent)
            parent = self.accounts[parent].parent

    def managed(self) -> Managed:
        """Return the names this document manages."""
        return Managed(frozenset(self.qos), frozenset(self.accounts), frozenset(self.users))

    def depth(self, account: str) -> int:
        """How many ancestors below root `account` has (a top-level account: 0)."""
        depth = 0
        parent = self.accounts[account].parent
        while parent != ROOT:
            depth += 1
            parent = self.accounts[parent].parent
        return depth


def _among(key: str, names: Iterable[str], allowed: set[str], what: str) -> None:
    for name in names:
        if name not in allowed:
            raise DocumentError(key, f"{name!r} is not {what}")


def _reason(message: str) -> str:
    return message.removeprefix("Value error, ")


# What slurmdbd holds, in a canonical form both sides are compared in.

Settings = Mapping[str, str]
"""sacctmgr's `set` keyword -> canonical value ("" when unset: Slurm's default)."""


@dataclass(frozen=True)
class AccountState:
    """An account's association: parent, settings, description (None: unknown or unmanaged)."""

    parent: str
    settings: Settings
    description: str | None = None


@dataclass(frozen=True)
class UserState:
    """A user: default account, admin level, and the settings of each association by account."""

    default_account: str
    admin_level: str
    associations: Mapping[str, Settings]


@dataclass(frozen=True)
class State:
    """What slurmdbd holds (or what a document wants), in canonical form."""

    qos: Mapping[str, Settings] = field(default_factory=dict[str, Settings])
    accounts: Mapping[str, AccountState] = field(default_factory=dict[str, AccountState])
    users: Mapping[str, UserState] = field(default_factory=dict[str, UserState])


@dataclass(frozen=True)
class Busy:
    """The (account, user) associations that have running or pending jobs."""

    associations: frozenset[tuple[str, str]] = frozenset()

    def user(self, user: str, account: str) -> bool:
        """Whether `user` has jobs in `account`."""
        return (account, user) in self.associations

    def accounts(self) -> frozenset[str]:
        """Return the accounts with jobs (not their ancestors)."""
        return frozenset(account for account, _ in self.associations)


@dataclass(frozen=True)
class Change:
    """One sacctmgr command: `sacctmgr --immediate --parsable2 *argv`."""

    argv: tuple[str, ...]
    summary: str


@dataclass(frozen=True)
class Plan:
    """The changes in the safe order, and the removals held back by jobs."""

    changes: tuple[Change, ...] = ()
    held: tuple[str, ...] = ()

    def managed_after(self, document: "Document", previously_managed: Managed) -> Managed:
        """Return the names to record once this plan is applied.

        The document's, and while a removal is held the previous names too, so that a later
        reconcile still removes what the jobs held back.
        """
        managed = document.managed()
        return managed.union(previously_managed) if self.held else managed


# The keys each kind manages: the document's field, sacctmgr's `set` keyword, the `format=`
# field that reads it back, how its values read, and Slurm's default (canonical).


@dataclass(frozen=True)
class _Key:
    attribute: str
    keyword: str
    column: str
    kind: Literal["int", "time", "tres", "names", "word"]
    default: str = ""
    inherited: bool = False
    """Left unset, an account shows its parent's value (Slurm's hierarchical Max limits)."""


_QOS_KEYS = (
    _Key("priority", "priority", "Priority", "int", "0"),
    _Key("max_wall", "maxwall", "MaxWall", "time"),
    _Key("max_tres_per_user", "maxtresperuser", "MaxTRESPU", "tres"),
    _Key("max_tres_per_job", "maxtresperjob", "MaxTRES", "tres"),
    _Key("max_jobs_per_user", "maxjobsperuser", "MaxJobsPU", "int"),
    _Key("max_submit_jobs_per_user", "maxsubmitjobsperuser", "MaxSubmitPU", "int"),
    _Key("grp_tres", "grptres", "GrpTRES", "tres"),
    _Key("grp_jobs", "grpjobs", "GrpJobs", "int"),
    _Key("preempt_mode", "preemptmode", "PreemptMode", "word", "cluster"),
    _Key("preempt", "preempt", "Preempt", "names"),
)
_ACCOUNT_KEYS = (
    _Key("fairshare", "fairshare", "Fairshare", "int", "1"),
    _Key("qos", "qos", "QOS", "names", NORMAL),
    _Key("default_qos", "defaultqos", "DefaultQOS", "word", inherited=True),
    _Key("max_wall", "maxwall", "MaxWall", "time", inherited=True),
    _Key("grp_tres", "grptres", "GrpTRES", "tres"),
    _Key("max_tres_per_job", "maxtres", "MaxTRES", "tres", inherited=True),
    _Key("max_jobs", "maxjobs", "MaxJobs", "int", inherited=True),
    _Key("max_submit_jobs", "maxsubmitjobs", "MaxSubmit", "int", inherited=True),
    _Key("grp_jobs", "grpjobs", "GrpJobs", "int"),
)
_USER_KEYS = (_ACCOUNT_KEYS[0],)
"""What a user association manages: its fairshare."""
_UNKNOWN = "?"
"""A setting's value when it cannot be known (it differs from every value)."""


def _canonical(kind: str, value: str) -> str:
    """`value` as Slurm's default-free, sorted, lower-case form ("" unset).

    Raises:
        ValueError: `value` is not of `kind`.

    """
    if value == "":
        return ""
    if kind == "int":
        if not value.isdecimal() or not value.isascii():
            raise ValueError(f"{value!r} is not a number")
        return str(int(value))
    if kind == "time":
        return str(grammar.time_seconds(value) // 60)
    if kind == "tres":
        TRES(value)
        return ",".join(f"{name}={count}" for name, count in sorted(_tres(value).items()))
    LOWER_NAME(value.lower()) if kind == "word" else grammar.list_of(LOWER_NAME)(value.lower())
    return ",".join(sorted(set(value.lower().split(","))))


def _tres(value: str) -> dict[str, int]:
    """Read a TRES list by name: `mem` in MB, other counts as given."""
    counts: dict[str, int] = {}
    for item in value.split(","):
        match = _TRES_RE.fullmatch(item)
        if match is None:
            raise ValueError(f"{item!r} is not a TRES limit")
        count, unit = int(match["count"]), match["unit"]
        if match["name"] == "mem":
            count = -(-count // 1024) if unit == "K" else count * _MEMORY_UNITS[unit]
        elif unit:
            raise ValueError(f"{item!r}: only mem takes a unit")
        counts[match["name"]] = count
    return counts


def _desired(spec: BaseModel, keys: tuple[_Key, ...]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for key in keys:
        value: object = getattr(spec, key.attribute)
        text = ",".join(value) if isinstance(value, tuple) else "" if value is None else str(value)  # pyright: ignore[reportUnknownArgumentType]
        settings[key.keyword] = _canonical(key.kind, text) or key.default
    return settings


def _inherited(settings: Settings, parent: Settings) -> dict[str, str]:
    """Return `settings` with each inherited key left unset showing `parent`'s value."""
    return {
        key.keyword: parent[key.keyword]
        if key.inherited and not settings[key.keyword]
        else settings[key.keyword]
        for key in _ACCOUNT_KEYS
    }


def desired(document: Document) -> State:
    """Return the state `document` describes, in the canonical form `Sacctmgr.read` gives."""
    accounts: dict[str, AccountState] = {}
    for name in sorted(document.accounts, key=document.depth):
        spec = document.accounts[name]
        settings = _desired(spec, _ACCOUNT_KEYS)
        if spec.parent != ROOT:
            settings = _inherited(settings, accounts[spec.parent].settings)
        # sacctmgr keeps descriptions in lower case.
        accounts[name] = AccountState(spec.parent, settings, (spec.description or name).lower())
    return State(
        qos={name: _desired(spec, _QOS_KEYS) for name, spec in document.qos.items()},
        accounts=accounts,
        users={
            name: UserState(
                spec.default,
                spec.admin_level,
                {account: _desired(spec, _USER_KEYS) for account in spec.accounts},
            )
            for name, spec in document.users.items()
        },
    )


def _defaults(keys: tuple[_Key, ...]) -> dict[str, str]:
    return {key.keyword: key.default for key in keys}


# Planning.


@dataclass(frozen=True)
class _Scope:
    """The names a plan may touch, and the document's own (the rest may only be removed)."""

    qos: frozenset[str]
    accounts: frozenset[str]
    users: frozenset[str]

    @classmethod
    def of(cls, document: Document, state: State, previously: Managed, prune: bool) -> "_Scope":
        names = document.managed().union(previously)
        if prune:
            names = names.union(
                Managed(frozenset(state.qos), frozenset(state.accounts), frozenset(state.users))
            )
        return cls(
            names.qos,
            names.accounts - {ROOT},
            names.users - {ROOT},
        )


def _wanted(document: Document, scope: _Scope) -> State:
    """Return what `document` says, and Slurm's defaults for `normal` if it manages it no more.

    `normal` is never removed: dropped from the document, it gets its defaults back.
    """
    want = desired(document)
    if NORMAL in scope.qos and NORMAL not in want.qos:
        return State({**want.qos, NORMAL: _defaults(_QOS_KEYS)}, want.accounts, want.users)
    return want


def _names(names: Iterable[str]) -> str:
    return ",".join(sorted(names))


def _assignments(changes: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    return tuple(f"{keyword}={value}" for keyword, value in sorted(changes))


def _grouped(
    wanted: Mapping[str, frozenset[tuple[str, str]]], *, empty: bool = False
) -> list[tuple[frozenset[tuple[str, str]], list[str]]]:
    """Return names grouped by the assignments they need, in a stable order.

    A name that needs none is left out, unless `empty` (names to add with Slurm's defaults).
    """
    groups: dict[frozenset[tuple[str, str]], list[str]] = {}
    for name in sorted(wanted):
        if wanted[name] or empty:
            groups.setdefault(wanted[name], []).append(name)
    return sorted(groups.items(), key=lambda item: (sorted(item[0]), item[1]))


def _setting(key: _Key, old: str, new: str) -> tuple[str, str]:
    """Return the `keyword=value` pair that turns `old` into `new`.

    sacctmgr clears a limit with -1, a TRES limit name by name (`cpu=-1`; `grptres=-1` is
    refused), and a list with an empty value (`preempt=`; it refuses `''` from argv, and
    after `preempt-=a` it refuses the next QoS that preempts this one, seeing a loop).
    """
    if key.kind == "tres":
        known = old not in ("", _UNKNOWN)
        dropped = set(_tres(old)) - set(_tres(new) if new else {}) if known else set[str]()
        cleared = [f"{name}=-1" for name in sorted(dropped)]
        return key.keyword, ",".join([part for part in (new, *cleared) if part])
    if key.kind == "names":
        return key.keyword, new
    return key.keyword, new or "-1"


def _settings_diff(
    keys: tuple[_Key, ...], old: Settings, new: Settings
) -> frozenset[tuple[str, str]]:
    return frozenset(
        _setting(key, old.get(key.keyword, key.default), new[key.keyword])
        for key in keys
        if old.get(key.keyword, key.default) != new[key.keyword]
    )


class _Planner:
    """Builds a plan kind by kind, in the safe order."""

    def __init__(self, document: Document, state: State, scope: _Scope, busy: Busy) -> None:
        self.document = document
        self.want = _wanted(document, scope)
        self.state = state
        self.scope = scope
        self.busy = busy
        self.changes: list[Change] = []
        self.held: list[str] = []

    def run(self, verb: str, kind: str, *argv: str) -> None:
        self.changes.append(Change((verb, kind, *argv), " ".join((verb, kind, *argv))))

    def modify(
        self, kind: str, where: tuple[str, ...], assignments: Iterable[tuple[str, str]]
    ) -> None:
        self.run("modify", kind, "where", *where, "set", *_assignments(assignments))

    def qos(self) -> None:
        new = {name: s for name, s in self.want.qos.items() if name not in self.state.qos}
        defaults = _defaults(_QOS_KEYS)
        adds = {
            name: _settings_diff(_QOS_KEYS, defaults, {**settings, "preempt": ""})
            for name, settings in new.items()
        }
        for assignments, names in _grouped(adds, empty=True):
            self.run("add", "qos", f"name={_names(names)}", *_assignments(assignments))
        added = {name: {**settings, "preempt": ""} for name, settings in new.items()}
        current = {**self.state.qos, **added}
        wanted = {
            name: _settings_diff(_QOS_KEYS, current[name], s) for name, s in self.want.qos.items()
        }
        for assignments, names in _grouped(wanted):
            self.modify("qos", (f"name={_names(names)}",), assignments)

    def accounts(self) -> None:
        new = [name for name in self.want.accounts if name not in self.state.accounts]
        defaults = _defaults(_ACCOUNT_KEYS)
        groups: dict[tuple[int, str, frozenset[tuple[str, str]]], list[str]] = {}
        for name in sorted(new):
            account = self.want.accounts[name]
            if account.parent != ROOT:
                inherited = _inherited(defaults, self.want.accounts[account.parent].settings)
            else:
                inherited = defaults
            given = set(_settings_diff(_ACCOUNT_KEYS, inherited, account.settings)) | {
                ("qos", account.settings["qos"])
            }
            if account.description not in (None, name):
                given.add(("description", account.description))
            groups.setdefault(
                (self.document.depth(name), account.parent, frozenset(given)), []
            ).append(name)
        for (_, parent, given), names in sorted(groups.items(), key=lambda g: (g[0][0], g[1])):
            self.run(
                "add", "account", f"name={_names(names)}", f"parent={parent}", *_assignments(given)
            )
        self._modify_accounts()

    def _modify_accounts(self) -> None:
        moves: dict[str, frozenset[tuple[str, str]]] = {}
        wanted: dict[str, frozenset[tuple[str, str]]] = {}
        for name, account in self.want.accounts.items():
            old = self.state.accounts.get(name)
            if old is None:
                continue
            if old.parent != account.parent:
                moves[name] = frozenset({("parent", account.parent)})
            settings = self._known(name, old)
            diff = set(_settings_diff(_ACCOUNT_KEYS, settings, account.settings))
            if account.description is not None and old.description != account.description:
                diff.add(("description", account.description))
            wanted[name] = frozenset(diff)
        for assignments, names in [*_grouped(moves), *_grouped(wanted)]:
            self.modify("account", (f"name={_names(names)}",), assignments)

    def _known(self, name: str, old: AccountState) -> Settings:
        """Return what is known of account `name`'s settings once its ancestors changed.

        Slurm shows an unset inherited limit as the parent's value: one that reads as the
        document wants may be an ancestor's shown through, and change with it. It is set
        again (unknown) when the account moves or an ancestor changes that key, unless both
        are unset TRES (no names to clear).
        """
        account = self.want.accounts[name]
        settings = dict(old.settings)
        for key in _ACCOUNT_KEYS:
            value = account.settings[key.keyword]
            shown = key.inherited and old.settings[key.keyword] == value
            if shown and (value or key.kind != "tres") and self._ancestry_changes(name, key, old):
                settings[key.keyword] = _UNKNOWN
        return settings

    def _ancestry_changes(self, name: str, key: _Key, old: AccountState) -> bool:
        """Whether `name` moves, or an ancestor of it moves or changes `key`, in this plan."""
        if old.parent != self.want.accounts[name].parent:
            return True
        parent = old.parent
        while parent != ROOT:
            was, wants = self.state.accounts.get(parent), self.want.accounts[parent]
            if was is None or was.parent != wants.parent:
                return True
            if was.settings[key.keyword] != wants.settings[key.keyword]:
                return True
            parent = wants.parent
        return False

    def users(self) -> None:
        current = dict(self.state.users)
        adds: dict[str, frozenset[tuple[str, str]]] = {}
        for name, user in self.want.users.items():
            for account, settings in user.associations.items():
                if account not in current.get(name, UserState("", "", {})).associations:
                    assignments = _settings_diff(_USER_KEYS, _defaults(_USER_KEYS), settings)
                    adds[f"{account}\0{name}"] = frozenset({("account", account), *assignments})
        added: dict[str, UserState] = {}
        for assignments, keys in _grouped(adds):
            names = [key.split("\0")[1] for key in keys]
            self.run("add", "user", f"name={_names(names)}", *_assignments(assignments))
            account = dict(assignments)["account"]
            for name in names:
                before = added.get(name) or current.get(name) or UserState(account, "none", {})
                settings = {
                    **_defaults(_USER_KEYS),
                    **dict(a for a in assignments if a[0] != "account"),
                }
                added[name] = UserState(
                    before.default_account,
                    before.admin_level,
                    {**before.associations, account: settings},
                )
        current |= added
        self._modify_users(current)

    def _modify_users(self, current: Mapping[str, UserState]) -> None:
        defaults: dict[str, frozenset[tuple[str, str]]] = {}
        levels: dict[str, frozenset[tuple[str, str]]] = {}
        shares: dict[str, frozenset[tuple[str, str]]] = {}
        for name, user in self.want.users.items():
            old = current[name]
            if old.default_account != user.default_account:
                defaults[name] = frozenset({("defaultaccount", user.default_account)})
            if old.admin_level != user.admin_level:
                levels[name] = frozenset({("adminlevel", user.admin_level)})
            for account, settings in user.associations.items():
                diff = _settings_diff(_USER_KEYS, old.associations[account], settings)
                shares[f"{account}\0{name}"] = diff
        for assignments, names in [*_grouped(defaults), *_grouped(levels)]:
            self.modify("user", (f"name={_names(names)}",), assignments)
        by_account: dict[tuple[str, frozenset[tuple[str, str]]], list[str]] = {}
        for assignments, keys in _grouped(shares):
            for key in keys:
                account, name = key.split("\0")
                by_account.setdefault((account, assignments), []).append(name)
        for (account, assignments), names in sorted(
            by_account.items(), key=lambda g: (g[0][0], sorted(g[0][1]))
        ):
            self.modify("user", (f"name={_names(names)}", f"account={account}"), assignments)

    def remove_associations(self) -> None:
        whole: list[str] = []
        by_account: dict[str, list[str]] = {}
        for name in sorted(self.scope.users & set(self.state.users)):
            wanted = self.want.users.get(name)
            kept = set(wanted.associations) if wanted is not None else set[str]()
            dropped = sorted(set(self.state.users[name].associations) - kept)
            busy = [account for account in dropped if self.busy.user(name, account)]
            self.held.extend(f"user {name} in account {account}: it has jobs" for account in busy)
            if name not in self.want.users and not busy:
                whole.append(name)
                continue
            for account in dropped:
                if account not in busy:
                    by_account.setdefault(account, []).append(name)
        for account, names in sorted(by_account.items()):
            self.run("remove", "user", "where", f"name={_names(names)}", f"account={account}")
        if whole:
            self.run("remove", "user", "where", f"name={_names(whole)}")

    def remove_accounts(self) -> None:
        gone = (self.scope.accounts & set(self.state.accounts)) - set(self.want.accounts)
        held = self._busy_accounts() & gone
        for name in sorted(held):
            self.held.append(f"account {name}: it or an account below it has jobs")
        by_depth: dict[int, list[str]] = {}
        for name in gone - held:
            by_depth.setdefault(_state_depth(self.state, name), []).append(name)
        for _, names in sorted(by_depth.items(), reverse=True):
            self.run("remove", "account", "where", f"name={_names(names)}")

    def _busy_accounts(self) -> set[str]:
        """Return the accounts with jobs, and their ancestors."""
        busy: set[str] = set()
        for each in self.busy.accounts():
            account = each
            while account in self.state.accounts and account not in busy and account != ROOT:
                busy.add(account)
                account = self.state.accounts[account].parent
        return busy

    def remove_qos(self) -> None:
        gone = (self.scope.qos & set(self.state.qos)) - set(self.want.qos) - {NORMAL}
        if gone:
            self.run("remove", "qos", "where", f"name={_names(gone)}")


def _state_depth(state: State, account: str) -> int:
    depth = 0
    seen = {account}
    parent = state.accounts[account].parent
    while parent in state.accounts and parent not in seen and parent != ROOT:
        depth += 1
        seen.add(parent)
        parent = state.accounts[parent].parent
    return depth


def plan(
    document: Document,
    state: State,
    previously_managed: Managed,
    *,
    busy: Busy,
    prune_unmanaged: bool = False,
) -> Plan:
    """Return the commands that make `state` what `document` says, for the names it may touch.

    In the safe order: add and modify QoS; add accounts (parents first) and modify them; add
    users and associations and modify them; then remove associations, accounts (children
    first) and QoS. A removal whose association has jobs (`busy`) is held, not planned.
    """
    planner = _Planner(
        document, state, _Scope.of(document, state, previously_managed, prune_unmanaged), busy
    )
    planner.qos()
    planner.accounts()
    planner.users()
    planner.remove_associations()
    planner.remove_accounts()
    planner.remove_qos()
    return Plan(tuple(planner.changes), tuple(planner.held))


def _shown(value: str | None) -> str:
    """Return a value for a drift line: None is a description that could not be read."""
    if value is None:
        return "unreadable"
    return "unset" if value == "" else repr(value) if " " in value else value


def _differs(what: str, key: str, had: str | None, wants: str | None) -> str:
    return f"{what}: {key} is {_shown(had)}, the document says {_shown(wants)}"


def _drift_settings(what: str, keys: tuple[_Key, ...], old: Settings, new: Settings) -> list[str]:
    lines: list[str] = []
    for key in keys:
        had = old.get(key.keyword, key.default)
        if had != new[key.keyword]:
            field_name = key.attribute.replace("_", "-")
            lines.append(_differs(what, field_name, had, new[key.keyword]))
    return lines


def drift(document: Document, state: State, previously_managed: Managed) -> tuple[str, ...]:
    """Return one line per managed name and key where slurmdbd differs from `document`."""
    scope = _Scope.of(document, state, previously_managed, prune=False)
    want = _wanted(document, scope)
    lines: list[str] = []
    for name in sorted(scope.qos):
        lines += _drift_object(f"qos {name}", name in state.qos, name in want.qos)
        if name in state.qos and name in want.qos:
            lines += _drift_settings(f"qos {name}", _QOS_KEYS, state.qos[name], want.qos[name])
    for name in sorted(scope.accounts):
        lines += _drift_object(f"account {name}", name in state.accounts, name in want.accounts)
        if name in state.accounts and name in want.accounts:
            lines += _drift_account(name, state.accounts[name], want.accounts[name])
    for name in sorted(scope.users):
        lines += _drift_object(f"user {name}", name in state.users, name in want.users)
        if name in state.users and name in want.users:
            lines += _drift_user(name, state.users[name], want.users[name])
    return tuple(lines)


def _drift_object(what: str, present: bool, wanted: bool) -> list[str]:
    if wanted and not present:
        return [f"{what}: missing"]
    if present and not wanted:
        return [f"{what}: present, the document removed it"]
    return []


def _drift_account(name: str, old: AccountState, new: AccountState) -> list[str]:
    lines = _drift_settings(f"account {name}", _ACCOUNT_KEYS, old.settings, new.settings)
    if old.parent != new.parent:
        lines.insert(0, _differs(f"account {name}", "parent", old.parent, new.parent))
    if old.description != new.description:
        lines.append(_differs(f"account {name}", "description", old.description, new.description))
    return lines


def _drift_user(name: str, old: UserState, new: UserState) -> list[str]:
    what = f"user {name}"
    lines: list[str] = []
    for account in sorted(set(new.associations) - set(old.associations)):
        lines.append(f"{what}: not in account {account}")
    for account in sorted(set(old.associations) - set(new.associations)):
        lines.append(f"{what}: in account {account}, the document removed it")
    if old.default_account != new.default_account:
        lines.append(_differs(what, "default-account", old.default_account, new.default_account))
    if old.admin_level != new.admin_level:
        lines.append(_differs(what, "admin-level", old.admin_level, new.admin_level))
    for account in sorted(set(new.associations) & set(old.associations)):
        lines += _drift_settings(
            f"{what} in account {account}",
            _USER_KEYS,
            old.associations[account],
            new.associations[account],
        )
    return lines


# Reading slurmdbd and running sacctmgr.

QOS_FORMAT = ("Name", *(key.column for key in _QOS_KEYS))
ASSOC_FORMAT = (
    "Account",
    "User",
    "Partition",
    "ParentName",
    *(key.column for key in _ACCOUNT_KEYS),
)
USER_FORMAT = ("User", "DefaultAccount", "AdminLevel")
DESCRIPTION_FORMAT = ("Account", "Description")
_ADMIN_LEVELS = {
    "none": "none",
    "operator": "operator",
    "administrator": "administrator",
    "": "none",
}
_NAME_FIELD_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")


def show(what: str, columns: tuple[str, ...]) -> list[str]:
    """`sacctmgr show <what>` printing `columns`, one record a line, no header."""
    return ["sacctmgr", "--parsable2", "--noheader", "show", what, f"format={','.join(columns)}"]


BUSY_QUERY = ["squeue", "--all", "--noheader", "--format=%u|%a"]
"""Users and accounts of active jobs: the user (a login name) first, the account (users'
text without enforcement) last."""


def _records(output: str, columns: tuple[str, ...]) -> list[list[str]]:
    """Return the lines of `output` that are whole records: `columns` fields each."""
    records: list[list[str]] = []
    for line in output.split("\n"):
        fields = line.split("|")
        if len(fields) != len(columns):
            if line:
                logger.warning("skipped a line of sacctmgr output that is no whole record")
            continue
        records.append(fields)
    return records


def parse_qos(output: str) -> dict[str, Settings]:
    """Read `show qos` output (`QOS_FORMAT`): QoS by name, canonical settings."""
    qos: dict[str, Settings] = {}
    for fields in _records(output, QOS_FORMAT):
        settings = _read_settings(_QOS_KEYS, fields[1:])
        if _NAME_FIELD_RE.fullmatch(fields[0]) and settings is not None:
            qos[fields[0].lower()] = settings
    return qos


def _read_settings(keys: tuple[_Key, ...], fields: list[str]) -> Settings | None:
    try:
        return {
            key.keyword: _canonical(key.kind, value) or key.default
            for key, value in zip(keys, fields, strict=True)
        }
    except ValueError:
        logger.warning("skipped a record of sacctmgr output with an unreadable value")
        return None


def parse_associations(
    output: str,
) -> tuple[dict[str, AccountState], dict[str, dict[str, Settings]]]:
    """Read `show association` output: account associations, and user associations by user."""
    accounts: dict[str, AccountState] = {}
    users: dict[str, dict[str, Settings]] = {}
    for account, user, partition, parent, *values in _records(output, ASSOC_FORMAT):
        names_ok = all(
            _NAME_FIELD_RE.fullmatch(n) for n in (account, *filter(None, (user, parent)))
        )
        settings = _read_settings(_ACCOUNT_KEYS, values)
        if partition or not names_ok or settings is None:
            continue
        if user:
            users.setdefault(user, {})[account] = {k: settings[k] for k in _defaults(_USER_KEYS)}
        else:
            accounts[account] = AccountState(parent, settings)
    return accounts, users


def parse_users(
    output: str, associations: Mapping[str, Mapping[str, Settings]]
) -> dict[str, UserState]:
    """Read `show user` output (`USER_FORMAT`) with each user's associations."""
    users: dict[str, UserState] = {}
    for name, default, level in _records(output, USER_FORMAT):
        if _NAME_FIELD_RE.fullmatch(name) and level.lower() in _ADMIN_LEVELS:
            users[name] = UserState(
                default, _ADMIN_LEVELS[level.lower()], associations.get(name, {})
            )
    return users


def parse_descriptions(output: str, accounts: Collection[str]) -> dict[str, str | None]:
    """Read `show account format=Account,Description`: the description of each of `accounts`.

    A description is free text and may hold `|` and newlines: it is last on its line, and
    reads as None (unknown) when a line follows it that is no record of one of `accounts`
    (the accounts the association query found), or when its account's name repeats.
    """
    descriptions: dict[str, str | None] = {}
    last: str | None = None
    for line in output.split("\n"):
        name, bar, text = line.partition("|")
        if bar and name in accounts:
            descriptions[name] = None if name in descriptions else text
            last = name
        elif line and last is not None:
            descriptions[last] = None
    return descriptions


def parse_busy(output: str) -> Busy:
    """Read `BUSY_QUERY`'s answer: lines `user|account`; others (forged, torn) are skipped."""
    pairs: set[tuple[str, str]] = set()
    for line in output.split("\n"):
        user, bar, account = line.partition("|")
        if bar and _NAME_FIELD_RE.fullmatch(user) and _NAME_FIELD_RE.fullmatch(account):
            pairs.add((account.lower(), user))
    return Busy(frozenset(pairs))


class Sacctmgr:
    """Runs sacctmgr and squeue (argv lists, no shell); every failure is an `AccountsError`."""

    def __init__(self, *, timeout: float = TIMEOUT) -> None:
        self.timeout = timeout

    def _run(self, argv: list[str], what: str) -> str:
        try:
            return host.run(argv, timeout=self.timeout).stdout
        except SlurmOpsError as e:
            raise AccountsError.restated(what, e) from e

    def read(self) -> State:
        """Read what slurmdbd holds: four queries (QoS, associations, users, descriptions).

        Raises:
            AccountsError: sacctmgr failed (slurmdbd down, say), with its stderr.

        """
        qos = parse_qos(self._run(show("qos", QOS_FORMAT), "cannot read QoS"))
        assoc = self._run(show("association", ASSOC_FORMAT), "cannot read associations")
        accounts, associations = parse_associations(assoc)
        users = parse_users(
            self._run(show("user", USER_FORMAT), "cannot read users"), associations
        )
        descriptions = parse_descriptions(
            self._run(show("account", DESCRIPTION_FORMAT), "cannot read accounts"), accounts
        )
        return State(
            qos,
            {
                name: AccountState(a.parent, a.settings, descriptions.get(name))
                for name, a in accounts.items()
            },
            users,
        )

    def busy(self) -> Busy:
        """Return the associations with running or pending jobs (one squeue).

        Raises:
            AccountsError: squeue failed (slurmctld down, say): nothing may be removed then.

        """
        return parse_busy(self._run(BUSY_QUERY, "cannot list jobs"))

    def apply(self, plan: Plan) -> None:
        """Run `plan`'s changes in order; stop at the first failure.

        Raises:
            AccountsError: carrying the failed command and sacctmgr's stderr.

        """
        for change in plan.changes:
            self._run([*SACCTMGR, *change.argv], f"sacctmgr failed to {change.summary}")
