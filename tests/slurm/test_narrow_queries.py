"""The slurmctld charm's narrow squeue and sinfo queries against real Slurm 24.11 daemons.

The takeover repair (`takeover.JOBS_QUERY`, `takeover.NODES_QUERY`) and the native metrics'
node releases (`native_metrics.NODES_QUERY`) parse text Slurm prints: these tests run the
charm's exact argv on the session's controller and parse the output with the charm's own
parsers, and read the records the repair decides on (`scontrol show job|node --json`), so a
format letter, a state name or a reason that Slurm spells otherwise fails here.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hpc_libs.slurm.scontrol import Job, Node
from incluster import PARTITION, Cluster, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "charms" / "slurmctld" / "src"))
native_metrics = importlib.import_module("native_metrics")  # The charm's modules, by name.
takeover = importlib.import_module("takeover")

pytestmark = pytest.mark.lab


def query(cluster: Cluster, argv: list[str]) -> str:
    """Run `argv` on the controller with Unix-second times, as the charm runs it."""
    return cluster.sh(cluster.controller, "env", "SLURM_TIME_FORMAT=%s", *argv)


def record(cluster: Cluster, kind: str, name: str) -> dict[str, Any]:
    """`Scontrol().show_job|show_node(name)` on the controller, as a dict."""
    return cluster.py(
        cluster.controller,
        f"""
        from hpc_libs.slurm.scontrol import Scontrol
        shown = Scontrol().show_{kind}(args["name"])
        result = shown.model_dump()
        """,
        name=int(name) if kind == "job" else name,
    )


def submit(cluster: Cluster, *argv: str) -> int:
    out = cluster.sh(cluster.controller, "sbatch", "--parsable", "-p", PARTITION, *argv)
    return int(out.strip().split(";")[0])


def job_line(output: str, job_id: int) -> Any:
    parsed = [takeover.parse_job_line(line) for line in takeover.lines(output)]
    assert None not in parsed, output
    [line] = [j for j in parsed if j is not None and j.job_id == job_id]
    return line


def test_a_requeueable_batch_job_that_exited_1_is_listed_as_the_repair_expects(cluster: Cluster):
    """Exit status 1 is what slurmctld gives a job whose launch its node refused (agent.c)."""
    since = int(time.time()) - 1
    job = submit(cluster, "--requeue", "-w", "compute-0", "--wrap", "exit 1")
    wait_for(
        f"job {job} to fail",
        lambda: cluster.sh(
            cluster.controller, "squeue", "-h", "-t", "all", "-j", str(job), "-o", "%T"
        ),
        lambda out: out.strip() == "FAILED",
    )

    output = query(cluster, takeover.JOBS_QUERY)
    line = job_line(output, job)
    shown = Job.model_validate(record(cluster, "job", str(job)))

    assert (line.state, line.exit_code, line.requeue, line.batch) == ("FAILED", "1:0", True, True)
    assert line.start_time is not None and line.end_time is not None
    assert since <= line.start_time <= line.end_time
    assert job in takeover.job_candidates(output, since)
    assert "FAILED" in shown.job_state
    assert shown.state_reason == takeover.REFUSED_REASON
    assert shown.exit_code.return_code == 1 and not shown.exit_code.signal.id
    assert shown.requeueable
    assert takeover.ended_for_revoked(shown, since)  # Its record is a refused launch's.


def test_a_job_requeued_held_is_a_candidate_its_record_tells_apart(cluster: Cluster):
    """A user's `scontrol requeuehold`: pending, restarted, resubmitted; another description."""
    since = int(time.time()) - 1
    job = submit(cluster, "--requeue", "-w", "compute-1", "--wrap", "sleep 60")
    try:
        wait_for(
            f"job {job} to run",
            lambda: cluster.sh(cluster.controller, "squeue", "-h", "-j", str(job), "-o", "%T"),
            lambda out: out.strip() == "RUNNING",
        )
        cluster.sh(cluster.controller, "scontrol", "requeuehold", str(job))
        wait_for(
            f"job {job} to be pending again",
            lambda: cluster.sh(cluster.controller, "squeue", "-h", "-j", str(job), "-o", "%T"),
            lambda out: out.strip() == "PENDING",
        )
        output = query(cluster, takeover.JOBS_QUERY)
        line = job_line(output, job)
        shown = Job.model_validate(record(cluster, "job", str(job)))
    finally:
        cluster.sh(cluster.controller, "scancel", str(job))

    assert line.state == "PENDING" and line.restarts >= 1
    assert line.submit_time is not None and line.submit_time >= since
    assert job in takeover.job_candidates(output, since)
    assert shown.state_description == "job requeued in held state"
    assert not takeover.held_for_launch(shown, since)


