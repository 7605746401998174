"""The node health check this unit's node runs (see programs/health_check.py).

slurmctld's charm names `HEALTH_CHECK_PROGRAM` in slurm.conf (`HealthCheckProgram`, with its
`health-check-interval` and `health-check-node-state` options); this charm installs the
program shipped with it there, root-owned (slurmd runs it as root), and the settings it reads
beside it: the node's name, its partition and this charm's `health-*` options, validated by
the config model (paths and numbers, never a command). The program writes what it found to a
root-owned file this charm reads for the unit's status (`unhealthy: <check>`).
"""

import json
from pathlib import Path

from config import SlurmdConfig, free_space_minimums
from hpc_libs.machine import files
from hpc_libs.slurm.base import HEALTH_CHECK_PROGRAM

SOURCE = Path(__file__).parent / "programs/health_check.py"
SETTINGS = "etc/default/slurmd-charm-health.json"  # under the machine's root
STATE = "run/slurmd-charm-health.json"  # written by the program, as root
WRITABLE = ("/var/lib/slurm/slurmd", "/var/log/slurm")
"""slurmd's spool directory (the Ubuntu package's SlurmdSpoolDir) and log directory."""


def settings(config: SlurmdConfig, node_name: str, partition: str) -> dict[str, object]:
    """Return what the program reads: the node, its partition and the checks' parameters."""
    return {
        "node": node_name,
        "partition": partition,
        "mounts": [p.rstrip("/") or "/" for p in config.health_mounts.split()],
        "free_space": free_space_minimums(config.health_free_space),
        "time_sync": config.health_time_sync,
        "max_drain": config.health_max_drain,
        "writable": list(WRITABLE),
    }


def install(root: Path, config: SlurmdConfig, node_name: str, partition: str) -> bool:
    """Install the program and its settings; return whether either changed."""
    program = files.write_if_changed(
        root / HEALTH_CHECK_PROGRAM.lstrip("/"), SOURCE.read_bytes(), mode=0o755
    )
    text = json.dumps(settings(config, node_name, partition), indent=1, sort_keys=True) + "\n"
    written = files.write_if_changed(root / SETTINGS, text, mode=0o644)
    return program or written


def unhealthy_message(root: Path) -> str | None:
    """Return `unhealthy: <check>: <what it saw>` from the program's last run; None if healthy.

    A node failing a check beyond `health-max-drain` says so: it was not drained.
    """
    try:
        state = json.loads(files.read_bytes(root / STATE) or b"{}")
        problem = state["problems"][0]
        message = f"unhealthy: {problem['check']}: {problem['seen']}"
        report = str(state.get("report", ""))
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return f"{message} ({report})" if report.startswith("not drained") else message
