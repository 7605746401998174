"""`just bench-lab` in smoke mode (issue 13): the lab benchmark runs end to end.

One repetition of every figure at the smallest sizes, on a lab of its own, only to prove the
script works: each figure is there and no step failed. Its numbers are not checked here;
benchmarks are not timed tests.

Not in the smoke (`--skip`), as their own integration modules run the same behaviour on a lab
and they cost most of the run (`just bench-lab` runs them): the rolling rebuild (figure 10;
test_rebuild_and_upgrade.py), the failover (figure 4; test_ha.py) and slurm-autoscale's two
figures (figure 9; test_autoscale.py). Their rows of the report are printed from a recorded run's
document (`--report`), so the report code of every figure still runs here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, lab_usable, on_real_juju

PROVEN_ELSEWHERE = ("rebuild", "failover", "autoscale_from_zero", "autoscale_pass")
SMOKE = [
    "--quick",
    "--nodes=3",
    "--jobs=20",
    "--compare-jobs=10",
    "--partitions=2",
    "--scale-limit=4",
    "--bare-runs=1",
    "--job-seconds=10",
    f"--skip={','.join(PROVEN_ELSEWHERE)}",
]
FIGURES = (
    "enlistment",
    "controller_work",
    "static_method",
    "throughput",
    "scale_in_idle",
    "scale_in_busy",
    "config_changed_many",
    "scale",
    "throughput_local",
    "throughput_shared",
    "throughput_accounting",
    "exporter",
)
RECORDED = REPO / "benchmarks" / "lab" / "testdata" / "bench-lab-quick.json"
"""A `just bench-lab --quick` document with every figure (the smoke's sizes, no step skipped);
its failover is a `--only failover` run's sweep (figure 4's shape since issue 41)."""
ROWS_OF_SKIPPED = (
    *(f"| 4 | Failover, {kind}, SlurmctldTimeout " for kind in ("kill", "power", "network")),
    "| 4s | Spurious takeovers / fences, SlurmctldTimeout ",
    "| 9 | Scale from zero",
    "| 9b | Autoscaler pass at",
    "| 10 | Rollout of",
)


def test_the_lab_benchmark_runs_every_figure(tmp_path: Path):
    if on_real_juju() or not lab_usable():
        pytest.skip("the lab benchmark needs the lab (root, debootstrap, systemd-nspawn)")
    out = tmp_path / "bench-lab.json"

    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.lab", *SMOKE, f"--out={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=40 * 60,
        check=False,
    )

    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    document = json.loads(out.read_text())
    assert document["failed"] is None
    assert document["errors"] == []
    assert [name for name in FIGURES if name not in document["figures"]] == []
    assert [name for name in PROVEN_ELSEWHERE if name in document["figures"]] == []


def test_the_report_prints_the_skipped_figures_of_a_recorded_run():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.lab", f"--report={RECORDED}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert [row for row in ROWS_OF_SKIPPED if row not in result.stdout] == []
