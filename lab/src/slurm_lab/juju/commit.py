"""Applies what a hook changed to the model and returns the events those changes trigger.

Status and workload version take effect at once, as Juju's status-set does (`apply_immediate`,
also mid-hook). Relation data, secrets, ports and unit state commit when the hook exits 0
(`commit`). A changed databag gives relation-changed to the units that see its writer; a new
secret revision gives secret-changed to every consumer tracking an older one.

Secret revisions follow Juju's rule: a revision is obsolete once it is not the latest and no
consumer unit tracks it (after the owner adds a revision, or after a consumer moves on with
`secret-get --refresh`). Juju then runs `secret-remove` once per obsolete revision on the
owner: the owner unit, or the leader of the owning application. The revision stays until the
charm removes it (`secret-remove --revision`); the owner's own units always read the latest.

The bookkeeping around hooks is here too: what a relation hook records when it starts
(`before`) and ends (`after`), and what goes when a relation, an application or a unit does.
The engine queues the events these functions return; none of them runs anything.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_lab.juju import hooks
from slurm_lab.juju.model import (
    Consumer,
    JsonDict,
    ModelState,
    Relation,
    Secret,
    SecretRevision,
    StatusValue,
    Unit,
)
from slurm_lab.juju.views import address_bag

Events = list[JsonDict]


def apply_immediate(model: ModelState, unit: Unit, context: JsonDict) -> None:
    """Status and workload version: Juju sets them when the tool runs, not at commit."""
    out = context.get("out", {})
    status = context.get("status", {})
    app = model.apps.get(unit.app)
    if out.get("status_set"):
        _set_status(unit.workload, status.get("unit"), lambda s: setattr(unit, "workload", s))
        if app is not None and app.leader == unit.name:
            _set_status(app.status, status.get("app"), lambda s: setattr(app, "status", s))
    if out.get("version_set"):
        unit.workload_version = str(context.get("workload_version", ""))


def commit(model: ModelState, unit: Unit, context: JsonDict) -> Events:
    """Apply what a hook that exited 0 changed; return the hooks those changes trigger."""
    out: JsonDict = context.get("out", {})
    unit.ports = list(context.get("ports", unit.ports))
    unit.server_state = dict(context.get("state", unit.server_state))
    events: Events = []
    for rel_id in out.get("relations_written", []):
        rel = model.relations.get(str(rel_id))
        view = context["relations"].get(str(rel_id))
        if rel is not None and view is not None:
            events += _apply_databags(model, unit, rel, view)
    return events + apply_secret_ops(model, unit, out.get("secret_ops", []))


def _set_status(
    current: StatusValue, raw: dict[str, str] | None, store: Callable[[StatusValue], None]
) -> None:
    if not raw:
        return
    if (current.name, current.message) != (raw["status"], raw["message"]):
        store(StatusValue(raw["status"], raw["message"]))


def _apply_databags(model: ModelState, unit: Unit, rel: Relation, view: JsonDict) -> Events:
    """Store the unit's (and, for the leader, the app's) databag as the hook left it."""
    events: Events = []
    mine = view["unit_data"].get(unit.name, {})
    if mine != rel.unit_data.get(unit.name, {}):
        rel.unit_data[unit.name] = dict(mine)
        for other in rel.members:
            if unit.name in rel.seen.get(other, []):
                events.append(
                    hooks.event(
                        other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                    )
                )
    app_bag = view["app_data"].get(unit.app, {})
    leader = model.apps[unit.app].leader == unit.name
    if leader and app_bag != rel.app_data.get(unit.app, {}):
        rel.app_data[unit.app] = dict(app_bag)
        readers = [
            m
            for m in rel.members
            if m != unit.name and model.units[m].app == rel.other_app(unit.app)
        ]
        for other in readers:
            if rel.seen.get(other):
                events.append(
                    hooks.event(other, "relation_changed", relation_id=rel.id, remote_unit=None)
                )
    return events


# --- secrets -------------------------------------------------------------------------------------


def _remove_revision(secret: Secret, revision: int) -> None:
    """Drop a revision the owner removed (`secret-remove --revision`); never the latest."""
    if revision != secret.latest.revision:  # Removing the latest removes the secret.
        secret.revisions = [r for r in secret.revisions if r.revision != revision]


def obsolete_revisions(model: ModelState, secret: Secret) -> Events:
    """Return secret-remove on the owner for each revision no consumer tracks any more."""
    owner = secret.owner
    if secret.owner_kind == "app":
        app = model.apps.get(secret.owner)
        owner = app.leader if app is not None else None
    if owner is None or owner not in model.units:
        return []
    tracked = {consumer.tracked for consumer in secret.consumers.values()}
    events: Events = []
    for revision in secret.revisions[:-1]:
        number = revision.revision
        if number in tracked or number in secret.removal_notified:
            continue
        secret.removal_notified.append(number)
        events.append(hooks.event(owner, "secret_remove", secret_id=secret.id, revision=number))
    return events


def _manages(model: ModelState, unit: Unit, secret: Secret) -> bool:
    """Whether the unit may change the secret: its owner unit, or the owning app's leader."""
    if secret.owner_kind == "unit":
        return secret.owner == unit.name
    return model.apps[unit.app].leader == unit.name


