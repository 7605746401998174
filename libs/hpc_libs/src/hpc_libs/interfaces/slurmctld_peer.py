"""The slurmctld peer relation (`slurmctld-peer`): what the controller must remember.

State that must survive a leader change lives in the peer APPLICATION databag, written by
the leader only, never in one unit's StoredState:

* `partitions`: each partition the controller serves, one object per slurmd application:
  its name, its keys (`PartitionSpec`; the names come from the application's name), the id
  of the relation that published it (the oldest becomes the default partition), whether it
  is `retiring` (its application left while jobs ran) and whether it is `drained` already;
* `departed_nodes`: nodes of slurmd units that left, deleted once no job runs on them;
* `controllers`: the controller units in join order, primary first;
* `native_metrics`: whether the slurm.conf the leader rendered turns on Slurm's own metrics
  endpoint (`MetricsType`), so that every controller unit offers its scrape jobs. A value that
  is not a JSON boolean is logged and read as not said;
* `upgrade_slurmctld_timeout`: the raised `SlurmctldTimeout` (seconds) the leader rendered and
  applied for the controllers' turn of a Slurm major upgrade, absent outside it. A value that
  is not a JSON integer from 2 to 65533 is logged and read as not said;
* `rollouts`: each rolling rebuild the leader started, one object per partition: the
  partition, when it started (`since`, epoch seconds), whether it upgrades, and the jobs it
  submitted as root (`jobs`: one `{id, node}` per node). The charm acts (hold, cancel) on these
  ids only, never on an id it read back from Slurm's output, where users' text can forge one;
* `accounts_managed`: the QoS, accounts and users the `accounts` document managed in slurmdbd
  (`{"qos": [...], "accounts": [...], "users": [...]}`, names sorted), written only once
  `sacctmgr` applied them: the union of what every successful reconcile applied since, so a
  name a later document drops is still known as managed and removed (`hpc_libs.slurm.accounts`).
  Absent: nothing managed yet. A value that does not parse is logged and read as absent, so
  nothing is removed on its word;
* `accounts_applied`: the digest (64 hex digits) of the `accounts` document last applied in
  full, written with `accounts_managed`: while the document is unchanged, what slurmdbd holds
  that differs from it was changed by hand. Anything else is logged and read as absent;
* `config_digest`: the digest of the configuration the leader's slurmctld runs with and
  serves (the controller interface's `config_digest`, same form), written once it applied it.
  The other controllers run from the files the leader writes on the shared filesystem, and
  Juju gives no event for a file: the change of this field is their event to follow the
  files, whatever made the leader change them (a relation only the leader acted on yet, its
  config-changed running after theirs). Anything but 8 to 64 hex digits is logged and read
  as absent.

Every field is optional and JSON-encoded under its own key (`ops.Relation.save`). An entry
that does not parse (or breaks Slurm's grammar) is logged and skipped; the rest is read.

Each unit shares in its own UNIT databag where its controller runs (`ControllerHost`):

* `hostname`: its host name, slurmctld's `SlurmctldHost` name;
* `address`: the address the other controllers and the daemons reach it at.

and, once its slurmctld runs with it, `slurmctld_timeout`: the `SlurmctldTimeout` of the
slurm.conf its daemon last loaded (decimal text), so that a controller about to stop for its
upgrade knows every other one waits long enough before taking over.

The first two are plain strings, not JSON (the contract's first form, kept so that units of
different revisions read each other during an upgrade). They become `SlurmctldHost=` lines
and `--conf-server` entries, so they are checked with the same grammar as the controller
entries published to the daemons (`HostEntry`); a unit whose data breaks it is never used.
"""

import logging
import re
from typing import Annotated, Any, cast

import ops
from pydantic import BaseModel, Field, ValidationError, ValidationInfo, field_validator

from hpc_libs.interfaces.base import (
    DatabagModel,
    HostEntry,
    Interface,
    NodeSetFields,
    SlurmName,
    bounded_text,
)
from hpc_libs.interfaces.controller import CONFIG_DIGEST
from hpc_libs.slurm import grammar
from hpc_libs.slurm.accounts import Managed
from hpc_libs.slurm.partition import PartitionSpec, node_set

logger = logging.getLogger(__name__)

_DIGEST = re.compile(r"[0-9a-f]{64}")
"""A sha256 digest in hex (`accounts_applied`)."""
_DIGESTS = {
    "accounts_applied": (_DIGEST, "a sha256 hex digest"),
    "config_digest": (CONFIG_DIGEST, "8 to 64 hex digits"),
}
"""Each digest field's form, and how a refusal names it."""
MAX_EPOCH = 1 << 40
"""A time far beyond any real clock, in seconds: bounds `since`."""


