"""The slurmd charm's node health check program, run as slurmd runs it, on real Slurm 24.11.

The program (charms/slurmd/src/programs/health_check.py) is installed on both compute
machines as the charm installs it, with settings the charm would write; it runs as root
there, asks slurmctld about the nodes with `scontrol --json` through the node's configless
configuration and key, and drains or resumes its own node. A required mount that is not there
stands for a failing check; settings without it for the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from incluster import COMPUTES, PARTITION, Cluster

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

SOURCE = Path(__file__).resolve().parents[2] / "charms/slurmd/src/programs/health_check.py"
PROGRAM = "/usr/local/sbin/slurmd-charm-health"
SETTINGS = "/etc/default/slurmd-charm-health.json"
STATE = "/run/slurmd-charm-health.json"
MISSING = "/srv/health-test-mount"
RUNS = 100


def configure(cluster: Cluster, node: str, mounts: list[str]) -> None:
    """Write the settings the charm would write for `node`."""
    settings = {
        "node": node,
        "partition": PARTITION,
        "mounts": mounts,
        "free_space": {"/": "1%"},
        "time_sync": False,
        "max_drain": 50,
        "writable": ["/var/log/slurm"],
    }
    cluster.computes[node].write_file(SETTINGS, json.dumps(settings))


def run_program(cluster: Cluster, node: str) -> dict[str, Any]:
    """Run the program on `node`'s machine as slurmd would; return the state it wrote."""
    cluster.sh(cluster.computes[node], PROGRAM)
    return json.loads(cluster.sh(cluster.computes[node], "cat", STATE))


@pytest.fixture
def installed(cluster: Cluster):
    for node, machine in cluster.computes.items():
        machine.push(SOURCE, PROGRAM)
        configure(cluster, node, [])
    yield
    for node, machine in cluster.computes.items():
        machine.exec(["rm", "-f", PROGRAM, SETTINGS, STATE])
        if "DRAIN" in (cluster.node(node) or {}).get("state", []):
            update = ["scontrol", "update", f"nodename={node}", "state=resume"]
            cluster.sh(cluster.controller, *update)
        cluster.wait_for_node_state(node, "IDLE")


def test_a_failing_check_drains_within_the_share_and_only_its_own_drain_is_resumed(
    cluster: Cluster, installed: None
) -> None:
    first, second = sorted(COMPUTES)
    configure(cluster, first, [MISSING])
    configure(cluster, second, [MISSING])

    drained = run_program(cluster, first)
    past_share = run_program(cluster, second)

    reason = f"health: mounts: {MISSING} not mounted"
    node = cluster.wait_for_node_state(first, "DRAIN", without=())
    assert (node["reason"], node["reason_set_by_user"]) == (reason, "root")
    assert drained["report"] == "drained"
    # 50% of a 2-node partition is one node: the second only reports.
    assert past_share["report"] == "not drained: health-max-drain reached"
    assert "DRAIN" not in (cluster.node(second) or {})["state"]

    # An operator drains the second node (as root, on the controller): healthy, it stays.
    configure(cluster, second, [])
    cluster.sh(
        cluster.controller,
        "scontrol", "update", f"nodename={second}", "state=drain", "reason=operator: disk swap",
    )  # fmt: skip
    assert run_program(cluster, second)["report"] == "healthy"
    operator = cluster.node(second) or {}
    assert "DRAIN" in operator["state"]
    assert operator["reason"] == "operator: disk swap"

    # Fixed, the first node is resumed by the program.
    configure(cluster, first, [])
    assert run_program(cluster, first)["report"] == "healthy again"
    cluster.wait_for_node_state(first, "IDLE")


def test_the_programs_run_time_on_a_healthy_node(cluster: Cluster, installed: None) -> None:
    node = sorted(COMPUTES)[0]
    timings = cluster.py(
        cluster.computes[node],
        """
        import subprocess, time
        seconds = []
        for _ in range(args["runs"]):
            started = time.monotonic()
            subprocess.run([args["program"]], check=True)
            seconds.append(time.monotonic() - started)
        result = seconds
        """,
        runs=RUNS,
        program=PROGRAM,
    )
    median, longest = statistics.median(timings), max(timings)
    print(f"\n[health program] {RUNS} runs: median {median:.3f} s, max {longest:.3f} s")
    assert longest < 10, timings
