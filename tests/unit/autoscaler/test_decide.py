"""The autoscaler's decisions over Slurm answers recorded on the lab (Slurm 24.11).

Fixtures (tests/unit/autoscaler/fixtures/<state>-<version>-<endpoint>.json), recorded from the
lab's slurmrestd with data_parser v0.0.40, v0.0.41 and v0.0.42, reach the decisions through
the `scaling-view` action's reading (autoscaler_recorded):
- busy: compute-0 runs job 1 (1 of 2 CPUs), compute-1 idle; job 4 held, job 7 --begin later.
- pending: as busy, plus jobs 8 (-N2 --exclusive, Resources) and 9 (-N2, Priority).
- guards: compute-1 in reservation `maint`, compute-2 drained by an operator, jobs 8, 9 gone.
- zero: as guards, plus partition `empty` with no node (FUTURE placeholders only) and pending
  jobs 12 (-N1), 13 and 17 (-N2).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from autoscaler_recorded import answers, recorded, results
from hypothesis import given, settings
from hypothesis import strategies as st
from slurm_autoscale.decide import decide
from slurm_autoscale.policy import AppPolicy, Window
from slurm_autoscale.slurm import Job, Node, Snapshot, parse_view

VERSIONS = ("v0.0.40", "v0.0.41", "v0.0.42")
RECORDED = 1795630780
"""A moment just after the recordings (compute-1's last job ended at 1795630741)."""
MONDAY_NOON = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)


def policy(**fields) -> AppPolicy:
    settings_ = {"min": 0, "max": 3, "idle-timeout": 60, "step": 3, "cooldown": 0} | fields
    return AppPolicy.model_validate(settings_)


UNITS = ["compute/0", "compute/1"]


@pytest.mark.parametrize("version", VERSIONS)
def test_nodes_not_jobs_two_pending_two_node_jobs_need_four_nodes(version):
    decision = decide(
        "compute", policy(max=10), UNITS, recorded("pending", version), now=MONDAY_NOON
    )
    # Jobs 8 and 9 need 2 nodes each; compute-1 is idle: 3 more.
    assert decision.add == 3
    assert "2 pending jobs need 4 nodes, 1 idle, 0 enlisting" in decision.reason


def test_scale_up_stops_at_max():
    decision = decide("compute", policy(max=3), UNITS, recorded("pending"), now=MONDAY_NOON)
    assert decision.add == 1
    assert decision.describe().startswith("compute: +1, 2 pending jobs need 4 nodes")


def test_scale_up_is_limited_by_step():
    decision = decide(
        "compute", policy(max=10, step=2), UNITS, recorded("pending"), now=MONDAY_NOON
    )
    assert decision.add == 2


def test_enlisting_units_count_as_capacity_on_the_way():
    # compute/2 and compute/3 exist in Juju but have no node yet: 3 short - 2 = 1.
    units = [*UNITS, "compute/2", "compute/3"]
    decision = decide("compute", policy(max=10), units, recorded("pending"), now=MONDAY_NOON)
    assert decision.add == 1
    assert "2 enlisting" in decision.reason


def test_held_and_later_jobs_add_nothing():
    decision = decide("compute", policy(), UNITS, recorded("busy"), now=MONDAY_NOON)
    assert (decision.add, decision.remove) == (0, ())


def test_a_job_with_more_nodes_than_max_never_fits():
    decision = decide(
        "compute", policy(max=1, min=0), ["compute/0"], recorded("pending"), now=MONDAY_NOON
    )
    assert decision.add == 0
    assert "2 can never fit (job 8, 9)" in decision.reason


def test_a_job_needing_more_cpus_than_the_nodes_have_never_fits():
    pending = recorded("pending")
    wide = dataclasses.replace(pending.pending[-1], job_id=99, node_count=1, cpus_per_node=64)
    slurm = dataclasses.replace(pending, pending=(wide,))
    decision = decide("compute", policy(max=10), UNITS, slurm, now=MONDAY_NOON)
    assert decision.add == 0
    assert "1 can never fit (job 99)" in decision.reason


