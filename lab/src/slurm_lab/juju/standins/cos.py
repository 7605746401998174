"""A stand-in for the `opentelemetry-collector` subordinate (COS), implemented by the backend.

The real collector requires `cos-agent` (interface `cos_agent`, container scope) and reads one
key of its principal unit's databag, `config`: a JSON object whose `metrics_scrape_jobs`,
`metrics_alert_rules`, `log_alert_rules`, `dashboards` and `log_slots` are required. It
scrapes the jobs on its machine and forwards metrics, rules and dashboards to COS.

The stand-in reads the same databag independently of the charms' library (plain `json`, the
required keys checked as the collector's model does) and feeds a real Prometheus, Debian's
`prometheus` package of the lab's base, on the principal's machine:

* `/etc/prometheus/prometheus.yml` gets every scrape job, named `<principal unit>_<job>` and
  labelled with the Juju topology (`juju_model`, `juju_application`, `juju_unit`), as the
  collector labels what it forwards;
* the alert rule groups go to `/etc/prometheus/cos-agent/<principal app>.rules`;
* `promtool check config` judges the result before Prometheus restarts with it; a config it
  refuses blocks the unit with promtool's reason and leaves the running one alone.

Prometheus listens on the machine's port 9090 (the lab network only). It scrapes every 10 s,
or every `scrape-interval` (an option of the stand-in: Prometheus seconds such as `2s`, given
at deploy), which the lab's tests shorten to see a change within seconds.

Integrated over `send-remote-write` (interface `prometheus_remote_write`) with a Prometheus
(COS's, or the lab's stand-in `standins.prometheus`), it forwards as the collector does:

* each unit's Prometheus remote-writes every scraped series to the `url` of each remote
  unit's `remote_write`, and evaluates no rule itself (the receiving Prometheus does);
* the leader publishes `alert_rules` in the application databag: the rule groups of every
  principal application it serves, once per application. The real collector gathers its
  principals' data over its peer relation; the stand-in reads the same relations directly.

Prometheus runs as root, as the real collector's snap daemon does, so a job's
`authorization: credentials_file` may name a file only root reads (`cos-apply.sh`).

Differences from the real collector: no Loki or Grafana (log files and dashboards are checked
to decode, not shipped), no tracing, no topology matchers injected into rule expressions.
"""

from __future__ import annotations

import base64
import binascii
import json
import lzma
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from slurm_lab.juju.model import JsonDict, Relation, StatusValue, Unit
from slurm_lab.juju.standins.base import Endpoints, SubordinateStandIn

PROMETHEUS_PORT = 9090
CONFIG = "/etc/prometheus/prometheus.yml"
RULES_DIR = "/etc/prometheus/cos-agent"
REQUIRED = (
    "metrics_alert_rules",
    "log_alert_rules",
    "dashboards",
    "metrics_scrape_jobs",
    "log_slots",
)
_JOB_NAME_RE = re.compile(r"[^A-Za-z0-9_]")
DEFAULT_INTERVAL = "10s"
_INTERVAL_RE = re.compile(r"[1-9][0-9]{0,3}s")


INTERVAL_RULE = "is not whole seconds from 1s to 9999s (such as 10s)"


def interval_option(config: dict[str, Any], key: str) -> str | None:
    """Read a stand-in's interval option (`10s` if unset); None if it is not whole seconds."""
    text = str(config.get(key, DEFAULT_INTERVAL))
    return text if _INTERVAL_RE.fullmatch(text) else None


