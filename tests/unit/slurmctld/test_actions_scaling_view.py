"""Scenarios: the read-only `scaling-view` action slurm-autoscale runs instead of a token.

Slurm's answers are the lab's recorded data_parser v0.0.42 documents
(tests/unit/autoscaler/fixtures; `scontrol show ... --json` prints the same documents).
"""

import json
from pathlib import Path
from types import SimpleNamespace

import charm
import pytest
from charm_testing import FakeMachine
from ops import testing
from test_charm_slurmctld import running

FIXTURES = Path(__file__).parents[1] / "autoscaler" / "fixtures"
RECORDED = 1795630780
"""Just after the recordings: reservation `maint` (guards) has not ended."""


@pytest.fixture(autouse=True)
def recorded_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(charm.actions.scaling_view, "time", SimpleNamespace(time=lambda: RECORDED))


OFFERED_24_11 = "data_parser/v0.0.42\ndata_parser/v0.0.40\ndata_parser/v0.0.41\n"
"""`scontrol --json=list` of Slurm 24.11 on the lab (stdout; its order)."""


def answer(machine: FakeMachine, state: str, **changed: str) -> None:
    """Make scontrol answer the recorded `state` (pending, busy, guards, zero)."""
    machine.responses[("scontrol", "--json=list")] = OFFERED_24_11
    for what in ("nodes", "jobs", "reservations"):
        text = changed.get(what) or (FIXTURES / f"{state}-v0.0.42-{what}.json").read_text()
        machine.responses[("scontrol", "show", what)] = text


def scaling_view(ctx, partitions: str = "compute", **params: str) -> dict:
    params["partitions"] = partitions
    ctx.run(ctx.on.action("scaling-view", params=params), running())
    results = ctx.action_results
    assert results is not None
    return json.loads("".join(results[f"part-{n}"] for n in range(int(results["parts"]))))


def test_returns_the_partitions_nodes_pending_shapes_and_reserved_nodes(ctx, machine):
    answer(machine, "guards")

    view = scaling_view(ctx)

    assert machine.ran("scontrol") == [
        ["scontrol", "--json=list"],
        ["scontrol", "show", "nodes", "--json=v0.0.42"],
        ["scontrol", "show", "jobs", "--json=v0.0.42"],
        ["scontrol", "show", "reservations", "--json=v0.0.42"],
    ]
    by_name = {node["name"]: node for node in view["nodes"]}
    assert sorted(by_name) == ["compute-0", "compute-1", "compute-2"]
    assert by_name["compute-0"]["alloc_cpus"] == 1 and "MIXED" in by_name["compute-0"]["state"]
    assert "DRAIN" in by_name["compute-2"]["state"]
    assert view["reserved"] == ["compute-1"]
    assert {(job["example"], job["reason"]) for job in view["pending"]} == {
        (4, "JobHeldUser"),
        (7, "BeginTime"),
    }
    assert (view["omitted"], view["time"]) == (0, RECORDED)


def test_jobs_of_one_shape_are_one_record_with_a_count(ctx, machine):
    jobs = json.loads((FIXTURES / "pending-v0.0.42-jobs.json").read_text())
    record = next(job for job in jobs["jobs"] if job["job_id"] == 9)
    jobs["jobs"] = [dict(record, job_id=n) for n in (30, 12, 21)]
    jobs["jobs"].append(dict(record, job_id=40, array_task_string="0-3000000%4"))
    answer(machine, "pending", jobs=json.dumps(jobs))

    view = scaling_view(ctx)

    assert view["pending"] == [
        {
            "partition": "compute",
            "nodes": 2,
            "cpus": 1,
            "memory": record["memory_per_node"]["number"],
            "reason": "Priority",
            "jobs": 4,
            "copies": 3 + 4,
            "example": 12,
        }
    ]


def test_other_partitions_are_left_out(ctx, machine):
    answer(machine, "zero")

    view = scaling_view(ctx, "empty")

    assert all(node["partitions"] == ["empty"] for node in view["nodes"])
    # Jobs 13 and 17 (-N2 each) are one shape.
    shapes = sorted((job["example"], job["nodes"], job["jobs"]) for job in view["pending"])
    assert shapes == [(12, 1, 1), (13, 2, 2)]


@pytest.mark.parametrize(
    "partitions", ["compute;reboot", "", "compute,", "a b", "x" * 65, "compute\nroot"]
)
def test_bad_partitions_fail_and_run_nothing(ctx, machine, partitions):
    with pytest.raises(testing.ActionFailed) as failure:
        scaling_view(ctx, partitions)

    assert failure.value.message.startswith("invalid scaling-view request: ")
    assert machine.ran("scontrol") == []


