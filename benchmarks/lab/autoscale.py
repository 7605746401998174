"""Issue 23's figures: `slurm-autoscale`'s scale-from-zero latency and its cost per pass.

Set-up: a slurmd application `burst` with no unit whose partition holds 2 FUTURE
placeholders (slurmctld's `future-nodes`). The program runs in this process, as the console
script would (`slurm_autoscale.cli`), on the benchmark's model; it reads Slurm through
slurmctld's read-only `scaling-view` action (issue 33: no token, no slurmrestd).

* Cost per pass, at the exporter figure's size (`--exporter-nodes` nodes, `--exporter-jobs`
  held jobs: 64 and 10,000 by default, topped up here the way figure 8 sizes its cluster):
  per pass `juju status`, the `scaling-view` action (the controller's three
  `scontrol show ... --json`, grouped by shape; its result's size and slurmctld's CPU
  seconds), and the program's own work on the result (`parse_view`, `decide` for both
  applications; process CPU seconds). `benchmarks/test_bench_autoscale.py` times the
  action's reading and the program's work over 10,000 jobs that all count.
* Scale from zero, before the cluster is sized (an empty queue: cancelled jobs would stay
  in scontrol's answer for MinJobAge): a 2-node job submitted from the login node to
  `burst`, then one pass (`--once`); submission to the job running (watched from a thread:
  `_watch_job`), and to the pass's end (with `juju add-unit`). The table puts it beside
  figure 1's enlistment of one unit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shlex
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import jubilant
from slurm_autoscale import cli
from slurm_autoscale.decide import decide
from slurm_autoscale.policy import parse
from slurm_autoscale.slurm import ACTION, ACTION_WAIT, SlurmUnreadable, parse_view
from slurm_lab.machines import Machine

from .cluster import CHARMS, COMPUTE, CONTROLLER, LAB_OPTIONS, LOGIN, SETTLE, Bench, load_module
from .exporter import size_cluster, slurmctld_cpu_seconds

APP = "burst"
JOB_NODES = 2
POLICY = f"""
[{APP}]
min = 0
max = {JOB_NODES}
step = {JOB_NODES}
cooldown = 0

[{COMPUTE}]
min = 0
max = 128
step = 8
"""


def deploy_autoscaled(bench: Bench, jobs: int) -> float:
    """`burst` with 0 units and its FUTURE placeholders; seconds taken.

    MaxJobCount is raised above `jobs` in the same change (as figure 8 does).
    """
    juju = bench.juju
    started = time.monotonic()
    if APP in juju.status().apps:
        return 0.0  # Deployed by the other figure of this module.
    juju.deploy(CHARMS / "slurmd", APP, num_units=0, config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmd", f"{APP}:slurmctld")
    options = {
        "future-nodes": f"{APP}={JOB_NODES}",
        "slurm-conf-parameters": f"MaxJobCount={max(10000, 2 * jobs)}\n",
    }
    juju.config("slurmctld", options)
    juju.wait(
        lambda status: jubilant.all_active(status, "slurmctld", "login"),
        error=jubilant.any_error,
        timeout=SETTLE,
        successes=2,
    )
    _partition_shown(bench)
    return time.monotonic() - started


def _partition_shown(bench: Bench, timeout: float = 120) -> None:
    """Wait until slurmctld shows the partition (it restarts for the placeholders)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            bench.sh(CONTROLLER, f"scontrol show partition {APP} --oneliner")
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(2)


def _argv(folder: Path) -> list[str]:
    """The command line of a pass with the policy (written in `folder`)."""
    policy = folder / "policy.toml"
    policy.write_text(POLICY)
    return ["--policy", str(policy), "--state-file", str(folder / "state.json")]


