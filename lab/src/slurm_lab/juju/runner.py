"""Run one Juju hook (or action) of a charm inside a lab machine, with ops.testing.

This file is shipped into the lab (``/lab/charms/_runner/runner.py``) and executed by the
machine's own python3 with PYTHONPATH set to the charm's dependency dir and its ``src``. It
must only import the standard library, ops and ops.testing (the charm's own dependencies).

Protocol: one JSON request on stdin (see ``slurm_lab.juju.engine`` for what the backend sends),
one JSON response on stdout. The charm's own stdout (prints, subprocesses) goes to stderr so it
cannot corrupt the response.
"""

from __future__ import annotations

import base64
import importlib
import inspect
import json
import marshal
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import ops
from ops import testing

try:  # In a lab machine the runner runs as a script, with hooktools.py beside it.
    import hooktools  # pyright: ignore[reportMissingImports]
except ModuleNotFoundError:  # Imported from the slurm_lab package (the lab's own tests).
    from slurm_lab.juju import hooktools

# --- state: JSON -> ops.testing --------------------------------------------------------------


def _status(raw: dict[str, str] | None) -> ops.StatusBase:
    if not raw or raw.get("name", "unknown") in ("unknown", "error"):
        return ops.UnknownStatus()
    return ops.StatusBase.from_name(raw["name"], raw.get("message", ""))


def _decode_content(raw: Any) -> Any:
    if isinstance(raw, dict) and "__marshal__" in raw:
        return marshal.loads(base64.b64decode(raw["__marshal__"]))
    return raw


def _encode_content(content: Any) -> Any:
    try:
        json.dumps(content)
        return content
    except TypeError:
        return {"__marshal__": base64.b64encode(marshal.dumps(content)).decode()}


def _int_keys(bags: dict[str, dict[str, str]]) -> dict[int, dict[str, str]]:
    return {int(key): dict(value) for key, value in bags.items()}


def _relation(raw: dict[str, Any]) -> testing.RelationBase:
    common: dict[str, Any] = {
        "endpoint": raw["endpoint"],
        "interface": raw.get("interface"),
        "id": raw["id"],
        "local_app_data": raw["local_app_data"],
        "local_unit_data": raw["local_unit_data"],
    }
    if raw["type"] == "peer":
        return testing.PeerRelation(**common, peers_data=_int_keys(raw["remote_units_data"]))
    if raw["type"] == "subordinate":
        return testing.SubordinateRelation(
            **common,
            remote_app_name=raw["remote_app"],
            remote_app_data=raw["remote_app_data"],
            remote_unit_id=raw["remote_unit_id"],
            remote_unit_data=raw["remote_units_data"].get(str(raw["remote_unit_id"]), {}),
        )
    return testing.Relation(
        **common,
        remote_app_name=raw["remote_app"],
        remote_app_data=raw["remote_app_data"],
        remote_units_data=_int_keys(raw["remote_units_data"]),
        limit=raw.get("limit", 1),
    )


def _secret(raw: dict[str, Any]) -> testing.Secret:
    secret = testing.Secret(
        raw["tracked_content"],
        latest_content=raw["latest_content"],
        id=raw["id"],
        owner=raw["owner"],
        remote_grants={int(k): v for k, v in raw["remote_grants"].items()},
        label=raw.get("label"),
        description=raw.get("description"),
    )
    # ops.testing keeps revision numbers as private attributes; seed them so revisions stay
    # consistent with the backend's across hooks.
    object.__setattr__(secret, "_tracked_revision", raw["tracked_revision"])
    object.__setattr__(secret, "_latest_revision", raw["latest_revision"])
    return secret


def _network(raw: dict[str, str]) -> testing.Network:
    address = raw["address"]
    return testing.Network(
        raw["binding"],
        [testing.BindAddress([testing.Address(address)], interface_name="eth0")],
        ingress_addresses=[address],
        egress_subnets=[f"{address}/32"],
    )


def _port(spec: str) -> testing.Port | None:
    """Build an opened port as ops.testing takes it; None for a range, which it cannot hold.

    Ranges reach the charm through the hook tools only (`_install_port_tools`), as on Juju,
    where ops' own port API also speaks single ports only.
    """
    opened = hooktools.parse(spec)
    if opened.protocol == "icmp":
        return testing.ICMPPort()
    if opened.first != opened.last:
        return None
    kind = testing.UDPPort if opened.protocol == "udp" else testing.TCPPort
    return kind(port=opened.first)