def test_a_drained_node_is_listed_with_its_reasons_time(cluster: Cluster):
    node = "compute-0"
    since = int(time.time()) - 1
    try:
        cluster.sh(
            cluster.controller,
            "scontrol", "update", f"nodename={node}", "state=drain", "reason=Duplicate jobid",
        )  # fmt: skip
        output = query(cluster, takeover.NODES_QUERY)
        shown = Node.model_validate(record(cluster, "node", node))
    finally:
        cluster.sh(cluster.controller, "scontrol", "update", f"nodename={node}", "state=resume")

    parsed = [takeover.parse_node_line(line) for line in takeover.lines(output)]
    assert parsed and None not in parsed, output
    assert takeover.node_candidates(output, since) == [node]
    assert shown.reason == "Duplicate jobid" and shown.reason_set_by_user == "root"
    assert not takeover.drained_by_launch(shown, "slurm", since)  # root typed Slurm's words.


def test_sinfo_gives_every_registered_nodes_release(cluster: Cluster):
    output = cluster.sh(cluster.controller, *native_metrics.NODES_QUERY)
    releases = native_metrics.node_releases(output)

    assert set(releases) == {"compute-0", "compute-1"}, output
    assert all(r is not None and r.startswith("24.11.") for r in releases.values()), output


MEASURE = """
import resource, subprocess, time
started = time.monotonic()
out = subprocess.run(args["argv"], env={"SLURM_TIME_FORMAT": "%s", "PATH": "/usr/bin:/bin"},
                     capture_output=True, check=True).stdout
result = {
    "seconds": round(time.monotonic() - started, 2),
    "bytes": len(out),
    "peak_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
}
"""


@pytest.mark.skipif(
    not os.environ.get("TAKEOVER_QUERY_SIZES"), reason="a measurement: TAKEOVER_QUERY_SIZES=<jobs>"
)
def test_measure_a_look_against_every_job_as_json(cluster: Cluster):
    """What one look costs the client beside what the old look did, with N held jobs queued.

    Prints the seconds, output bytes and peak RSS of each command (run on the controller).
    """
    count = int(os.environ["TAKEOVER_QUERY_SIZES"])
    submit_all = (
        f"for i in $(seq {count}); do sbatch -H -p {PARTITION} -o /dev/null --wrap true"
        " >/dev/null || exit 1; done"
    )
    cluster.sh(cluster.controller, "sh", "-c", submit_all, timeout=3600)
    try:
        looks = {
            "squeue (JOBS_QUERY)": takeover.JOBS_QUERY,
            "sinfo (NODES_QUERY)": takeover.NODES_QUERY,
            "scontrol show jobs --json": ["scontrol", "show", "jobs", "--json"],
            "scontrol show nodes --json": ["scontrol", "show", "nodes", "--json"],
        }
        measured = {
            name: cluster.py(cluster.controller, MEASURE, argv=argv)
            for name, argv in looks.items()
        }
    finally:
        cluster.sh(
            cluster.controller, "scancel", "--state=PENDING", "--partition", PARTITION, timeout=600
        )
    print(f"\n[takeover looks, {count} held jobs] {measured}")
    assert (
        measured["squeue (JOBS_QUERY)"]["bytes"] < measured["scontrol show jobs --json"]["bytes"]
    )
