#!/usr/bin/env python3
"""A test charm: records each hook in its stored state and in a file on its machine."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

import ops

logger = logging.getLogger(__name__)

EVENTS_FILE = Path("/var/lib/labtest/events.log")
FAILURES_FILE = Path("/var/lib/labtest/failures")
MOUNTPOINT = Path("/srv/shared")


class PingEvent(ops.EventBase):
    """A custom event a process on the machine dispatches with juju-exec."""


class LabtestEvents(ops.CharmEvents):
    """The charm's events, with the custom one."""

    ping = ops.EventSource(PingEvent)


class LabtestCharm(ops.CharmBase):
    """Wires every event to one recorder; relation and secret handlers do the data flow."""

    on = LabtestEvents()  # pyright: ignore[reportAssignmentType]
    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self._stored.set_default(events=[])
        for name, source in self.on.events().items():
            if name not in ("collect_metrics", "collect_app_status", "collect_unit_status"):
                framework.observe(source, self._record)
        framework.observe(self.on.provide_relation_joined, self._publish)
        framework.observe(self.on.config_changed, self._rotate)
        framework.observe(self.on.require_relation_changed, self._consume)
        framework.observe(self.on.secret_changed, self._refresh)
        framework.observe(self.on.peers_relation_created, self._greet)
        framework.observe(self.on.mount_relation_created, self._request_mount)
        framework.observe(self.on.mount_relation_changed, self._use_mount)
        framework.observe(self.on.get_state_action, self._get_state)
        framework.observe(self.on.fail_action, self._fail)
        framework.observe(self.on.ports_action, self._ports)
        framework.observe(self.on.stop, self._linger)
        framework.observe(self.on.collect_unit_status, self._status)

    def _record(self, event: ops.EventBase) -> None:
        name = event.handle.kind
        if isinstance(event, ops.RelationEvent) and event.unit is not None:
            name += f":{event.unit.name}"
        if isinstance(event, ops.RelationDepartedEvent) and event.departing_unit is not None:
            name += f":departing={event.departing_unit.name}"
        self._stored.events.append(name)
        EVENTS_FILE.parent.mkdir(parents=True, exist_ok=True)
        with EVENTS_FILE.open("a") as handle:
            handle.write(name + "\n")
        logger.info("event: %s", name)
        fail_on = str(self.config["fail-on"]).replace("-", "_")
        if fail_on and fail_on == event.handle.kind:
            raise RuntimeError(f"failing on {event.handle.kind} as configured")
        self._fail_first_times(event.handle.kind)
        self._be_slow(event.handle.kind)

    def _fail_first_times(self, kind: str) -> None:
        """Fail the `fail-first` hook its first `fail-times` runs (counted on the machine)."""
        if str(self.config["fail-first"]).replace("-", "_") != kind:
            return
        failures = int(FAILURES_FILE.read_text()) if FAILURES_FILE.exists() else 0
        if failures < int(self.config["fail-times"]):
            FAILURES_FILE.write_text(str(failures + 1))
            raise RuntimeError(f"failing {kind} ({failures + 1} of {self.config['fail-times']})")

    def _be_slow(self, kind: str) -> None:
        """Sleep in a hook of one unit (`slow`: "unit:hook:seconds"), showing a status first."""
        unit, _, rest = str(self.config["slow"]).partition(":")
        hook, _, seconds = rest.partition(":")
        if unit == self.unit.name and hook.replace("-", "_") == kind:
            self.unit.status = ops.MaintenanceStatus(f"slow {hook}")
            time.sleep(int(seconds))

    def _ports(self, event: ops.ActionEvent) -> None:
        """Open and close with the hook tools (as a charm with ranges must), then list them."""
        if port := int(event.params.get("ops-port", 0)):
            self.unit.open_port("tcp", port)
        runs = [("open-port", a) for a in str(event.params.get("open", "")).split()]
        runs += [("close-port", a) for a in str(event.params.get("close", "")).split()]
        for tool, arg in runs:
            done = subprocess.run([tool, arg], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                event.fail(done.stderr.strip())
                return
        listed = subprocess.run(
            ["opened-ports", "--format=json"], capture_output=True, text=True, check=True
        )
        event.set_results({"opened": listed.stdout})

    def _linger(self, _: ops.StopEvent) -> None:
        """Leave background work behind, as slurmd does while its node drains."""
        seconds = int(self.config["linger-on-stop"])
        if seconds > 0:
            argv = ["systemd-run", "--unit=labtest-linger", "--collect", "sleep", str(seconds)]
            subprocess.run(argv, check=True)

    def _publish(self, event: ops.RelationJoinedEvent) -> None:
        event.relation.data[self.unit]["echo-of"] = self.unit.name
        if not self.unit.is_leader():
            return
        token = {"token": str(self.config["token"])}
        try:
            secret = self.model.get_secret(label="token")
        except ops.SecretNotFoundError:
            secret = self.app.add_secret(token, label="token")
        secret.grant(event.relation)
        event.relation.data[self.app]["secret-id"] = secret.id or ""
        event.relation.data[self.app]["from"] = self.app.name

    def _rotate(self, _: ops.ConfigChangedEvent) -> None:
        if not self.unit.is_leader():
            return
        try:
            secret = self.model.get_secret(label="token")
        except ops.SecretNotFoundError:
            return
        token = str(self.config["token"])
        if secret.peek_content().get("token") != token:
            secret.set_content({"token": token})

    def _consume(self, event: ops.RelationChangedEvent) -> None:
        data = event.relation.data[event.relation.app]
        mine = event.relation.data[self.unit]
        mine["got-from"] = data.get("from", "")
        if event.unit is not None:
            mine[f"unit-{event.unit.name.replace('/', '-')}"] = event.relation.data[
                event.unit
            ].get("echo-of", "")
        if data.get("secret-id"):
            secret = self.model.get_secret(id=data["secret-id"], label="their-token")
            mine["token"] = secret.get_content()["token"]

    def _refresh(self, event: ops.SecretChangedEvent) -> None:
        content = event.secret.get_content(refresh=True)
        for relation in self.model.relations["require"]:
            relation.data[self.unit]["token"] = content["token"]

    def _greet(self, event: ops.RelationCreatedEvent) -> None:
        event.relation.data[self.unit]["hello"] = self.unit.name

    def _request_mount(self, event: ops.RelationCreatedEvent) -> None:
        if self.unit.is_leader():
            event.relation.data[self.app]["mountpoint"] = json.dumps(str(MOUNTPOINT))

    def _use_mount(self, event: ops.RelationChangedEvent) -> None:
        if event.unit is not None and event.relation.data[event.unit].get("mounted") == "true":
            (MOUNTPOINT / self.unit.name.replace("/", "-")).write_text(self.unit.name)

    def _get_state(self, event: ops.ActionEvent) -> None:
        received = {
            str(rel.id): {unit.name: dict(rel.data[unit]) for unit in rel.units}
            | {"app": dict(rel.data[rel.app]) if rel.app else {}}
            for name in ("provide", "require", "peers")
            for rel in self.model.relations[name]
        }
        mine = {
            name: {str(rel.id): dict(rel.data[self.unit]) for rel in self.model.relations[name]}
            for name in ("provide", "require", "peers")
        }
        event.set_results(
            {
                "events": json.dumps(list(self._stored.events)),
                "received": json.dumps(received),
                "mine": json.dumps(mine),
                "leader": self.unit.is_leader(),
                "planned": self.app.planned_units(),
                "address": str(self.model.get_binding("provide").network.bind_address),
            }
        )

    def _fail(self, event: ops.ActionEvent) -> None:
        event.log("about to fail")
        event.fail(event.params.get("message", "failed"))

    def _status(self, event: ops.CollectStatusEvent) -> None:
        role = "leader" if self.unit.is_leader() else "follower"
        seen = [e for e in self._stored.events if e != "update_status"]
        last = seen[-1] if seen else "none"
        event.add_status(ops.ActiveStatus(f"{role}, {len(self._stored.events)} events, {last}"))


if __name__ == "__main__":  # pragma: nocover
    ops.main(LabtestCharm)