def build_state(raw: dict[str, Any]) -> testing.State:
    """Build the ops.testing State for the backend's JSON view of one unit."""
    return testing.State(
        config=raw["config"],
        leader=raw["leader"],
        planned_units=raw["planned_units"],
        model=testing.Model(name=raw["model"]["name"], uuid=raw["model"]["uuid"]),
        relations=[_relation(r) for r in raw["relations"]],
        networks=[_network(n) for n in raw["networks"]],
        secrets=[_secret(s) for s in raw["secrets"]],
        stored_states=[
            testing.StoredState(
                s["name"],
                owner_path=s["owner_path"],
                content=_decode_content(s["content"]),
                _data_type_name=s.get("data_type_name", "StoredStateData"),
            )
            for s in raw["stored_states"]
        ],
        deferred=[
            testing.DeferredEvent(
                d["handle_path"], d["owner"], d["observer"], _decode_content(d["snapshot_data"])
            )
            for d in raw["deferred"]
        ],
        opened_ports=[p for spec in raw["ports"] if (p := _port(spec)) is not None],
        unit_status=_status(raw["unit_status"]),
        app_status=_status(raw["app_status"]),
        workload_version=raw["workload_version"],
    )


# --- state: ops.testing -> JSON --------------------------------------------------------------


def _dump_status(status: Any) -> dict[str, str]:
    return {"name": status.name, "message": status.message}


def _dump_relation(relation: testing.RelationBase) -> dict[str, Any]:
    return {
        "id": relation.id,
        "endpoint": relation.endpoint,
        "local_app_data": dict(relation.local_app_data),
        "local_unit_data": dict(relation.local_unit_data),
    }


def _dump_secret(secret: testing.Secret) -> dict[str, Any]:
    return {
        "id": secret.id,
        "owner": secret.owner,
        "label": secret.label,
        "description": secret.description,
        "latest_content": dict(secret.latest_content),
        "latest_revision": secret._latest_revision,  # pyright: ignore[reportPrivateUsage]
        "tracked_revision": secret._tracked_revision,  # pyright: ignore[reportPrivateUsage]
        "remote_grants": {str(k): sorted(v) for k, v in secret.remote_grants.items()},
    }


def _port_spec(port: testing.Port) -> str:
    """Write a port in Juju's notation (`6818/tcp`, `icmp`)."""
    return "icmp" if port.protocol == "icmp" else f"{port.port}/{port.protocol}"


def dump_state(state: testing.State) -> dict[str, Any]:
    """Dump the parts of an output State the backend keeps."""
    return {
        "relations": [_dump_relation(r) for r in state.relations],
        "secrets": [_dump_secret(s) for s in state.secrets],
        "stored_states": [
            {
                "name": s.name,
                "owner_path": s.owner_path,
                "content": _encode_content(dict(s.content)),
                "data_type_name": s._data_type_name,  # pyright: ignore[reportPrivateUsage]
            }
            for s in state.stored_states
        ],
        "deferred": [
            {
                "handle_path": d.handle_path,
                "owner": d.owner,
                "observer": d.observer,
                "snapshot_data": _encode_content(d.snapshot_data),
            }
            for d in state.deferred
        ],
        "ports": [_port_spec(p) for p in state.opened_ports],
        "unit_status": _dump_status(state.unit_status),
        "app_status": _dump_status(state.app_status),
        "workload_version": state.workload_version,
    }


# --- the event ---------------------------------------------------------------------------------


def build_event(  # noqa: PLR0911
    ctx: testing.Context[ops.CharmBase], raw: dict[str, Any], state: testing.State
) -> Any:
    """Build the ctx.on.<event>(...) for the backend's event description."""
    kind: str = raw["kind"]
    if kind == "action":
        return ctx.on.action(raw["name"], params=raw.get("params") or None, id=raw["id"])
    if kind.startswith("relation_"):
        relation = state.get_relation(raw["relation_id"])
        if kind in ("relation_created", "relation_broken"):
            return getattr(ctx.on, kind)(relation)
        if kind == "relation_departed":
            return ctx.on.relation_departed(
                relation,
                remote_unit=raw.get("remote_unit"),
                departing_unit=raw.get("departing_unit_id"),
            )
        return getattr(ctx.on, kind)(relation, remote_unit=raw.get("remote_unit"))
    if kind == "custom":
        from scenario.state import _Event  # noqa: PLC0415

        return _Event(raw["name"].replace("-", "_"))
    if kind.startswith("secret_"):
        secret = state.get_secret(id=raw["secret_id"])
        if kind in ("secret_expired", "secret_remove"):
            return getattr(ctx.on, kind)(secret, revision=raw["revision"])
        return getattr(ctx.on, kind)(secret)
    return getattr(ctx.on, kind)()