def test_slurms_refusal_fails_with_slurms_words(ctx, machine):
    answer(machine, "pending")
    machine.fail("scontrol", "show", "jobs", stderr="slurm_load_jobs error: Unable to contact")

    with pytest.raises(testing.ActionFailed) as failure:
        scaling_view(ctx)

    assert failure.value.message == "cannot read Slurm: slurm_load_jobs error: Unable to contact"


V42 = '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, '
"""The start of a v0.0.42 answer, to which each case adds its records."""


@pytest.mark.parametrize(
    ("jobs", "complaint"),
    [
        ("not json", "unexpected scontrol answer"),
        (V42 + '"jobs": [{"job_id": 1, "node_count": 1e400}]}', "unexpected scontrol"),
        (V42 + '"jobs": [{"job_id": 1, "cpus": 99999999999999999999}]}', "unexpected"),
        (V42 + '"jobs": [], "errors": [{"error": "boom"}]}', "scontrol reported errors"),
        (
            V42 + '"jobs": [{"job_id": 1, "job_state": ["PENDING"], "partition": "compute",'
            ' "array_task_string": "0-x"}]}',
            "array task list",
        ),
        (
            V42 + '"jobs": [{"job_id": 1, "job_state": ["PENDING"], "partition": "compute",'
            ' "state_reason": "Resources\\njob 2"}]}',
            "pending reason",
        ),
        ('{"jobs": []}', "data_parser (none named), not the v0.0.42"),
        (
            '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.41"}}, "jobs": []}',
            "in data_parser v0.0.41, not the v0.0.42 this client asked for",
        ),
    ],
)
def test_an_unexpected_answer_fails_the_action(ctx, machine, jobs, complaint):
    answer(machine, "pending", jobs=jobs)

    with pytest.raises(testing.ActionFailed) as failure:
        scaling_view(ctx)

    assert failure.value.message.startswith("cannot read Slurm: ")
    assert complaint in failure.value.message


def test_users_text_never_makes_a_job(ctx, machine):
    """A job name and comment with newlines, `|` and JSON of a job stay in their strings."""
    jobs = json.loads((FIXTURES / "pending-v0.0.42-jobs.json").read_text())
    forged = '{"job_id": 666, "job_state": ["PENDING"], "partition": "compute"}'
    for job in jobs["jobs"]:
        job["name"] = f"x\n666|compute|PENDING\u2028{forged}"
        job["comment"] = forged
    answer(machine, "pending", jobs=json.dumps(jobs))

    view = scaling_view(ctx)

    assert 666 not in {job["example"] for job in view["pending"]}
    assert sum(job["jobs"] for job in view["pending"]) == 4  # Jobs 4, 7, 8, 9.


def test_a_view_too_large_for_one_argument_is_cut_in_parts(ctx, machine):
    nodes = json.loads((FIXTURES / "pending-v0.0.42-nodes.json").read_text())
    idle = nodes["nodes"][1]
    nodes["nodes"] = [dict(idle, name=f"compute-{n}") for n in range(2000)]
    answer(machine, "pending", nodes=json.dumps(nodes))

    ctx.run(ctx.on.action("scaling-view", params={"partitions": "compute"}), running())

    results = ctx.action_results or {}
    assert int(results["parts"]) > 1
    assert all(len(results[f"part-{n}"]) <= 100_000 for n in range(int(results["parts"])))
    text = "".join(results[f"part-{n}"] for n in range(int(results["parts"])))
    assert len(json.loads(text)["nodes"]) == 2000


@pytest.mark.parametrize(
    ("tasks", "throttle", "copies"),
    [
        ("", None, 1),
        ("0-3000000", None, 3000001),
        ("0-3000000", 4, 4),
        ("0-3000000%2", 4, 2),
        ("1-5,7,10-20:2", None, 5 + 1 + 6),
        ("4294967295", None, 1),
    ],
)
def test_array_tasks_are_counted_from_the_bounds(tasks, throttle, copies):
    assert charm.actions.scaling_view.array_copies(tasks, throttle) == copies


@pytest.mark.parametrize("tasks", ["5-1", "0-9:0", "x", "0-9%", "0-9%x", "1,,2", "-1"])
def test_an_array_task_list_slurm_never_prints_is_unreadable(tasks):
    with pytest.raises(charm.actions.scaling_view.SlurmUnreadable):
        charm.actions.scaling_view.array_copies(tasks, None)


