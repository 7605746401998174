"""The slurmctld charm's Grafana dashboards: written from the specs below, checked without Grafana.

`uv run python tools/dashboards.py write` writes charms/slurmctld/src/grafana_dashboards/*.json
(the cos_agent integration sends them to Grafana, `hpc_libs.interfaces.cos_agent`).
`... rules -o FILE` writes every panel's PromQL as a Prometheus recording rule file, so
`promtool check rules FILE` parses each expression (`just alerts`); Grafana's own variables
are replaced by values of their kind first. tests/unit/project/test_dashboards.py checks the
written files are the specs' and that every variable an expression uses is defined.
"""

# ruff: noqa: E501 (one PromQL expression per line reads better than a split one)

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD_DIR = ROOT / "charms/slurmctld/src/grafana_dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${prometheusds}"}
SEL = 'juju_model=~"$juju_model",juju_application=~"$juju_application"'
PSEL = SEL + ',partition=~"$partition"'
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range"}
VARIABLE_RE = re.compile(r"\$\{?(\w+)")
# What each Grafana variable becomes for promtool (a range or a regex in a label matcher).
PROMTOOL_VALUES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


def _query_variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": name,
        "type": "query",
        "datasource": DATASOURCE,
        "query": {"query": query, "refId": name},
        "definition": query,
        "refresh": 2,
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "current": {"text": "All", "value": "$__all"},
        "sort": 1,
    }


def _variables(partition: bool) -> list[dict[str, Any]]:
    variables = [
        {
            "name": "prometheusds",
            "label": "Prometheus",
            "type": "datasource",
            "query": "prometheus",
        },
        _query_variable("juju_model", "label_values(slurm_controller_primary, juju_model)"),
        _query_variable(
            "juju_application",
            'label_values(slurm_controller_primary{juju_model=~"$juju_model"}, juju_application)',
        ),
    ]
    if partition:
        variables.append(
            _query_variable("partition", f"label_values(slurm_partition_jobs{{{SEL}}}, partition)")
        )
    return variables


def _panel(
    kind: str, title: str, targets: list[tuple[str, str]], unit: str = "short"
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"showLegend": True}} if kind == "timeseries" else {},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "expr": expr,
                "legendFormat": legend,
                "datasource": DATASOURCE,
            }
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _dashboard(
    title: str, description: str, panels: list[dict[str, Any]], partition: bool = False
) -> dict[str, Any]:
    for i, panel in enumerate(panels):
        panel["id"] = i + 1
        panel["gridPos"] = {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)}
    return {
        "title": title,
        "description": description,
        "tags": ["slurm"],
        "editable": True,
        "schemaVersion": 39,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "timezone": "browser",
        "templating": {"list": _variables(partition)},
        "panels": panels,
    }


