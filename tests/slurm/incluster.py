"""Run hpc_libs inside lab machines, as the charms would, and bring the results back.

A snippet runs as `python3 -c` in a machine with the hpc_libs dependency dir on PYTHONPATH.
It reads its parameters from `args` and leaves what the test checks in `result`, which
comes back to the host as JSON. `error_fields(e)` turns an `hpc_libs` error into a dict, so
a test can assert on the type, the command and the stderr that Slurm printed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from slurm_lab.machines import CHARMS_MOUNT, Machine

CONTROLLER = "ctl"
#: Dynamic node name (-N) -> machine (host) name: deliberately different, as under Juju.
COMPUTES = {"compute-0": "cn-a", "compute-1": "cn-b"}
LOGIN = "login"
PARTITION = "compute"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
DEPS_NAME = "_hpc_libs_tests"
MACHINE_PYTHON = "3.13"
MACHINE_PLATFORM = "x86_64-manylinux_2_28"
RESULT_MARKER = "@@hpc-libs-result@@"

_PRELUDE = """\
import json, os
args = json.loads(os.environ["HPC_TEST_ARGS"])
result = None

def error_fields(e):
    return {
        "type": type(e).__name__,
        "message": e.message,
        "command": e.command,
        "stderr": e.stderr,
        "returncode": e.returncode,
    }
"""
_EPILOGUE = f"""
print({RESULT_MARKER!r} + json.dumps(result, default=str))
"""

#: Node state flags of a node that cannot take jobs.
UNHEALTHY = ("DOWN", "DRAIN", "NOT_RESPONDING", "FAIL", "INVALID_REG")

T = TypeVar("T")


def build_hpc_libs_deps(repo: Path, target: Path, source: Path | None = None) -> None:
    """Install hpc_libs and its locked dependencies for the machines' Python into target.

    hpc_libs itself is copied from the working tree (or from `source`, a mutated copy that
    shows a test can fail) rather than built, so the machines run exactly the source under
    test (a cached wheel of an unchanged pyproject would be stale).
    """
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    requirements = target.parent / f"{target.name}-requirements.txt"
    export = subprocess.run(
        [
            "uv",
            "export",
            "--package",
            "hpc-libs",
            "--no-dev",
            "--no-hashes",
            "--frozen",
            "--no-emit-workspace",
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    requirements.write_text(export.stdout)
    subprocess.run(
        [
            "uv",
            "pip",
            "install",
            "--target",
            str(target),
            "--python-version",
            MACHINE_PYTHON,
            "--python-platform",
            MACHINE_PLATFORM,
            "-r",
            str(requirements),
        ],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    requirements.unlink()
    shutil.copytree(
        source or repo / "libs/hpc_libs/src/hpc_libs",
        target / "hpc_libs",
        ignore=shutil.ignore_patterns("__pycache__"),
    )


def run_python(machine: Machine, code: str, deps: str, **args: Any) -> Any:
    """Run a snippet in machine; return its `result`, or fail the test with its stderr."""
    program = _PRELUDE + textwrap.dedent(code) + _EPILOGUE
    proc = machine.exec(
        ["python3", "-c", program],
        env={"PYTHONPATH": deps, "HPC_TEST_ARGS": json.dumps(args)},
        timeout=120,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if proc.returncode != 0 or not lines:
        raise AssertionError(
            f"snippet failed in {machine.name} (exit {proc.returncode}):\n"
            f"{textwrap.dedent(code)}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return json.loads(lines[-1].removeprefix(RESULT_MARKER))


def wait_for(
    what: str, probe: Callable[[], T], done: Callable[[T], bool], timeout: float = 30
) -> T:
    """Call probe until done(value) holds; return that value or fail with the last one."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {value}")
        time.sleep(0.5)


@dataclass
class Cluster:
    """One controller and compute machines, each compute running the named dynamic node."""

    controller: Machine
    computes: dict[str, Machine]
    deps: str = f"{CHARMS_MOUNT}/{DEPS_NAME}"
    key: str = ""
    timings: dict[str, float] = field(default_factory=dict[str, float])

    def py(self, machine: Machine, code: str, **args: Any) -> Any:
        """Run a snippet in machine (see `run_python`)."""
        return run_python(machine, code, self.deps, **args)

    def sh(self, machine: Machine, *argv: str, timeout: float = 60) -> str:
        """Run a command in machine; return its stdout, failing the test on a non-zero exit."""
        proc = machine.exec(list(argv), timeout=timeout)
        assert proc.returncode == 0, (
            f"{machine.name}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr}"
        )
        return proc.stdout

    def node(self, name: str) -> dict[str, Any] | None:
        """`Scontrol().show_node(name)` run on the controller, as a dict (None if unknown)."""
        return self.py(
            self.controller,
            """
            from hpc_libs.slurm.scontrol import Scontrol
            node = Scontrol().show_node(args["name"])
            result = None if node is None else node.model_dump()
            """,
            name=name,
        )

    def partition(self, name: str) -> dict[str, Any] | None:
        """`scontrol show partition <name> --json` on the controller (None if unknown)."""
        argv = ["scontrol", "show", "partition", name, "--json"]
        shown = json.loads(self.controller.exec(argv, timeout=60).stdout or "{}")
        return next((p for p in shown.get("partitions", []) if p["name"] == name), None)

    def wait_for_node_state(
        self, name: str, state: str, without: tuple[str, ...] = UNHEALTHY, timeout: float = 30
    ) -> dict[str, Any]:
        """Wait until node `name` has state flag `state` and none of `without`."""
        node = wait_for(
            f"node {name} to be {state} and none of {without}",
            lambda: self.node(name),
            lambda node: (
                node is not None
                and state in node["state"]
                and not set(without) & set(node["state"])
            ),
            timeout,
        )
        assert node is not None
        return node
