"""The Grafana dashboards: the files are the specs' (tools/dashboards.py), every variable an
expression uses is defined, and cos_agent sends each with a valid UID.

promtool parses every expression in `just alerts` (tools/dashboards.py rules).
"""

import json
from pathlib import Path

import cos_agent_reader
import pytest
from hpc_libs.interfaces import cos_agent
from tool_modules import TOOLS, load_tool

DASHBOARDS = load_tool("dashboards.py", "dashboards_tool")
FILES = sorted(DASHBOARDS.DASHBOARD_DIR.glob("*.json"))


def test_the_five_dashboards_are_written_from_their_specs() -> None:
    assert [f.name for f in FILES] == sorted(DASHBOARDS.specs())
    assert {f.stem for f in FILES} == {
        "slurm-cluster",
        "slurm-partitions",
        "slurm-nodes",
        "slurm-scheduler",
        "slurm-controllers",
    }
    for path in FILES:
        assert json.loads(path.read_text()) == DASHBOARDS.specs()[path.name], (
            f"{path.name} is stale: run `uv run python tools/dashboards.py write`"
        )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_variable_resolves(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    used = DASHBOARDS.used_variables(dashboard)
    assert used - defined - DASHBOARDS.BUILTIN_VARIABLES == set()
    # A variable's query only uses variables defined before it (Grafana resolves in order).
    seen: set[str] = set()
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query_uses = set(DASHBOARDS.VARIABLE_RE.findall(variable["query"]["query"]))
            assert query_uses <= seen | {"prometheusds"}, variable["name"]
        seen.add(variable["name"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_panel_queries_slurm_series_through_the_datasource_variable(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert "slurm_" in target["expr"]
            assert target["datasource"]["uid"] == "${prometheusds}"


def test_a_checked_variable_fails_when_undefined() -> None:
    """The check can fail: a panel using `$cluster`, which no dashboard defines."""
    dashboard = DASHBOARDS.specs()["slurm-cluster.json"]
    dashboard["panels"][0]["targets"][0]["expr"] = 'slurm_nodes{cluster="$cluster"}'
    assert "cluster" in DASHBOARDS.used_variables(dashboard)


def test_promtool_gets_parseable_ranges_for_grafanas_variables() -> None:
    expr = 'rate(slurm_rpc_requests_total{juju_model=~"$juju_model"}[$__rate_interval])'
    assert DASHBOARDS.for_promtool(expr) == 'rate(slurm_rpc_requests_total{juju_model=~".*"}[5m])'


def test_cos_agent_sends_each_dashboard_with_its_path_uid() -> None:
    root = TOOLS.parent / "charms/slurmctld"
    for path in FILES:
        relative = str(path.relative_to(root))
        decoded = cos_agent_reader.decode_dashboard(
            cos_agent.encode_dashboard(path.read_text(), "slurmctld", relative)
        )
        assert len(decoded["uid"]) == 40 and int(decoded["uid"], 16) >= 0
        assert "charm: slurmctld" in decoded["tags"]
