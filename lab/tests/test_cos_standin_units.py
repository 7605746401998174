"""The COS collector stand-in's reading of cos_agent data and the Prometheus config it writes.

Its reading is written apart from the charms' library (hpc_libs.interfaces.cos_agent), so the
principal's side is checked against an independent reader here, and end to end on the lab by
tests/integration/test_observability.py.
"""

import base64
import json
import lzma

import yaml
from slurm_lab.juju.standins.cos import (
    interval_option,
    prometheus_config,
    read_config,
    remote_write_url,
)
from slurm_lab.juju.standins.prometheus import rules_problem


def _config(**fields: object) -> dict[str, str]:
    data = {
        "metrics_alert_rules": {"groups": []},
        "log_alert_rules": {"groups": []},
        "dashboards": [base64.b64encode(lzma.compress(b'{"title": "x"}')).decode()],
        "metrics_scrape_jobs": [
            {
                "job_name": "slurm_exporter",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": ["localhost:9341"]}],
            }
        ],
        "log_slots": [],
        **fields,
    }
    return {"config": json.dumps(data)}


def test_a_complete_config_reads() -> None:
    data = read_config(_config())
    assert isinstance(data, dict)
    assert data["metrics_scrape_jobs"][0]["job_name"] == "slurm_exporter"


def test_nothing_published_yet_is_no_error() -> None:
    assert read_config({}) == ""


def test_a_missing_required_field_is_refused_naming_it() -> None:
    bag = json.loads(_config()["config"])
    del bag["log_slots"]
    assert read_config({"config": json.dumps(bag)}) == "cos-agent config lacks log_slots"


def test_a_dashboard_that_does_not_decode_is_refused() -> None:
    problem = read_config(_config(dashboards=["not base64!"]))
    assert isinstance(problem, str) and "LZMA and base64" in problem


def test_scrape_jobs_are_named_per_unit_and_carry_the_topology() -> None:
    data = read_config(_config())
    assert isinstance(data, dict)
    topology = {"juju_model": "lab", "juju_application": "slurmctld", "juju_unit": "slurmctld/0"}
    config = yaml.safe_load(
        prometheus_config(data["metrics_scrape_jobs"], topology, "slurmctld/0")
    )
    assert config["rule_files"] == ["/etc/prometheus/cos-agent/*.rules"]
    assert config["scrape_configs"] == [
        {
            "job_name": "slurmctld_0_slurm_exporter",
            "metrics_path": "/metrics",
            "static_configs": [{"targets": ["localhost:9341"], "labels": topology}],
        }
    ]


def test_with_remote_write_every_series_is_forwarded() -> None:
    data = read_config(_config())
    assert isinstance(data, dict)
    topology = {"juju_model": "lab", "juju_application": "slurmctld", "juju_unit": "slurmctld/0"}
    url = "http://10.0.0.9:9090/api/v1/write"
    config = yaml.safe_load(
        prometheus_config(data["metrics_scrape_jobs"], topology, "slurmctld/0", [url])
    )
    assert config["remote_write"] == [{"url": url}]


def test_the_scrape_interval_is_the_stand_ins_option() -> None:
    data = read_config(_config())
    assert isinstance(data, dict)
    topology = {"juju_model": "lab", "juju_application": "slurmctld", "juju_unit": "slurmctld/0"}
    default = yaml.safe_load(prometheus_config(data["metrics_scrape_jobs"], topology, "u/0"))
    short = yaml.safe_load(
        prometheus_config(data["metrics_scrape_jobs"], topology, "u/0", interval="2s")
    )
    assert default["global"]["scrape_interval"] == "10s"
    assert short["global"] == {"scrape_interval": "2s", "evaluation_interval": "2s"}


def test_an_interval_option_is_whole_seconds() -> None:
    assert interval_option({}, "scrape-interval") == "10s"
    assert interval_option({"scrape-interval": "2s"}, "scrape-interval") == "2s"
    for bad in ("0s", "2", "1m", "2s\nscrape_configs: []", 2):
        assert interval_option({"scrape-interval": bad}, "scrape-interval") is None


def test_a_remote_write_url_is_read_only_when_plain() -> None:
    good = {"remote_write": json.dumps({"url": "http://10.0.0.9:9090/api/v1/write"})}
    assert remote_write_url(good) == "http://10.0.0.9:9090/api/v1/write"
    assert remote_write_url({}) == ""
    assert remote_write_url({"remote_write": "not json"}) == ""
    hostile = {"remote_write": json.dumps({"url": "http://x/\n- url: http://evil"})}
    assert remote_write_url(hostile) == ""


def test_the_central_prometheus_loads_only_rule_files() -> None:
    assert rules_problem("slurmctld", json.dumps({"groups": []})) == ""
    assert "groups" in rules_problem("slurmctld", json.dumps({"rules": []}))
    assert "JSON" in rules_problem("slurmctld", "{")
    assert "application" in rules_problem("../etc", json.dumps({"groups": []}))
