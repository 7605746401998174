"""Issue 23: `slurm-autoscale` on one lab, from 0 units, up to `max` and back to 0.

slurmctld, a login node and a slurmd application `compute` with no unit. The
controller's `future-nodes` keeps 4 FUTURE placeholders of 4 CPUs in the partition, so jobs
pend instead of being refused; the policy's `max` is 3 and the lab's machines have 2 CPUs, so
a 4-node job and a 4-CPU job are accepted by Slurm but can never fit. The tests run in order
on the same cluster:

1. the jobs that can never fit add nothing;
2. a 2-node job pends, one pass adds 2 units and the job runs (submission to running is
   printed, next to `bench-lab`'s enlistment figure);
3. a burst of 20 one-node jobs: a pass after another until the queue is empty, the unit count
   sampled after every pass never exceeds `max`;
4. a node drained by the operator stays while the idle ones are removed, even idle past
   idle-timeout, and goes once resumed: the application is back to 0;
5. no job was cancelled or requeued (MinJobAge keeps ended jobs' records; the lab has no
   accounting), and the empty partition still takes jobs.

The cooldown holds scale-in only (see the policy reference); it is 0 here so removals follow
the idle-timeout alone, and the unit tests check it over recorded responses. That a node is
not removed before idle-timeout is also checked there (a pass's time on a loaded host would
make it a race here).

The program runs in this process (`slurm_autoscale.cli.run`, the console script's code) on
the test's model, the lab's documented way (autoscaler/README.md): it reads Slurm through
slurmctld's read-only `scaling-view` action (issue 33: no token, no slurmrestd). A hostile
job name (a newline, `|`, JSON of a forged job) pends through the whole module and never shows
in a decision.
"""

from __future__ import annotations

import json
import logging
import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
import pytest
from deploy_helpers import deploy_slurm
from dynamic_nodes_helpers import job_state, node_states, nodes, poll, sh, try_sh
from hpc_libs.slurm.naming import node_name
from slurm_autoscale import cli
from slurm_autoscale.slurm import parse_view

RELEASES = ("trixie", "forky")
"""The autoscaler reads the REST API in the version each release serves: 24.11 and 26.05."""

APP = "compute"
LOGIN = "login/0"
IDLE_TIMEOUT = 20
MAX = 3
NODE_CPUS = 2
"""CPUs of a lab machine (slurmd -C)."""
PLACEHOLDERS = MAX + 1
OPERATOR_REASON = "operator: disk check"
POLICY = f"""
[{APP}]
min = 0
max = {MAX}
idle-timeout = {IDLE_TIMEOUT}
step = 3
cooldown = 0
cpus = {NODE_CPUS}
memory = 1
"""

Autoscale = Callable[[], int]


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    deploy_slurm(juju, charm_path, computes=((APP, 0),))
    placeholders = f"{APP}={PLACEHOLDERS} cpus={2 * NODE_CPUS} realmemory=1"
    juju.config(
        "slurmctld",
        {"future-nodes": placeholders, "slurm-conf-parameters": "MinJobAge=3600"},
    )
    juju.wait(lambda s: jubilant.all_active(s, "slurmctld", "login"), timeout=900)
    return juju


@pytest.fixture(scope="module")
def autoscale(cluster: jubilant.Juju, tmp_path_factory: pytest.TempPathFactory) -> Autoscale:
    """One `slurm-autoscale --once` pass; the state file is kept across the module."""
    folder = tmp_path_factory.mktemp("autoscale")
    policy = folder / "policy.toml"
    policy.write_text(POLICY)
    argv = ["--policy", str(policy), "--once", "--state-file", str(folder / "state.json")]
    return lambda: cli.run(argv, juju=cluster)


@pytest.fixture(scope="module")
def served() -> list[str]:
    """The jobs the autoscaler served, checked at the end."""
    return []


@pytest.fixture(autouse=True)
def decisions(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="slurm-autoscale")
    return caplog


def units(juju: jubilant.Juju) -> list[str]:
    return sorted(juju.status().apps[APP].units)


def all_jobs(juju: jubilant.Juju) -> list[dict[str, Any]]:
    """Every job slurmctld knows, ended ones included (for MinJobAge)."""
    return json.loads(sh(juju, "scontrol show jobs --json"))["jobs"]


def submit(juju: jubilant.Juju, options: str, command: str = "true") -> str:
    out = sh(
        juju, f"sbatch --parsable -p {APP} {options} -o /dev/null --wrap '{command}'", unit=LOGIN
    )
    return out.strip().split(";")[0]


def test_the_view_is_read_only_and_keeps_users_text_out(cluster: jubilant.Juju):
    """The action returns no token; a job named like a forged record is one job of its shape."""
    forged = '\n4242|compute|PENDING\u2028{"job_id": 4242, "job_state": ["PENDING"]}'
    held = submit(cluster, f"-H -N1 -J {shlex.quote('x' + forged)}")
    results = cluster.run("slurmctld/leader", "scaling-view", {"partitions": APP}).results
    assert "token" not in json.dumps(results).lower()
    slurm = parse_view(results)
    assert [(job.job_id, job.reason, job.jobs) for job in slurm.pending] == [
        (int(held), "JobHeldUser", 1)
    ]
    sh(cluster, f"scancel {held}", unit=LOGIN)


