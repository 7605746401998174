"""The lab's Juju controller: an event queue, hook execution in unit machines, state updates.

Every change the backend makes (deploy, integrate, config, remove, ...) enqueues the hooks Juju
would run, in Juju's documented order; `Controller.drain` runs them one at a time, in queue order,
until nothing is left. A hook that changes a databag or a secret enqueues the follow-up hooks
(relation-changed, secret-changed) on the units Juju would notify.

An event is a small JSON document: {"unit": "app/0", "kind": "install"} or, for relations,
{"unit", "kind": "relation_changed", "relation_id", "remote_unit": "other/1"}, and a few
internal kinds starting with "_" for bookkeeping once hooks have run (dropping a relation,
destroying a unit's machine).
"""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from slurm_lab.errors import LabError
from slurm_lab.juju import charms
from slurm_lab.juju.model import (
    App,
    Consumer,
    JsonDict,
    ModelState,
    Relation,
    Secret,
    SecretRevision,
    StatusValue,
    Unit,
)

logger = logging.getLogger(__name__)

HOOK_TIMEOUT = 900.0
UNIT_AGENT_DIR = "/var/lib/juju/agents"
PYCACHE_DIR = "/var/cache/lab-juju/pycache"


RETIRING_MACHINE_TIMEOUT = 30 * 60
"""How long a removed unit's machine is kept for its background work, at most (seconds)."""


