"""The rolling rebuild's reading of Slurm's answer, fed hostile text (slurmctld's `rebuild`).

Seeds are what real Slurm printed (`recorded`): the charm's query (root's jobs, id and state)
and a naive `%i|%T|%k` read of the same partition, whose comments forge `<id>|PENDING`
records. Hypothesis splices in new lines, CR, U+2028, `|`, huge ids and whole forged lines.

* `queue.parse_root_jobs` raises nothing and returns only ids of whole `<id>|<STATE>` lines, each a
  Slurm job id (1 to 67,108,863 at most, 8 digits).
* Whatever the answer, the charm holds and cancels only the job ids it recorded.
"""

from __future__ import annotations

import harness
import recorded
import strategies as s
from hpc_libs.interfaces.slurmctld_peer import Rollout
from hpc_libs.slurm import queue
from hypothesis import example, given
from hypothesis import strategies as st

rebuild = harness.modules("slurmctld")["rebuild"]

SEEDS = (
    "7|PENDING",
    "8|CONFIGURING",
    "9|COMPLETED",
    *recorded.lines("squeue-rebuild"),
    *recorded.lines("squeue-rebuild-naive"),
)
BREAKS = ("\r", "\x0b", "\x0c", "\x85", "\u2028", "\u2029")
RECORD = Rollout.model_validate(
    {
        "partition": "compute",
        "since": 1,
        "jobs": [{"id": 7, "node": "compute-0"}, {"id": 8, "node": "compute-1"}],
    }
)


def hostile_answer() -> st.SearchStrategy[str]:
    """Lines of squeue's answer: seeds, mutated seeds, seeds joined by any line break."""
    line = st.one_of(
        st.sampled_from(SEEDS),
        s.mutated(SEEDS),
        st.builds(
            lambda a, b, br: a + br + b,
            st.sampled_from(SEEDS),
            st.sampled_from(SEEDS),
            st.sampled_from(BREAKS),
        ),
        st.sampled_from(s.HUGE).map(lambda huge: f"{huge}|PENDING"),
    )
    return st.lists(line, max_size=8).map(lambda lines: "".join(f"{x}\n" for x in lines))


@given(hostile_answer())
@example("1|PENDING|x\n31337|PENDING\n")
@example("7|PENDING\u20281|PENDING\n99999999999|PENDING\n")
def test_parse_root_jobs_reads_whole_id_state_lines_only(answer: str):
    states = queue.parse_root_jobs(answer)

    whole = {line.strip() for line in answer.split("\n")}
    assert all(f"{job_id}|{state}" in whole for job_id, state in states.items()), answer
    assert all(0 < job_id <= 99_999_999 for job_id in states)
    assert all(not any(b in state for b in BREAKS) for state in states.values())


@given(hostile_answer())
def test_only_recorded_ids_are_held_or_cancelled(answer: str):
    states = queue.parse_root_jobs(answer)
    rollouts = rebuild.progress([RECORD], states, [])
    recorded_ids = {job_id for job_id, _ in RECORD.submitted()}

    assert all(set(r.waiting_jobs) <= recorded_ids for r in rollouts)