def apply_secret_ops(model: ModelState, unit: Unit, ops: list[JsonDict]) -> Events:
    """Apply the secret tools' calls in order; one new revision per secret per hook."""
    pending: dict[str, dict[str, str]] = {}
    for op in ops:
        if op["op"] == "add":
            _add_secret(model, unit, op)
            continue
        secret = model.secrets.get(op["id"])
        if secret is None:
            continue
        if op["op"] in ("track", "consumer_label"):
            _apply_consumer_op(unit, secret, op)
        elif _manages(model, unit, secret):
            _apply_owner_op(model, secret, op, pending)
    events: Events = []
    for secret_id, content in pending.items():
        secret = model.secrets.get(secret_id)
        if secret is not None and content != secret.latest.content:
            events += _new_revision(secret, content)
    for secret in model.secrets.values():
        events += obsolete_revisions(model, secret)
    return events


def _add_secret(model: ModelState, unit: Unit, op: JsonDict) -> None:
    owned_by_app = op["owner"] == "application"
    model.secrets[op["id"]] = Secret(
        id=op["id"],
        owner=unit.app if owned_by_app else unit.name,
        owner_kind="app" if owned_by_app else "unit",
        revisions=[SecretRevision(1, dict(op["content"]))],
        label=op.get("label"),
        description=op.get("description"),
    )


def _apply_consumer_op(unit: Unit, secret: Secret, op: JsonDict) -> None:
    """Record a consumer's tracked revision (first read, --refresh) or its label."""
    known = secret.consumers.get(unit.name)
    if op["op"] == "track":
        secret.consumers[unit.name] = Consumer(op["revision"], known.label if known else None)
    else:
        tracked = known.tracked if known else secret.latest.revision
        secret.consumers[unit.name] = Consumer(tracked, op["label"])


def _apply_owner_op(
    model: ModelState, secret: Secret, op: JsonDict, pending: dict[str, dict[str, str]]
) -> None:
    """secret-set, -grant, -revoke or -remove by the unit that manages the secret."""
    kind = op["op"]
    if kind == "set":
        for name in ("label", "description"):
            if op.get(name) is not None:
                setattr(secret, name, op[name])
        if op.get("content") is not None:
            pending[secret.id] = dict(op["content"])
    elif kind in ("grant", "revoke"):
        _apply_grant(model, secret, op)
    elif kind == "remove" and op.get("revision") is None:
        del model.secrets[secret.id]
        pending.pop(secret.id, None)
    elif kind == "remove":
        _remove_revision(secret, op["revision"])


def _apply_grant(model: ModelState, secret: Secret, op: JsonDict) -> None:
    rel_id = op.get("relation")
    if rel_id is None:
        return
    rel = model.relations.get(str(rel_id))
    if rel is None:
        return
    grantee = op.get("unit") or op.get("app") or rel.other_app(secret.owner.split("/")[0])
    grantees = secret.grants.setdefault(str(rel_id), [])
    if op["op"] == "grant" and grantee not in grantees:
        grantees.append(grantee)
    elif op["op"] == "revoke" and grantee in grantees:
        grantees.remove(grantee)
        if not grantees:
            del secret.grants[str(rel_id)]


