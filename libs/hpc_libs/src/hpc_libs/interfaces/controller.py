"""What slurmctld gives every Slurm daemon that joins its cluster: the auth key and controllers.

slurmd (compute) and sackd (login) both receive the same `ControllerData` from slurmctld's
leader: the id of the auth key secret (`auth_secret_id`; `auth_key_id` before, see
`ControllerData`) and the controllers, primary first, each an object
(`ControllerEntry`: hostname, address, port) checked against Slurm's grammar on both sides:
an entry that is not a host or IP with a port in 1-65535 (`"ctl --foo"`, `"a,b"`, a new line)
is never published, and a consumer reads a databag holding one as "not ready". The key itself
travels only as a Juju secret owned by the slurmctld application and granted to the relation;
it never appears in a databag.

`config_digest` is a short hex digest of the configuration slurmctld last applied and serves
configless (slurm.conf, cgroup.conf, gres.conf). It changes only once slurmctld accepted a new
configuration, so every consumer gets a relation-changed then: a daemon that could not start
with the former configuration retries at once. A running configless daemon needs no restart
for it (slurmctld pushes the new configuration with its reconfigure).

`srun_port_range` is slurm.conf's `SrunPortRange` when the operator set one (`{"first":
60001, "last": 63000}`): srun listens only there, on login and compute nodes, and slurmctld
and slurmstepd connect to it, so those units open it (`hpc_libs.charm.ports`). Both ends are
1-65535 and the range never ends before it starts; an entry lacking an end opens nothing.

Rotating the key (slurmctld's `rotate-auth-key`) takes several revisions of the secret, and
slurmctld moves to the next one only once every daemon runs with the current one. So each
consumer unit confirms the key its daemon runs with: once the daemon (re)started with it, the
charm calls `confirm_auth_key`, which writes the key's digest (`auth_key_digest`, 16 hex
digits of SHA-256: it reveals nothing of the key) to the unit's databag.

A consumer unit whose daemon reads slurm.conf (sackd on a login node, slurmrestd's sackd)
also publishes there the Slurm release it runs (`version`, `24.11.5`, as controllers and
slurmdbd publish theirs: `hpc_libs.interfaces.base.HostEntry`), once its daemon runs it
(`publish_version`). slurmctld writes a slurm.conf key an older release refuses
(`MetricsType`, 25.11) only once every such unit said it runs a release that knows it
(`unit_versions`); a unit that said nothing, or something invalid (logged), counts as old.
A slurmd unit publishes its release too, which wakes slurmctld when a node's release
changes; slurmctld takes a node's release from Slurm's own node record.
Each field is optional and left out until known, so a reader of either revision reads the
other's databag.

* `ControllerConsumer`: the daemon's side (slurmd, sackd, slurmdbd, slurmrestd). Emits
  `slurmctld_disconnected` when the unit leaves (the charm reconciles on the relation's own
  events); reads the controllers and the key, and confirms the key the daemon runs with.
* `ControllerPublisher`: slurmctld's side. Grants the key and publishes `ControllerData`;
  tells which units have not confirmed a key.
"""

import hashlib
import ipaddress
import logging
import re
from collections.abc import Callable
from typing import Annotated, Any, cast

import ops
from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from hpc_libs.charm.ports import PortRange
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import (
    DatabagModel,
    Interface,
    ServiceEntry,
    SlurmVersion,
    checked,
    get_or_create_app_secret,
    read_granted_secret,
    without_none,
)
from hpc_libs.slurm import grammar
from hpc_libs.slurm.ports import SLURMCTLD_PORT

logger = logging.getLogger(__name__)

AUTH_KEY_LABEL = "slurm-auth-key"
"""Label of the slurmctld application's auth key secret."""
AUTH_KEY_FIELD = "key"
"""Field of the secret content holding the key (base64 text, as `KeyFile` uses)."""


DEFAULT_SLURMCTLD_PORT = SLURMCTLD_PORT
CONFIG_DIGEST = re.compile(r"[0-9a-f]{8,64}")
"""A `config_digest`: lowercase hex, 8 to 64 digits."""
HexDigest = Annotated[str, checked(grammar.pattern(CONFIG_DIGEST, "a hex digest"))]
"""A digest on the wire (`config_digest`, `auth_key_digest`), as `CONFIG_DIGEST` says."""
AUTH_KEY_DIGEST_LENGTH = 16


def auth_key_digest(key: str) -> str:
    """Return the digest a unit confirms for the key (base64 text) its daemon runs with."""
    return hashlib.sha256(key.encode()).hexdigest()[:AUTH_KEY_DIGEST_LENGTH]