def _one_pass_cost(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    """One pass, each part timed; the program's own work timed over the same result."""
    juju = bench.juju
    started = time.monotonic()
    status = juju.status()
    read_model = time.monotonic()
    policies = parse(args.policy.read_text())
    leader = next(n for n, u in status.apps[args.controller_app].units.items() if u.leader)
    cpu_before = slurmctld_cpu_seconds(bench)
    params = {"partitions": ",".join(sorted(policies))}
    try:
        results = juju.run(leader, ACTION, params, wait=ACTION_WAIT).results
    except jubilant.TaskError as e:
        raise SlurmUnreadable(f"{ACTION} failed: {e.task.message}") from e
    cpu_after = slurmctld_cpu_seconds(bench)
    read_slurm = time.monotonic()
    units = {app: sorted(status.apps[app].units) for app in policies}
    wall = dt.datetime.now(dt.UTC)

    def own_work() -> tuple[int, int]:
        slurm = parse_view(results)
        for app, rule in policies.items():
            decide(app, rule, units[app], slurm, now=wall)
        return len(slurm.nodes), sum(job.jobs for job in slurm.pending)

    cpu_started = time.process_time()
    nodes, pending = own_work()
    own_cpu = time.process_time() - cpu_started
    return {
        "juju_status_s": round(read_model - started, 3),
        "view_action_s": round(read_slurm - read_model, 3),
        "slurmctld_cpu_s": round(cpu_after - cpu_before, 3),
        "own_cpu_s": round(own_cpu, 3),
        "pass_s": round(read_slurm - started + own_cpu, 3),
        "result_bytes": sum(len(str(value)) for value in results.values()),
        "nodes": nodes,
        "pending_jobs": pending,
    }


def pass_cost(bench: Bench, nodes: int, jobs: int, runs: int) -> dict[str, Any]:
    """`runs` read-only passes at `nodes` nodes and `jobs` pending jobs; medians and sizes.

    The cluster is topped up to that size first (figure 8's way; the reconfigure for the
    placeholders drops the nodes figure 8 created, not its queued jobs).
    """
    queued = int(bench.sh(CONTROLLER, "squeue -h -t pending -o %i | wc -l").strip())
    size_cluster(bench, nodes, max(0, jobs - queued), prefix="scale")
    with tempfile.TemporaryDirectory() as folder:
        args = cli.parse_args([*_argv(Path(folder)), "--dry-run"])
        passes, failures = [], []
        for _ in range(runs):
            try:
                passes.append(_one_pass_cost(bench, args))
            except SlurmUnreadable as e:  # Recorded: e.g. a GET longer than the timeout.
                failures.append(str(e).splitlines()[0])
    if not passes:
        raise RuntimeError(f"every pass failed: {failures}")
    keys = ("juju_status_s", "view_action_s", "slurmctld_cpu_s", "own_cpu_s")
    medians = {
        f"{key}_median": round(statistics.median(p[key] for p in passes), 3) for key in keys
    }
    return {
        "runs": runs,
        "failed_passes": failures,
        "nodes": passes[-1]["nodes"],
        "pending_jobs": passes[-1]["pending_jobs"],
        "pass_s_median": round(statistics.median(p["pass_s"] for p in passes), 3),
        "unchanged_pass_s_median": round(statistics.median(p["pass_s"] for p in passes[1:]), 3)
        if len(passes) > 1
        else None,
        **medians,
        "result_bytes": passes[-1]["result_bytes"],
        "transport": "slurmctld's scaling-view action (juju run on its leader)",
        "comparators_s_median": comparators(bench, runs),
    }


COMPARATORS: dict[str, str | None] = {
    "floor_squeue": "squeue -h -t PD -o '%D %P %r'",
    "action_squeue": None,
    "json_jobs": "scontrol show jobs --json",
}
"""Commands timed on the controller beside the passes (issue 41): the issue's floor, the
action's own query of the pending jobs (None: the charm's QUEUE_ARGV), and scontrol's JSON of
the jobs that the action read before (and still reads when a reason is a description)."""


def _queue_argv() -> list[str]:
    """The squeue command of the slurmctld charm's `scaling-view` action."""
    path = CHARMS / "slurmctld" / "src" / "scaling_view.py"
    module = load_module("bench_lab_scaling_view", path)
    return list(module.QUEUE_ARGV)


def comparators(bench: Bench, runs: int) -> dict[str, float]:
    """Median seconds of each COMPARATORS command inside the controller's machine, and of
    `juju run` of an action that reads no Slurm (`list-backups`): a pass's floor through Juju."""
    medians: dict[str, float] = {}
    for name, given in COMPARATORS.items():
        command = given or shlex.join(_queue_argv())
        script = f"s=$(date +%s.%N); {command} >/dev/null; e=$(date +%s.%N); echo $s $e"
        times = []
        for _ in range(runs):
            start, end = bench.sh(CONTROLLER, script, timeout=600).split()
            times.append(float(end) - float(start))
        medians[name] = round(statistics.median(times), 3)
    leader = next(n for n, u in bench.juju.status().apps["slurmctld"].units.items() if u.leader)
    times = []
    for _ in range(runs):
        started = time.monotonic()
        bench.juju.run(leader, "list-backups", wait=ACTION_WAIT)
        times.append(time.monotonic() - started)
    medians["juju_run_no_slurm"] = round(statistics.median(times), 3)
    return medians


JOB_POLL_S = 0.2
"""How often scale from zero looks at its job's state."""


def _watch_job(machine: Machine, job_id: str, stop: threading.Event, running: list[float]) -> None:
    """Poll the job on the controller's machine until it runs; its first RUNNING time.

    Through `Machine.exec`, not `LabJuju`: the lab's `add_unit` holds the model until every
    hook it caused has run, where `juju add-unit` returns at once, and the job may run long
    before that.
    """
    while not stop.is_set():
        result = machine.exec(["bash", "-c", f"squeue -h -j {job_id} -o %T || true"], timeout=30)
        if result.stdout.strip() == "RUNNING":
            running.append(time.monotonic())
            return
        stop.wait(JOB_POLL_S)


def scale_from_zero(bench: Bench) -> dict[str, Any]:
    """A 2-node job into the empty `burst` partition, one pass, until the job runs."""
    script = f"sbatch --parsable -p {APP} -N{JOB_NODES} -o /dev/null --wrap 'sleep 30'"
    controller = bench.machine(CONTROLLER)
    submitted = time.monotonic()
    job_id = bench.sh(LOGIN, script).strip().split(";")[0]
    stop, seen = threading.Event(), list[float]()
    watcher = threading.Thread(target=_watch_job, args=(controller, job_id, stop, seen))
    watcher.start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            code = cli.run([*_argv(Path(folder)), "--once"], juju=bench.juju)
        pass_done = time.monotonic()
        if code != 0:
            raise RuntimeError(f"the autoscaler's pass exited {code}")
        added = len(bench.juju.status().apps[APP].units)
        deadline = time.monotonic() + SETTLE
        while not seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} not running after {SETTLE} s")
            bench.tick()  # The lab runs the new units' hooks while its model is read.
            time.sleep(JOB_POLL_S)
    finally:
        stop.set()
        watcher.join()
    running = seen[0]
    return {
        "job_nodes": JOB_NODES,
        "units_added": added,
        "submit_to_running_s": round(running - submitted, 1),
        "pass_s": round(pass_done - submitted, 1),
        "pass_to_running_s": round(running - pass_done, 1),
    }


def from_zero_figure(bench: Bench, jobs: int) -> dict[str, Any]:
    """Figure 9: deploy (once), then scale from zero on an empty queue."""
    logging.getLogger("slurm-autoscale").setLevel(logging.INFO)
    deployed = deploy_autoscaled(bench, jobs)
    return {"deploy_s": round(deployed, 1), **scale_from_zero(bench)}


def pass_cost_figure(bench: Bench, nodes: int, jobs: int, runs: int) -> dict[str, Any]:
    """Figure 9b: deploy (once), size, measure the passes; the held jobs are cancelled."""
    deployed = deploy_autoscaled(bench, jobs)
    try:
        return {"deploy_s": round(deployed, 1), **pass_cost(bench, nodes, jobs, runs)}
    finally:
        bench.sh(CONTROLLER, "scancel --state=PENDING --user=root", timeout=600)
