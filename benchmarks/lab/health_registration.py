"""`python -m benchmarks.lab.health_registration`: what the health check adds to registration.

Issue 39: slurmd runs `HealthCheckProgram` once when it starts, before it registers, so the
slurmd charm's health check (`/usr/local/sbin/slurmd-charm-health`) delays a node's
registration; by no more than the program's own run time, the issue asks. This measures
slurmd's registration on one lab node with and without `HealthCheckProgram` in slurm.conf, in
turns on the same two machines, `--runs` times each.

The cluster is tests/slurm's, set up the same way (its setup snippets and helpers, through
hpc_libs as the charms do): a controller and one compute machine running the dynamic node
`compute-0` (2 lab machines, a lab of its own, torn down at the end unless `--keep`). The
program is installed as the charm installs it, with settings the charm would write for a
healthy node. Before each run the controller's slurm.conf gets (or loses) slurmctld's charm's
three health keys and `scontrol reconfigure`, until the node is idle again.

One run, inside the compute machine: `systemctl restart slurmd`, then `scontrol show node
compute-0 --json` every `--poll` seconds (the command's own time included) until the node's
`slurmd_start_time` is the new slurmd's and the node is idle with no unhealthy flag, which
it is from slurmctld's registration on. Times are from the restart's call: `restart_s` (that
poll), `logged_s` (slurmctld's millisecond debug2 line of the node's completed registration,
the precise one), `returned_s` (`systemctl restart` returned); `start_s` and `logged_start_s`
are the first two from the new slurmd's `ExecMainStartTimestampMonotonic` (without the old
slurmd's stop). The containers share the host's kernel, so one monotonic and one wall clock.
Each run checks that the slurm.conf slurmd fetched has the program or not, as meant, and that
the program wrote its state file after the restart when set; then it times one run of the
program by hand (`program_s`), the same moment's cost. The host's load average is kept
before each run.

Runs come in pairs, one without and then one with the program. Medians and maxima of both
arms and of the difference within each pair (with less without) go to stdout and `--out`
(`build/health-registration.json`), each run's figures too. A failed run is kept under
`errors` (exit status 1); after three the measurement stops. Needs root; not run by CI.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hpc_libs.slurm.base import HEALTH_CHECK_PROGRAM
from slurm_lab.errors import LabError
from slurm_lab.machines import CHARMS_MOUNT, Lab

from .cluster import load_module

REPO = Path(__file__).resolve().parents[2]
SLURM_TIER = REPO / "tests" / "slurm"
PROGRAM_SOURCE = REPO / "charms" / "slurmd" / "src" / "programs" / "health_check.py"
SETTINGS = "/etc/default/slurmd-charm-health.json"
STATE = "/run/slurmd-charm-health.json"
NODE = "compute-0"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
"""tests/slurm's (incluster.SLURMCTLD_LOG)."""
COMPUTE_MACHINE = "cn-a"
HEALTH_KEYS = {
    "healthcheckprogram": HEALTH_CHECK_PROGRAM,
    "healthcheckinterval": 300,
    "healthchecknodestate": ["any"],
}
"""slurmctld's charm's keys at its defaults (`render.health_settings`)."""

SET_HEALTH_KEYS = """
import subprocess, time
from hpc_libs.slurm.slurmctld import SlurmctldManager
from slurmutils import SlurmConfig

manager = SlurmctldManager()
conf = manager.config.load().dict()
for key in args["keys"]:
    conf.pop(key, None)
if args["on"]:
    conf.update(args["keys"])
written = manager.config.write(SlurmConfig.from_dict(conf))
subprocess.run(["scontrol", "reconfigure"], check=True, capture_output=True)
deadline = time.monotonic() + 60
while subprocess.run(["scontrol", "ping"], capture_output=True).returncode != 0:
    if time.monotonic() > deadline:
        raise SystemExit("slurmctld does not answer after its reconfigure")
    time.sleep(0.2)
# A reconfigure resets the level: the registration line is debug2.
subprocess.run(["scontrol", "setdebug", "debug2"], check=True, capture_output=True)
result = written
"""

