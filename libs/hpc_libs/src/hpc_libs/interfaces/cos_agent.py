"""The `cos_agent` integration: a principal hands its telemetry to the COS collector subordinate.

The wire contract is the one of the published `cos_agent` charm library
(`charms.grafana_agent.v0.cos_agent`, LIBAPI 0), which the opentelemetry-collector and
grafana-agent machine charms read. That library is not on PyPI, so the contract is written
here once, against raw databag vectors (tests/unit/hpc_libs/test_interfaces_cos_agent.py):

* The principal *provides* `cos-agent` (`interface: cos_agent`, `limit: 1`); the collector, a
  container-scoped subordinate, requires it. Subordinate relations carry **unit** data only.
* Each principal unit writes ONE key, `config`: a JSON object with
  - `metrics_scrape_jobs`: Prometheus `scrape_config` objects; an exporter on this machine is
    `{"job_name", "metrics_path", "static_configs": [{"targets": ["localhost:<port>"]}]}`,
    with Prometheus' own `metric_relabel_configs` and `follow_redirects` where needed;
  - `metrics_alert_rules` and `log_alert_rules`: `{"groups": [...]}` Prometheus rule groups
    (PromQL and LogQL), each rule labelled with the Juju topology (`juju_model`,
    `juju_model_uuid`, `juju_application`, `juju_charm`) and each group name prefixed with
    the topology identifier, so groups of two applications never collide;
  - `dashboards`: Grafana dashboards, each JSON text LZMA-compressed then base64-encoded,
    with `uid` the 40 hex digits of SHAKE-256 over `<charm name>-<path in the charm>` and a
    tag `charm: <charm name>`;
  - `log_slots` (snap slots, `snap:slot`; none here) and `include_log_files` (file globs the
    collector tails, as root: each charm names its daemon's log file exactly, in a directory
    only root can change (`hpc_libs.machine.files.log_file`), never a glob over a directory
    the slurm user writes, where it could plant a link to any file);
  - `tracing_protocols` and `subordinate`: optional, unused here.
  The collector's model requires `metrics_alert_rules`, `log_alert_rules`, `dashboards`,
  `metrics_scrape_jobs` and `log_slots`, so they are always written, empty when empty.
* The collector may answer `receivers` (tracing endpoints) in its unit databag: not read.

The collector's reading of the contract (bad data logged and read as None, never raised) is
in the unit tests (tests/unit/cos_agent_reader.py): no charm here requires `cos_agent`.
"""

import base64
import hashlib
import json
import logging
import lzma
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import ops
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hpc_libs.interfaces.base import Interface

logger = logging.getLogger(__name__)

COS_AGENT_ENDPOINT = "cos-agent"
DATA_KEY = "config"
"""The one key of the principal unit's databag."""
UID_LENGTH = 40
"""Grafana's longest dashboard UID; the collector checks a UID has exactly this many hex digits."""


class CosAgentData(BaseModel):
    """The principal unit's `config` object (every field the collector reads)."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)

    metrics_alert_rules: dict[str, Any] = Field(default_factory=lambda: {"groups": []})
    log_alert_rules: dict[str, Any] = Field(default_factory=lambda: {"groups": []})
    dashboards: list[str] = Field(default_factory=list[str])
    metrics_scrape_jobs: list[dict[str, Any]] = Field(default_factory=list[dict[str, Any]])
    log_slots: list[str] = Field(default_factory=list[str])
    include_log_files: list[str] | None = None
    tracing_protocols: list[str] | None = None
    subordinate: bool | None = None


@dataclass(frozen=True)
class Topology:
    """Where telemetry comes from in Juju (COS labels every series and rule with it)."""

    model: str
    model_uuid: str
    application: str
    charm_name: str

    @classmethod
    def of(cls, charm: ops.CharmBase) -> "Topology":
        """Return the topology of `charm`'s unit."""
        return cls(charm.model.name, charm.model.uuid, charm.app.name, charm.meta.name)

    @property
    def identifier(self) -> str:
        """`<model>_<model uuid>_<application>`: prefixes rule group names."""
        return f"{self.model}_{self.model_uuid}_{self.application}"

    @property
    def labels(self) -> dict[str, str]:
        """The topology labels a rule carries."""
        return {
            "juju_model": self.model,
            "juju_model_uuid": self.model_uuid,
            "juju_application": self.application,
            "juju_charm": self.charm_name,
        }


def scrape_job(
    name: str,
    port: int,
    path: str = "/metrics",
    *,
    rename: tuple[str, str] | None = None,
    follow_redirects: bool = True,
    credentials_file: str | None = None,
) -> dict[str, Any]:
    """Return the scrape job of an exporter listening on this machine's loopback.

    `rename` is `(prefix, new prefix)`: each scraped series whose name starts with `prefix`
    is stored under `new prefix` instead (a `metric_relabel_configs` rule), so two sources
    of like-named series cannot collide. With `follow_redirects` false a target that
    redirects (a backup slurmctld sends its primary's address) fails its scrape instead of
    delivering another machine's series as its own. With `credentials_file` each scrape
    sends `Authorization: Bearer <the file's content>`: the collector reads the file, so only
    its path travels in the databag, never the token.
    """
    job: dict[str, Any] = {
        "job_name": name,
        "metrics_path": path,
        "static_configs": [{"targets": [f"localhost:{port}"]}],
    }
    if rename is not None:
        prefix, new_prefix = rename
        job["metric_relabel_configs"] = [
            {
                "source_labels": ["__name__"],
                "regex": f"{re.escape(prefix)}(.*)",
                "target_label": "__name__",
                "replacement": f"{new_prefix}${{1}}",
                "action": "replace",
            }
        ]
    if not follow_redirects:
        job["follow_redirects"] = False
    if credentials_file is not None:
        job["authorization"] = {"type": "Bearer", "credentials_file": credentials_file}
    return job


