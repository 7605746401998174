r"""Slurm's associations as code: a YAML document of QoS, accounts and users, and sacctmgr.

The API (issue 40, shared with the slurmctld charm)::

    AccountsError(SlurmOpsError)              sacctmgr or squeue failed (command, stderr)
    DocumentError(AccountsError, ValueError)  .key ("users.alice.default-account"), .reason
    Document.parse(text) -> Document          YAML -> checked model (raises DocumentError)
    Document.managed() -> Managed             the names the document manages
    Managed(qos, accounts, users)             frozensets of names; to_json(), from_json(), union()
    State(qos, accounts, users)               what slurmdbd holds (Sacctmgr.read)
    Busy(associations)                        (account, user) pairs with running/pending jobs
    Change(argv, summary)                     one command: `sacctmgr --immediate --parsable2 *argv`
    Plan(changes, held)                       changes in the safe order; removals held for jobs
    plan(document, state, previously_managed, *, busy, prune_unmanaged=False) -> Plan
    drift(document, state, previously_managed) -> tuple[str, ...]   lines for accounts-diff
    Sacctmgr(timeout=...).read() -> State, .busy() -> Busy, .apply(plan) -> None

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
`[normal]`, admin level none. An account's `description` is the one exception: left out, it
is not managed. Times are strings (YAML reads `00:10:00` unquoted as a number) in whole
minutes; TRES are `name=count` lists (`cpu=8,mem=16G,gres/gpu=2`). Account and QoS names are
lower case (Slurm lowers them). Slurm's `normal` QoS may be referenced without being defined,
and is never removed.

What it never does: remove an association with running or pending jobs (the removal is held,
`Plan.held`, and done by a later reconcile), or touch a name neither this document nor the
previous one (`previously_managed`) managed, unless `prune_unmanaged`. Commands are batched
(`add user name=a,b,c account=x`): one per group of objects that need the same change.

Slurm's output is untrusted (an account's description may hold `|` and newlines; job
accounts are users' text): queries use `--parsable2 --noheader` and fixed `format=` field
lists, are split on "\n" only, and a line that is not a whole record of names and numbers is
skipped. The only free text read, account descriptions, is last on its line, and a
description that cannot be read exactly (a name seen twice, a line that is no record) reads
as unknown, so a reconcile sets it again: a forged line can cost a command, never skip one.

Not managed: clusters (slurmdbd's associations of every cluster are read as one), partition
associations, organisations, QoS flags, user-level QoS.
"""

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
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
_TIME_FORMS = (
    re.compile(r"(?P<m>\d+)"),
    re.compile(r"(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+)"),
    re.compile(r"(?P<d>\d+)-(?P<h>\d+):(?P<m>\d+):(?P<s>\d+)"),
)
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
    if _seconds(value) % 60:
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


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        populate_by_name=False,
        alias_generator=lambda n: n.replace("_", "-"),
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
    preempt_mode: Literal["off", "cancel", "requeue", "suspend", "cluster"] | None = None


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
    model_config = ConfigDict(extra="forbid", frozen=True)

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


def plan(
    document: Document,
    state: State,
    previously_managed: Managed,
    *,
    busy: Busy,
    prune_unmanaged: bool = False,
) -> Plan:
    """Return the commands that make `state` what `document` says, for the names it may touch."""
    raise NotImplementedError


def drift(document: Document, state: State, previously_managed: Managed) -> tuple[str, ...]:
    """Return one line per managed name and key where slurmdbd differs from `document`."""
    raise NotImplementedError


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
        """Read what slurmdbd holds: four queries (QoS, associations, users, descriptions)."""
        raise NotImplementedError

    def busy(self) -> Busy:
        """Return the associations with running or pending jobs (one squeue)."""
        raise NotImplementedError

    def apply(self, plan: Plan) -> None:
        """Run `plan`'s changes in order; stop at the first failure.

        Raises:
            AccountsError: carrying the failed command and sacctmgr's stderr.

        """
        raise NotImplementedError


def _seconds(value: str) -> int:
    """Seconds in a time as Slurm writes it (`grammar.time_value`'s forms)."""
    for form in _TIME_FORMS:
        match = form.fullmatch(value)
        if match:
            parts = {k: int(v) for k, v in match.groupdict().items() if v is not None}
            return (
                parts.get("d", 0) * 86400
                + parts.get("h", 0) * 3600
                + parts.get("m", 0) * 60
                + parts.get("s", 0)
            )
    raise ValueError(f"{value!r} is not a time")
