"""What a unit sees, as functions of the model: its hook's variables and its hook context.

The hook context (`unit_view`) is what the unit's hook tools answer from (`jujuc`): config with
the charm's defaults, leadership, the relations it joined with the databags it may read, the
secrets it owns or was granted (an owner sees every revision, a consumer the latest and the one
it tracks), ports, statuses, the action and its parameters, goal state and its network. Nothing
here changes the model.
"""

from __future__ import annotations

import time

from slurm_lab.juju import charms
from slurm_lab.juju.hooks import hook_name
from slurm_lab.juju.model import JsonDict, ModelState, Relation, Secret, Unit


def address_bag(unit: Unit) -> dict[str, str]:
    """Return the keys Juju puts in every unit databag."""
    return {
        "egress-subnets": f"{unit.address}/32",
        "ingress-address": unit.address,
        "private-address": unit.address,
    }


def hook_vars(model: ModelState, unit: Unit, event: JsonDict) -> dict[str, str | None]:
    """Return the variables Juju sets for this hook (dispatch path, relation, secret...)."""
    kind: str = event["kind"]
    if kind == "custom":
        return {}  # juju-exec: the command sets JUJU_DISPATCH_PATH itself if it dispatches
    if kind == "action":
        return {
            "JUJU_DISPATCH_PATH": f"actions/{event['name']}",
            "JUJU_ACTION_NAME": event["name"],
            "JUJU_ACTION_UUID": str(event["id"]),
        }
    name = hook_name(event, model)
    out: dict[str, str | None] = {
        "JUJU_DISPATCH_PATH": f"hooks/{name}",
        "JUJU_HOOK_NAME": name,
    }
    if kind.startswith("relation_"):
        rel = model.relations.get(str(event["relation_id"]))
        if rel is not None:
            endpoint = rel.endpoint_of(unit.app).endpoint
            out["JUJU_RELATION"] = endpoint
            out["JUJU_RELATION_ID"] = f"{endpoint}:{rel.id}"
            out["JUJU_REMOTE_APP"] = rel.other_app(unit.app)
        out["JUJU_REMOTE_UNIT"] = event.get("remote_unit")
        if kind == "relation_departed":
            out["JUJU_DEPARTING_UNIT"] = event.get("departing_unit")
    if kind.startswith("secret_"):
        secret = model.secrets.get(event["secret_id"])
        out["JUJU_SECRET_ID"] = event["secret_id"]
        if secret is not None:
            consumer = secret.consumers.get(unit.name)
            owned = secret.owner in (unit.app, unit.name)
            out["JUJU_SECRET_LABEL"] = (
                secret.label if owned else (consumer.label if consumer else None)
            )
        if event.get("revision") is not None:
            out["JUJU_SECRET_REVISION"] = str(event["revision"])
    return out


def unit_view(model: ModelState, spec: charms.CharmSpec, unit: Unit, event: JsonDict) -> JsonDict:
    """Return the hook context's view of the model for one unit (see `jujuc`)."""
    app = model.apps[unit.app]
    endpoints = spec.endpoints()
    config = {
        name: option["default"]
        for name, option in spec.options.items()
        if isinstance(option, dict) and option.get("default") is not None
    }
    config.update(app.config)
    relations = {
        str(rel.id): _relation_view(model, unit, rel, event)
        for rel in model.relations_of(unit.app)
        if unit.name in rel.members
    }
    extra = list((spec.meta.get("extra-bindings") or {}).keys())
    units_of_app = {
        name: {"status": u.workload.name, "message": u.workload.message}
        for name in app.units
        if (u := model.units.get(name)) is not None
    }
    action = None
    if event["kind"] == "action":
        action = {
            "name": event["name"],
            "id": str(event["id"]),
            "params": event.get("params") or {},
        }
    return {
        "unit": unit.name,
        "app": unit.app,
        "machine_id": unit.machine_id,
        "principal": unit.principal,
        "model": {"name": model.name, "uuid": model.uuid},
        "leader": app.leader == unit.name,
        "config": config,
        "endpoints": {
            name: {"role": role, **dict(spec_)} for name, (role, spec_) in endpoints.items()
        },
        "bindings": [*endpoints.keys(), *extra],
        "address": unit.address,
        "cidr": f"{unit.address.rsplit('.', 1)[0]}.0/24",
        "relations": relations,
        "secrets": {s.id: _secret_view(unit, s) for s in _visible_secrets(model, unit)},
        "ports": list(unit.ports),
        "status": {
            "unit": {"status": unit.workload.name, "message": unit.workload.message},
            "app": {"status": app.status.name, "message": app.status.message},
            "units_of_app": units_of_app,
        },
        "workload_version": unit.workload_version,
        "action": action,
        "goal_state": _goal_state(model, unit),
        "storage": [],
        "state": dict(unit.server_state),
        "out": {},
    }