class _Rule(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    labels: dict[str, str] = Field(default_factory=dict[str, str])


class _Group(BaseModel):
    model_config = ConfigDict(extra="allow", defer_build=True)
    name: str
    rules: list[_Rule]


class _RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    groups: list[_Group]


def rule_groups(files: Iterable[Path], topology: Topology) -> dict[str, Any]:
    """Read Prometheus rule files and label every rule with `topology`.

    Raises:
        ValueError: A file is not a rule file (`groups` of named groups with `rules`).

    """
    groups: list[dict[str, Any]] = []
    for path in sorted(files):
        try:
            document = _RuleFile.model_validate(yaml.safe_load(path.read_text()))
        except (ValidationError, yaml.YAMLError) as e:
            raise ValueError(f"{path.name} is not a Prometheus rule file: {e}") from e
        for group in document.groups:
            rules = [
                {**rule.model_dump(), "labels": {**rule.labels, **topology.labels}}
                for rule in group.rules
            ]
            name = f"{topology.identifier}_{group.name}"
            groups.append({**group.model_dump(), "name": name, "rules": rules})
    return {"groups": groups}


def dashboard_uid(charm_name: str, path: str) -> str:
    """Return the dashboard's UID: 40 hex digits from the charm's name and the file's path."""
    return hashlib.shake_256(f"{charm_name}-{path}".encode()).hexdigest(UID_LENGTH // 2)


def encode_dashboard(text: str, charm_name: str, path: str) -> str:
    """Return a dashboard as the collector reads it: UID and charm tag set, LZMA, base64.

    Raises:
        ValueError: The text is not a JSON object.

    """
    dashboard: Any = json.loads(text)
    if not isinstance(dashboard, dict):
        raise ValueError(f"{path} is not a JSON object")
    dashboard = cast(dict[str, Any], dashboard)
    tags = [str(t) for t in cast(list[Any], dashboard.get("tags", []))]
    if not any(tag.startswith("charm: ") for tag in tags):
        tags.append(f"charm: {charm_name}")
    dashboard = {**dashboard, "uid": dashboard_uid(charm_name, path), "tags": tags}
    return base64.b64encode(lzma.compress(json.dumps(dashboard).encode())).decode()


class CosAgentProvider(Interface):
    """The principal's side: publish scrape jobs, rules, dashboards and log files.

    The charm's `src/` may hold `prometheus_alert_rules/*.rules` (alert rule files) and
    `grafana_dashboards/*.json`; they, the scrape jobs and the log globs are written to this
    unit's databag when the collector joins, on any change of the relation and on
    config-changed and upgrade-charm (a new charm brings new rules). Every unit writes its
    own: subordinate relations have no application data. `scrape_jobs` may be a callable,
    asked at each publication, for jobs that depend on facts (the Slurm release, options); a
    charm whose facts changed in another event calls `publish`.
    """

    def __init__(
        self,
        charm: ops.CharmBase,
        endpoint: str = COS_AGENT_ENDPOINT,
        *,
        scrape_jobs: Iterable[dict[str, Any]] | Callable[[], Iterable[dict[str, Any]]] = (),
        log_files: Iterable[str] = (),
    ) -> None:
        super().__init__(charm, endpoint)
        self._scrape_jobs = scrape_jobs if callable(scrape_jobs) else list(scrape_jobs)
        self.log_files = list(log_files)
        events = charm.on[endpoint]
        for event in (events.relation_joined, events.relation_changed):
            self.framework.observe(event, self._publish)
        self.framework.observe(charm.on.config_changed, self._publish)
        self.framework.observe(charm.on.upgrade_charm, self._publish)

    def data(self) -> CosAgentData:
        """Return what this unit offers the collector (rules and dashboards from `src/`)."""
        source = Path(self.charm.charm_dir)
        topology = Topology.of(self.charm)
        rules = rule_groups((source / "src/prometheus_alert_rules").glob("*.rules"), topology)
        dashboards = [
            encode_dashboard(path.read_text(), topology.charm_name, str(path.relative_to(source)))
            for path in sorted((source / "src/grafana_dashboards").glob("*.json"))
        ]
        return CosAgentData(
            metrics_alert_rules=rules,
            dashboards=dashboards,
            metrics_scrape_jobs=self.scrape_jobs(),
            include_log_files=self.log_files,
        )

    def scrape_jobs(self) -> list[dict[str, Any]]:
        """Return the scrape jobs offered now (a callable given is asked each time)."""
        jobs = self._scrape_jobs
        return list(jobs() if callable(jobs) else jobs)

    def publish(self) -> None:
        """Write this unit's offer to every collector (the charm calls it when facts change)."""
        for relation in self.relations:
            try:
                text = self.data().model_dump_json()
            except (OSError, ValueError) as e:
                logger.error("not publishing telemetry to %s: %s", self.endpoint, e)
                return
            relation.data[self.charm.unit][DATA_KEY] = text

    def _publish(self, _: ops.EventBase) -> None:
        self.publish()