def _patch_event_env(event: dict[str, Any]) -> None:
    """Set the hook environment ops.testing gets wrong for the lab's events.

    ops.testing assumes the departing unit belongs to the remote app; when a unit leaves, Juju
    also runs relation-departed on the unit itself, with JUJU_DEPARTING_UNIT naming it. A custom
    event dispatched by juju-exec has JUJU_DISPATCH_PATH=hooks/<name as given>.
    """
    overrides: dict[str, str] = {}
    if event.get("departing_unit"):
        overrides["JUJU_DEPARTING_UNIT"] = event["departing_unit"]
    if event["kind"] == "custom":
        overrides["JUJU_DISPATCH_PATH"] = f"hooks/{event['name']}"
    if not overrides:
        return
    from scenario import _runtime  # noqa: PLC0415

    original = _runtime.Runtime._get_event_env  # pyright: ignore[reportPrivateUsage]

    def patched(self: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
        env = original(self, *args, **kwargs)
        env.update(overrides)
        return env

    _runtime.Runtime._get_event_env = patched  # pyright: ignore[reportPrivateUsage]


def _publish_status_changes(path: str) -> None:
    """Write each status the charm sets to path at once, for the host to show mid-hook.

    On Juju, status-set takes effect immediately; ops.testing only returns it at the end.
    """
    from scenario import mocking  # noqa: PLC0415

    live = Path(path)
    live.parent.mkdir(parents=True, exist_ok=True)
    live.unlink(missing_ok=True)
    original = mocking._MockModelBackend.status_set  # pyright: ignore[reportPrivateUsage]

    def patched(self: Any, status: Any, message: str = "", *, is_app: bool = False) -> None:
        original(self, status, message, is_app=is_app)
        try:
            current = json.loads(live.read_text())
        except (OSError, ValueError):
            current = {}
        current["app" if is_app else "unit"] = {"name": str(status), "message": message}
        tmp = live.with_name(f".{live.name}.tmp")
        tmp.write_text(json.dumps(current))
        tmp.replace(live)

    mocking._MockModelBackend.status_set = patched  # pyright: ignore[reportPrivateUsage]


def _defined(charm: type[ops.CharmBase], name: str) -> bool:
    """Whether the charm's events (charm.on) define an event of that name."""
    events = type(charm.on)  # pyright: ignore[reportUnknownMemberType]
    return isinstance(getattr(events, name.replace("-", "_"), None), ops.EventSource)


def _record_secret_reads(reads: set[str]) -> None:
    """Remember which secrets the charm read: only those observers get secret-changed."""
    from scenario import mocking  # noqa: PLC0415

    original = mocking._MockModelBackend.secret_get  # pyright: ignore[reportPrivateUsage]

    def patched(self: Any, *args: Any, **kwargs: Any) -> dict[str, str]:
        secret = self._get_secret(kwargs.get("id"), kwargs.get("label"))
        reads.add(secret.id)
        return original(self, *args, **kwargs)

    mocking._MockModelBackend.secret_get = patched  # pyright: ignore[reportPrivateUsage]


def _record_revision_removals(removed: list[list[Any]]) -> None:
    """Remember each revision the charm removes ([secret id, revision]), for the model."""
    from scenario import mocking  # noqa: PLC0415

    original = mocking._MockModelBackend.secret_remove  # pyright: ignore[reportPrivateUsage]

    def patched(self: Any, id: str, *, revision: int | None = None) -> None:
        original(self, id, revision=revision)
        if revision is not None:
            removed.append([self._get_secret(id).id, revision])

    mocking._MockModelBackend.secret_remove = patched  # pyright: ignore[reportPrivateUsage]


def charm_class(module_name: str = "charm") -> type[ops.CharmBase]:
    """Find the charm class defined in src/charm.py (the most derived if several)."""
    module = importlib.import_module(module_name)
    classes = [
        obj
        for _, obj in inspect.getmembers(module, inspect.isclass)
        if issubclass(obj, ops.CharmBase) and obj.__module__ == module.__name__
    ]
    leaves = [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
    if len(leaves) != 1:
        raise RuntimeError(f"expected one charm class in {module_name}, found {leaves}")
    return leaves[0]


def _charm_root(unit_dir: str, charm_dir: str) -> Path:
    """Make a writable charm dir (ops.testing writes metadata there) linking the charm."""
    root = Path(unit_dir) / "charm"
    root.mkdir(parents=True, exist_ok=True)
    for name in ("src", "charmcraft.yaml"):
        link = root / name
        if not link.is_symlink():
            link.symlink_to(Path(charm_dir) / name)
    return root


def _install_port_tools(unit_dir: str, opened: list[str]) -> Path:
    """Put Juju's port hook tools on PATH for this hook; return the file they change.

    The file starts with the unit's opened ports; `_opened_after` reads it back.
    """
    store = Path(unit_dir) / "opened-ports.json"
    store.write_text(json.dumps(opened))
    tools = Path(unit_dir) / "hook-tools"
    tools.mkdir(parents=True, exist_ok=True)
    script = Path(hooktools.__file__).resolve()
    for name in hooktools.TOOLS:
        tool = tools / name
        tool.write_text(f'#!/bin/sh\nexec {sys.executable} {script} {name} "$@"\n')
        tool.chmod(0o755)
    os.environ["PATH"] = f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ[hooktools.PORTS_ENV] = str(store)
    return store


def _opened_after(store: Path, scenario_before: list[str], scenario_after: list[str]) -> list[str]:
    """Return the unit's ports after the hook: the tools' file, plus what ops' API changed.

    ops.testing holds the single ports the charm set with `Unit.set_ports` and friends; the
    tools' file holds everything, ranges included.
    """
    opened: list[str] = json.loads(store.read_text())
    closed = set(scenario_before) - set(scenario_after)
    added = [p for p in scenario_after if p not in scenario_before and p not in opened]
    return [p for p in opened if p not in closed] + added


def run(request: dict[str, Any]) -> dict[str, Any]:
    """Run the requested event; return the response document."""
    charm = request["charm"]
    event = request["event"]
    _patch_event_env(event)
    if request.get("live_status_file"):
        _publish_status_changes(request["live_status_file"])
    reads: set[str] = set()
    _record_secret_reads(reads)
    removed: list[list[Any]] = []
    _record_revision_removals(removed)
    response: dict[str, Any] = {"ok": True, "error": None, "action_failed": None, "state": None}
    ctx: testing.Context[ops.CharmBase] | None = None
    ports_store: Path | None = None
    scenario_before: list[str] = []
    try:
        charm_type = charm_class()
        if event["kind"] == "custom" and not _defined(charm_type, event["name"]):
            message = f"event {event['name']} not defined for the charm: nothing to do"
            return {
                **response,
                "log": [["DEBUG", message]],
                "action_results": None,
                "action_logs": [],
                "secrets_read": [],
            }
        ctx = testing.Context(
            charm_type,
            meta=charm["meta"],
            actions=charm["actions"],
            config=charm["config"],
            app_name=request["app"],
            unit_id=request["unit_id"],
            machine_id=request["machine_id"],
            principal_unit=request.get("principal_unit"),
            charm_root=_charm_root(request["unit_dir"], charm["dir"]),
        )
        state_in = build_state(request["state"])
        ports_store = _install_port_tools(request["unit_dir"], request["state"]["ports"])
        scenario_before = [_port_spec(p) for p in state_in.opened_ports]
        state_out = ctx.run(build_event(ctx, event, state_in), state_in)
        response["state"] = dump_state(state_out)
    except testing.ActionFailed as e:
        response["action_failed"] = e.message
        response["state"] = dump_state(e.state) if isinstance(e.state, testing.State) else None
    except Exception:
        response["ok"] = False
        response["error"] = traceback.format_exc()
    if ctx is None:
        return {
            **response,
            "log": [],
            "action_results": None,
            "action_logs": [],
            "secrets_read": [],
        }
    if response["state"] is not None and ports_store is not None:
        response["state"]["ports"] = _opened_after(
            ports_store, scenario_before, response["state"]["ports"]
        )
    response["log"] = [[line.level, line.message] for line in ctx.juju_log]
    response["action_results"] = ctx.action_results
    response["action_logs"] = list(ctx.action_logs)
    response["secrets_read"] = sorted(reads)
    response["secret_revisions_removed"] = removed
    return response


def main() -> None:
    """Read the request on stdin, answer on the original stdout."""
    request = json.load(sys.stdin)
    response_fd = os.dup(1)
    os.dup2(2, 1)  # the charm's own output (and its subprocesses') goes to stderr
    sys.stdout = sys.stderr
    os.environ.setdefault("SCENARIO_BARE_CHARM_ERRORS", "true")
    response = run(request)
    with os.fdopen(response_fd, "w") as out:
        json.dump(response, out)


if __name__ == "__main__":
    main()
