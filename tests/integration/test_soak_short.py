"""One short seed of the chaos soak (issue 37, item 5): `just soak-short`, on the smaller cluster.

`tests/soak/soak.py` on a fresh lab of its own: two controllers on network state, slurmdbd with
MySQL, slurmrestd, a login node, one compute unit and the autoscaled application (up to one
unit), jobs from the login node all along, and the faults that `SEED` draws for `MINUTES`
minutes with a fault every `FAULT_GAP_S` on average. Every invariant of the soak is checked
throughout and at the end; the run fails on any violation, a hook failed by no fault, or a job
lost in silence. Its report is `build/soak-report.json`; a failed run keeps its logs in
`build/soak-evidence` and prints each controller's turns (`SOAK_KEEP=1` keeps its lab).

The seed is the one of seeds 1-400 whose schedule (`just soak --dry-run`) covers the most fault
kinds with a hard fault of the controller in charge, the shorter holds first (chosen from the
schedules alone, never from a run): a network cut of the primary (a failover, the fence),
config changes on both daemons, a JWT key rotation, a power cut of a compute machine, a unit
added during a hook and a hook killed. The long runs are `just soak --minutes 20` (three seeds,
the README's reliability section) and `just soak --minutes 60`.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from conftest import lab_usable, on_real_juju

SOAK = Path(__file__).resolve().parents[1] / "soak"
SEED = 74
MINUTES = 4
FAULT_GAP_S = 30


def test_a_short_seed_keeps_every_invariant():
    if on_real_juju() or not lab_usable():
        pytest.skip("the soak drives the lab's machines: root, debootstrap and systemd-nspawn")
    sys.path.insert(0, str(SOAK))
    soak = importlib.import_module("soak")  # tests/soak/soak.py: not a package

    options = {"--seed": SEED, "--minutes": MINUTES, "--fault-gap": FAULT_GAP_S}
    keep = ["--keep"] if os.environ.get("SOAK_KEEP") else []  # to look at a failed run's lab
    status = soak.main([*(f"{k}={v}" for k, v in options.items()), "--small", *keep])

    report = json.loads(soak.REPORT.read_text())
    assert report["seed"] == SEED
    assert len(report["faults"]) == len(report["schedule"])
    assert report["violations"] == []
    assert report["jobs"]["lost_unreported"] == 0
    assert report["jobs"]["completed"] > 0
    assert status == 0