class MachineLike(Protocol):
    """What the backend needs from a lab machine (slurm_lab.machines.Machine)."""

    name: str
    address: str

    def exec(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        timeout: float | None = 120,
        env: dict[str, str] | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the machine."""
        ...

    def journal(self, unit: str | None = None, lines: int = 500) -> str:
        """Return the machine's journal."""
        ...


class LabLike(Protocol):
    """What the backend needs from the lab (slurm_lab.machines.Lab)."""

    state_dir: Path
    shared_dir: Path
    charms_dir: Path

    def create(self, name: str) -> Any:
        """Create and boot a machine."""
        ...

    def get(self, name: str) -> Any:
        """Return the named machine."""
        ...

    def destroy(self, name: str) -> None:
        """Remove the named machine."""
        ...

    def machines(self) -> list[Any]:
        """Return every machine."""
        ...


def hook_name(event: JsonDict, model: ModelState) -> str:
    """Return the Juju hook name for an event, like 'slurmd-relation-changed'."""
    kind: str = event["kind"]
    if kind == "action":
        return f"action {event['name']}"
    if kind.startswith("relation_"):
        relation = model.relations.get(str(event["relation_id"]))
        unit = model.units.get(event["unit"])
        endpoint = relation.endpoint_of(unit.app).endpoint if relation and unit else "?"
        return f"{endpoint}-{kind.replace('_', '-')}"
    return kind.replace("_", "-")


class Controller:
    """Runs hooks for a model on a lab; owns the event queue."""

    def __init__(
        self,
        model: ModelState,
        lab: LabLike,
        log_dir: Path,
        save: Callable[[], None],
        charms_mount: str = "/lab/charms",
    ) -> None:
        self.model = model
        self.lab = lab
        self.log_dir = log_dir
        self.save = save
        self.charms_mount = charms_mount
        self._specs: dict[str, charms.CharmSpec] = {}
        self.hook_times: list[float] = []
        # stand-in subordinate apps implemented in Python: app kind -> handler
        self.builtin: dict[str, Callable[[Unit, JsonDict], None]] = {}

    # --- queue ---------------------------------------------------------------------------------

    def enqueue(self, unit: str, kind: str, **fields: Any) -> None:
        """Queue an event unless the same one is already waiting."""
        event = {"unit": unit, "kind": kind, **fields}
        if kind == "relation_changed" and event in self.model.queue:
            return
        self.model.queue.append(event)

    def drain(self) -> None:
        """Run queued events until none is left."""
        while self.model.queue:
            event = self.model.queue.pop(0)
            self.dispatch(event)
            self.save()

    def dispatch(self, event: JsonDict) -> None:
        """Run one event, holding it back while its unit is in error."""
        if event["kind"].startswith("_"):
            self._internal(event)
            return
        unit = self.model.units.get(event["unit"])
        if unit is None:
            return
        if not self._applies(unit, event):
            return
        if unit.in_error and not self.retry(unit):
            unit.backlog.append(event)
            return
        self.run_event(unit, event)

    def _applies(self, unit: Unit, event: JsonDict) -> bool:
        """Relation events only reach units that joined the relation (it may be gone)."""
        if not event["kind"].startswith("relation_"):
            return True
        rel = self.model.relations.get(str(event["relation_id"]))
        member = rel is not None and unit.name in rel.members
        if rel is None or (event["kind"] != "relation_created" and not member):
            logger.debug("dropping %s for %s: not in the relation", event["kind"], unit.name)
            return False
        return True

    def retry(self, unit: Unit) -> bool:
        """Run the failed hook again, then the events held back; whether the unit recovered."""
        assert unit.failed_event is not None
        failed, unit.failed_event = unit.failed_event, None
        if self._applies(unit, failed) and not self.run_event(unit, failed):
            return False
        while unit.backlog:
            event = unit.backlog.pop(0)
            if self._applies(unit, event) and not self.run_event(unit, event):
                return False
        return True

    # --- running one event ---------------------------------------------------------------------

    def spec(self, app: App) -> charms.CharmSpec:
        """Return the charm spec of an app (read once per process)."""
        if app.name not in self._specs:
            self._specs[app.name] = charms.load_spec(Path(app.charm_dir))
        return self._specs[app.name]

    def forget_spec(self, app: str) -> None:
        """Drop a cached spec (the app was redeployed)."""
        self._specs.pop(app, None)

    def machine(self, unit: Unit) -> MachineLike:
        """Return the lab machine a unit runs on."""
        return self.lab.get(unit.machine)

    def run_event(self, unit: Unit, event: JsonDict) -> bool:
        """Run a hook for unit; on failure the unit goes into error. Returns success."""
        self._before(unit, event)
        app = self.model.apps[unit.app]
        if app.kind != "charm":
            self.builtin[app.kind](unit, event)
            self._after(unit, event)
            return True
        return self._finish(unit, event, self.run_charm(unit, event))

    def _finish(self, unit: Unit, event: JsonDict, response: JsonDict) -> bool:
        if not response["ok"]:
            unit.failed_event = event
            name = hook_name(event, self.model)
            self.log(unit, "ERROR", f'hook "{name}" failed:\n{response["error"]}')
            return False
        self.apply(unit, response)
        self._after(unit, event)
        return True

    def run_concurrently(self, events: list[JsonDict], workers: int = 2) -> None:
        """Run events of distinct charm units at once, as Juju's unit agents would.

        Each hook sees the model as it was before the batch; results are applied in the given
        order. Units in error (and stand-ins) get their event queued instead.
        """
        batch: list[tuple[Unit, JsonDict]] = []
        for event in events:
            unit = self.model.units.get(event["unit"])
            if unit is None:
                continue
            if unit.in_error or self.model.apps[unit.app].kind != "charm":
                self.model.queue.append(event)
            else:
                self._before(unit, event)
                batch.append((unit, event))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            responses = list(pool.map(lambda item: self.run_charm(*item), batch))
        for (unit, event), response in zip(batch, responses, strict=True):
            self._finish(unit, event, response)
        self.save()

    def run_charm(self, unit: Unit, event: JsonDict) -> JsonDict:
        """Execute the runner in the unit's machine; the parsed response (ok False on crash)."""
        app = self.model.apps[unit.app]
        spec = self.spec(app)
        charm_dir = f"{self.charms_mount}/{app.name}"
        request = {
            "charm": {
                "dir": charm_dir,
                "meta": spec.meta,
                "config": spec.config,
                "actions": spec.actions,
            },
            "app": app.name,
            "unit_id": unit.number,
            "machine_id": unit.machine_id,
            "principal_unit": unit.principal,
            "unit_dir": f"{UNIT_AGENT_DIR}/unit-{app.name}-{unit.number}",
            "event": self._event_for_runner(event),
            "state": self.unit_state(unit, event),
        }
        env = {
            "PYTHONPATH": f"{charm_dir}/deps:{charm_dir}/src",
            "PYTHONPYCACHEPREFIX": PYCACHE_DIR,
        }
        name = hook_name(event, self.model)
        unit.agent = "executing"
        started = time.monotonic()
        try:
            result = self.machine(unit).exec(
                ["python3", f"{self.charms_mount}/{charms.RUNNER_DIR}/runner.py"],
                input=json.dumps(request),
                env=env,
                timeout=HOOK_TIMEOUT,
            )
        except LabError as e:
            return {"ok": False, "error": str(e), "log": []}
        finally:
            unit.agent = "idle"
        elapsed = time.monotonic() - started
        self.hook_times.append(elapsed)
        try:
            response: JsonDict = json.loads(result.stdout)
        except ValueError:
            response = {
                "ok": False,
                "error": result.stderr or f"runner exited {result.returncode}",
            }
        response["secrets_shown"] = [secret["id"] for secret in request["state"]["secrets"]]
        for level, message in response.get("log") or []:
            self.log(unit, level, message)
        if result.stderr.strip():
            self.log(unit, "DEBUG", f"{name} output:\n{result.stderr.rstrip()}")
        self.log(unit, "INFO", f'ran "{name}" hook ({elapsed:.2f}s)')
        return response

    @staticmethod
    def _event_for_runner(event: JsonDict) -> JsonDict:
        """Turn unit names into the unit numbers ops.testing events take."""
        out = dict(event)
        if event.get("remote_unit"):
            out["remote_unit"] = int(event["remote_unit"].split("/")[1])
        if event.get("departing_unit"):
            out["departing_unit_id"] = int(event["departing_unit"].split("/")[1])
        return out

    # --- state for one unit --------------------------------------------------------------------

    def unit_state(self, unit: Unit, event: JsonDict | None = None) -> JsonDict:
        """Return the JSON view of the model one unit's charm sees (the runner builds a State)."""
        app = self.model.apps[unit.app]
        breaking = event["relation_id"] if event and event["kind"] == "relation_broken" else None
        relations = [
            self._relation_view(unit, rel, broken=rel.id == breaking)
            for rel in self.model.relations_of(unit.app)
            if unit.name in rel.members
        ]
        networks = [
            {"binding": name, "address": unit.address}
            for name, (_, spec) in self.spec(app).endpoints().items()
            if spec.get("scope") != "container"
        ]
        return {
            "config": app.config,
            "leader": app.leader == unit.name,
            "planned_units": len(app.units),
            "model": {"name": self.model.name, "uuid": self.model.uuid},
            "relations": relations,
            "networks": networks,
            "secrets": [self._secret_view(unit, s) for s in self._visible_secrets(unit)],
            "stored_states": unit.stored_states,
            "deferred": unit.deferred,
            "ports": unit.ports,
            "unit_status": {"name": unit.workload.name, "message": unit.workload.message},
            "app_status": {"name": app.status.name, "message": app.status.message},
            "workload_version": unit.workload_version,
        }

    def _relation_view(self, unit: Unit, rel: Relation, *, broken: bool) -> JsonDict:
        local = rel.endpoint_of(unit.app)
        other = rel.other_app(unit.app)
        seen = [] if broken else rel.seen.get(unit.name, [])
        declared = self.spec(self.model.apps[unit.app]).endpoints()[local.endpoint][1]
        kind = "peer" if rel.is_peer else "regular"
        if declared.get("scope") == "container":  # else ops sees a plain one-unit relation
            kind = "subordinate"
        view: JsonDict = {
            "type": kind,
            "id": rel.id,
            "endpoint": local.endpoint,
            "interface": local.interface,
            "remote_app": other,
            "local_app_data": rel.app_data.get(unit.app, {}),
            "local_unit_data": rel.unit_data.get(unit.name, {}),
            "remote_app_data": {} if rel.is_peer else rel.app_data.get(other, {}),
            "remote_units_data": {
                str(self.model.units[r].number if r in self.model.units else r.split("/")[1]): (
                    rel.unit_data.get(r, {})
                )
                for r in seen
            },
        }
        if kind == "subordinate":
            partner = rel.seen.get(unit.name) or [self._partner(unit, rel)]
            view["remote_unit_id"] = int(partner[0].split("/")[1])
            view["remote_units_data"] = {
                str(int(partner[0].split("/")[1])): rel.unit_data.get(partner[0], {})
            }
        limit = declared.get("limit")
        if limit:
            view["limit"] = limit
        return view

    def _partner(self, unit: Unit, rel: Relation) -> str:
        """For a container-scoped relation: the unit on the other side in the same machine."""
        other = rel.other_app(unit.app)
        for candidate in self.model.apps[other].units:
            peer = self.model.units[candidate]
            if peer.machine == unit.machine:
                return candidate
        return f"{other}/0"

    def _visible_secrets(self, unit: Unit) -> list[Secret]:
        found: list[Secret] = []
        for secret in self.model.secrets.values():
            if secret.owner in (unit.app, unit.name) or self._granted(secret, unit):
                found.append(secret)
        return found

    def _granted(self, secret: Secret, unit: Unit) -> bool:
        for rel_id, grantees in secret.grants.items():
            if rel_id in self.model.relations and (unit.app in grantees or unit.name in grantees):
                return True
        return False

    def _secret_view(self, unit: Unit, secret: Secret) -> JsonDict:
        owned = secret.owner in (unit.app, unit.name)
        latest = secret.latest
        consumer = secret.consumers.get(unit.name)
        tracked = latest.revision if owned or consumer is None else consumer.tracked
        return {
            "id": secret.id,
            "owner": secret.owner_kind if owned else None,
            "label": secret.label if owned else (consumer.label if consumer else None),
            "description": secret.description if owned else None,
            "tracked_content": secret.content_of(tracked),
            "latest_content": latest.content,
            "tracked_revision": tracked,
            "latest_revision": latest.revision,
            "remote_grants": secret.grants if owned else {},
        }

    # --- applying a hook's output ----------------------------------------------------------------

    def apply(self, unit: Unit, response: JsonDict) -> None:
        """Store what the hook changed; queue the hooks those changes trigger elsewhere."""
        app = self.model.apps[unit.app]
        state: JsonDict = response["state"]
        self._set_status(
            unit.workload, state["unit_status"], lambda s: setattr(unit, "workload", s)
        )
        if app.leader == unit.name:
            self._set_status(app.status, state["app_status"], lambda s: setattr(app, "status", s))
        unit.workload_version = state["workload_version"]
        unit.ports = state["ports"]
        unit.stored_states = state["stored_states"]
        unit.deferred = state["deferred"]
        for rel_out in state["relations"]:
            rel = self.model.relations.get(str(rel_out["id"]))
            if rel is not None:
                self._apply_databags(unit, rel, rel_out)
        self._apply_secrets(
            unit,
            state["secrets"],
            read=set(response.get("secrets_read") or []),
            shown=set(response.get("secrets_shown") or []),
        )

    @staticmethod
    def _set_status(
        current: StatusValue, raw: dict[str, str], store: Callable[[StatusValue], None]
    ) -> None:
        if (current.name, current.message) != (raw["name"], raw["message"]):
            store(StatusValue(raw["name"], raw["message"]))

    def _apply_databags(self, unit: Unit, rel: Relation, rel_out: JsonDict) -> None:
        if rel_out["local_unit_data"] != rel.unit_data.get(unit.name, {}):
            rel.unit_data[unit.name] = rel_out["local_unit_data"]
            for other in rel.members:
                if unit.name in rel.seen.get(other, []):
                    self.enqueue(
                        other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                    )
        if rel_out["local_app_data"] != rel.app_data.get(unit.app, {}):
            rel.app_data[unit.app] = rel_out["local_app_data"]
            readers = [
                m
                for m in rel.members
                if m != unit.name and self.model.units[m].app == rel.other_app(unit.app)
            ]
            for other in readers:
                if rel.seen.get(other):
                    self.enqueue(other, "relation_changed", relation_id=rel.id, remote_unit=None)

    def _apply_secrets(
        self, unit: Unit, secrets_out: list[JsonDict], *, read: set[str], shown: set[str]
    ) -> None:
        present = {s["id"] for s in secrets_out}
        for raw in secrets_out:
            secret = self.model.secrets.get(raw["id"])
            if secret is None:
                if raw["owner"] is None:
                    continue
                owner = unit.app if raw["owner"] == "app" else unit.name
                secret = Secret(
                    id=raw["id"],
                    owner=owner,
                    owner_kind=raw["owner"],
                    revisions=[SecretRevision(raw["latest_revision"], raw["latest_content"])],
                )
                self.model.secrets[secret.id] = secret
            if raw["owner"] is not None:
                self._apply_owned_secret(secret, raw)
            elif secret.id in read or unit.name in secret.consumers:
                secret.consumers[unit.name] = Consumer(raw["tracked_revision"], raw["label"])
        for secret in list(self.model.secrets.values()):
            owned = secret.owner in (unit.app, unit.name)
            if owned and secret.id in shown and secret.id not in present:  # the charm removed it
                del self.model.secrets[secret.id]

    def _apply_owned_secret(self, secret: Secret, raw: JsonDict) -> None:
        secret.label = raw["label"]
        secret.description = raw["description"]
        secret.grants = {k: list(v) for k, v in raw["remote_grants"].items()}
        if raw["latest_revision"] > secret.latest.revision:
            secret.revisions.append(SecretRevision(raw["latest_revision"], raw["latest_content"]))
            for consumer_unit, consumer in sorted(secret.consumers.items()):
                if consumer.tracked < raw["latest_revision"]:
                    self.enqueue(consumer_unit, "secret_changed", secret_id=secret.id)

    # --- bookkeeping around hooks ----------------------------------------------------------------

    def _before(self, unit: Unit, event: JsonDict) -> None:
        kind = event["kind"]
        rel = self.model.relations.get(str(event.get("relation_id")))
        if rel is None:
            return
        if kind == "relation_created" and unit.name not in rel.members:
            rel.members.append(unit.name)
            rel.unit_data.setdefault(unit.name, self.address_bag(unit))
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

    def _after(self, unit: Unit, event: JsonDict) -> None:
        if event["kind"] == "relation_broken":
            rel = self.model.relations.get(str(event["relation_id"]))
            if rel is not None and unit.name in rel.members:
                rel.members.remove(unit.name)
                rel.seen.pop(unit.name, None)
        elif event["kind"] == "start" and unit.agent != "executing":
            unit.agent = "idle"

    @staticmethod
    def address_bag(unit: Unit) -> dict[str, str]:
        """Return the keys Juju puts in every unit databag."""
        return {
            "egress-subnets": f"{unit.address}/32",
            "ingress-address": unit.address,
            "private-address": unit.address,
        }

    def _internal(self, event: JsonDict) -> None:
        kind = event["kind"]
        if kind == "_drop_relation":
            rel_id = str(event["relation_id"])
            self.model.relations.pop(rel_id, None)
            for secret in self.model.secrets.values():
                secret.grants.pop(rel_id, None)
        elif kind == "_destroy_unit":
            unit = self.model.units.pop(event["unit"], None)
            if unit is not None and unit.principal is None:
                deadline = time.time() + RETIRING_MACHINE_TIMEOUT
                self.model.retiring_machines[unit.machine] = deadline
                self.reap_machines()
            for secret in list(self.model.secrets.values()):
                secret.consumers.pop(event["unit"], None)
                if secret.owner == event["unit"]:
                    del self.model.secrets[secret.id]
        elif kind == "_drop_app":
            app = event["app"]
            self.model.apps.pop(app, None)
            for secret in list(self.model.secrets.values()):
                if secret.owner == app:
                    del self.model.secrets[secret.id]

    def reap_machines(self) -> None:
        """Destroy the machines of removed units whose background work has ended.

        A charm may leave work running after its unit's last hook, as a transient systemd unit
        (slurmd waits for its jobs, then deletes its node). The lab keeps such a machine until
        that work ends, or RETIRING_MACHINE_TIMEOUT passes. Juju destroys a machine once its
        last principal unit is gone, so there the work is cut short: see the slurmd README.
        """
        for name, deadline in list(self.model.retiring_machines.items()):
            if time.time() < deadline and self._has_background_work(name):
                continue
            with contextlib.suppress(LabError):
                self.lab.destroy(name)
            del self.model.retiring_machines[name]

    def _has_background_work(self, machine: str) -> bool:
        """Whether a transient systemd service (`systemd-run`) is still loaded on the machine."""
        try:
            listed = self.lab.get(machine).exec(
                ["sh", "-c", "ls /run/systemd/transient/ | grep '[.]service$'"], timeout=30
            )
        except LabError:
            return False
        return listed.returncode == 0 and bool(listed.stdout.strip())

    # --- logs ------------------------------------------------------------------------------------

    def log(self, unit: Unit, level: str, message: str) -> None:
        """Append a line to the unit's log and the model's debug log."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
        tag = f"unit-{unit.app}-{unit.number}"
        line = f"{tag}: {stamp} {level} {message}\n"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{tag}.log").open("a") as handle:
            handle.write(line)
        with (self.log_dir / "debug.log").open("a") as handle:
            handle.write(line)
