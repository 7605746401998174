"""`just bench-lab` in smoke mode (issue 13): the lab benchmark runs end to end.

One repetition of every figure at the smallest sizes, on a lab of its own, only to prove the
script works: each figure is there and no step failed. Its numbers are not checked here;
benchmarks are not timed tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, lab_usable, on_real_juju

SMOKE = [
    "--quick",
    "--nodes=3",
    "--jobs=20",
    "--compare-jobs=10",
    "--partitions=2",
    "--scale-limit=4",
    "--bare-runs=1",
    "--job-seconds=10",
    "--failover-runs=1",
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
    "failover",
    "autoscale_from_zero",
    "autoscale_pass",
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
    for kind in ("kill", "power", "network"):
        assert f"| 4 | Failover, {kind} (1 runs)" in result.stdout
