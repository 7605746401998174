"""The autoscaler's own cost per pass, without the network: parsing slurmrestd's answers and
deciding, for 64 nodes and 10,000 queued jobs (issue 23). The jobs and nodes are the recorded
v0.0.41 records of tests/unit/autoscaler/fixtures, copied and renamed.
"""

import datetime as dt
import json
from pathlib import Path

from pytest_benchmark.fixture import BenchmarkFixture
from slurm_autoscale.decide import decide
from slurm_autoscale.policy import AppPolicy
from slurm_autoscale.slurm import snapshot

FIXTURES = Path(__file__).parents[1] / "tests" / "unit" / "autoscaler" / "fixtures"
NODES, JOBS = 64, 10_000


def test_one_pass_at_64_nodes_and_10000_queued_jobs(benchmark: BenchmarkFixture):
    def load(endpoint: str) -> dict:
        return json.loads((FIXTURES / f"pending-v0.0.41-{endpoint}.json").read_text())

    jobs, nodes, reservations = load("jobs"), load("nodes"), load("reservations")
    pending = next(j for j in jobs["jobs"] if j["state_reason"] == "Resources")
    idle = next(n for n in nodes["nodes"] if "IDLE" in n["state"])
    jobs["jobs"] = [dict(pending, job_id=i) for i in range(JOBS)]
    nodes["nodes"] = [dict(idle, name=f"compute-{i}") for i in range(NODES)]
    units = [f"compute/{i}" for i in range(NODES)]
    rule = AppPolicy.model_validate({"max": 128, "step": 8})
    now = dt.datetime.now(dt.UTC)

    def one_pass():
        slurm = snapshot(jobs, nodes, reservations, 1795630780)
        return decide("compute", rule, units, slurm, now=now)

    decision = benchmark(one_pass)

    assert decision.add == 8