class ControllerEntry(ServiceEntry):
    """One slurmctld unit as the cluster's daemons reach it.

    `address` (an IP or host name) is what daemons connect to; `hostname` is the unit's host
    name, slurmctld's own `SlurmctldHost` name. `port` defaults to 6817.
    """

    def conf_server(self) -> str | None:
        """`host:port` for `--conf-server` (`[v6]:port` for IPv6); None without an address."""
        host = self.address or self.hostname
        if not host:
            return None
        if ":" in host:
            host = f"[{ipaddress.ip_address(host)}]"
        return f"{host}:{self.port or DEFAULT_SLURMCTLD_PORT}"


class PortRangeEntry(DatabagModel):
    """TCP ports `first` to `last`, both included."""

    first: int | None = Field(None, ge=1, le=65535, strict=True)
    last: int | None = Field(None, ge=1, le=65535, strict=True)

    @model_validator(mode="after")
    def _in_order(self) -> "PortRangeEntry":
        if self.first is not None and self.last is not None and self.last < self.first:
            raise ValueError(f"{self.first}-{self.last} ends before it starts")
        return self

    def ports(self) -> PortRange | None:
        """Return the range as a unit opens it; None unless both ends are given."""
        if self.first is None or self.last is None:
            return None
        return PortRange(self.first, self.last)


class ControllerData(DatabagModel):
    """slurmctld's application databag.

    `auth_secret_id` is the id of the auth key's secret (the key itself is never in a
    databag). The previous release called it `auth_key_id`: for one release both names
    are written, the same id under each, and a reader takes the old one when the new one
    is absent, so an upgraded slurmctld serves daemons that are not upgraded yet, and the
    reverse. Next, slurmctld stops writing `auth_key_id`; the release after, readers stop
    reading it.
    """

    auth_secret_id: str | None = None
    auth_key_id: str | None = None
    """`auth_secret_id` under its previous name (see above); always the same id."""
    controllers: list[ControllerEntry] | None = None
    config_digest: HexDigest | None = None
    """Digest of the configuration slurmctld last applied (see the module's docstring)."""
    srun_port_range: PortRangeEntry | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_secret_id_under_both_names(cls, data: Any) -> Any:
        """Give both names the id: the new name's if it has one, else the old name's."""
        if isinstance(data, dict):
            fields = cast(dict[str, Any], data)
            secret_id = fields.get("auth_secret_id")
            if secret_id is None:
                secret_id = fields.get("auth_key_id")
            return {**fields, "auth_secret_id": secret_id, "auth_key_id": secret_id}
        return data

    @field_validator("auth_secret_id", "auth_key_id")
    @classmethod
    def _valid_secret_id(cls, value: str | None) -> str | None:
        if value is not None:
            grammar.token(value)
        return value

    def srun_ports(self) -> PortRange | None:
        """Return the `SrunPortRange` a login or compute node opens; None when none is set."""
        return self.srun_port_range.ports() if self.srun_port_range else None

    def conf_servers(self) -> list[str]:
        """Return the controllers as `host:port` for `--conf-server`, primary first (validated)."""
        servers = [c.conf_server() for c in self.controllers or []]
        return [s for s in servers if s is not None]

    @property
    def is_complete(self) -> bool:
        """Whether the auth key secret id and at least one controller are present."""
        return bool(self.auth_secret_id) and bool(self.conf_servers())


