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

Each function takes the model and returns the events to queue, in order; the engine queues them.
"""

from __future__ import annotations

from slurm_lab.juju import hooks
from slurm_lab.juju.model import Endpoint, JsonDict, ModelState, Relation, Unit

Events = list[JsonDict]


def new_relation(model: ModelState, endpoints: list[Endpoint]) -> Relation:
    """Record a relation (no hooks yet)."""
    rel = Relation(id=model.next_relation, endpoints=endpoints)
    model.next_relation += 1
    model.relations[str(rel.id)] = rel
    return rel


def _pairs(model: ModelState, rel: Relation, unit: Unit) -> list[str]:
    """List the units on the other side of rel that unit will see.

    For a container-scoped relation that is only the partner on the same machine.
    """
    other_app = rel.other_app(unit.app)
    others = [u.name for u in model.app_units(other_app) if u.name != unit.name]
    if any(e.scope == "container" for e in rel.endpoints):
        others = [o for o in others if model.units[o].machine == unit.machine]
    return others


def join(rel: Relation, unit: str, remote: str) -> Events:
    """Return relation-joined then relation-changed on unit for remote."""
    return [
        hooks.event(unit, "relation_joined", relation_id=rel.id, remote_unit=remote),
        hooks.event(unit, "relation_changed", relation_id=rel.id, remote_unit=remote),
    ]


def created(unit: str, rel: Relation) -> Events:
    """Return relation-created, then the unit's entry into the relation's scope."""
    return [
        hooks.event(unit, "relation_created", relation_id=rel.id),
        hooks.event(unit, "_enter_scope", relation_id=rel.id),
    ]


def enter_scope(model: ModelState, unit_name: str, relation_id: int) -> Events:
    """Put a unit whose relation-created succeeded in scope; it and each unit there join.

    The unit's own joins queue after what it already has queued (after start for a new unit).
    """
    rel = model.relations.get(str(relation_id))
    unit = model.units.get(unit_name)
    if rel is None or unit is None or unit_name not in rel.members or unit_name in rel.in_scope:
        return []
    rel.in_scope.append(unit_name)
    events: Events = []
    for other in _pairs(model, rel, unit):
        if other in rel.in_scope:
            events += join(rel, other, unit_name) + join(rel, unit_name, other)
    return events


def unit_added(model: ModelState, unit: Unit) -> Events:
    """Return a new unit's setup hooks; it joins each relation once in its scope."""
    app = model.apps[unit.app]
    events = [hooks.event(unit.name, "install")]
    relations = sorted(model.relations_of(unit.app), key=lambda r: (not r.is_peer, r.id))
    for rel in relations:
        events += created(unit.name, rel)
    # Juju runs leader-settings-changed once on a new unit that is not the leader.
    leadership = "leader_elected" if app.leader == unit.name else "leader_settings_changed"
    return events + [
        hooks.event(unit.name, kind) for kind in (leadership, "config_changed", "start")
    ]


def integrated(model: ModelState, rel: Relation) -> Events:
    """Return the hooks for a new relation between two applications (joins: `enter_scope`)."""
    events: Events = []
    container = any(e.scope == "container" for e in rel.endpoints)
    for endpoint in rel.endpoints:
        for unit in model.app_units(endpoint.app):
            # A subordinate takes part in a container relation only beside its principal.
            if container and unit.principal and not _beside(model, unit, rel):
                continue
            events += created(unit.name, rel)
    return events


def _beside(model: ModelState, unit: Unit, rel: Relation) -> bool:
    """Whether subordinate `unit`'s principal belongs to the relation's other application."""
    principal = model.units.get(unit.principal or "")
    return principal is not None and principal.app == rel.other_app(unit.app)


def departing(model: ModelState, unit: Unit) -> Events:
    """Return what happens when unit leaves: departed elsewhere, departed/broken, stop, remove."""
    events: Events = []
    for rel in model.relations_of(unit.app):
        if unit.name not in rel.members and unit.name not in rel.seen:
            continue
        for other, seen in sorted(rel.seen.items()):
            if other != unit.name and unit.name in seen:
                events.append(_departed(other, rel, remote=unit.name, departing=unit.name))
        for remote in list(rel.seen.get(unit.name, [])):
            events.append(_departed(unit.name, rel, remote=remote, departing=unit.name))
        events.append(hooks.event(unit.name, "relation_broken", relation_id=rel.id))
    return [*events, hooks.event(unit.name, "stop"), hooks.event(unit.name, "remove")]


def relation_removed(rel: Relation) -> Events:
    """Return departed (for every joined pair) and broken (for every member), then the drop."""
    events = [
        _departed(unit, rel, remote=remote, departing=remote)
        for unit, seen in sorted(rel.seen.items())
        for remote in seen
    ]
    events += [
        hooks.event(unit, "relation_broken", relation_id=rel.id) for unit in sorted(rel.members)
    ]
    return [*events, hooks.event("", "_drop_relation", relation_id=rel.id)]


def _departed(unit: str, rel: Relation, *, remote: str, departing: str) -> JsonDict:
    return hooks.event(
        unit, "relation_departed", relation_id=rel.id, remote_unit=remote, departing_unit=departing
    )
