"""Observability end to end (issue 22): the exporter, cos-agent and the alert rules in a real
Prometheus.

One deployment for the module: slurmctld (exporter every 10 s, SlurmdTimeout=30 so a dead
slurmd is marked down within a minute), two slurmd applications (`compute`, `debug`) of one
unit each, and the lab's COS collector stand-in `otelcol` (slurm_lab.juju.cos) integrated
over `cos-agent`: it reads what slurmctld publishes and feeds Debian's Prometheus on
slurmctld's machine (scrape job and alert rules), so the wire contract is proven against a
real consumer, not only against vectors.

- jobs queued in `debug` show in `slurm_partition_jobs{state="pending"}`;
- the dashboards' core panels return data from that Prometheus;
- a compute node's slurmd killed fires SlurmNodeDown with the node and Slurm's reason.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
import pytest
from conftest import on_real_juju
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import all_nodes_idle, poll, sh

pytestmark = pytest.mark.skipif(on_real_juju(), reason="the COS collector stand-in is the lab's")

SETTLE = 10 * 60
CONTROLLER = "slurmctld/0"


def prometheus(juju: jubilant.Juju, path: str, query: str | None = None) -> Any:
    """GET the stand-in Prometheus's API on slurmctld's machine; return its `data`."""
    url = f"http://localhost:9090/api/v1/{path}"
    curl = f"curl -sf {shlex.quote(url)}"
    if query is not None:
        curl += f" --data-urlencode {shlex.quote('query=' + query)}"
    answer = json.loads(juju.exec(curl, unit=CONTROLLER).stdout)
    assert answer["status"] == "success", answer
    return answer["data"]


def value(juju: jubilant.Juju, query: str) -> float | None:
    """The single value of an instant query, or None while it has none."""
    result = prometheus(juju, "query", query)["result"]
    return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, computes=(("compute", 1), ("debug", 1)), login=False)
    juju.config(
        "slurmctld", {"metrics-interval": 10, "slurm-conf-parameters": "SlurmdTimeout=30\n"}
    )
    juju.deploy("opentelemetry-collector", "otelcol")
    juju.integrate("slurmctld:cos-agent", "otelcol:cos-agent")
    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=SETTLE)
    poll(
        lambda: all_nodes_idle(juju, ["compute-0", "debug-0"]),
        timeout=120,
        what="compute-0 and debug-0 idle",
    )
    return juju


def test_the_collector_loaded_the_scrape_job_and_the_alert_rules(cluster: jubilant.Juju):
    targets = poll(
        lambda: (
            [t for t in prometheus(cluster, "targets")["activeTargets"] if t["health"] == "up"]
            or None
        ),
        timeout=120,
        what="the exporter's target up",
    )
    assert targets[0]["labels"]["juju_application"] == "slurmctld"
    rules = {r["name"] for g in prometheus(cluster, "rules")["groups"] for r in g["rules"]}
    assert {"SlurmNodeDown", "SlurmNoPrimaryController", "SlurmExporterStale"} <= rules


def test_queued_jobs_show_as_pending(cluster: jubilant.Juju):
    for _ in range(3):
        sh(cluster, "sbatch --hold -p debug --wrap 'sleep 1'")

    pending = poll(
        lambda: (
            value(cluster, 'sum(slurm_partition_jobs{partition="debug",state="pending"})') == 3
        ),
        timeout=120,
        what="3 pending jobs of debug in Prometheus",
    )

    assert pending
    assert value(cluster, 'slurm_controller_primary{host!=""}') == 1


CORE_PANELS = {
    "slurm-cluster.json": ["Nodes by state", "Jobs by state"],
    "slurm-partitions.json": ["Pending jobs", "CPUs by state", "Usable nodes"],
    "slurm-nodes.json": ["Nodes by state"],
    "slurm-scheduler.json": ["Main scheduling cycle", "Queues"],
    "slurm-controllers.json": ["In control (1) per controller", "Exporter pass duration"],
}
"""Panels that have data on any running cluster (not those of failures, GPUs or RPC rates)."""
DASHBOARDS = Path(__file__).parents[2] / "charms/slurmctld/src/grafana_dashboards"
GRAFANA_VALUES = {"__rate_interval": "1m", "__range": "10m"}


def test_core_dashboard_panels_return_data(cluster: jubilant.Juju):
    """Every core panel's queries, with Grafana's variables at "All", answer from Prometheus."""
    empty = []
    for name, titles in CORE_PANELS.items():
        dashboard = json.loads((DASHBOARDS / name).read_text())
        panels = {p["title"]: p for p in dashboard["panels"]}
        for title in titles:
            for target in panels[title]["targets"]:
                expr = re.sub(
                    r"\$\{?(\w+)\}?",
                    lambda m: GRAFANA_VALUES.get(m.group(1), ".*"),
                    target["expr"],
                )
                if not prometheus(cluster, "query", expr)["result"]:
                    empty.append(f"{name} / {title}: {expr}")
    assert not empty


def test_a_killed_slurmd_fires_node_down_with_the_node_and_reason(cluster: jubilant.Juju):
    # By this machine's process id: a unit's cgroup is shared by every lab machine of a
    # cgroup v1 host, so `systemctl kill` would take the other slurmd with it.
    kill = 'kill -KILL "$(systemctl show -P MainPID slurmd.service)"'
    cluster.exec(kill, unit="compute/0")

    def firing() -> list[dict[str, Any]] | None:
        alerts = prometheus(cluster, "alerts")["alerts"]
        return [
            a
            for a in alerts
            if a["labels"]["alertname"] == "SlurmNodeDown"
            and a["state"] == "firing"
            and a["labels"].get("reason")
        ] or None

    alerts = poll(firing, timeout=8 * 60, interval=10, what="SlurmNodeDown firing with a reason")

    nodes = sh(cluster, "sinfo --Node --long --noheader; sinfo --list-reasons --long")
    assert {a["labels"]["node"] for a in alerts} == {"compute-0"}, (alerts, nodes)
    assert "compute-0 is down" in alerts[0]["annotations"]["summary"]