@pytest.mark.parametrize("version", VERSIONS)
def test_scale_from_zero_uses_the_policy_shape(version):
    slurm = recorded("zero", version)
    empty = decide("empty", policy(max=3, cpus=2, memory=1000), [], slurm, now=MONDAY_NOON)
    # Jobs 12 (1 node), 13 and 17 (2 nodes each) need 5; max 3.
    assert empty.add == 3
    assert "3 pending jobs need 5 nodes, 0 idle, 0 enlisting" in empty.reason
    small = decide("empty", policy(max=3, memory=1, cpus=1), [], slurm, now=MONDAY_NOON)
    assert small.add == 3  # Each job asks 1 CPU, memory unset: fits a 1-CPU, 1 MB machine.


def test_idle_node_is_removed_only_after_idle_timeout():
    slurm = recorded("busy", now=1795630741 + 59)
    assert decide("compute", policy(), UNITS, slurm, now=MONDAY_NOON).remove == ()
    slurm = recorded("busy", now=1795630741 + 60)
    decision = decide("compute", policy(), UNITS, slurm, now=MONDAY_NOON)
    assert decision.remove == ("compute/1",)  # compute/0 runs job 1.


def test_scale_in_stops_at_min():
    decision = decide("compute", policy(min=2), UNITS, recorded("busy"), now=MONDAY_NOON)
    assert decision.remove == ()
    assert "floor 2" in decision.reason


@pytest.mark.parametrize("version", VERSIONS)
def test_reserved_and_operator_drained_nodes_are_never_removed(version):
    units = [*UNITS, "compute/2"]
    slurm = recorded("guards", version, now=RECORDED + 3600)
    decision = decide("compute", policy(), units, slurm, now=MONDAY_NOON)
    # compute-0 runs a job, compute-1 is reserved, compute-2 drained by an operator.
    assert decision.remove == ()


def test_a_leaving_unit_is_neither_capacity_nor_removed_again():
    guards = recorded("guards", now=RECORDED + 3600)
    leaving = [
        dataclasses.replace(n, reason="juju: unit leaving the cluster")
        if n.name == "compute-2"
        else n
        for n in guards.nodes
    ]
    slurm = dataclasses.replace(guards, nodes=tuple(leaving))
    decision = decide("compute", policy(min=3), [*UNITS, "compute/2"], slurm, now=MONDAY_NOON)
    assert decision.add == 1  # 2 staying units, floor 3.


def test_pending_demand_blocks_scale_in():
    slurm = recorded("pending", now=RECORDED + 3600)
    decision = decide("compute", policy(max=2), UNITS, slurm, now=MONDAY_NOON)
    assert (decision.add, decision.remove) == (0, ())
    assert "at max 2" in decision.reason


@pytest.mark.parametrize(
    ("added_by_the_last_pass", "since", "add"),
    [
        # Jobs 8 and 9 pend (-N2 each), compute-1 is idle: 3 more, the cooldown or not.
        (0, 60, 3),
        # The last pass added compute/2..4 for them: still enlisting, they are capacity.
        (3, 10, 0),
    ],
)
def test_within_the_cooldown_pending_work_adds_what_enlisting_units_do_not_cover(
    added_by_the_last_pass, since, add
):
    units = [*UNITS, *(f"compute/{n}" for n in range(2, 2 + added_by_the_last_pass))]
    decision = decide(
        "compute",
        policy(max=10, cooldown=120),
        units,
        recorded("pending"),
        now=MONDAY_NOON,
        last_action=RECORDED - since,
    )
    assert (decision.add, decision.remove) == (add, ())
    enlisting = f"2 pending jobs need 4 nodes, 1 idle, {added_by_the_last_pass} enlisting"
    assert enlisting in decision.reason


def test_cooldown_never_holds_raising_to_the_floor():
    slurm = recorded("busy", now=RECORDED + 3600)
    decision = decide(
        "compute",
        policy(min=3, cooldown=120),
        UNITS,
        slurm,
        now=MONDAY_NOON,
        last_action=slurm.now,
    )
    assert decision.add == 1


