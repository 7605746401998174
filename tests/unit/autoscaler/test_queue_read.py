"""The scaling view reads pending jobs from squeue's lines, and decides as from the jobs' JSON.

Issue 41: the `scaling-view` action reads the pending jobs from `squeue` (fields that cannot
hold its separator, Slurm's reason last) instead of `scontrol show jobs --json`, about 60 bytes
a job instead of 5 KB. Here each recorded state and version goes both ways, from the same raw
recorded JSON (squeue's lines derived from it by tests/unit/recorded_queue.py): the snapshot
the autoscaler reads, and its decisions, must be the same.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from autoscaler_recorded import PARTITIONS, answers, load_scaling_view, recorded
from recorded_queue import queue_text
from slurm_autoscale.decide import decide
from slurm_autoscale.policy import AppPolicy

RECORDED = Path(__file__).parent / "recorded"
NOW = 1795630780
LATER = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
FIXTURE_CASES = [
    (state, version)
    for state in ("busy", "pending", "guards")
    for version in ("v0.0.40", "v0.0.41", "v0.0.42")
]
RELEASE_CASES = [
    ("24.11", "v0.0.40"),
    ("24.11", "v0.0.41"),
    ("24.11", "v0.0.42"),
    ("26.05", "v0.0.42"),
    ("26.05", "v0.0.43"),
    ("26.05", "v0.0.44"),
    ("26.05", "v0.0.45"),
]
POLICIES = [
    {"max": 10, "step": 10, "cooldown": 0, "idle-timeout": 60},
    {"max": 3, "step": 1, "cooldown": 0, "idle-timeout": 0},
    {"min": 1, "max": 2, "cpus": 1, "memory": 1, "cooldown": 0},
]
UNITS = ["compute/0", "compute/1", "compute/2"]


def queue_view(documents: dict, version: str, partitions: list[str], now: int) -> dict | None:
    module = load_scaling_view()
    nodes, reservations = (json.dumps(documents[w]) for w in ("nodes", "reservations"))
    lines = queue_text(documents["jobs"])
    return module.queue_view(nodes, lines, reservations, partitions, now, version=version)


def json_view(documents: dict, version: str, partitions: list[str], now: int) -> dict:
    module = load_scaling_view()
    texts = [json.dumps(documents[w]) for w in ("nodes", "jobs", "reservations")]
    return module.view(*texts, partitions, now, version=version)


@pytest.mark.parametrize(("state", "version"), FIXTURE_CASES)
def test_the_squeue_read_gives_the_snapshot_and_decisions_of_the_json_read(state, version):
    documents = answers(state, version)
    assert queue_view(documents, version, PARTITIONS, NOW) is not None  # No JSON fallback.

    by_queue, by_json = recorded(state, version), recorded(state, version, queue=False)

    assert by_queue == by_json
    for fields in POLICIES:
        rule = AppPolicy.model_validate(fields)
        assert decide("compute", rule, UNITS, by_queue, now=LATER) == decide(
            "compute", rule, UNITS, by_json, now=LATER
        )


@pytest.mark.parametrize(("release", "version"), RELEASE_CASES)
def test_each_release_and_version_reads_alike_from_squeue(release, version):
    documents = {
        what: json.loads((RECORDED / release / f"{version}-{what}.json").read_text())
        for what in ("nodes", "jobs", "reservations")
    }

    by_queue = queue_view(documents, version, ["compute"], 1795937400)

    assert by_queue is not None
    assert by_queue == json_view(documents, version, ["compute"], 1795937400)
    assert {(shape["example"], shape["reason"]) for shape in by_queue["pending"]} == {
        (2, "Resources"),
        (3, "JobHeldUser"),
        (4, "BeginTime"),
    }


def test_a_recorded_description_sends_the_read_to_the_json():
    """In `zero`, jobs 12, 13 and 17 wait with descriptions squeue prints instead of a word."""
    documents = answers("zero", "v0.0.42")

    assert queue_view(documents, "v0.0.42", PARTITIONS, NOW) is None
    pending = {job.job_id: job.reason for job in recorded("zero", "v0.0.42").pending}
    assert pending[12] == "Resources" and pending[13] == "ReqNodeNotAvail"
