"""The autoscaler's path from Slurm's answers to a decision, under hostile input.

Two readers: the slurmctld action `scaling-view` reading `scontrol show ... --json` (users'
fields with newlines, `|`, U+2028, JSON of a forged job; numbers huge, fractional, negative,
wrapped or not) and slurm-autoscale reading the action's results. Properties: no exception but
the reader's own "unreadable" escapes; what comes out names only jobs and nodes the input had;
every pending job of the asked partitions is counted once.
"""

import json
from typing import Any

import harness
from hypothesis import given
from hypothesis import strategies as st
from slurm_autoscale.slurm import SlurmUnreadable, parse_view

SCALING_VIEW = harness.modules("slurmctld")["scaling_view"]
PARTITIONS = ["compute", "gpu"]
HOSTILE = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "x\n4242|compute|PENDING",
            "a|b|c",
            "line\u2028next",
            '{"job_id": 4242, "job_state": ["PENDING"], "partition": "compute"}',
            "compute\r\ngpu",
            "",
        ]
    ),
)
HUGE = st.sampled_from([2**63, 2**64 + 1, 10**30, -1, -(2**70), 1e300, 1.5, float("inf")])
NUMBER = st.one_of(st.integers(0, 64), HUGE, st.booleans(), st.none())


def mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` about 19 times in 20: a bad value makes the whole answer unreadable."""
    return st.integers(0, 19).flatmap(lambda n: bad if n == 0 else good)


COUNT = mostly(st.integers(0, 64), st.one_of(HUGE, st.booleans(), st.none()))


def wrapped(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A number as data_parser writes it: bare, or `{"set", "infinite", "number"}`."""
    box = st.fixed_dictionaries({"set": st.booleans(), "infinite": st.booleans(), "number": value})
    return st.one_of(value, box)


partition_text = st.one_of(
    st.sampled_from(["compute", "gpu", "compute,gpu", "other", "compute,other"]), HOSTILE
)
tasks = mostly(
    st.sampled_from(["", "", "0-9%2", "0-3000000", "0-4294967295%3", "1,3,5-7", "0-9:2"]),
    HOSTILE,
)


@st.composite
def jobs(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "job_id": draw(mostly(st.integers(1, 2**40), HUGE)),
        "job_state": draw(st.sampled_from([["PENDING"], ["RUNNING"], ["PENDING", "x"], []])),
        "partition": draw(partition_text),
        "node_count": draw(wrapped(COUNT)),
        "cpus": draw(wrapped(COUNT)),
        "minimum_cpus_per_node": draw(wrapped(COUNT)),
        "memory_per_node": draw(wrapped(COUNT)),
        "memory_per_cpu": draw(wrapped(COUNT)),
        "state_reason": draw(mostly(st.sampled_from(["Resources", "Priority"]), HOSTILE)),
        "array_task_string": draw(tasks),
        "array_max_tasks": draw(wrapped(COUNT)),
        "name": draw(HOSTILE),
        "comment": draw(HOSTILE),
        "account": draw(HOSTILE),
    }


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "name": draw(mostly(st.from_regex(r"compute-[0-9]{1,3}", fullmatch=True), HOSTILE)),
        "state": draw(
            st.lists(mostly(st.sampled_from(["IDLE", "MIXED", "DRAIN"]), HOSTILE), max_size=3)
        ),
        "cpus": draw(wrapped(COUNT)),
        "real_memory": draw(wrapped(COUNT)),
        "alloc_cpus": draw(wrapped(COUNT)),
        "last_busy": draw(wrapped(COUNT)),
        "reason": draw(HOSTILE),
        "partitions": draw(st.one_of(st.lists(partition_text, max_size=2), partition_text)),
        "reservation": draw(HOSTILE),
    }


reservations = st.fixed_dictionaries(
    {
        "node_list": mostly(
            st.sampled_from(["compute-[0-3000000000]", "compute-1,gpu-[01-10]", ""]),
            st.one_of(st.just("a[[1]"), HOSTILE),
        ),
        "end_time": wrapped(COUNT),
    }
)


def pending_in_partitions(job: dict[str, Any]) -> bool:
    listed = job["partition"].split(",") if isinstance(job["partition"], str) else []
    return "PENDING" in job["job_state"] and any(p in PARTITIONS for p in listed)


@given(
    st.lists(nodes(), max_size=6), st.lists(jobs(), max_size=8), st.lists(reservations, max_size=3)
)
def test_the_action_names_only_what_slurm_said(node_list, job_list, reservation_list):
    meta = {"plugin": {"data_parser": "data_parser/v0.0.45"}}
    answers = [
        json.dumps({"meta": meta, "nodes": node_list}),
        json.dumps({"meta": meta, "jobs": job_list}),
        json.dumps({"meta": meta, "reservations": reservation_list}),
    ]
    try:
        document = SCALING_VIEW.view(*answers, PARTITIONS, 1_000_000, version="v0.0.45")
    except SCALING_VIEW.SlurmUnreadable:
        return
    ids = {job["job_id"] for job in job_list if pending_in_partitions(job)}
    assert {shape["example"] for shape in document["pending"]} <= ids
    assert sum(shape["jobs"] for shape in document["pending"]) + document["omitted"] == len(
        [job for job in job_list if pending_in_partitions(job)]
    )
    names = {node["name"] for node in node_list}
    assert {node["name"] for node in document["nodes"]} <= names
    assert set(document["reserved"]) <= names
    # What the action returns, the autoscaler reads back whole.
    slurm = parse_view(SCALING_VIEW.as_results(document))
    assert {job.job_id for job in slurm.pending} <= ids
    assert len(slurm.nodes) == len(document["nodes"])


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBER, HOSTILE),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(HOSTILE, inner, max_size=4)
    ),
    max_leaves=20,
)


@given(
    st.one_of(
        st.dictionaries(st.sampled_from(["parts", "part-0", "part-1"]), json_values),
        json_values.map(lambda value: {"parts": "1", "part-0": json.dumps(value)}),
        st.builds(
            lambda parts, text: {"parts": parts, "part-0": text},
            st.one_of(st.sampled_from(["1", "2", "0", "17", "-1", "1\n"]), HOSTILE),
            HOSTILE,
        ),
    )
)
def test_the_autoscaler_reads_any_answer_or_says_slurm_is_unreadable(results):
    try:
        slurm = parse_view(results)
    except SlurmUnreadable:
        return
    text = "".join(str(results.get(f"part-{n}", "")) for n in range(int(results["parts"])))
    for node in slurm.nodes:
        assert json.dumps(node.name) in text
    for job in slurm.pending:
        assert str(job.job_id) in text