class PartitionEntry(DatabagModel):
    """One partition the controller serves (named after its slurmd application).

    `nodeset` is written for a controller unit of the previous release, which drops an
    entry without one; this release never reads it (the node set comes from `name`), and
    the next one stops writing it, as slurmd stops sending its own (`hpc_libs.interfaces
    .slurmd`).
    """

    name: SlurmName | None = None
    partition: PartitionSpec | None = None
    nodeset: NodeSetFields | None = None
    relation_id: int | None = None
    retiring: bool | None = None
    drained: bool | None = None

    @classmethod
    def serving(
        cls, name: str, spec: PartitionSpec, relation_id: int | None = None
    ) -> "PartitionEntry":
        """Return the entry of application `name`'s partition, with the node set of its name."""
        return cls(name=name, partition=spec, nodeset=node_set(name), relation_id=relation_id)

    @property
    def spec(self) -> PartitionSpec:
        """The partition's keys (an entry without any: Slurm's defaults)."""
        return self.partition or PartitionSpec()


class DepartedNode(DatabagModel):
    """The node of a slurmd unit that left, to delete once idle."""

    name: SlurmName | None = None


JobId = Annotated[int, Field(strict=True, ge=1, le=grammar.MAX_JOB_ID)]
"""A Slurm job id (a JSON integer, never a boolean or text)."""


class RolloutJob(DatabagModel):
    """One rebuild job the leader submitted: its id and the node it reboots."""

    id: JobId | None = None
    node: SlurmName | None = None


class Rollout(DatabagModel):
    """One partition's rolling rebuild, as the leader started it."""

    partition: SlurmName | None = None
    since: Annotated[int, Field(strict=True, ge=0, le=MAX_EPOCH)] | None = None
    upgrade: Annotated[bool, Field(strict=True)] | None = None
    jobs: list[RolloutJob] | None = None

    def submitted(self) -> list[tuple[int, str]]:
        """Return its jobs as (id, node) pairs (complete entries only)."""
        return [(job.id, job.node) for job in self.jobs or () if job.id is not None and job.node]


class AccountsManaged(DatabagModel):
    """The names the `accounts` document managed in slurmdbd, as last applied."""

    qos: list[str] = Field(default_factory=list[str])
    accounts: list[str] = Field(default_factory=list[str])
    users: list[str] = Field(default_factory=list[str])

    @classmethod
    def of(cls, managed: Managed) -> "AccountsManaged":
        """Return the record of `managed` (names sorted, so an equal set writes equal text)."""
        return cls(
            qos=sorted(managed.qos), accounts=sorted(managed.accounts), users=sorted(managed.users)
        )

    def managed(self) -> Managed:
        """Return the names as the library's `Managed`, each checked (ValueError if one is bad)."""
        return Managed.from_json(self.model_dump_json())


class ControllerSlot(DatabagModel):
    """One controller unit in the join order."""

    unit: str | None = None


def _valid_items(model: type[BaseModel], value: Any, field: str) -> Any:
    """Keep the entries of a list that parse as `model`; log and skip the others."""
    if not isinstance(value, list):
        return value
    items = cast(list[Any], value)
    kept: list[Any] = []
    for item in items:
        try:
            kept.append(model.model_validate(item))
        except ValidationError as e:
            logger.warning("skipping invalid %s entry %r: %s", field, item, e.errors()[0]["msg"])
    return kept


LIST_ITEMS: dict[str, type[BaseModel]] = {
    "partitions": PartitionEntry,
    "departed_nodes": DepartedNode,
    "controllers": ControllerSlot,
    "rollouts": Rollout,
}
"""The peer memory's lists and the model of their entries: a bad entry is skipped alone."""


class SlurmctldPeerData(DatabagModel):
    """The slurmctld application's peer databag."""

    partitions: list[PartitionEntry] | None = None
    departed_nodes: list[DepartedNode] | None = None
    controllers: list[ControllerSlot] | None = None
    native_metrics: bool | None = None
    upgrade_slurmctld_timeout: int | None = None
    rollouts: list[Rollout] | None = None
    accounts_managed: AccountsManaged | None = None
    accounts_applied: str | None = None
    config_digest: str | None = None

    def served(self) -> dict[str, PartitionEntry]:
        """Return the partitions the leader serves (retiring ones included), by name."""
        return {p.name: p for p in self.partitions or [] if p.name}

    def serving(self) -> list[str]:
        """Name the partitions the leader serves and does not retire, sorted."""
        return sorted(name for name, p in self.served().items() if not p.retiring)

    @field_validator(*LIST_ITEMS, mode="before")
    @classmethod
    def _lists(cls, value: Any, info: ValidationInfo) -> Any:
        field = str(info.field_name)
        return _valid_items(LIST_ITEMS[field], value, field)

    @field_validator("native_metrics", mode="before")
    @classmethod
    def _native_metrics(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool):
            return value
        logger.warning("skipping invalid native_metrics %r: not a boolean", value)
        return None

    @field_validator("upgrade_slurmctld_timeout", mode="before")
    @classmethod
    def _upgrade_timeout(cls, value: Any) -> Any:
        if value is None or _is_timeout(value):
            return value
        logger.warning("skipping invalid upgrade_slurmctld_timeout %r", value)
        return None

    @field_validator("accounts_managed", mode="before")
    @classmethod
    def _accounts_managed(cls, value: Any) -> Any:
        if value is None or isinstance(value, AccountsManaged):
            return value
        try:
            AccountsManaged.model_validate(value).managed()
        except ValueError as e:  # pydantic's ValidationError is one, as is Managed's refusal.
            logger.warning("skipping invalid accounts_managed: %s", e)
            return None
        return value

    @field_validator("accounts_applied", "config_digest", mode="before")
    @classmethod
    def _digests(cls, value: Any, info: ValidationInfo) -> Any:
        pattern, form = _DIGESTS[str(info.field_name)]
        if value is None or (isinstance(value, str) and pattern.fullmatch(value)):
            return value
        logger.warning("skipping invalid %s %r: not %s", info.field_name, value, form)
        return None


