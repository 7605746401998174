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
from typing import Any

from slurm_lab.juju.cos import interval_option
from slurm_lab.juju.engine import Controller
from slurm_lab.juju.model import App, JsonDict, Relation, StatusValue, Unit

PORT = 9090
RULES_DIR = "/etc/prometheus/remote-write"
_APP_RE = re.compile(r"[a-z0-9-]{1,50}")

_SETUP = f"""set -e
interval=$1
mkdir -p {RULES_DIR}
cat > /etc/default/prometheus <<'EOF'
ARGS="--web.enable-remote-write-receiver --web.listen-address=:{PORT}"
EOF
cat > /etc/prometheus/prometheus.yml <<EOF
global: {{scrape_interval: $interval, evaluation_interval: $interval}}
rule_files: ["{RULES_DIR}/*.rules"]
scrape_configs: []
EOF
promtool check config --syntax-only /etc/prometheus/prometheus.yml >/dev/null
systemctl enable --quiet prometheus
systemctl restart prometheus
"""
"""Write the config, evaluating every $1, and start Prometheus with the remote-write receiver."""

_LOAD_RULES = """set -e
rules=$1 rules_file=$2
printf '%s\\n' "$rules" > "$rules_file.new"
promtool check rules "$rules_file.new" >/dev/null
mv "$rules_file.new" "$rules_file"
systemctl reload prometheus
"""
"""Write the rules ($1) to $2 once promtool accepts them; Prometheus reloads (SIGHUP)."""


class PrometheusStandIn:
    """Hooks of the central Prometheus stand-in."""

    KIND = "prometheus"
    ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {  # noqa: RUF012
        "receive-remote-write": ("provider", {"interface": "prometheus_remote_write"}),
    }

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    @classmethod
    def new_app(cls, name: str, config: Any) -> App:
        """Build the stand-in application record (its units are lab machines)."""
        return App(
            name=name, charm_dir="", charm_name=cls.KIND, kind=cls.KIND, config=dict(config or {})
        )

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        kind = event["kind"]
        if kind == "install":
            self._install(unit)
            return
        rel = self.ctl.model.relations.get(str(event.get("relation_id")))
        if rel is None or rel.endpoint_of(unit.app).endpoint != "receive-remote-write":
            return
        requirer = rel.other_app(unit.app)
        if kind in ("relation_joined", "relation_changed"):
            self._publish_url(unit, rel)
            self._load_rules(unit, requirer, rel.app_data.get(requirer, {}).get("alert_rules"))
        elif kind == "relation_broken" and _APP_RE.fullmatch(requirer):
            self.ctl.machine(unit).exec(
                ["sh", "-c", 'rm -f "$1" && systemctl reload prometheus', "sh", _rules(requirer)]
            )

    def _install(self, unit: Unit) -> None:
        interval = interval_option(self.ctl.model.apps[unit.app].config, "evaluation-interval")
        if interval is None:
            message = "evaluation-interval is not whole seconds from 1s to 9999s (such as 10s)"
            unit.workload = StatusValue("blocked", message)
            self.ctl.log(unit, "ERROR", message)
            return
        argv = ["sh", "-c", _SETUP, "sh", interval]
        result = self.ctl.machine(unit).exec(argv, timeout=120)
        if result.returncode != 0:
            unit.workload = StatusValue("blocked", f"prometheus failed: {result.stderr.strip()}")
            self.ctl.log(unit, "ERROR", f"prometheus setup: {result.stderr}")
            return
        unit.workload = StatusValue("active", f"receiving remote write on :{PORT}")

    def _publish_url(self, unit: Unit, rel: Relation) -> None:
        bag = {"remote_write": json.dumps({"url": f"http://{unit.address}:{PORT}/api/v1/write"})}
        if rel.unit_data.get(unit.name) == bag:
            return
        rel.unit_data[unit.name] = bag
        for other in rel.members:
            if unit.name in rel.seen.get(other, []):
                self.ctl.enqueue(
                    other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                )

    def _load_rules(self, unit: Unit, requirer: str, raw: str | None) -> None:
        if raw is None:
            return
        problem = rules_problem(requirer, raw)
        if problem:
            self.ctl.log(unit, "WARNING", f"ignoring the alert rules of {requirer}: {problem}")
            return
        argv = ["sh", "-c", _LOAD_RULES, "sh", raw, _rules(requirer)]
        result = self.ctl.machine(unit).exec(argv)
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
