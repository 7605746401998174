"""The lab model's state: everything Juju's controller would keep, as JSON-serialisable data.

The backend persists one `ModelState` per lab (``<state dir>/juju/model.json``), so a CLI in
another process can continue where a test or ``deploy-bundle`` left off.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JsonDict = dict[str, Any]


def now() -> str:
    """Return a timestamp like Juju's status 'since' field."""
    return time.strftime("%d %b %Y %H:%M:%SZ", time.gmtime())


@dataclass
class StatusValue:
    """A workload status as the charm set it (name is ops' status name)."""

    name: str = "unknown"
    message: str = ""
    since: str = field(default_factory=now)


@dataclass
class Endpoint:
    """One side of a relation."""

    app: str
    endpoint: str
    interface: str
    role: str  # provider, requirer or peer
    scope: str = "global"


@dataclass
class Relation:
    """A relation, its databags and which remote units each unit has seen join."""

    id: int
    endpoints: list[Endpoint]
    app_data: dict[str, dict[str, str]] = field(default_factory=dict)
    unit_data: dict[str, dict[str, str]] = field(default_factory=dict)
    # unit -> remote units it got relation-joined for (relation-list), in join order
    seen: dict[str, list[str]] = field(default_factory=dict)
    # units that ran relation-created (they see the relation in relation-ids)
    members: list[str] = field(default_factory=list)
    # members whose relation-created succeeded: in the relation's scope, as Juju's EnterScope
    # (only units in scope see each other join)
    in_scope: list[str] = field(default_factory=list)

    @property
    def is_peer(self) -> bool:
        """Whether this is a peer relation (one endpoint)."""
        return len(self.endpoints) == 1

    def endpoint_of(self, app: str) -> Endpoint:
        """Return the relation's endpoint on app's side."""
        return next(e for e in self.endpoints if e.app == app)

    def other_app(self, app: str) -> str:
        """Return the app on the other side (the app itself for a peer relation)."""
        return next((e.app for e in self.endpoints if e.app != app), app)

    def key(self) -> str:
        """'app:endpoint app:endpoint', the way Juju prints a relation."""
        return " ".join(f"{e.app}:{e.endpoint}" for e in self.endpoints)


@dataclass
class SecretRevision:
    """One revision's content."""

    revision: int
    content: dict[str, str]


@dataclass
class Consumer:
    """What one observing unit knows about a secret."""

    tracked: int
    label: str | None = None


@dataclass
class Secret:
    """A charm-owned secret."""

    id: str
    owner: str  # app name or unit name
    owner_kind: str  # "app" or "unit"
    revisions: list[SecretRevision]
    label: str | None = None
    description: str | None = None
    grants: dict[str, list[str]] = field(default_factory=dict)  # relation id -> grantees
    consumers: dict[str, Consumer] = field(default_factory=dict)  # unit -> tracking
    # revisions secret-remove was queued for (Juju runs it once per obsolete revision)
    removal_notified: list[int] = field(default_factory=list)

    @property
    def latest(self) -> SecretRevision:
        """The newest revision."""
        return self.revisions[-1]

    def content_of(self, revision: int) -> dict[str, str]:
        """Content of a revision (the oldest kept one if it was pruned)."""
        for rev in self.revisions:
            if rev.revision >= revision:
                return rev.content
        return self.latest.content


@dataclass
class Unit:
    """A unit, its machine and the per-unit state Juju keeps for the charm."""

    name: str
    app: str
    machine: str  # lab machine name
    machine_id: str  # Juju machine number
    address: str
    principal: str | None = None
    workload: StatusValue = field(default_factory=lambda: StatusValue("waiting", "allocating"))
    agent: str = "allocating"
    failed_event: JsonDict | None = None  # the hook that failed (retried before anything else)
    retry_at: float = 0.0  # when the failed hook runs again (epoch seconds)
    retry_delay: float = 0.0  # the back-off that led to retry_at (seconds)
    running: JsonDict | None = None  # the hook in flight, if any
    runner_pid: int = 0  # the process that runs it (its results are applied there)
    runner_start: int = 0  # when that process started: its PID alone may name a stranger
    server_state: dict[str, str] = field(default_factory=dict)  # state-set (Juju's unit state)
    ports: list[str] = field(default_factory=list)  # Juju's notation: 6818/tcp, 1-9/udp
    workload_version: str = ""

    @property
    def number(self) -> int:
        """The unit number."""
        return int(self.name.split("/")[1])

    @property
    def in_error(self) -> bool:
        """Whether a hook failed and was not yet retried successfully."""
        return self.failed_event is not None