MIN_SLURMCTLD_TIMEOUT = 2
MAX_SLURMCTLD_TIMEOUT = 65533
TIMEOUT_FIELD = "slurmctld_timeout"
"""A controller unit's databag key: the SlurmctldTimeout its daemon runs with."""


def _is_timeout(value: Any) -> bool:
    """Whether `value` is a SlurmctldTimeout the charm renders (an int, never a bool)."""
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and MIN_SLURMCTLD_TIMEOUT <= value <= MAX_SLURMCTLD_TIMEOUT
    )


class ControllerHost(HostEntry):
    """Where one controller unit runs (its own unit databag, plain strings)."""

    def is_complete(self) -> bool:
        """Whether both the host name and the address are there."""
        return bool(self.hostname and self.address)


class SlurmctldPeer(Interface):
    """The controller units' shared memory, on the peer endpoint."""

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmctld-peer") -> None:
        super().__init__(charm, endpoint)

    def read(self) -> SlurmctldPeerData:
        """Return the application's peer data (empty without a relation or if unreadable)."""
        relation = self.relation
        data = None if relation is None else self.load(SlurmctldPeerData, relation, self.model.app)
        return data if data is not None else SlurmctldPeerData()

    def write(self, data: SlurmctldPeerData) -> bool:
        """Store `data` (leader only, when it changed); return whether it was written."""
        relation = self.relation
        if relation is None:
            logger.warning("no peer relation yet: cannot remember the controller's state")
            return False
        return self.save(data, relation, self.model.app)

    def share_host(self, host: ControllerHost) -> None:
        """Put this unit's host name, address and Slurm version in its peer unit databag.

        Plain strings; the version (`24.11.5`) only once known: the other controllers wait
        for it in a major upgrade.
        """
        relation = self.relation
        if relation is not None and host.hostname and host.address:
            shared = {"hostname": host.hostname, "address": host.address}
            if host.version:
                shared["version"] = host.version
            relation.data[self.model.unit].update(shared)

    def share_slurmctld_timeout(self, seconds: int) -> None:
        """Say in this unit's databag that its slurmctld runs with SlurmctldTimeout `seconds`."""
        relation = self.relation
        if relation is not None and relation.data[self.model.unit].get(TIMEOUT_FIELD) != str(
            seconds
        ):
            relation.data[self.model.unit][TIMEOUT_FIELD] = str(seconds)

    def slurmctld_timeouts(self) -> dict[str, int | None]:
        """Return each peer unit's SlurmctldTimeout (None: not said, or invalid: logged)."""
        relation = self.relation
        if relation is None:
            return {}
        found: dict[str, int | None] = {}
        for unit in relation.units:
            text = relation.data[unit].get(TIMEOUT_FIELD)
            value = None
            if text is not None and text.isascii() and text.isdigit() and len(text) <= 5:
                value = int(text)
            if text is not None and (value is None or not _is_timeout(value)):
                logger.warning("skipping invalid %s %r of %s", TIMEOUT_FIELD, text, unit.name)
                value = None
            found[unit.name] = value
        return found

    def hosts(self) -> dict[str, ControllerHost]:
        """Return each peer unit's complete, valid host data (invalid data is logged, left out)."""
        relation = self.relation
        if relation is None:
            return {}
        found: dict[str, ControllerHost] = {}
        for unit in relation.units:
            host = self.load(ControllerHost, relation, unit, decoder=bounded_text)
            if host is not None and host.is_complete():
                found[unit.name] = host
        return found

    def host_problems(self) -> list[str]:
        """Say, per peer unit whose host data breaks Slurm's grammar, what is wrong (by unit)."""
        relation = self.relation
        if relation is None:
            return []
        problems: list[str] = []
        for unit in sorted(relation.units, key=lambda u: u.name):
            if problem := self.problem(ControllerHost, relation, unit, decoder=bounded_text):
                problems.append(problem)
        return problems
