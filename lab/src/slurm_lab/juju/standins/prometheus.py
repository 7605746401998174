"""A stand-in for COS's Prometheus (`prometheus-k8s`), implemented by the backend itself.

`juju deploy prometheus` on the lab deploys it: each unit is a lab machine running Debian's
`prometheus` with its remote-write receiver on (`--web.enable-remote-write-receiver`), on the
lab network's port 9090. It stands for the Prometheus of COS that the collector's
`send-remote-write` is integrated with (an offer, on Juju), so the whole cluster's series meet
in one place and the charms' alert rules are evaluated over all of them, as in COS.

Over `receive-remote-write` (interface `prometheus_remote_write`) it speaks that interface's
wire format:

* it publishes, in each of its unit databags, `remote_write`: `{"url": "http://<address>:9090
  /api/v1/write"}`;
* it reads the requirer's application databag `alert_rules` (a JSON rule file: `groups`), lets
  `promtool check rules` judge it, and loads it as `/etc/prometheus/remote-write/<app>.rules`;
  a file promtool refuses is logged and the previous one kept. relation-broken removes it.

It evaluates the rules every 10 s, or every `evaluation-interval` (an option of the stand-in,
Prometheus seconds such as `2s`, given at deploy; COS's Prometheus has one too). The rules
themselves, `for:` included, are the requirer's as sent.

Differences from COS's: no Alertmanager (alerts are read from `/api/v1/alerts`), no
topology matchers injected into the expressions, no retention or TLS settings.
"""

from __future__ import annotations

import json
import re
from typing import ClassVar

from slurm_lab.juju.model import JsonDict, StatusValue, Unit
from slurm_lab.juju.standins.base import Endpoints, StandIn
from slurm_lab.juju.standins.cos import INTERVAL_RULE, interval_option

PORT = 9090
RULES_DIR = "/etc/prometheus/remote-write"
_APP_RE = re.compile(r"[a-z0-9-]{1,50}")


class PrometheusStandIn(StandIn):
    """Hooks of the central Prometheus stand-in."""

    KIND = "prometheus"
    ENDPOINTS: ClassVar[Endpoints] = {
        "receive-remote-write": ("provider", {"interface": "prometheus_remote_write"}),
    }

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        kind = event["kind"]
        if kind == "install":
            self._install(unit)
            return
        related = self.event_relation(unit, event)
        if related is None or related[1] != "receive-remote-write":
            return
        rel = related[0]
        requirer = rel.other_app(unit.app)
        if kind in ("relation_joined", "relation_changed"):
            url = f"http://{unit.address}:{PORT}/api/v1/write"
            self.publish_unit(unit, rel, {"remote_write": json.dumps({"url": url})})
            self._load_rules(unit, requirer, rel.app_data.get(requirer, {}).get("alert_rules"))
        elif kind == "relation_broken" and _APP_RE.fullmatch(requirer):
            self.run(unit, "prometheus-drop-rules.sh", _rules(requirer))

    def _install(self, unit: Unit) -> None:
        interval = interval_option(self.config(unit), "evaluation-interval")
        if interval is None:
            self.block(unit, f"evaluation-interval {INTERVAL_RULE}")
            return
        result = self.run(unit, "prometheus-setup.sh", interval, RULES_DIR, str(PORT))
        if result.returncode != 0:
            message = f"prometheus failed: {result.stderr.strip()}"
            self.block(unit, message, log=f"prometheus setup: {result.stderr}")
            return
        unit.workload = StatusValue("active", f"receiving remote write on :{PORT}")

    def _load_rules(self, unit: Unit, requirer: str, raw: str | None) -> None:
        if raw is None:
            return
        problem = rules_problem(requirer, raw)
        if problem:
            self.ctl.log(unit, "WARNING", f"ignoring the alert rules of {requirer}: {problem}")
            return
        result = self.run(unit, "prometheus-load-rules.sh", raw, _rules(requirer))
        if result.returncode != 0:
            reason = (result.stderr or result.stdout).strip()
            self.ctl.log(unit, "WARNING", f"promtool refused the rules of {requirer}: {reason}")
            return
        groups = len(json.loads(raw)["groups"])
        self.ctl.log(unit, "INFO", f"loaded {groups} rule groups of {requirer}")


def _rules(app: str) -> str:
    return f"{RULES_DIR}/{app}.rules"


def rules_problem(app: str, raw: str) -> str:
    """Say why `raw` is not a rule file of `app` the stand-in would load; "" if it is."""
    if not _APP_RE.fullmatch(app):
        return f"application name {app[:60]!r}"
    try:
        data = json.loads(raw)
    except ValueError as e:
        return f"not JSON: {e}"
    if not isinstance(data, dict) or not isinstance(data.get("groups"), list):  # pyright: ignore[reportUnknownMemberType]
        return "not a rule file (no `groups` list)"
    return ""


__all__ = ["PrometheusStandIn", "rules_problem"]
