"""The takeover repair's and native metrics' parsers of Slurm's text, fed hostile text.

Seeds are the lines Slurm prints for the charm's narrow queries (`takeover.JOBS_QUERY`,
`takeover.NODES_QUERY`, `native_metrics.NODES_QUERY`); hypothesis mutates them with new
lines, `|`, CR, U+2028, NEL, huge numbers and impossible dates, and adds whole forged lines.

* No exception escapes a parser (`native_metrics.node_releases` refuses a bad line with
  `SlurmOpsError`, which keeps the last decision).
* A candidate is the id of a whole record: the first field of a line split on "\\n" only,
  with as many fields as the query prints and none of CR, U+2028 or another line break in it.
* The repair acts only on what Slurm's own records say: driven with hostile squeue and sinfo
  output naming any job or node, it releases, requeues and resumes only the records that are
  casualties (`held_for_launch`, `ended_for_revoked`, `drained_by_launch`).
"""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace
from typing import Any

import harness
import pytest
import recorded
import strategies as s
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm.scontrol import Job, Node
from hypothesis import example, given
from hypothesis import strategies as st

takeover = harness.modules("slurmctld")["takeover"]
native_metrics = harness.modules("slurmctld")["native_metrics"]

SINCE = 1795619000
BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
JOB_LINES = (
    f"1|PENDING|{SINCE + 74}|{SINCE + 195}|N/A|1|1|2|0:0",
    f"2|FAILED|{SINCE - 30}|{SINCE + 74}|{SINCE + 74}|0|1|1|1:0",
    f"3|COMPLETING|{SINCE - 30}|{SINCE + 74}|{SINCE + 75}|0|1|1|1:0",
    f"77|FAILED|{SINCE - 30}|{SINCE + 10}|{SINCE + 11}|0|1|1|1:0",
    f"4|PENDING|{SINCE - 99}|N/A|NONE|0|0|1|",
    *recorded.lines("squeue-takeover"),
)
NODE_LINES = (f"compute-0|{SINCE + 74}", "compute-1|Unknown", f"gpu-0|{SINCE - 5}")
RELEASE_LINES = ("compute-0|idle+drain|24.11.5", "compute-1|allocated|26.05.5", "p-0|future|N/A")
IMPOSSIBLE = ("2026-13-45T99:99:99", "99999999999999", "-1", "1e9", "²", "1" * 5000)


