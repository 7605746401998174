"""What every stand-in shares: its application record, its relations, its databags, its status.

A stand-in is an application the backend runs itself instead of a charm: its units are lab
machines (or, for a subordinate, the principal's machine) and its "hooks" are Python run by the
engine in place of dispatch (`Controller.builtin`). It speaks the charm's side of the wire: what
it writes in a databag reaches the other side as relation-changed, as a charm's commit would.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from slurm_lab import programs
from slurm_lab.juju import lifecycle
from slurm_lab.juju.model import App, JsonDict, ModelState, Relation, StatusValue, Unit

Endpoints = dict[str, tuple[str, dict[str, Any]]]
"""Endpoint name -> (role, its metadata: interface, scope, limit), as in metadata.yaml."""


class Lab(Protocol):
    """What a stand-in needs of the lab: the directory every machine sees at /lab/shared."""

    shared_dir: Path


class Machine(Protocol):
    """What a stand-in needs of a lab machine: running a command in it."""

    def exec(
        self, argv: list[str], *, input: str | None = None, timeout: float | None = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the machine."""
        ...


class Host(Protocol):
    """What a stand-in needs of the engine (`engine.Controller`)."""

    model: ModelState

    @property
    def lab(self) -> Lab:
        """The lab the model's machines run in."""
        ...

    def machine(self, unit: Unit) -> Machine:
        """Return the lab machine a unit runs on."""
        ...

    def log(self, unit: Unit, level: str, message: str) -> None:
        """Append a line to the unit's log and the debug log."""
        ...

    def enqueue(self, unit: str, kind: str, **fields: Any) -> None:
        """Queue a hook on a unit."""
        ...

    def enqueue_all(self, events: Iterable[JsonDict]) -> None:
        """Queue the events `lifecycle` returns."""
        ...


class StandIn:
    """A stand-in application's hooks; subclasses name their charm and endpoints."""

    KIND: ClassVar[str]
    """The charm name `juju deploy` takes for it, and its `App.kind`."""
    ENDPOINTS: ClassVar[Endpoints]
    SUBORDINATE: ClassVar[bool] = False

    def __init__(self, ctl: Host) -> None:
        self.ctl = ctl

    @classmethod
    def new_app(cls, name: str, config: Any) -> App:
        """Build the stand-in application record."""
        return App(
            name=name,
            charm_dir="",
            charm_name=cls.KIND,
            kind=cls.KIND,
            subordinate=cls.SUBORDINATE,
            config=dict(config or {}),
        )

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        raise NotImplementedError

    # --- what a hook reads -----------------------------------------------------------------------

    def event_relation(self, unit: Unit, event: JsonDict) -> tuple[Relation, str] | None:
        """Return the event's relation and this unit's endpoint on it; None if no relation."""
        rel = self.ctl.model.relations.get(str(event.get("relation_id")))
        return None if rel is None else (rel, rel.endpoint_of(unit.app).endpoint)

    def relations(self, unit: Unit, endpoint: str) -> list[Relation]:
        """Return the relations of this unit's application on `endpoint`."""
        return [
            rel
            for rel in self.ctl.model.relations_of(unit.app)
            if rel.endpoint_of(unit.app).endpoint == endpoint
        ]

    def is_leader(self, unit: Unit) -> bool:
        """Whether `unit` leads its application."""
        return self.ctl.model.apps[unit.app].leader == unit.name

    def config(self, unit: Unit) -> dict[str, Any]:
        """Return the options the stand-in application was deployed with."""
        return self.ctl.model.apps[unit.app].config

    # --- what a hook does ------------------------------------------------------------------------

    def run(
        self, unit: Unit, program: str, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run a lab program (`slurm_lab.programs`) with `args` on the unit's machine."""
        return self.ctl.machine(unit).exec(programs.sh(program, *args), timeout=timeout)

    def block(self, unit: Unit, message: str, log: str | None = None) -> None:
        """Set the unit blocked with `message` and log `log` (else the message) as an error."""
        self.ctl.log(unit, "ERROR", message if log is None else log)
        unit.workload = StatusValue("blocked", message)

    def publish_app(self, unit: Unit, rel: Relation, bag: dict[str, str]) -> None:
        """Set the application databag; the other side's units that joined see it change."""
        if rel.app_data.get(unit.app) == bag:
            return
        rel.app_data[unit.app] = bag
        for other in rel.members:
            if self.ctl.model.units[other].app != unit.app and rel.seen.get(other):
                self.ctl.enqueue(other, "relation_changed", relation_id=rel.id, remote_unit=None)

    def publish_unit(self, unit: Unit, rel: Relation, bag: dict[str, str]) -> None:
        """Set the unit databag; the units that see this unit get relation-changed."""
        if rel.unit_data.get(unit.name) == bag:
            return
        rel.unit_data[unit.name] = bag
        for other in rel.members:
            if unit.name in rel.seen.get(other, []):
                self.ctl.enqueue(
                    other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                )


class SubordinateStandIn(StandIn):
    """A subordinate stand-in: one unit beside each principal unit of a container relation."""

    SUBORDINATE = True
    WAITING: ClassVar[str]
    """A new unit's waiting message."""

    def add_subordinate_units(self, rel: Relation, principals: list[Unit] | None = None) -> None:
        """Give each principal unit of a container relation with the stand-in its own unit.

        With `principals` (new units of an existing relation), each new unit runs
        relation-created, then enters the relation's scope (`lifecycle.created`). Either way a
        new unit also runs relation-created for its application's other, global relations (an
        `ldap` or `send-remote-write` integrated before the unit existed), as Juju does.
        """
        model = self.ctl.model
        if not any(e.scope == "container" for e in rel.endpoints):
            return
        sub_app = next(
            (model.apps[e.app] for e in rel.endpoints if model.apps[e.app].kind == self.KIND),
            None,
        )
        if sub_app is None:
            return
        principal_app = rel.other_app(sub_app.name)
        for principal in principals or model.app_units(principal_app):
            if any(model.units[u].principal == principal.name for u in sub_app.units):
                continue
            unit = Unit(
                name=f"{sub_app.name}/{sub_app.next_unit}",
                app=sub_app.name,
                machine=principal.machine,
                machine_id=principal.machine_id,
                address=principal.address,
                principal=principal.name,
                workload=StatusValue("waiting", self.WAITING),
                agent="idle",
            )
            sub_app.next_unit += 1
            sub_app.units.append(unit.name)
            model.units[unit.name] = unit
            sub_app.leader = sub_app.leader or unit.name
            if principals is not None:
                self.ctl.enqueue_all(lifecycle.created(unit.name, rel))
            for other in model.relations_of(sub_app.name):
                if other is not rel and all(e.scope != "container" for e in other.endpoints):
                    self.ctl.enqueue_all(lifecycle.created(unit.name, other))