def _new_revision(secret: Secret, content: dict[str, str]) -> Events:
    """Add a revision; every consumer tracking an older one gets secret-changed."""
    revision = secret.latest.revision + 1
    secret.revisions.append(SecretRevision(revision, content))
    return [
        hooks.event(consumer_unit, "secret_changed", secret_id=secret.id)
        for consumer_unit, consumer in sorted(secret.consumers.items())
        if consumer.tracked < revision
    ]


# --- bookkeeping around hooks --------------------------------------------------------------------


def before(model: ModelState, unit: Unit, event: JsonDict) -> None:
    """Record what a relation hook changes as it starts: membership, who it saw join or go."""
    kind = event["kind"]
    rel = model.relations.get(str(event.get("relation_id")))
    if rel is None:
        return
    if kind == "relation_created" and unit.name not in rel.members:
        rel.members.append(unit.name)
        rel.unit_data.setdefault(unit.name, address_bag(unit))
        rel.app_data.setdefault(unit.app, {})
    elif kind == "relation_joined":
        seen = rel.seen.setdefault(unit.name, [])
        if event["remote_unit"] not in seen:
            seen.append(event["remote_unit"])
    elif kind == "relation_departed":
        gone = event["departing_unit"] if event["departing_unit"] != unit.name else None
        gone = gone or event["remote_unit"]
        seen = rel.seen.get(unit.name, [])
        if gone in seen:
            seen.remove(gone)


def after(model: ModelState, unit: Unit, event: JsonDict) -> None:
    """Record what a hook that succeeded ends: a unit out of a broken relation, a started one."""
    if event["kind"] == "relation_broken":
        rel = model.relations.get(str(event["relation_id"]))
        if rel is not None and unit.name in rel.members:
            rel.members.remove(unit.name)
            rel.seen.pop(unit.name, None)
            if unit.name in rel.in_scope:
                rel.in_scope.remove(unit.name)
    elif event["kind"] == "start" and unit.agent != "executing":
        unit.agent = "idle"


def drop_relation(model: ModelState, relation_id: int) -> None:
    """Forget a relation after its last hook, and the secret grants made over it."""
    rel_id = str(relation_id)
    model.relations.pop(rel_id, None)
    for secret in model.secrets.values():
        secret.grants.pop(rel_id, None)


def drop_app(model: ModelState, app: str) -> None:
    """Forget an application after its units' last hooks, and the secrets it owned."""
    model.apps.pop(app, None)
    for secret in list(model.secrets.values()):
        if secret.owner == app:
            del model.secrets[secret.id]


def drop_unit(model: ModelState, name: str) -> tuple[Unit | None, Events]:
    """Forget a unit after its last hook; the unit, and the hooks that follow.

    Its secrets go, revisions only it tracked become obsolete, and leadership moves on (the
    new leader gets leader-elected). Its machine is the caller's to destroy.
    """
    unit = model.units.pop(name, None)
    events: Events = []
    for secret in list(model.secrets.values()):
        secret.consumers.pop(name, None)
        if secret.owner == name:
            del model.secrets[secret.id]
        else:
            events += obsolete_revisions(model, secret)  # It tracked a revision no one else does.
    app = model.apps.get(name.split("/", maxsplit=1)[0])
    if app is not None and app.leader == name:
        app.leader = app.units[0] if app.units else None
        if app.leader:
            events.append(hooks.event(app.leader, "leader_elected"))
    return unit, events


def move_leadership(model: ModelState, app_name: str) -> tuple[str, Events]:
    """Make the application's next unit (after the leader, in unit order) its leader.

    What Juju does when the leader's agent loses its lease (a stalled or restarted agent):
    another unit becomes the leader and gets leader-elected; the old leader is told nothing,
    its next `is-leader` answers false. The new leader, and the hooks that follow.
    """
    app = model.apps[app_name]
    if len(app.units) < 2:
        raise ValueError(f"{app_name} has no other unit to lead")
    current = app.units.index(app.leader) if app.leader in app.units else -1
    app.leader = app.units[(current + 1) % len(app.units)]
    return app.leader, [hooks.event(app.leader, "leader_elected")]
