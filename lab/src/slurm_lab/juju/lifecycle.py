"""Which hooks Juju runs, in which order, when the model changes.

Orders follow Juju's documented charm lifecycle: a new unit runs install, relation-created for
the relations it is born into (peers first), leader-elected (the leader) or
leader-settings-changed (any other unit), config-changed and start, then relation-joined/changed
per remote unit; integrate runs relation-created on both sides, then relation-joined and
relation-changed per remote unit; a leaving unit makes the other units run relation-departed,
runs relation-departed and relation-broken itself, then stop and remove.
"""

from __future__ import annotations

from slurm_lab.juju.engine import Controller
from slurm_lab.juju.model import Endpoint, Relation, Unit


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


def unit_added(ctl: Controller, unit: Unit) -> None:
    """Queue a new unit's setup hooks and its joins with every existing relation."""
    model = ctl.model
    app = model.apps[unit.app]
    ctl.enqueue(unit.name, "install")
    relations = sorted(model.relations_of(unit.app), key=lambda r: (not r.is_peer, r.id))
    for rel in relations:
        ctl.enqueue(unit.name, "relation_created", relation_id=rel.id)
    # Juju runs leader-settings-changed once on a new unit that is not the leader.
    leadership = "leader_elected" if app.leader == unit.name else "leader_settings_changed"
    ctl.enqueue(unit.name, leadership)
    ctl.enqueue(unit.name, "config_changed")
    ctl.enqueue(unit.name, "start")
    for rel in relations:
        for other in _pairs(ctl, rel, unit):
            join(ctl, rel, unit.name, other)
            join(ctl, rel, other, unit.name)


def integrated(ctl: Controller, rel: Relation) -> None:
    """Queue the hooks for a new relation between two applications."""
    model = ctl.model
    sides = [model.app_units(e.app) for e in rel.endpoints]
    for units in sides:
        for unit in units:
            ctl.enqueue(unit.name, "relation_created", relation_id=rel.id)
    for units in sides:
        for unit in units:
            for other in _pairs(ctl, rel, unit):
                join(ctl, rel, unit.name, other)


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