def specs() -> dict[str, dict[str, Any]]:
    """Return every dashboard by file name."""
    ts, stat, table = "timeseries", "stat", "table"
    return {
        "slurm-cluster.json": _dashboard(
            "Slurm / Cluster",
            "The cluster at a glance: controllers, nodes, jobs and CPUs.",
            [
                _panel(
                    stat,
                    "Controller in control",
                    [(f"max by (host) (slurm_controller_primary{{{SEL}}}) == 1", "{{host}}")],
                ),
                _panel(
                    stat,
                    "Drained nodes",
                    [(f'sum(slurm_nodes_flagged{{{SEL},flag="drain"}}) or vector(0)', "drained")],
                ),
                _panel(
                    ts,
                    "Nodes by state",
                    [(f"sum by (state) (slurm_cluster_nodes{{{SEL}}})", "{{state}}")],
                ),
                _panel(
                    ts,
                    "Jobs by state",
                    [(f"sum by (state) (slurm_partition_jobs{{{SEL}}})", "{{state}}")],
                ),
                _panel(
                    ts,
                    "CPUs allocated / total, by partition",
                    [
                        (
                            f'sum by (partition) (slurm_partition_cpus{{{SEL},state="allocated"}}) / sum by (partition) (slurm_partition_cpus{{{SEL},state="total"}})',
                            "{{partition}}",
                        ),
                        (
                            f'sum(slurm_cluster_cpus{{{SEL},state="allocated"}}) / sum(slurm_cluster_cpus{{{SEL},state="total"}})',
                            "cluster",
                        ),
                    ],
                    "percentunit",
                ),
                _panel(
                    ts,
                    "GPUs allocated, by partition",
                    [
                        (
                            f'sum by (partition) (slurm_partition_gpus{{{SEL},state="allocated"}})',
                            "{{partition}}",
                        )
                    ],
                ),
            ],
        ),
        "slurm-partitions.json": _dashboard(
            "Slurm / Partitions",
            "Per partition: jobs, why they wait, the oldest pending job, CPUs, GPUs, usable nodes.",
            [
                _panel(
                    ts,
                    "Pending jobs",
                    [
                        (
                            f'sum by (partition) (slurm_partition_jobs{{{PSEL},state="pending"}})',
                            "{{partition}}",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "Running jobs",
                    [
                        (
                            f'sum by (partition) (slurm_partition_jobs{{{PSEL},state="running"}})',
                            "{{partition}}",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "Pending reasons",
                    [
                        (
                            f"sum by (partition, reason) (slurm_partition_jobs_pending_reason{{{PSEL}}})",
                            "{{partition}}: {{reason}}",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "Oldest pending job",
                    [
                        (
                            f"max by (partition) (slurm_partition_oldest_pending_job_age_seconds{{{PSEL}}})",
                            "{{partition}}",
                        )
                    ],
                    "s",
                ),
                _panel(
                    ts,
                    "CPUs by state",
                    [
                        (
                            f"sum by (partition, state) (slurm_partition_cpus{{{PSEL}}})",
                            "{{partition}} {{state}}",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "GPUs by state",
                    [
                        (
                            f"sum by (partition, state) (slurm_partition_gpus{{{PSEL}}})",
                            "{{partition}} {{state}}",
                        )
                    ],
                ),
                _panel(
                    stat,
                    "Usable nodes",
                    [
                        (
                            f"sum by (partition) (slurm_partition_nodes_usable{{{PSEL}}})",
                            "{{partition}}",
                        )
                    ],
                ),
            ],
            partition=True,
        ),
        "slurm-nodes.json": _dashboard(
            "Slurm / Nodes",
            "Nodes by state and flag, and every node's reason with how long it has held.",
            [
                _panel(
                    ts,
                    "Nodes by state",
                    [
                        (
                            f"sum by (partition, state) (slurm_nodes{{{PSEL}}})",
                            "{{partition}} {{state}}",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "Nodes by flag",
                    [
                        (
                            f"sum by (partition, flag) (slurm_nodes_flagged{{{PSEL}}})",
                            "{{partition}} {{flag}}",
                        )
                    ],
                ),
                _panel(
                    table,
                    "Node reasons (age)",
                    [
                        (
                            f"slurm_node_reason_info{{{SEL}}} * on (node) group_left () (time() - slurm_node_reason_since_timestamp_seconds{{{SEL}}})",
                            "{{node}}: {{reason}}",
                        ),
                    ],
                    "s",
                ),
                _panel(
                    table,
                    "Nodes down or not responding",
                    [
                        (
                            f'slurm_node_state_info{{{SEL},state="down"}} or on (node) slurm_node_flag_info{{{SEL},flag="not_responding"}}',
                            "{{node}}",
                        ),
                    ],
                ),
            ],
            partition=True,
        ),
        "slurm-scheduler.json": _dashboard(
            "Slurm / Scheduler",
            "slurmctld's scheduler, backfill, RPCs and accounting queue (sdiag).",
            [
                _panel(
                    ts,
                    "Main scheduling cycle",
                    [
                        (f"max(slurm_scheduler_cycle_last_seconds{{{SEL}}})", "last"),
                        (f"max(slurm_scheduler_cycle_mean_seconds{{{SEL}}})", "mean"),
                    ],
                    "s",
                ),
                _panel(
                    ts,
                    "Backfill cycle",
                    [
                        (f"max(slurm_backfill_cycle_last_seconds{{{SEL}}})", "last"),
                        (
                            f"time() - max(slurm_backfill_last_cycle_timestamp_seconds{{{SEL}}})",
                            "since last",
                        ),
                    ],
                    "s",
                ),
                _panel(
                    ts,
                    "RPCs per second, top 10 types",
                    [
                        (
                            f"topk(10, sum by (type) (rate(slurm_rpc_requests_total{{{SEL}}}[$__rate_interval])))",
                            "{{type}}",
                        ),
                    ],
                    "reqps",
                ),
                _panel(
                    ts,
                    "RPC time per second, top 10 types",
                    [
                        (
                            f"topk(10, sum by (type) (rate(slurm_rpc_requests_duration_seconds_total{{{SEL}}}[$__rate_interval])))",
                            "{{type}}",
                        ),
                    ],
                    "s",
                ),
                _panel(
                    ts,
                    "Queues",
                    [
                        (f"max(slurm_scheduler_dbd_agent_queue_size{{{SEL}}})", "slurmdbd agent"),
                        (f"max(slurm_scheduler_agent_queue_size{{{SEL}}})", "agent"),
                        (f"max(slurm_scheduler_queue_length{{{SEL}}})", "scheduler"),
                    ],
                ),
                _panel(
                    ts,
                    "Jobs started per minute",
                    [
                        (
                            f"sum(rate(slurm_scheduler_jobs_started_total{{{SEL}}}[$__rate_interval])) * 60",
                            "started",
                        ),
                        (
                            f"sum(rate(slurm_backfill_backfilled_jobs_total{{{SEL}}}[$__rate_interval])) * 60",
                            "by backfill",
                        ),
                    ],
                ),
            ],
        ),
        "slurm-controllers.json": _dashboard(
            "Slurm / Controllers",
            "Which controller is in control, failovers, fencing, and the exporters themselves.",
            [
                _panel(
                    ts,
                    "In control (1) per controller",
                    [(f"max by (host) (slurm_controller_primary{{{SEL}}})", "{{host}}")],
                ),
                _panel(
                    stat,
                    "Failovers in the range",
                    [
                        (
                            f"sum(changes(slurm_controller_primary{{{SEL}}}[$__range])) / 2",
                            "failovers",
                        )
                    ],
                ),
                _panel(
                    ts,
                    "Controllers answering",
                    [(f"max by (host) (slurm_controller_up{{{SEL}}})", "{{host}}")],
                ),
                _panel(ts, "Fenced", [(f"max by (host) (slurm_fenced{{{SEL}}})", "{{host}}")]),
                _panel(
                    ts,
                    "Exporter pass duration",
                    [
                        (
                            f"max by (juju_unit, source) (slurm_exporter_collect_duration_seconds{{{SEL}}})",
                            "{{juju_unit}} {{source}}",
                        )
                    ],
                    "s",
                ),
                _panel(
                    ts,
                    "Exporter data age",
                    [
                        (
                            f"time() - slurm_exporter_last_success_timestamp_seconds{{{SEL}}}",
                            "{{juju_unit}}",
                        )
                    ],
                    "s",
                ),
            ],
        ),
    }


def expressions(dashboard: dict[str, Any]) -> list[str]:
    """Return every panel's PromQL (variable queries are Grafana's `label_values`, not PromQL)."""
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def used_variables(dashboard: dict[str, Any]) -> set[str]:
    """Return the variables a dashboard's expressions and variable queries use."""
    texts = expressions(dashboard)
    texts += [v["query"]["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    texts += [json.dumps(p["datasource"]) for p in dashboard["panels"]]
    return {name for text in texts for name in VARIABLE_RE.findall(text)}


def for_promtool(expr: str) -> str:
    """Replace Grafana's variables by values promtool parses (`[$__rate_interval]` -> `[5m]`)."""
    return VARIABLE_RE.sub(lambda m: PROMTOOL_VALUES.get(m.group(1), ".*"), expr)


def rules_file(dashboards: dict[str, dict[str, Any]]) -> str:
    """Return every dashboard expression as a recording rule, for `promtool check rules`."""
    rules = [
        {
            "record": f"dashboard:{Path(name).stem.replace('-', '_')}:{i}",
            "expr": for_promtool(expr),
        }
        for name, dashboard in sorted(dashboards.items())
        for i, expr in enumerate(expressions(dashboard))
    ]
    return json.dumps({"groups": [{"name": "dashboard_expressions", "rules": rules}]}, indent=1)


def main(argv: list[str]) -> int:
    """Write the dashboards, or their expressions as a rule file."""
    parser = argparse.ArgumentParser(description="Write or check the Grafana dashboards.")
    parser.add_argument("command", choices=["write", "rules"])
    parser.add_argument("-o", "--output", type=Path)
    args = parser.parse_args(argv)
    if args.command == "write":
        DASHBOARD_DIR.mkdir(parents=True, exist_ok=True)
        for name, dashboard in specs().items():
            (DASHBOARD_DIR / name).write_text(json.dumps(dashboard, indent=2) + "\n")
        return 0
    text = rules_file({p.name: json.loads(p.read_text()) for p in DASHBOARD_DIR.glob("*.json")})
    if args.output is None:
        print(text)
    else:
        args.output.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