@dataclass
class App:
    """An application."""

    name: str
    charm_dir: str  # host path of the charm; "" for built-in stand-ins
    charm_name: str
    kind: str = "charm"  # "charm" (ops, run in the machine) or "filesystem-client"
    subordinate: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    units: list[str] = field(default_factory=list)
    leader: str | None = None
    next_unit: int = 0
    status: StatusValue = field(default_factory=StatusValue)
    constraints: dict[str, str] = field(default_factory=dict)
    """Juju's application constraints as deployed (`virt-type` picks the units' machine kind)."""


@dataclass
class ModelState:
    """Everything the lab's Juju model knows."""

    name: str = "lab"
    uuid: str = ""
    apps: dict[str, App] = field(default_factory=dict)
    units: dict[str, Unit] = field(default_factory=dict)
    relations: dict[str, Relation] = field(default_factory=dict)  # str(id) -> relation
    secrets: dict[str, Secret] = field(default_factory=dict)
    next_machine: int = 0
    next_relation: int = 0
    next_task: int = 0
    queue: list[JsonDict] = field(default_factory=list)
    boots: dict[str, int] = field(default_factory=dict)  # machine -> its init's start last seen

    def app_units(self, app: str) -> list[Unit]:
        """Return the units of app, by number."""
        return sorted((self.units[u] for u in self.apps[app].units), key=lambda unit: unit.number)

    def relations_of(self, app: str) -> list[Relation]:
        """Relations app takes part in, by id."""
        found = [r for r in self.relations.values() if any(e.app == app for e in r.endpoints)]
        return sorted(found, key=lambda r: r.id)


def _known(cls: type[Any], data: JsonDict) -> JsonDict:
    """Keep the fields cls has (a model saved by an older lab may have others)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _load_list(cls: type[Any], items: list[JsonDict]) -> list[Any]:
    return [cls(**item) for item in items]


def _from_dict(data: JsonDict) -> ModelState:
    apps = {
        name: App(**{**a, "status": StatusValue(**a["status"])})
        for name, a in data.get("apps", {}).items()
    }
    units = {
        name: Unit(**_known(Unit, {**u, "workload": StatusValue(**u["workload"])}))
        for name, u in data.get("units", {}).items()
    }
    relations = {
        key: Relation(
            **{
                "in_scope": list(r.get("members", [])),  # a model saved before scopes
                **r,
                "endpoints": _load_list(Endpoint, r["endpoints"]),
            }
        )
        for key, r in data.get("relations", {}).items()
    }
    secrets = {
        key: Secret(
            **{
                **_known(Secret, s),
                "revisions": _load_list(SecretRevision, s["revisions"]),
                "consumers": {u: Consumer(**c) for u, c in s["consumers"].items()},
            }
        )
        for key, s in data.get("secrets", {}).items()
    }
    scalars = {
        k: v
        for k, v in _known(ModelState, data).items()
        if k not in ("apps", "units", "relations", "secrets")
    }
    return ModelState(apps=apps, units=units, relations=relations, secrets=secrets, **scalars)


def load(path: Path) -> ModelState | None:
    """Load the model saved at path, or None if there is none."""
    try:
        return _from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None


def save(model: ModelState, path: Path) -> None:
    """Persist the model atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(dataclasses.asdict(model), indent=1, sort_keys=True))
    os.replace(tmp, path)