@pytest.mark.parametrize(("since", "removed"), [(119, ()), (120, ("compute/1",))])
def test_cooldown_holds_scale_in_after_the_last_action(since, removed):
    # compute-1 has been idle for an hour; the last add or removal was `since` s ago.
    slurm = recorded("busy", now=RECORDED + 3600)
    decision = decide(
        "compute",
        policy(cooldown=120),
        UNITS,
        slurm,
        now=MONDAY_NOON,
        last_action=slurm.now - since,
    )
    assert decision.remove == removed
    if not removed:
        assert decision.reason.endswith("; scale-in cooling down (1 s left)")


def test_schedule_raises_the_floor_in_working_hours():
    window = Window(days=["mon"], start="08:00", end="18:00", min=3)  # type: ignore[arg-type]
    rule = policy(schedule=[window])
    slurm = recorded("busy", now=RECORDED + 3600)
    assert decide("compute", rule, UNITS, slurm, now=MONDAY_NOON).add == 1
    evening = MONDAY_NOON.replace(hour=19)
    assert decide("compute", rule, UNITS, slurm, now=evening).remove == ("compute/1",)


# Properties: whatever Slurm says, never past max, never below the floor, never a busy node.

node_states = st.sampled_from(
    [{"IDLE"}, {"MIXED"}, {"ALLOCATED"}, {"IDLE", "DRAIN"}, {"IDLE", "RESERVED"}, {"DOWN"}]
)


@st.composite
def worlds(draw):
    units = [f"compute/{i}" for i in range(draw(st.integers(0, 8)))]
    nodes = []
    for unit in units:
        if draw(st.booleans()):  # Else still enlisting.
            state = frozenset(draw(node_states))
            nodes.append(
                Node(
                    name=unit.replace("/", "-"),
                    state=state,
                    cpus=4,
                    real_memory=1000,
                    alloc_cpus=4 if state & {"MIXED", "ALLOCATED"} else 0,
                    last_busy=draw(st.integers(0, 1000)),
                    reason="",
                    partitions=("compute",),
                )
            )
    jobs = tuple(
        Job(i, "compute", draw(st.integers(1, 10)), draw(st.integers(1, 8)), 0, "Resources")
        for i in range(draw(st.integers(0, 6)))
    )
    low = draw(st.integers(0, 5))
    rule = policy(min=low, max=draw(st.integers(low, 10)), step=draw(st.integers(1, 4)))
    return rule, units, Snapshot(tuple(nodes), jobs, frozenset(), 1000)


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_never_past_max_never_below_floor_never_a_busy_node(world):
    rule, units, slurm = world
    decision = decide("compute", rule, units, slurm, now=MONDAY_NOON)
    assert len(units) + decision.add <= max(rule.max, len(units))
    assert decision.add <= rule.step and len(decision.remove) <= rule.step
    assert len(units) - len(decision.remove) >= min(rule.min, len(units))
    by_name = {n.name: n for n in slurm.nodes}
    for unit in decision.remove:
        node = by_name[unit.replace("/", "-")]
        assert node.state == {"IDLE"}
    assert not (decision.add and decision.remove)


@pytest.mark.parametrize("tasks", ["0-9%2", "0-3000000%2", "0,5%2"])
def test_a_pending_job_array_counts_the_tasks_that_may_run_at_once(tasks):
    documents = answers("pending")
    # Job 8's record (-N2) as the one record of a pending array, at most 2 tasks at once.
    record = next(j for j in documents["jobs"]["jobs"] if j["job_id"] == 8)
    documents["jobs"]["jobs"] = [dict(record, array_task_string=tasks)]
    slurm = parse_view(results(documents, RECORDED))
    decision = decide("compute", policy(max=10, step=10), UNITS, slurm, now=MONDAY_NOON)
    assert decision.add == 3  # 2 tasks x 2 nodes, compute-1 idle.
    assert "1 pending jobs need 4 nodes" in decision.reason