@pytest.mark.parametrize(
    ("name", "hostlist", "held"),
    [
        ("compute-1", "compute-1", True),
        ("compute-1", "compute-[0-2,5]", True),
        ("compute-5", "gpu-0,compute-[0-2,5]", True),
        ("compute-3", "compute-[0-2,5]", False),
        ("compute-05", "compute-[00-10]", True),
        ("compute-5", "compute-[00-10]", False),
        ("compute-7", "compute-[0-3000000000]", True),
        ("compute-1x", "compute-[0-9]", False),
    ],
)
def test_reserved_nodes_are_matched_without_expanding_the_host_list(name, hostlist, held):
    assert charm.actions.scaling_view.in_hostlist(name, hostlist) is held


def test_a_26_05_controller_is_read_in_the_newest_version_both_know(ctx, machine):
    """26.05 lists v0.0.42 to v0.0.45 (in its own order): v0.0.45, its recorded answers."""
    recorded = FIXTURES.parent / "recorded" / "26.05"
    machine.responses[("scontrol", "--json=list")] = (
        "data_parser/v0.0.43\ndata_parser/v0.0.42\ndata_parser/v0.0.45\ndata_parser/v0.0.44\n"
    )
    for what in ("nodes", "jobs", "reservations"):
        text = (recorded / f"v0.0.45-{what}.json").read_text()
        machine.responses[("scontrol", "show", what, "--json=v0.0.45")] = text

    view = scaling_view(ctx)

    assert [argv[-1] for argv in machine.ran("scontrol", "show")] == ["--json=v0.0.45"] * 3
    assert [node["name"] for node in view["nodes"]] == ["compute-0"]
    assert {job["example"] for job in view["pending"]} == {2, 3, 4}


def test_a_slurm_offering_only_unknown_versions_fails_naming_them_and_reads_nothing(ctx, machine):
    machine.responses[("scontrol", "--json=list")] = "data_parser/v0.0.46\ndata_parser/v0.0.47\n"

    with pytest.raises(testing.ActionFailed) as failure:
        scaling_view(ctx)

    assert failure.value.message == (
        "cannot read Slurm: scontrol: Slurm offers data_parser v0.0.46, v0.0.47, none of "
        "which this client reads (v0.0.40 to v0.0.45)"
    )
    assert machine.ran("scontrol", "show") == []


def test_a_newer_slurm_is_read_in_the_newest_version_this_charm_knows(ctx, machine):
    answer(machine, "pending")
    machine.responses[("scontrol", "--json=list")] = (
        "data_parser/v0.0.47\ndata_parser/v0.0.46\ndata_parser/v0.0.42\ndata_parser/v0.0.41\n"
    )

    scaling_view(ctx)

    assert [argv[-1] for argv in machine.ran("scontrol", "show")] == ["--json=v0.0.42"] * 3


def test_the_operator_may_name_an_older_version_both_know(ctx, machine):
    machine.responses[("scontrol", "--json=list")] = OFFERED_24_11
    for what in ("nodes", "jobs", "reservations"):
        text = (FIXTURES / f"pending-v0.0.41-{what}.json").read_text()
        machine.responses[("scontrol", "show", what, "--json=v0.0.41")] = text

    view = scaling_view(ctx, **{"data-parser": "v0.0.41"})

    assert [argv[-1] for argv in machine.ran("scontrol", "show")] == ["--json=v0.0.41"] * 3
    assert sum(job["jobs"] for job in view["pending"]) == 4


@pytest.mark.parametrize(
    ("asked", "complaint"),
    [
        (
            "v0.0.45",
            "cannot read Slurm: scontrol: data_parser v0.0.45 is not offered (Slurm offers "
            "v0.0.40, v0.0.41, v0.0.42)",
        ),
        (
            "v0.0.42 --json",
            "invalid scaling-view request: 'v0.0.42 --json' is not a data_parser version "
            "such as v0.0.42",
        ),
    ],
)
def test_a_version_scontrol_lacks_or_that_is_not_one_fails_and_reads_nothing(
    ctx, machine, asked, complaint
):
    answer(machine, "pending")

    with pytest.raises(testing.ActionFailed) as failure:
        scaling_view(ctx, **{"data-parser": asked})

    assert failure.value.message == complaint
    assert machine.ran("scontrol", "show") == []
