"""Which hooks Juju runs, in which order, when the model changes.

Orders follow Juju's documented charm lifecycle: a new unit runs install, relation-created for
the relations it is born into (peers first), leader-elected (the leader) or
leader-settings-changed (any other unit), config-changed and start, then relation-joined/changed
per remote unit; integrate runs relation-created on both sides, then relation-joined and
relation-changed per remote unit; a leaving unit makes the other units run relation-departed,
runs relation-departed and relation-broken itself, then stop and remove.

A unit enters a relation's scope once its relation-created hook succeeded (Juju's uniter joins
the relation only then: `relationStateTracker`, "we will only enter scope *after* the
relation-created hook fires"), and two units see each other join only when both are in scope:
the units already there get relation-joined for a new unit after its relation-created, not while
it installs (`enter_scope`, run by the engine as the internal event `_enter_scope` queued after
each relation-created).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slurm_lab.juju.model import Endpoint, Relation, Unit

if TYPE_CHECKING:  # the engine runs `enter_scope`
    from slurm_lab.juju.engine import Controller


def new_relation(ctl: Controller, endpoints: list[Endpoint]) -> Relation:
    """Record a relation (no hooks yet)."""
    model = ctl.model
    rel = Relation(id=model.next_relation, endpoints=endpoints)
    model.next_relation += 1
    model.relations[str(rel.id)] = rel
    return rel


def _pairs(ctl: Controller, rel: Relation, unit: Unit) -> list[str]:
    """List the units on the other side of rel that unit will see.

    For a container-scoped relation that is only the partner on the same machine.
    """
    other_app = rel.other_app(unit.app)
    others = [u.name for u in ctl.model.app_units(other_app) if u.name != unit.name]
    if any(e.scope == "container" for e in rel.endpoints):
        others = [o for o in others if ctl.model.units[o].machine == unit.machine]
    return others


def join(ctl: Controller, rel: Relation, unit: str, remote: str) -> None:
    """Queue relation-joined then relation-changed on unit for remote."""
    ctl.enqueue(unit, "relation_joined", relation_id=rel.id, remote_unit=remote)
    ctl.enqueue(unit, "relation_changed", relation_id=rel.id, remote_unit=remote)


def created(ctl: Controller, unit: str, rel: Relation) -> None:
    """Queue relation-created, then the unit's entry into the relation's scope."""
    ctl.enqueue(unit, "relation_created", relation_id=rel.id)
    ctl.model.queue.append({"unit": unit, "kind": "_enter_scope", "relation_id": rel.id})


def enter_scope(ctl: Controller, unit_name: str, relation_id: int) -> None:
    """Put a unit whose relation-created succeeded in scope; it and each unit there join.

    The unit's own joins queue after what it already has queued (after start for a new unit).
    """
    rel = ctl.model.relations.get(str(relation_id))
    unit = ctl.model.units.get(unit_name)
    if rel is None or unit is None or unit_name not in rel.members or unit_name in rel.in_scope:
        return
    rel.in_scope.append(unit_name)
    for other in _pairs(ctl, rel, unit):
        if other in rel.in_scope:
            join(ctl, rel, other, unit_name)
            join(ctl, rel, unit_name, other)


def unit_added(ctl: Controller, unit: Unit) -> None:
    """Queue a new unit's setup hooks; it joins each relation once in its scope."""
    model = ctl.model
    app = model.apps[unit.app]
    ctl.enqueue(unit.name, "install")
    relations = sorted(model.relations_of(unit.app), key=lambda r: (not r.is_peer, r.id))
    for rel in relations:
        created(ctl, unit.name, rel)
    # Juju runs leader-settings-changed once on a new unit that is not the leader.
    leadership = "leader_elected" if app.leader == unit.name else "leader_settings_changed"
    ctl.enqueue(unit.name, leadership)
    ctl.enqueue(unit.name, "config_changed")
    ctl.enqueue(unit.name, "start")


def integrated(ctl: Controller, rel: Relation) -> None:
    """Queue the hooks for a new relation between two applications (joins: `enter_scope`)."""
    model = ctl.model
    for endpoint in rel.endpoints:
        for unit in model.app_units(endpoint.app):
            created(ctl, unit.name, rel)


def departing(ctl: Controller, unit: Unit) -> None:
    """Queue what happens when unit leaves: departed elsewhere, departed/broken, stop, remove."""
    for rel in ctl.model.relations_of(unit.app):
        if unit.name not in rel.members and unit.name not in rel.seen:
            continue
        for other, seen in sorted(rel.seen.items()):
            if other != unit.name and unit.name in seen:
                ctl.enqueue(
                    other,
                    "relation_departed",
                    relation_id=rel.id,
                    remote_unit=unit.name,
                    departing_unit=unit.name,
                )
        for remote in list(rel.seen.get(unit.name, [])):
            ctl.enqueue(
                unit.name,
                "relation_departed",
                relation_id=rel.id,
                remote_unit=remote,
                departing_unit=unit.name,
            )
        ctl.enqueue(unit.name, "relation_broken", relation_id=rel.id)
    ctl.enqueue(unit.name, "stop")
    ctl.enqueue(unit.name, "remove")


def relation_removed(ctl: Controller, rel: Relation) -> None:
    """Queue departed (for every joined pair) and broken (for every member), then drop it."""
    for unit, seen in sorted(rel.seen.items()):
        for remote in seen:
            ctl.enqueue(
                unit,
                "relation_departed",
                relation_id=rel.id,
                remote_unit=remote,
                departing_unit=remote,
            )
    for unit in sorted(rel.members):
        ctl.enqueue(unit, "relation_broken", relation_id=rel.id)
    ctl.model.queue.append({"unit": "", "kind": "_drop_relation", "relation_id": rel.id})
