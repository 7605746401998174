"""The model as a `juju status --format json` document (jubilant parses it into a Status)."""

from __future__ import annotations

from typing import Any

from slurm_lab.juju.hooks import hook_name
from slurm_lab.juju.model import App, ModelState, StatusValue, Unit

JUJU_VERSION = "3.6.14"
BASE = {"name": "debian", "channel": "13"}
# Juju derives an application's status from its units' when the charm set none.
SEVERITY = ["error", "blocked", "waiting", "maintenance", "active", "unknown"]


def _status(current: str, message: str = "", since: str = "") -> dict[str, str]:
    return {"current": current, "message": message, "since": since}


def _workload(unit: Unit, model: ModelState) -> dict[str, str]:
    if unit.failed_event is not None:
        name = hook_name(unit.failed_event, model)
        return _status("error", f'hook failed: "{name}"', unit.workload.since)
    return _status(unit.workload.name, unit.workload.message, unit.workload.since)


def _agent(unit: Unit, model: ModelState) -> dict[str, str]:
    if unit.failed_event is not None:
        return _status("error", f'hook failed: "{hook_name(unit.failed_event, model)}"')
    return _status(unit.agent)


def _unit_doc(unit: Unit, model: ModelState) -> dict[str, Any]:
    app = model.apps[unit.app]
    return {
        "workload-status": _workload(unit, model),
        "juju-status": _agent(unit, model),
        "leader": app.leader == unit.name,
        "machine": unit.machine_id,
        "open-ports": list(unit.ports),
        "public-address": unit.address,
        "address": unit.address,
    }


def _app_status(app: App, units: list[dict[str, Any]]) -> dict[str, str]:
    if app.status.name != "unknown" or not units:
        return _status(app.status.name, app.status.message, app.status.since)
    worst = min(
        (u["workload-status"] for u in units),
        key=lambda s: SEVERITY.index(s["current"]) if s["current"] in SEVERITY else 0,
    )
    return dict(worst)


def _relations(app: App, model: ModelState) -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    for rel in model.relations_of(app.name):
        local = rel.endpoint_of(app.name)
        found.setdefault(local.endpoint, []).append(
            {
                "related-application": rel.other_app(app.name),
                "interface": local.interface,
                "scope": local.scope,
            }
        )
    return found


def _machine_doc(unit: Unit) -> dict[str, Any]:
    return {
        "juju-status": _status("started"),
        "hostname": unit.machine,
        "dns-name": unit.address,
        "ip-addresses": [unit.address],
        "instance-id": unit.machine,
        "machine-status": _status("running"),
        "base": BASE,
    }


def build_status(model: ModelState) -> dict[str, Any]:
    """Build the status document."""
    machines: dict[str, Any] = {}
    apps: dict[str, Any] = {}
    subordinates: dict[str, dict[str, Any]] = {}
    for unit in sorted(model.units.values(), key=lambda u: (u.app, u.number)):
        if unit.principal is not None:
            doc = _unit_doc(unit, model)
            doc.pop("machine")
            subordinates.setdefault(unit.principal, {})[unit.name] = doc
    for app in model.apps.values():
        # A removed unit stays in status, dying, until its last hook ran and its machine went.
        units = {
            u.name: _unit_doc(u, model)
            for u in sorted(model.units.values(), key=lambda u: u.number)
            if u.app == app.name and u.principal is None
        }
        for name, doc in units.items():
            if name in subordinates:
                doc["subordinates"] = subordinates[name]
            machines[doc["machine"]] = _machine_doc(model.units[name])
        sub_units = [
            doc
            for subs in subordinates.values()
            for n, doc in subs.items()
            if n.startswith(f"{app.name}/")
        ]
        principals = sorted(
            {rel.other_app(app.name) for rel in model.relations_of(app.name) if not rel.is_peer}
        )
        versions = [u.workload_version for u in model.app_units(app.name) if u.workload_version]
        apps[app.name] = {
            "charm": f"local:{app.charm_name}-0",
            "charm-origin": "local",
            "charm-name": app.charm_name,
            "charm-rev": 0,
            "exposed": False,
            "base": BASE,
            "application-status": _app_status(app, list(units.values()) or sub_units),
            "relations": _relations(app, model),
            "subordinate-to": principals if app.subordinate else [],
            "units": units,
            "version": versions[0] if versions else "",
            "scale": len(app.units),
        }
    return {
        "model": {
            "name": model.name,
            "type": "iaas",
            "controller": "lab",
            "cloud": "lab",
            "region": "local",
            "version": JUJU_VERSION,
            "model-status": _status("available"),
        },
        "machines": machines,
        "applications": apps,
        "controller": {"timestamp": StatusValue().since},
    }
