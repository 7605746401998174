#!/usr/bin/env python3
"""A charm that misuses the hook runtime on request (config `mode`), as a careless charm would.

* follower-app-data: every unit writes the peer app databag (with relation-set, as a charm
  without ops' own check would): Juju refuses a follower.
* read-back: the leader writes its unit databag, then waits in the same hook for the other
  unit's acknowledgement: Juju shows the write to others only once the hook has ended.
* write-then-fail: writes its unit databag, then fails; the retry expects the write to have
  stuck: Juju drops a failed hook's changes.
* trust-tracked: the consumer reads the shared secret without refreshing and expects the
  content the owner announced: Juju gives the revision the consumer tracks.
* reboot: not a misuse: asks Juju (once) to reboot the machine after the hook; every `start`
  is counted in /var/lib/misuse/starts.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

import ops

logger = logging.getLogger(__name__)

STARTS = Path("/var/lib/misuse/starts")
REBOOT_ASKED = Path("/var/lib/misuse/reboot-asked")
UP_SINCE_BOOT = Path("/run/misuse-up")


class MisuseCharm(ops.CharmBase):
    """Does what its mode says; otherwise shares a secret and reads it back."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        framework.observe(self.on.config_changed, self._on_config)
        framework.observe(self.on.pair_relation_changed, self._ack)
        framework.observe(self.on.share_relation_joined, self._share)
        framework.observe(self.on.config_changed, self._rotate)
        framework.observe(self.on.use_relation_changed, self._use)
        framework.observe(self.on.take_action, self._take)
        framework.observe(self.on.peer_data_action, self._peer_data)
        framework.observe(self.on.start, self._count_start)
        framework.observe(self.on.collect_unit_status, self._status)

    @property
    def _mode(self) -> str:
        return str(self.config["mode"])

    def _on_config(self, _: ops.ConfigChangedEvent) -> None:
        if self._mode == "reboot" and not REBOOT_ASKED.exists():
            REBOOT_ASKED.write_text("yes")
            UP_SINCE_BOOT.write_text("yes")
            self.unit.reboot()
        pair = self.model.get_relation("pair")
        if pair is None:
            return
        if self._mode == "follower-app-data":
            subprocess.run(["relation-set", "-r", str(pair.id), "--app", "by=me"], check=True)
        elif self._mode == "read-back" and self.unit.is_leader():
            pair.data[self.unit]["ping"] = str(time.time())
            self._wait_for_ack(pair)
        elif self._mode == "write-then-fail" and pair.data[self.unit].get("stuck") != "yes":
            pair.data[self.unit]["stuck"] = "yes"
            raise RuntimeError("failing after writing stuck=yes; the retry expects it")

    def _count_start(self, _: ops.StartEvent) -> None:
        STARTS.parent.mkdir(parents=True, exist_ok=True)
        with STARTS.open("a") as handle:
            handle.write("start\n")

    def _wait_for_ack(self, pair: ops.Relation) -> None:
        ping = pair.data[self.unit]["ping"]
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            for unit in pair.units:
                done = subprocess.run(
                    ["relation-get", "-r", str(pair.id), "ack", unit.name],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                if done.stdout.strip() == ping:
                    return
            time.sleep(1)
        raise RuntimeError(f"no unit acknowledged ping {ping} within the hook")

    def _ack(self, event: ops.RelationChangedEvent) -> None:
        if event.unit is not None and (ping := event.relation.data[event.unit].get("ping")):
            event.relation.data[self.unit]["ack"] = ping

    def _share(self, event: ops.RelationJoinedEvent) -> None:
        if not self.unit.is_leader():
            return
        try:
            secret = self.model.get_secret(label="shared")
        except ops.SecretNotFoundError:
            secret = self.app.add_secret({"token": str(self.config["token"])}, label="shared")
        secret.grant(event.relation)
        event.relation.data[self.app]["secret-id"] = secret.id or ""
        event.relation.data[self.app]["expected"] = str(self.config["token"])

    def _rotate(self, _: ops.ConfigChangedEvent) -> None:
        if not self.unit.is_leader():
            return
        try:
            secret = self.model.get_secret(label="shared")
        except ops.SecretNotFoundError:
            return
        token = str(self.config["token"])
        secret.set_content({"token": token})
        for relation in self.model.relations["share"]:
            relation.data[self.app]["expected"] = token

    def _use(self, event: ops.RelationChangedEvent) -> None:
        data = event.relation.data[event.relation.app]
        if not data.get("secret-id"):
            return
        secret = self.model.get_secret(id=data["secret-id"])
        got = secret.get_content(refresh=self._mode != "trust-tracked")["token"]
        if got != data["expected"]:
            raise RuntimeError(f"secret content {got!r} does not match {data['expected']!r}")
        logger.info("secret content matches %s", got)

    def _take(self, event: ops.ActionEvent) -> None:
        event.set_results({"took": int(event.params["count"])})

    def _peer_data(self, event: ops.ActionEvent) -> None:
        pair = self.model.get_relation("pair")
        bags = {u.name: dict(pair.data[u]) for u in pair.units} if pair else {}
        event.set_results({"bags": repr(bags)})

    def _status(self, event: ops.CollectStatusEvent) -> None:
        event.add_status(ops.ActiveStatus(self._mode or "ready"))


if __name__ == "__main__":  # pragma: nocover
    ops.main(MisuseCharm)