class ConsumerUnitData(DatabagModel):
    """A consumer unit's databag: the digest of the auth key its daemon runs with, its release."""

    auth_key_digest: HexDigest | None = None
    version: SlurmVersion | None = None
    """The Slurm release the unit's daemon runs (`24.11.5`); None: not said."""

    @model_serializer(mode="wrap")
    def _without_unknown(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave unknown fields out: the databag reads as it did before `version` existed."""
        return without_none(handler(self), "auth_key_digest", "version")


class SlurmctldDisconnectedEvent(ops.RelationEvent):
    """Fired when this unit leaves the integration (its own relation-departed) or it is broken.

    With several controllers a departing unit sees one relation-departed per controller
    unit, so handlers must be idempotent.
    """


class ControllerConsumerEvents(ops.ObjectEvents):
    """Events of `ControllerConsumer`."""

    slurmctld_disconnected = ops.EventSource(SlurmctldDisconnectedEvent)


class ControllerConsumer(Interface):
    """A Slurm daemon's side of its integration with slurmctld (one relation at most)."""

    on = ControllerConsumerEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmctld") -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_departed, self._on_relation_departed)
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_departed(self, event: ops.RelationDepartedEvent) -> None:
        if event.departing_unit == self.model.unit:
            self.on.slurmctld_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.slurmctld_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    @property
    def controller_data(self) -> ControllerData | None:
        """Slurmctld's data; None without a relation or if it is malformed."""
        relation = self.relation
        if relation is None:
            return None
        return self.load(ControllerData, relation, relation.app)

    def is_ready(self) -> bool:
        """Whether slurmctld published the auth key secret id and the controllers."""
        data = self.controller_data
        return data is not None and data.is_complete

    def auth_key(self) -> str:
        """Return the auth key (base64 text) read from the secret slurmctld granted.

        Raises:
            IntegrationError: No secret id yet, or the secret cannot be read.

        """
        data = self.controller_data
        if data is None or not data.auth_secret_id:
            raise IntegrationError("slurmctld has not shared the auth key yet")
        return read_granted_secret(self.model, data.auth_secret_id, AUTH_KEY_FIELD, "auth key")

    def confirm_auth_key(self, key: str) -> bool:
        """Tell slurmctld this unit's daemon runs with `key`; return whether that was news.

        Call it only once the daemon (re)started with `key` (base64 text, as `auth_key`
        returned it): slurmctld's key rotation waits for every unit's confirmation.
        """
        return self._update_unit_data(auth_key_digest=auth_key_digest(key))

    def publish_version(self, version: str | None) -> bool:
        """Tell slurmctld the Slurm release (`24.11.5`) this unit's daemon runs; return if news.

        Call it once the daemon runs that release. None (not known) publishes nothing.

        Raises:
            ValueError: `version` is not `major.minor.micro`.

        """
        if version is None:
            return False
        return self._update_unit_data(version=version)

    def _update_unit_data(self, **fields: str) -> bool:
        """Set `fields` in this unit's databag, keeping the others; return whether it changed."""
        relation = self.relation
        if relation is None:
            return False
        current = self.load(ConsumerUnitData, relation, self.model.unit) or ConsumerUnitData()
        data = ConsumerUnitData.model_validate({**current.model_dump(), **fields})
        if data == current:
            return False
        relation.save(data, self.model.unit)
        return True


class ControllerPublisher(Interface):
    """slurmctld's side of an integration with a Slurm daemon application."""

    def publish_controller_data(
        self,
        relation: ops.Relation,
        auth_key: ops.Secret,
        controllers: list[ControllerEntry],
        config_digest: str | None = None,
        srun_port_range: PortRangeEntry | None = None,
    ) -> bool:
        """Grant `auth_key` to `relation` and publish its id, the controllers and the options.

        Leader only. Returns whether the databag changed. The key's content is never written
        to it. The entries were validated when built (`ControllerEntry` refuses a bad host or
        port, `PortRangeEntry` a bad range), and so is the digest (`ControllerData` refuses
        anything but hex).
        """
        if not self.model.unit.is_leader():
            return False
        auth_key.grant(relation)
        secret_id = auth_key.id or auth_key.get_info().id
        data = ControllerData(
            auth_secret_id=secret_id,
            controllers=list(controllers),
            config_digest=config_digest,
            srun_port_range=srun_port_range,
        )
        return self.save(data, relation, self.model.app)

    def shares_key(self, relation: ops.Relation) -> bool:
        """Whether this application published the auth key's secret id on `relation`.

        Read raw from this application's own databag (either name: one written by the
        previous release counts).
        """
        published = relation.data[self.model.app]
        return bool(published.get("auth_secret_id") or published.get("auth_key_id"))

    def units_without_key(self, relation: ops.Relation, key: str) -> list[str]:
        """Return the remote units of `relation` that have not confirmed running with `key`.

        A unit whose databag does not parse counts as not confirmed (and is logged).
        """
        wanted = auth_key_digest(key)
        missing: list[str] = []
        for unit in sorted(relation.units, key=lambda u: u.name):
            data = self.load(ConsumerUnitData, relation, unit)
            if data is None or data.auth_key_digest != wanted:
                missing.append(unit.name)
        return missing

    def unit_versions(self, relation: ops.Relation) -> dict[str, str | None]:
        """Return the Slurm release each remote unit of `relation` runs, by unit name.

        None for a unit that has not said, or whose databag does not parse (logged).
        """
        versions: dict[str, str | None] = {}
        for unit in sorted(relation.units, key=lambda u: u.name):
            data = self.load(ConsumerUnitData, relation, unit)
            versions[unit.name] = data.version if data is not None else None
        return versions


def get_or_create_auth_key_secret(charm: ops.CharmBase, generate: Callable[[], str]) -> ops.Secret:
    """Return the slurmctld app's auth key secret, created once with `generate()`.

    Raises:
        IntegrationError: The secret does not exist and this unit is not the leader.

    """
    return get_or_create_app_secret(charm, AUTH_KEY_LABEL, AUTH_KEY_FIELD, generate, "auth key")
