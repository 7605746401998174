"""The autoscaler's read of Slurm and its decision, without the network, for 64 nodes and
10,000 queued jobs (issues 23 and 33): on the controller, the `scaling-view` action's reading of
`scontrol show ... --json` (charms/slurmctld/src/scaling_view.py); then the program's reading of
the action's result and its decision. The jobs and nodes are the recorded v0.0.42 records of
tests/unit/autoscaler/fixtures, copied and renamed.
"""

import datetime as dt
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

from pytest_benchmark.fixture import BenchmarkFixture
from slurm_autoscale.decide import decide
from slurm_autoscale.policy import AppPolicy
from slurm_autoscale.slurm import parse_view

ROOT = Path(__file__).parents[1]
FIXTURES = ROOT / "tests" / "unit" / "autoscaler" / "fixtures"
NODES, JOBS = 64, 10_000
RECORDED = 1795630780


def scaling_view() -> ModuleType:
    """The slurmctld charm's action module, under a name no charm uses."""
    name = "bench_slurmctld_scaling_view"
    if name not in sys.modules:
        path = ROOT / "charms" / "slurmctld" / "src" / "scaling_view.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def answers() -> list[str]:
    """scontrol's three answers: 64 idle nodes, 10,000 pending jobs of two shapes."""

    def load(endpoint: str) -> dict:
        return json.loads((FIXTURES / f"pending-v0.0.42-{endpoint}.json").read_text())

    jobs, nodes, reservations = load("jobs"), load("nodes"), load("reservations")
    pending = [j for j in jobs["jobs"] if j["state_reason"] in ("Resources", "Priority")]
    idle = next(n for n in nodes["nodes"] if "IDLE" in n["state"])
    jobs["jobs"] = [dict(pending[i % 2], job_id=i + 1) for i in range(JOBS)]
    nodes["nodes"] = [dict(idle, name=f"compute-{i}") for i in range(NODES)]
    return [json.dumps(nodes), json.dumps(jobs), json.dumps(reservations)]


def test_the_action_reads_64_nodes_and_10000_queued_jobs(benchmark: BenchmarkFixture):
    module = scaling_view()
    texts = answers()

    def action():
        return module.as_results(module.view(*texts, ["compute"], RECORDED, version="v0.0.42"))

    results = benchmark(action)

    assert sum(len(value) for value in results.values()) < 20_000  # Two shapes, 64 nodes.


def test_one_pass_at_64_nodes_and_10000_queued_jobs(benchmark: BenchmarkFixture):
    module = scaling_view()
    results = module.as_results(module.view(*answers(), ["compute"], RECORDED, version="v0.0.42"))
    units = [f"compute/{i}" for i in range(NODES)]
    rule = AppPolicy.model_validate({"max": 128, "step": 8})
    now = dt.datetime.now(dt.UTC)

    def one_pass():
        return decide("compute", rule, units, parse_view(results), now=now)

    decision = benchmark(one_pass)

    assert decision.add == 8
    assert "10000 pending jobs" in decision.reason