ONE_RUN = """
import json, os, subprocess, time

def show():
    argv = ["scontrol", "show", "node", args["node"], "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True)
    nodes = json.loads(proc.stdout).get("nodes", []) if proc.returncode == 0 else []
    return nodes[0] if nodes else None

def registered(node, before):
    return (
        node is not None
        and node["slurmd_start_time"]["number"] != before
        and "IDLE" in node["state"]
        and not set(node["state"]) & set(args["unhealthy"])
    )

before = show()["slurmd_start_time"]["number"]
while time.time() < before + 1.05:  # the new slurmd's start, in whole seconds, must differ
    time.sleep(0.05)
wall = time.time()
called = time.monotonic()
subprocess.run(["systemctl", "restart", "slurmd"], check=True)
returned = time.monotonic()
polls = 0
while True:
    polled = time.monotonic()
    node = show()
    polls += 1
    if registered(node, before):
        break
    if polled - called > 60:
        log = subprocess.run(["journalctl", "-u", "slurmd", "-n", "30"], capture_output=True)
        raise SystemExit(f"not registered after 60 s: {node}\\n{log.stdout.decode()}")
    time.sleep(max(0.0, args["poll"] - (time.monotonic() - polled)))
seen = time.monotonic()
shown = subprocess.run(
    ["systemctl", "show", "slurmd", "-p", "ExecMainStartTimestampMonotonic", "--value"],
    capture_output=True, text=True, check=True,
)
started = int(shown.stdout.strip()) / 1e6
program_ran = os.path.exists(args["state"]) and os.stat(args["state"]).st_mtime >= wall
timed = time.monotonic()
subprocess.run([args["program"]], check=True)
program_s = time.monotonic() - timed
with open("/run/slurm/conf/slurm.conf") as conf:
    program_set = "healthcheckprogram=" in conf.read().lower()
result = {
    "called_wall": wall,
    "returned_s": returned - called,
    "started_s": started - called,
    "restart_s": seen - called,
    "start_s": seen - started,
    "polls": polls,
    "poll_period_s": (seen - called) / polls,
    "program_set": program_set,
    "program_ran": program_ran,
    "program_s": program_s,
}
"""


MAX_ERRORS = 3
"""Failed runs after which the measurement stops."""
REGISTERED_LINE = "_slurm_rpc_node_registration complete for"
"""slurmctld's debug2 line for a node's completed registration (as enlist_compare's)."""

REGISTERED_AFTER = """
from datetime import datetime

result = None
with open(args["log"], errors="replace") as log:
    for line in log:
        if args["line"] + " " + args["node"] + " " not in line or not line.startswith("["):
            continue
        stamp = datetime.fromisoformat(line[1 : line.index("]")]).timestamp()
        if stamp >= args["after"]:
            result = stamp
            break
"""


def load_avg() -> list[float]:
    return [float(field) for field in Path("/proc/loadavg").read_text().split()[:3]]


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "max": max(values), "min": min(values)}


def one_run(
    cluster: Any, with_program: bool, poll: float, unhealthy: tuple[str, ...]
) -> dict[str, Any]:
    """Set slurm.conf's health keys (or not), then time one slurmd restart to its registration."""
    controller, compute = cluster.controller, cluster.computes[NODE]
    cluster.py(controller, SET_HEALTH_KEYS, keys=HEALTH_KEYS, on=with_program)
    cluster.wait_for_node_state(NODE, "IDLE", timeout=60)
    loads = load_avg()
    run = cluster.py(
        compute,
        ONE_RUN,
        node=NODE,
        poll=poll,
        state=STATE,
        program=HEALTH_CHECK_PROGRAM,
        unhealthy=list(unhealthy),
    )
    assert run["program_set"] is with_program, run
    assert run["program_ran"] or not with_program, run
    registered = cluster.py(
        controller,
        REGISTERED_AFTER,
        log=SLURMCTLD_LOG,
        line=REGISTERED_LINE,
        node=NODE,
        after=run["called_wall"],
    )
    if registered is not None:
        run["logged_s"] = registered - run["called_wall"]
        run["logged_start_s"] = run["logged_s"] - run["started_s"]
    run.update(with_program=with_program, load_avg=loads)
    return run