class CosCollector(SubordinateStandIn):
    """Hooks of the COS collector stand-in (a unit beside each principal unit)."""

    KIND = "opentelemetry-collector"
    WAITING = "waiting for cos-agent data"
    ENDPOINTS: ClassVar[Endpoints] = {
        "cos-agent": ("requirer", {"interface": "cos_agent", "scope": "container"}),
        "juju-info": ("requirer", {"interface": "juju-info", "scope": "container"}),
        "send-remote-write": ("requirer", {"interface": "prometheus_remote_write"}),
    }

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        related = self.event_relation(unit, event)
        if related is None:
            return
        rel, endpoint = related
        if endpoint == "send-remote-write" and event["kind"] in (
            "relation_joined",
            "relation_changed",
            "relation_departed",
            "relation_broken",
        ):
            agent = self._agent_relation(unit)
            if agent is not None:
                self._apply(unit, agent)
            return
        if endpoint != "cos-agent":
            return
        if event["kind"] in ("relation_joined", "relation_changed"):
            self._apply(unit, rel)
        elif event["kind"] == "relation_broken":
            self.ctl.machine(unit).exec(["systemctl", "stop", "prometheus"])
            unit.workload = StatusValue("waiting", self.WAITING)

    def _agent_relation(self, unit: Unit) -> Relation | None:
        """Return the cos-agent relation with this unit's principal."""
        principal_app = (unit.principal or "").split("/")[0]
        return next(
            (
                rel
                for rel in self.relations(unit, "cos-agent")
                if rel.other_app(unit.app) == principal_app
            ),
            None,
        )

    def _remote_write_urls(self, unit: Unit) -> list[str]:
        """Return the `url` of each `remote_write` this unit sees on `send-remote-write`."""
        urls: list[str] = []
        for rel in self.relations(unit, "send-remote-write"):
            for remote in rel.seen.get(unit.name, []):
                url = remote_write_url(rel.unit_data.get(remote, {}))
                if url:
                    urls.append(url)
        return sorted(set(urls))

    def _principal_rule_groups(self, unit: Unit) -> list[Any]:
        """Return the rule groups of every principal application, one unit's per application."""
        groups: list[Any] = []
        for rel in self.relations(unit, "cos-agent"):
            principals = self.ctl.model.app_units(rel.other_app(unit.app))
            for principal in sorted(u.name for u in principals):
                data = read_config(rel.unit_data.get(principal, {}))
                if isinstance(data, dict):
                    groups += data["metrics_alert_rules"].get("groups", [])
                    break
        return groups

    def _publish_rules(self, unit: Unit) -> None:
        """As leader: every principal application's rule groups in `alert_rules`."""
        if not self.is_leader(unit):
            return
        bag = {"alert_rules": json.dumps({"groups": self._principal_rule_groups(unit)})}
        for rel in self.relations(unit, "send-remote-write"):
            self.publish_app(unit, rel, bag)

    def _apply(self, unit: Unit, rel: Relation) -> None:
        principal = unit.principal or ""
        data = read_config(rel.unit_data.get(principal, {}))
        if isinstance(data, str):
            if data:
                self.block(unit, data)
            return
        app = principal.split("/")[0]
        topology = {
            "juju_model": self.ctl.model.name,
            "juju_application": app,
            "juju_unit": principal,
        }
        urls = self._remote_write_urls(unit)
        interval = interval_option(self.config(unit), "scrape-interval")
        if interval is None:
            self.block(unit, f"scrape-interval {INTERVAL_RULE}")
            return
        config = prometheus_config(
            data["metrics_scrape_jobs"], topology, principal, urls, interval
        )
        # Forwarding: the receiving Prometheus evaluates the rules, this one none.
        rules = json.dumps({"groups": []} if urls else data["metrics_alert_rules"])
        self._publish_rules(unit)
        result = self.run(unit, "cos-apply.sh", config, rules, f"{RULES_DIR}/{app}.rules")
        if result.returncode != 0:
            reason = (result.stderr or result.stdout).strip().splitlines()
            self.block(
                unit, f"prometheus refused the data: {reason[-1] if reason else 'see the log'}"
            )
            return
        groups = len(data["metrics_alert_rules"].get("groups", []))
        jobs, dashboards = len(data["metrics_scrape_jobs"]), len(data["dashboards"])
        forwarding = f", remote write to {len(urls)}" if urls else ""
        self.ctl.log(unit, "INFO", f"prometheus: {jobs} jobs, {groups} rule groups{forwarding}")
        unit.workload = StatusValue(
            "active",
            f"prometheus :{PROMETHEUS_PORT}: {jobs} jobs, {groups} rule groups, "
            f"{dashboards} dashboards{forwarding}",
        )


_URL_RE = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9/_.-]*)?")


def remote_write_url(databag: dict[str, str]) -> str:
    """Read a remote unit's `remote_write` (`{"url": ...}`); "" if absent or not a plain URL."""
    try:
        url = json.loads(databag.get("remote_write", "{}")).get("url", "")
    except (ValueError, AttributeError):
        return ""
    return url if isinstance(url, str) and _URL_RE.fullmatch(url) else ""


def read_config(databag: dict[str, str]) -> dict[str, Any] | str:
    """Read the principal unit's `config` as the collector does; a string says what is wrong.

    An empty string: nothing published yet.
    """
    raw = databag.get("config")
    if raw is None:
        return ""
    try:
        data = json.loads(raw)
    except ValueError as e:
        return f"cos-agent config is not JSON: {e}"
    if not isinstance(data, dict):
        return "cos-agent config is not a JSON object"
    if missing := [key for key in REQUIRED if key not in data]:
        return f"cos-agent config lacks {', '.join(missing)}"
    if not isinstance(data["metrics_scrape_jobs"], list) or not isinstance(
        data["metrics_alert_rules"], dict
    ):
        return "cos-agent config: metrics_scrape_jobs or metrics_alert_rules has the wrong type"
    return _dashboards_problem(data["dashboards"]) or data


def _dashboards_problem(dashboards: Any) -> str:
    """Say why a `dashboards` entry would not decode as the collector decodes it; "" if none."""
    if not isinstance(dashboards, list):
        return "cos-agent config: dashboards is not a list"
    for dashboard in dashboards:
        try:
            json.loads(lzma.decompress(base64.b64decode(str(dashboard), validate=True)))
        except (binascii.Error, lzma.LZMAError, ValueError, TypeError) as e:
            return f"cos-agent config: a dashboard is not LZMA and base64 JSON: {e}"
    return ""


def prometheus_config(
    jobs: list[Any],
    topology: dict[str, str],
    principal: str,
    remote_write: Sequence[str] = (),
    interval: str = DEFAULT_INTERVAL,
) -> str:
    """Return prometheus.yml (JSON is YAML) scraping `jobs` every `interval`, with `topology`.

    With `remote_write` URLs it forwards every series to each.
    """
    scrape_configs: list[dict[str, Any]] = []
    for index, job in enumerate(jobs):
        if not isinstance(job, dict):
            continue
        name = _JOB_NAME_RE.sub("_", f"{principal}_{job.get('job_name', index)}")
        static = [
            {**target, "labels": {**target.get("labels", {}), **topology}}
            for target in job.get("static_configs", [])
            if isinstance(target, dict)
        ]
        scrape_configs.append({**job, "job_name": name, "static_configs": static})
    return json.dumps(
        {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [f"{RULES_DIR}/*.rules"],
            "scrape_configs": scrape_configs,
            "remote_write": [{"url": url} for url in remote_write],
        },
        indent=1,
    )