def _goal_state(model: ModelState, unit: Unit) -> JsonDict:
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    app = model.apps[unit.app]
    units = {name: {"status": "active", "since": since} for name in app.units}
    relations: JsonDict = {}
    for rel in model.relations_of(unit.app):
        endpoint = rel.endpoint_of(unit.app).endpoint
        other = rel.other_app(unit.app)
        goals = relations.setdefault(endpoint, {})
        if not rel.is_peer:
            goals[other] = {"status": "joined", "since": since}
        for name in model.apps[other].units if other in model.apps else []:
            if name != unit.name:
                goals[name] = {"status": "active", "since": since}
    return {"units": units, "relations": relations}


def _relation_view(model: ModelState, unit: Unit, rel: Relation, event: JsonDict) -> JsonDict:
    local = rel.endpoint_of(unit.app)
    other = rel.other_app(unit.app)
    broken = event["kind"] == "relation_broken" and event.get("relation_id") == rel.id
    seen = [] if broken else list(rel.seen.get(unit.name, []))
    readable = {name: dict(bag) for name, bag in rel.unit_data.items()}
    readable.setdefault(unit.name, {})
    for name in seen:  # a unit in scope has settings (Juju writes its addresses on entry)
        if name not in readable and (remote := model.units.get(name)) is not None:
            readable[name] = address_bag(remote)
    apps = {unit.app: dict(rel.app_data.get(unit.app, {}))}
    if not rel.is_peer:
        apps[other] = dict(rel.app_data.get(other, {}))
    return {
        "endpoint": local.endpoint,
        "interface": local.interface,
        "remote_app": other,
        "peer": rel.is_peer,
        "key": rel.key(),
        "units": seen,
        "app_data": apps,
        "unit_data": readable,
    }


def _visible_secrets(model: ModelState, unit: Unit) -> list[Secret]:
    found: list[Secret] = []
    for secret in model.secrets.values():
        if secret.owner in (unit.app, unit.name) or _granted(model, secret, unit):
            found.append(secret)
    return found


def _granted(model: ModelState, secret: Secret, unit: Unit) -> bool:
    for rel_id, grantees in secret.grants.items():
        if rel_id in model.relations and (unit.app in grantees or unit.name in grantees):
            return True
    return False


def _secret_view(unit: Unit, secret: Secret) -> JsonDict:
    owned = secret.owner in (unit.app, unit.name)
    latest = secret.latest
    if owned:
        return {
            "owner": "application" if secret.owner_kind == "app" else "unit",
            "label": secret.label,
            "description": secret.description,
            "revisions": {str(r.revision): dict(r.content) for r in secret.revisions},
            "latest": latest.revision,
            "tracked": latest.revision,
            "grants": {k: list(v) for k, v in secret.grants.items()},
        }
    consumer = secret.consumers.get(unit.name)
    revisions = {str(latest.revision): dict(latest.content)}
    if consumer is not None:
        revisions[str(consumer.tracked)] = dict(secret.content_of(consumer.tracked))
    return {
        "owner": None,
        "consumer_label": consumer.label if consumer else None,
        "revisions": revisions,
        "latest": latest.revision,
        "tracked": consumer.tracked if consumer else None,
        "grants": {},
    }