def test_a_job_that_can_never_fit_adds_nothing(
    cluster: jubilant.Juju, autoscale: Autoscale, decisions: pytest.LogCaptureFixture
):
    assert units(cluster) == []
    refused = try_sh(cluster, f"sbatch -p {APP} -N{PLACEHOLDERS + 1} --wrap true", unit=LOGIN)
    assert refused is None  # More nodes than placeholders: refused at submission.
    too_wide = submit(cluster, f"-N{MAX + 1}")
    too_fat = submit(cluster, f"-N1 -c{2 * NODE_CPUS}")
    assert job_state(cluster, too_wide) == job_state(cluster, too_fat) == "PENDING"

    assert autoscale() == 0

    never = f"2 can never fit (job {too_wide}, {too_fat})"
    assert f"{APP}: no change, 0 pending jobs need 0 nodes, 0 idle, 0 enlisting; {never}" in (
        decisions.text
    )
    assert units(cluster) == []
    # The test's own jobs: left pending, they would head the queue and hold the others until
    # the backfill scheduler's next cycle.
    sh(cluster, f"scancel {too_wide} {too_fat}", unit=LOGIN)


def test_scale_from_zero_runs_a_two_node_job(
    cluster: jubilant.Juju,
    autoscale: Autoscale,
    served: list[str],
    decisions: pytest.LogCaptureFixture,
):
    submitted = time.monotonic()
    job_id = submit(cluster, "-N2", "sleep 5")
    served.append(job_id)
    assert job_state(cluster, job_id) == "PENDING"

    assert autoscale() == 0

    pass_done = time.monotonic()
    assert f"{APP}: +2, 1 pending jobs need 2 nodes, 0 idle, 0 enlisting" in decisions.text
    assert units(cluster) == [f"{APP}/0", f"{APP}/1"]
    poll(
        lambda: job_state(cluster, job_id) in ("RUNNING", "COMPLETED"),
        timeout=120,
        interval=1,
        what=f"job {job_id} running",
    )
    running = time.monotonic()
    print(
        f"\nsubmission to running: {running - submitted:.1f} s: the pass, adding 2 units, "
        f"{pass_done - submitted:.1f} s; then to running {running - pass_done:.1f} s"
    )
    # Each new node was updated once registered (its Comment: its unit), which ran Slurm's
    # main scheduler: its own registration does not, and the job would wait for backfill.
    for unit in units(cluster):
        shown = sh(cluster, f"scontrol show node {node_name(unit)} --oneliner")
        assert f"Comment={unit}" in shown.split(), shown
    poll(lambda: job_state(cluster, job_id) == "COMPLETED", timeout=60, what="job completed")


def test_a_burst_of_20_jobs_never_takes_it_past_max(
    cluster: jubilant.Juju, autoscale: Autoscale, served: list[str]
):
    one = f"sbatch --parsable -p {APP} -N1 -o /dev/null --wrap 'sleep 1'"
    out = sh(cluster, f"for i in $(seq 20); do {one}; done", unit=LOGIN)
    burst = [line.split(";")[0] for line in out.split()]
    assert len(burst) == 20
    served.extend(burst)
    counts: list[int] = []
    deadline = time.monotonic() + 300
    while sh(cluster, f"squeue --noheader --partition={APP} --format=%i").strip():
        assert time.monotonic() < deadline, f"burst not done in 300 s; units per pass {counts}"
        assert autoscale() == 0
        counts.append(len(units(cluster)))
        assert counts[-1] <= MAX, f"past max {MAX}: units per pass {counts}"
    print(f"\nunits after each pass of the burst: {counts}")
    assert MAX in counts  # The burst asked for 20 nodes: the guard was what held it.


def test_a_node_drained_by_the_operator_is_not_removed(
    cluster: jubilant.Juju, autoscale: Autoscale, decisions: pytest.LogCaptureFixture
):
    present = units(cluster)
    assert len(present) == MAX
    drained = present[1]
    drained_node = node_name(drained)
    sh(cluster, f"scontrol update nodename={drained_node} state=drain reason='{OPERATOR_REASON}'")

    def others_removed() -> bool:
        assert autoscale() == 0
        left = units(cluster)
        assert drained in left, f"{drained} (drained by the operator) removed"
        return left == [drained]

    removal = time.monotonic()
    poll(others_removed, timeout=IDLE_TIMEOUT + 300, interval=3, what="the idle units removed")
    print(f"\nscale in to 1 (the drained unit): {time.monotonic() - removal:.1f} s")
    record = nodes(cluster)[drained_node]
    last_busy = record["last_busy"]
    idle_for = time.time() - (last_busy["number"] if isinstance(last_busy, dict) else last_busy)
    assert idle_for >= IDLE_TIMEOUT and {"IDLE", "DRAIN"} <= node_states(record)
    decisions.clear()
    assert autoscale() == 0
    assert f"{APP}: no change" in decisions.text
    assert units(cluster) == [drained]

    sh(cluster, f"scontrol update nodename={drained_node} state=resume")

    def resumed_and_removed() -> bool:
        assert autoscale() == 0
        return f"{APP}: -1 ({drained})" in decisions.text

    poll(
        resumed_and_removed,
        timeout=IDLE_TIMEOUT + 120,
        interval=3,
        what="the resumed unit removed",
    )
    poll(lambda: units(cluster) == [], timeout=300, what=f"{APP} back to 0 units")


def test_no_job_was_cancelled_or_requeued(cluster: jubilant.Juju, served: list[str]):
    assert len(served) == 21
    known = {str(record["job_id"]): record for record in all_jobs(cluster)}
    ended = {
        job_id: (known[job_id]["job_state"], known[job_id]["restart_cnt"]) for job_id in served
    }
    assert ended == dict.fromkeys(served, (["COMPLETED"], 0))
    # The partition is still there and takes jobs with 0 units.
    assert job_state(cluster, submit(cluster, "-N1")) == "PENDING"
