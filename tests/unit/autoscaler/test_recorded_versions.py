"""Every data_parser version of each supported Slurm, as its real slurmrestd answered on the lab.

recorded/<release>/ holds one queue as slurmrestd gave it in every version it serves (24.11:
v0.0.40 to v0.0.42; 26.05: v0.0.42 to v0.0.45), trimmed and anonymised, and the paths of its
`/openapi/v3` (tests/slurm/test_rest_recordings.py makes the queue, checks it and re-records
with RECORD_REST=1). `scontrol ... --json=<version>` prints the same documents, which is what
the `scaling-view` action reads. The queue: compute-0 (2 CPUs) runs job 1 on both, job 2
waits for them (Resources), job 3 is held, job 4 begins in an hour, and reservation `maint`
holds compute-0 from an hour on.

Slurm 25.11 cannot run here (no Debian suite has it). It serves v0.0.41 to v0.0.44: the
negotiation picks v0.0.44, whose answers are the ones recorded from 26.05 (the same parser
plugin), and v0.0.41 to v0.0.43, recorded from 24.11 or 26.05.
"""

import json
from pathlib import Path
from typing import Any

import pytest
from autoscaler_recorded import load_scaling_view
from hpc_libs.slurm import data_parser
from hpc_libs.slurm.scontrol import Job, Node
from slurm_autoscale.slurm import parse_view

RECORDED = Path(__file__).parent / "recorded"
RELEASES = {
    "24.11": ("v0.0.40", "v0.0.41", "v0.0.42"),
    "26.05": ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"),
}
CASES = [(release, version) for release, versions in RELEASES.items() for version in versions]
NOW = 1795937400
"""Just after the recordings: `maint` has not begun, nor ended."""


def answers(release: str, version: str) -> dict[str, dict[str, Any]]:
    return {
        what: json.loads((RECORDED / release / f"{version}-{what}.json").read_text())
        for what in ("nodes", "jobs", "reservations")
    }


def texts(documents: dict[str, dict[str, Any]]) -> list[str]:
    return [json.dumps(documents[what]) for what in ("nodes", "jobs", "reservations")]


@pytest.mark.parametrize("release", RELEASES)
def test_openapi_offers_these_versions_and_the_newest_is_chosen(release: str) -> None:
    spec = json.loads((RECORDED / release / "openapi-paths.json").read_text())

    offered = data_parser.offered_by_openapi(spec)

    assert offered == list(RELEASES[release])
    assert data_parser.choose(offered) == RELEASES[release][-1]


@pytest.mark.parametrize(("release", "version"), CASES)
def test_each_version_reads_as_the_same_queue_through_the_action_and_the_autoscaler(
    release: str, version: str
) -> None:
    documents = answers(release, version)
    module = load_scaling_view()
    assert {data_parser.answer_version(d) for d in documents.values()} == {version}
    assert documents["nodes"]["meta"]["slurm"]["release"].startswith(release)

    view = module.view(*texts(documents), ["compute"], NOW, version=version)
    snapshot = parse_view(module.as_results(view))

    [node] = snapshot.nodes
    assert (node.name, node.cpus, node.alloc_cpus, node.real_memory) == ("compute-0", 2, 2, 1000)
    assert node.busy and not node.drained
    assert 0 < node.last_busy <= NOW
    assert {
        (job.job_id, job.reason, job.node_count, job.cpus_per_node) for job in snapshot.pending
    } == {
        (2, "Resources", 1, 2),
        (3, "JobHeldUser", 1, 1),
        (4, "BeginTime", 1, 1),
    }
    assert snapshot.reserved == {"compute-0"}


@pytest.mark.parametrize(("release", "version"), CASES)
def test_an_answer_of_one_version_is_refused_when_another_was_asked_for(
    release: str, version: str
) -> None:
    module = load_scaling_view()
    other = next(v for v in data_parser.KNOWN if v != version)

    with pytest.raises(module.SlurmUnreadable) as error:
        module.view(*texts(answers(release, version)), ["compute"], NOW, version=other)

    assert str(error.value) == (
        f"scontrol: the answer is in data_parser {version}, not the {other} this client "
        "asked for and reads"
    )


@pytest.mark.parametrize(("release", "version"), CASES)
def test_hpc_libs_reads_the_nodes_and_jobs_of_each_version(release: str, version: str) -> None:
    documents = answers(release, version)

    [node] = [Node.model_validate(n) for n in documents["nodes"]["nodes"]]
    jobs = {j.job_id: j for j in (Job.model_validate(j) for j in documents["jobs"]["jobs"])}

    assert node.has_state("allocated") and node.partitions == ["compute"]
    assert node.version.startswith(release) and node.cpus == 2
    assert jobs[1].job_state == ["RUNNING"] and jobs[1].nodes == "compute-0"
    assert jobs[1].start_time is not None and jobs[2].start_time is not None
    assert jobs[3].state_reason == "JobHeldUser" and jobs[4].state_reason == "BeginTime"