def measure(runs: int, poll: float, keep: bool) -> dict[str, Any]:
    sys.path.insert(0, str(SLURM_TIER))
    incluster = load_module("incluster", SLURM_TIER / "incluster.py")
    tier = load_module("slurm_tier_conftest", SLURM_TIER / "conftest.py")
    lab = Lab(state_dir=Path(tempfile.mkdtemp(prefix="health-registration-lab-")))
    lab.ensure_base()
    document: dict[str, Any] = {"load_avg_start": load_avg(), "runs": [], "errors": []}
    try:
        target = lab.charms_dir / incluster.DEPS_NAME
        incluster.build_hpc_libs_deps(REPO, target)
        controller = lab.create(incluster.CONTROLLER)
        compute = lab.create(COMPUTE_MACHINE)
        cluster = incluster.Cluster(
            controller, {NODE: compute}, deps=f"{CHARMS_MOUNT}/{incluster.DEPS_NAME}"
        )
        setup = cluster.py(
            controller,
            tier.CONTROLLER_SETUP,
            hostname=controller.name,
            address=controller.address,
            partition=incluster.PARTITION,
            log=SLURMCTLD_LOG,
        )
        assert setup["active"], controller.journal("slurmctld", 50)
        cluster.key = setup["key"]
        started = cluster.py(
            compute,
            tier.COMPUTE_SETUP,
            key=cluster.key,
            node=NODE,
            controller=controller.name,
            partition=incluster.PARTITION,
        )
        assert started["active"], compute.journal("slurmd", 50)
        cluster.wait_for_node_state(NODE, "IDLE")
        compute.push(PROGRAM_SOURCE, HEALTH_CHECK_PROGRAM)
        settings = {
            "node": NODE,
            "partition": incluster.PARTITION,
            "mounts": [],
            "free_space": {"/": "1%"},
            "time_sync": False,
            "max_drain": 50,
            "writable": ["/var/log/slurm"],
        }
        compute.write_file(SETTINGS, json.dumps(settings))
        document["slurm"] = setup["version"]
        for index in range(2 * runs):
            with_program = index % 2 == 1
            try:
                run = one_run(cluster, with_program, poll, incluster.UNHEALTHY)
            except (AssertionError, LabError) as e:
                document["errors"].append({"run": index, "error": str(e)[-3000:]})
                print(f"run {index}: {str(e)[-3000:]}", file=sys.stderr, flush=True)
                if len(document["errors"]) >= MAX_ERRORS:
                    break
                continue
            run.update(pair=index // 2)
            document["runs"].append(run)
            print(json.dumps(run), flush=True)
    finally:
        document["load_avg_end"] = load_avg()
        if not keep:
            lab.down()
    return document


def analyse(document: dict[str, Any]) -> dict[str, Any]:
    """Medians and maxima of each arm, and of with less without within each complete pair."""
    runs = document["runs"]
    if not runs:
        return {"pairs": 0}
    pairs: dict[int, dict[bool, dict[str, Any]]] = {}
    for run in runs:
        pairs.setdefault(run["pair"], {})[run["with_program"]] = run
    complete = [pair for pair in pairs.values() if len(pair) == 2]
    figures: dict[str, Any] = {"pairs": len(complete)}
    for measured in ("restart_s", "start_s", "returned_s", "logged_s", "logged_start_s"):
        usable = [pair for pair in complete if all(measured in run for run in pair.values())]
        if not usable:
            continue
        without = [pair[False][measured] for pair in usable]
        with_ = [pair[True][measured] for pair in usable]
        figures[measured] = {
            "without": summary(without),
            "with": summary(with_),
            "difference": summary([a - b for a, b in zip(with_, without, strict=True)]),
            "difference_of_medians": statistics.median(with_) - statistics.median(without),
        }
    program = [run["program_s"] for run in runs]
    figures["program_s"] = summary(program)
    figures["poll_period_s"] = statistics.median(run["poll_period_s"] for run in runs)
    figures["program_ran"] = sum(run["program_ran"] for run in runs if run["with_program"])
    figures["max_load_avg_1m"] = max(run["load_avg"][0] for run in runs)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs with and runs without")
    parser.add_argument("--poll", type=float, default=0.05, help="poll period, seconds")
    parser.add_argument("--out", type=Path, default=REPO / "build" / "health-registration.json")
    parser.add_argument("--keep", action="store_true", help="leave the lab up")
    options = parser.parse_args()
    if os.geteuid() != 0:
        parser.error("the lab needs root")
    began = time.monotonic()
    document = measure(options.runs, options.poll, options.keep)
    document["figures"] = analyse(document)
    document["seconds"] = time.monotonic() - began
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(document, indent=2))
    print(json.dumps(document["figures"], indent=2))
    return 1 if document["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
