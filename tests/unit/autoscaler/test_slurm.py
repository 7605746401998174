"""Reading the `scaling-view` action's answer: anything malformed is `SlurmUnreadable`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from autoscaler_recorded import answers, results
from slurm_autoscale.slurm import SlurmUnreadable, parse_view

RECORDED = 1795630780


def one_part(document: Any) -> dict[str, str]:
    return {"parts": "1", "part-0": json.dumps(document)}


def good() -> dict[str, Any]:
    answer = results(answers("pending"), RECORDED)
    return json.loads("".join(answer[f"part-{n}"] for n in range(int(answer["parts"]))))


def test_a_recorded_view_reads_back_to_its_nodes_and_jobs():
    slurm = parse_view(results(answers("pending"), RECORDED))
    assert [node.name for node in slurm.nodes] == ["compute-0", "compute-1"]
    assert sorted(job.job_id for job in slurm.pending) == [4, 7, 8, 9]
    assert slurm.now == RECORDED and slurm.reserved == frozenset()


def changed(path: str, value: Any) -> dict[str, str]:
    """The recorded view's answer with one field changed."""
    document = good()
    *parents, last = path.split(".")
    target: Any = document
    for key in parents:
        target = target[int(key)] if key.isdigit() else target[key]
    target[int(last) if last.isdigit() else last] = value
    return one_part(document)


@pytest.mark.parametrize(
    ("results", "where"),
    [
        ({}, "'parts'"),
        ({"parts": "0"}, "parts '0'"),
        ({"parts": "99"}, "parts '99'"),
        ({"parts": 1, "part-0": "{}"}, "parts '1'"),
        ({"parts": "2", "part-0": "{}"}, "'part-1'"),
        ({"parts": "1", "part-0": "not json"}, "JSONDecodeError"),
        ({"parts": "1", "part-0": "[" * 100000}, "answer"),
        (one_part([]), "answer at"),
        (one_part({"time": 1e400}), "answer at time"),
        (changed("time", 2**64), "answer at time"),
        (changed("time", True), "answer at time"),
        (changed("time", 3.0), "answer at time"),
        (changed("nodes.0.cpus", -1), "answer at nodes.0.cpus"),
        (changed("nodes.0.cpus", "2"), "answer at nodes.0.cpus"),
        (changed("nodes.0.name", "compute-0\ncompute-9"), "answer at nodes.0.name"),
        (changed("nodes.0.state", "IDLE"), "answer at nodes.0.state"),
        (changed("nodes.0.extra", 1), "answer at nodes.0.extra"),
        (changed("pending.0.copies", 0), "answer at pending.0.copies"),
        (changed("pending.0.reason", "Resources|x"), "answer at pending.0.reason"),
        (changed("pending.0.partition", "compute\u2028gpu"), "answer at pending.0.partition"),
        (changed("reserved", "compute-0"), "answer at reserved"),
        (changed("nodes", None), "answer at nodes"),
    ],
)
def test_a_malformed_answer_is_slurm_unreadable(results, where):
    with pytest.raises(SlurmUnreadable) as caught:
        parse_view(results)
    assert "unexpected scaling-view answer" in str(caught.value)
    assert where in str(caught.value)
