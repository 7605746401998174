"""The cos_agent interface, with raw databag vectors of the COS collector subordinate.

The collector (opentelemetry-collector, grafana-agent) reads ONE key of the principal unit's
databag, `config`, and validates it with a model whose `metrics_alert_rules`,
`log_alert_rules`, `dashboards`, `metrics_scrape_jobs` and `log_slots` are required: a
databag missing one is dropped by the collector, so each test checks they are all there.
"""

import base64
import hashlib
import json
import lzma
import shutil
from pathlib import Path
from typing import Any

import cos_agent_reader
import ops
import pytest
from hpc_libs.interfaces import cos_agent
from ops import testing

REPO = Path(__file__).parents[3]
SLURMCTLD_SRC = REPO / "charms/slurmctld/src"
REQUIRED = {
    "metrics_alert_rules",
    "log_alert_rules",
    "dashboards",
    "metrics_scrape_jobs",
    "log_slots",
}

# What the published provider library writes for a charm with one endpoint and no rules: the
# collector's reading of it must accept ours and this one alike.
PUBLISHED_VECTOR = {
    "config": json.dumps(
        {
            "metrics_alert_rules": {"groups": []},
            "log_alert_rules": {"groups": []},
            "dashboards": [],
            "subordinate": None,
            "metrics_scrape_jobs": [
                {"metrics_path": "/metrics", "static_configs": [{"targets": ["localhost:9341"]}]}
            ],
            "log_slots": [],
            "include_log_files": ["/var/log/slurm/*.log"],
            "tracing_protocols": None,
        }
    )
}


class PrincipalCharm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.cos_agent = cos_agent.CosAgentProvider(
            self,
            scrape_jobs=[cos_agent.scrape_job("slurm_exporter", 9341)],
            log_files=["/var/log/slurm/slurmctld.log"],
        )


META: dict[str, Any] = {
    "name": "slurmctld",
    "provides": {"cos-agent": {"interface": "cos_agent", "limit": 1}},
}


@pytest.fixture
def charm_root(tmp_path: Path) -> Path:
    """A charm directory holding the slurmctld charm's rules and dashboards."""
    for folder in ("prometheus_alert_rules", "grafana_dashboards"):
        shutil.copytree(SLURMCTLD_SRC / folder, tmp_path / "src" / folder)
    return tmp_path


def _published(charm_root: Path, event: str = "joined") -> dict[str, Any]:
    ctx = testing.Context(PrincipalCharm, meta=META, charm_root=charm_root)
    relation = testing.Relation("cos-agent", remote_app_name="otelcol")
    on = ctx.on.relation_joined if event == "joined" else ctx.on.relation_changed
    state = testing.State(relations=[relation], model=testing.Model(name="hpc", uuid="0b5c" * 9))
    out = ctx.run(on(relation), state)
    databag = out.get_relation(relation.id).local_unit_data
    assert set(databag) - {"egress-subnets", "ingress-address", "private-address"} == {"config"}
    return json.loads(databag["config"])


def test_the_unit_databag_holds_every_field_the_collector_requires(charm_root: Path) -> None:
    config = _published(charm_root)
    assert set(config) >= REQUIRED
    assert cos_agent_reader.read_unit_data({"config": json.dumps(config)}) is not None


def test_the_exporter_is_scraped_on_this_machine(charm_root: Path) -> None:
    config = _published(charm_root, "changed")
    assert config["metrics_scrape_jobs"] == [
        {
            "job_name": "slurm_exporter",
            "metrics_path": "/metrics",
            "static_configs": [{"targets": ["localhost:9341"]}],
        }
    ]
    assert config["include_log_files"] == ["/var/log/slurm/slurmctld.log"]
    assert config["log_slots"] == []


def test_alert_rules_carry_the_juju_topology(charm_root: Path) -> None:
    groups = _published(charm_root)["metrics_alert_rules"]["groups"]
    identifier = f"hpc_{'0b5c' * 9}_slurmctld"
    assert [g["name"] for g in groups] == [
        f"{identifier}_slurm_controllers",
        f"{identifier}_slurm_nodes",
        f"{identifier}_slurm_scheduling",
        f"{identifier}_slurm_exporter",
    ]
    rules = {r["alert"]: r for g in groups for r in g["rules"]}
    assert rules["SlurmNodeDown"]["labels"] == {
        "severity": "warning",
        "juju_model": "hpc",
        "juju_model_uuid": "0b5c" * 9,
        "juju_application": "slurmctld",
        "juju_charm": "slurmctld",
    }
    assert rules["SlurmNodeDown"]["for"] == "2m"
    assert "slurm_node_reason_info" in rules["SlurmNodeDown"]["expr"]


def test_dashboards_are_lzma_base64_with_a_path_uid(charm_root: Path) -> None:
    dashboards = _published(charm_root)["dashboards"]
    assert len(dashboards) == 5
    decoded = [json.loads(lzma.decompress(base64.b64decode(d))) for d in dashboards]
    titles = {d["title"]: d for d in decoded}
    cluster = titles["Slurm / Cluster"]
    path = "src/grafana_dashboards/slurm-cluster.json"
    assert cluster["uid"] == hashlib.shake_256(f"slurmctld-{path}".encode()).hexdigest(20)
    assert len(cluster["uid"]) == 40
    assert cluster["tags"] == ["slurm", "charm: slurmctld"]


def test_the_published_librarys_vector_reads() -> None:
    data = cos_agent_reader.read_unit_data(PUBLISHED_VECTOR)
    assert data is not None
    assert data.metrics_scrape_jobs[0]["static_configs"] == [{"targets": ["localhost:9341"]}]


@pytest.mark.parametrize(
    "databag",
    [
        {},
        {"config": "not json"},
        {"config": json.dumps({"dashboards": "not a list"})},
        {"config": json.dumps({"metrics_scrape_jobs": [1, 2]})},
    ],
)
def test_bad_data_reads_as_none(databag: dict[str, str]) -> None:
    assert cos_agent_reader.read_unit_data(databag) is None


def test_a_bad_rule_file_publishes_nothing_and_says_why(charm_root: Path, caplog) -> None:
    (charm_root / "src/prometheus_alert_rules/broken.rules").write_text("groups: [{rules: 1}]\n")
    ctx = testing.Context(PrincipalCharm, meta=META, charm_root=charm_root)
    relation = testing.Relation("cos-agent", remote_app_name="otelcol")
    out = ctx.run(ctx.on.relation_joined(relation), testing.State(relations=[relation]))
    assert "config" not in out.get_relation(relation.id).local_unit_data
    assert "broken.rules is not a Prometheus rule file" in caplog.text


def test_a_dashboard_that_is_not_lzma_base64_is_refused() -> None:
    with pytest.raises(ValueError, match="LZMA"):
        cos_agent_reader.decode_dashboard(base64.b64encode(b"plain").decode())