def hostile_output(seeds: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Lines of a query's output: seeds mutated, forged lines, hostile text, any line breaks."""
    line = st.one_of(
        s.mutated(seeds),
        st.builds(
            lambda seed, cut, bad: "|".join(
                [*seed.split("|")[:cut], bad, *seed.split("|")[cut + 1 :]]
            ),
            st.sampled_from(seeds),
            st.integers(0, 8),
            st.sampled_from([*IMPOSSIBLE, *s.HUGE, *BREAKS, "|", "\n"]),
        ),
        st.builds(
            lambda a, b, br: a + br + b,
            st.sampled_from(seeds),
            st.sampled_from(seeds),
            st.sampled_from(BREAKS),
        ),
    )
    return st.lists(line, max_size=8).map(lambda lines: "".join(f"{x}\n" for x in lines))


def whole_records(output: str, fields: int) -> list[list[str]]:
    """The lines of `output` that are whole records: split on "\\n", `fields` fields, no break."""
    lines = output.split("\n")
    return [
        line.split("|")
        for line in lines
        if len(line.split("|")) == fields and not any(b in line for b in BREAKS)
    ]


@given(hostile_output(JOB_LINES))
@example(f"x\r{JOB_LINES[1]}\nx\u2028{JOB_LINES[2]}\n")
def test_job_candidates_are_ids_of_whole_squeue_records(output: str):
    candidates = takeover.job_candidates(output, SINCE)

    ids = {record[0] for record in whole_records(output, len(takeover.JOB_FIELDS))}
    assert all(str(c) in ids for c in candidates), (candidates, output)
    assert all(0 < c < 2**32 for c in candidates)


@given(hostile_output(NODE_LINES))
@example(f"x\u2028{NODE_LINES[0]}\nx\r{NODE_LINES[0]}\n")
def test_node_candidates_are_names_of_whole_sinfo_records(output: str):
    candidates = takeover.node_candidates(output, SINCE)

    names = {record[0] for record in whole_records(output, len(takeover.NODE_FIELDS))}
    assert set(candidates) <= names, (candidates, output)


@given(hostile_output(RELEASE_LINES))
@example(f"{RELEASE_LINES[1]}\r{RELEASE_LINES[0]}\n")
def test_node_releases_are_whole_records_or_refused(output: str):
    try:
        releases = native_metrics.node_releases(output)
    except SlurmOpsError:
        return
    records = whole_records(output, 3)
    assert len(records) == len([line for line in output.split("\n") if line])
    assert all(
        [name, release or "N/A"] in [[r[0], r[2]] for r in records]
        for name, release in releases.items()
    )


def job(job_id: int, **fields: Any) -> Job:
    return Job.model_validate({"job_id": job_id, "requeue": True, "batch_flag": True, **fields})


def exited_1(job_id: int, start: int, end: int) -> Job:
    """A job that ran from `start` to `end` and exited with code 1 (FAILED)."""
    return job(
        job_id,
        job_state=["FAILED"],
        state_reason="NonZeroExitCode",
        start_time=start,
        end_time=end,
        exit_code={"return_code": 1},
    )


RECORDS: dict[int, Job] = {
    1: job(
        1,
        job_state=["PENDING"],
        state_description="launch failed requeued held",
        submit_time=SINCE + 74,
    ),
    2: exited_1(2, SINCE + 74, SINCE + 74),
    3: exited_1(3, SINCE + 10, SINCE + 500),
    77: job(77, job_state=["COMPLETED"], start_time=SINCE + 10, end_time=SINCE + 11),
    4: job(
        4,
        job_state=["PENDING"],
        state_reason="JobHeldUser",
        state_description="job requeued in held state",
        submit_time=SINCE + 74,
    ),
}


def drained(name: str, reason: str, by: str) -> Node:
    """An idle node drained with `reason` by user `by`, 74 s after SINCE."""
    return Node(
        name=name,
        state=["IDLE", "DRAIN"],
        reason=reason,
        reason_set_by_user=by,
        reason_changed_at=SINCE + 74,
    )


NODES: dict[str, Node] = {
    node.name: node
    for node in (
        drained("compute-0", "Duplicate jobid", "slurm"),
        drained("compute-1", "Duplicate jobid", "root"),
        drained("gpu-0", "disk", "slurm"),
    )
}
CASUALTIES = {("release", 1), ("requeue", 2), ("resume", "compute-0")}


class FakeScontrol:
    """Slurm's records: what `scontrol show` gives for an id; the repair's acts recorded."""

    def __init__(self) -> None:
        self.acts: list[tuple[str, int | str]] = []

    def show_job(self, job_id: int) -> Job | None:
        return RECORDS.get(job_id)

    def show_node(self, name: str) -> Node | None:
        return NODES.get(name)

    def release(self, ids: list[int]) -> None:
        self.acts += [("release", i) for i in ids]

    def requeue(self, ids: list[int]) -> None:
        self.acts += [("requeue", i) for i in ids]

    def update_node(self, name: str, *, state: str) -> None:
        self.acts.append((state, name))


@given(hostile_output(JOB_LINES), hostile_output(NODE_LINES))
@example(f"{JOB_LINES[3]}\nx\r{JOB_LINES[3]}\n", "compute-1|1795619074\ngpu-0|1795619074\n")
def test_the_repair_acts_only_on_what_the_records_say(jobs: str, nodes: str):
    """Forged lines may name job 77 (another user's, completed) or compute-1: nothing happens."""
    scontrol = FakeScontrol()
    done: list[str] = []
    repair = SimpleNamespace(
        scontrol=scontrol,
        manager=SimpleNamespace(user="slurm"),
        _new=lambda key: key not in done,
        _pass=done.append,
        _record=lambda key, _: done.append(key),
        # Not yet time for the busy nodes' registration: its query lists only node names and
        # Slurm's states, which no user writes (tests/unit/slurmctld/test_takeover.py).
        _stored=SimpleNamespace(window_until=float("inf")),
    )
    repair._resume = partial(takeover.TakeoverRepair._resume, repair)
    repair._release = partial(takeover.TakeoverRepair._release, repair)
    answers = {"squeue": jobs, "sinfo": nodes}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(takeover, "_query", lambda argv: answers[argv[0]])
        takeover.TakeoverRepair._repair(repair, float(SINCE))

    assert set(scontrol.acts) <= CASUALTIES, scontrol.acts
    assert len(scontrol.acts) == len(set(scontrol.acts))  # Each at most once.
