"""The benchmark's cluster on the lab, and what it reads from the lab besides `juju`.

Units are reached through their lab machines (`Machine.exec`), so the watcher thread and the
measurements never go through `LabJuju`'s model session while the main thread is in one.
"""

from __future__ import annotations

import calendar
import importlib.util
import logging
import os
import re
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import jubilant
from slurm_lab.juju import LabJuju
from slurm_lab.machines import Lab, Machine

REPO = Path(__file__).resolve().parents[2]
CHARMS = REPO / "charms"
LAB_OPTIONS = {"slurm-package-source": "archive"}
CONTROLLER_OPTIONS = {**LAB_OPTIONS, "process-isolation": "none"}
CONTROLLER = "slurmctld/0"
LOGIN = "login/0"
COMPUTE = "compute"
SETTLE = 20 * 60
HOOK_LINE = re.compile(
    r'^unit-(?P<app>[a-z0-9-]+)-(?P<number>\d+): (?P<stamp>\S+) INFO ran "(?P<hook>[^"]+)" hook '
    r"\((?P<seconds>[0-9.]+)s\)$"
)


BOOT_MESSAGES = ("%s booted in %.1fs", "%s (VM) booted in %.1fs")
"""The lab's boot lines: a container's, a VM's (qemu's start to the guest's systemd up)."""


class BootLog(logging.Handler):
    """Collect the lab's `<machine> booted in <s>s` lines: machine boot time, by name."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.boots: dict[str, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Keep boot times; ignore every other record."""
        if record.msg in BOOT_MESSAGES and isinstance(record.args, tuple):
            name, seconds = record.args
            self.boots[str(name)] = float(seconds)  # pyright: ignore[reportArgumentType]

    def install(self) -> None:
        """Listen to slurm_lab.machines (its INFO lines only reach this handler)."""
        machines_logger = logging.getLogger("slurm_lab.machines")
        machines_logger.setLevel(logging.INFO)
        machines_logger.addHandler(self)


@dataclass
class HookRun:
    """One hook a unit ran, from the unit's log."""

    app: str
    unit: str
    hook: str
    seconds: float
    ended: float
    """Epoch seconds (the log's one-second resolution)."""


@dataclass
class Bench:
    """The lab, its `juju` and what the benchmark needs to reach."""

    lab: Lab
    juju: LabJuju
    boots: BootLog
    notes: list[str] = field(default_factory=list[str])

    def machine(self, unit: str) -> Machine:
        """The lab machine of a unit."""
        return self.lab.get(self.juju.state.units[unit].machine)

    def sh(self, unit_or_machine: str | Machine, script: str, timeout: float = 300) -> str:
        """Run a shell script on a unit's machine (or a machine); its stdout; raise if it fails."""
        machine = (
            self.machine(unit_or_machine) if isinstance(unit_or_machine, str) else unit_or_machine
        )
        result = machine.exec(["bash", "-c", script], timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(
                f"{machine.name}: {script!r} exited {result.returncode}: {result.stderr.strip()}"
            )
        return result.stdout

    def wait_active(
        self, timeout: float = SETTLE, blocked_for: float | None = None
    ) -> jubilant.Status:
        """Wait until every application with units is active (drives the backend meanwhile).

        An application without units has no status to be active (Juju's "unknown"): figure
        11's VM application before its `add_unit` and after its removal. With `blocked_for`,
        a unit still blocked that long after the start is an error.
        """
        started = time.monotonic()

        def active(status: jubilant.Status) -> bool:
            return jubilant.all_active(status, *(n for n, a in status.apps.items() if a.units))

        def error(status: jubilant.Status) -> bool:
            if jubilant.any_error(status):
                return True
            late = blocked_for is not None and time.monotonic() - started > blocked_for
            return late and jubilant.any_blocked(status)

        return self.juju.wait(active, error=error, timeout=timeout, successes=2)

    def active(self) -> bool:
        """Whether every application is active now."""
        return jubilant.all_active(self.juju.status())

    def tick(self) -> None:
        """Drive the backend once (hooks, background hook results), then pause briefly."""
        self.juju.status()
        time.sleep(0.2)

    def hook_runs(self, unit: str | None = None) -> list[HookRun]:
        """Every hook run so far, from the units' logs (actions excluded); with `unit`, that
        unit's only, from its log alone (at 128 units, not every log read for one unit's)."""
        runs: list[HookRun] = []
        log_dir = self.lab.state_dir / "juju" / "logs"
        pattern = f"unit-{unit.replace('/', '-')}.log" if unit else "unit-*.log"
        for path in sorted(log_dir.glob(pattern)):
            for line in path.read_text().splitlines():
                match = HOOK_LINE.match(line)
                if match is None or match["hook"].startswith("action "):
                    continue
                ended = calendar.timegm(time.strptime(match["stamp"], "%Y-%m-%dT%H:%M:%S"))
                runs.append(
                    HookRun(
                        app=match["app"],
                        unit=f"{match['app']}/{match['number']}",
                        hook=match["hook"],
                        seconds=float(match["seconds"]),
                        ended=ended,
                    )
                )
        return runs


def deploy(bench: Bench) -> float:
    """slurmctld, slurmd `compute` (one unit) and sackd `login`, all active; seconds taken."""
    juju = bench.juju
    started = time.monotonic()
    juju.deploy(CHARMS / "slurmctld", "slurmctld", config=CONTROLLER_OPTIONS)
    juju.deploy(CHARMS / "slurmd", COMPUTE, config=LAB_OPTIONS)
    juju.deploy(CHARMS / "sackd", "login", config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmd", f"{COMPUTE}:slurmctld")
    juju.integrate("slurmctld:login-node", "login:slurmctld")
    bench.wait_active()
    return time.monotonic() - started


def slurmd_options(bench: Bench, unit: str) -> dict[str, str]:
    """What the charm starts slurmd with: /etc/default/slurmd's variables."""
    text = bench.sh(unit, "cat /etc/default/slurmd")
    options: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            words = shlex.split(value)
            options[key.strip()] = words[0] if words else ""
    return options


def slurmd_started(machine: Machine) -> float | None:
    """When slurmd last started on a machine (host monotonic seconds; containers share it)."""
    out = machine.exec(
        ["systemctl", "show", "--property=ExecMainStartTimestampMonotonic", "--value", "slurmd"]
    ).stdout.strip()
    return int(out) / 1e6 if out.isdigit() and int(out) > 0 else None


def machine_footprint(machine: Machine, seconds: float = 5.0) -> dict[str, float]:
    """A machine's resident memory (sum over its processes) and CPU use over `seconds`."""
    script = "ps -e --no-headers -o rss=,cputimes= | awk '{r+=$1; c+=$2} END {print r, c}'"
    first = machine.exec(["bash", "-c", script]).stdout.split()
    time.sleep(seconds)
    second = machine.exec(["bash", "-c", script]).stdout.split()
    return {
        "rss_mib": round(int(second[0]) / 1024, 1),
        "cpu_percent_of_one_core": round(100 * (int(second[1]) - int(first[1])) / seconds, 1),
    }


def host_memory_available_mib() -> float:
    """The host's MemAvailable."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def other_lab_machines(lab: Lab) -> int:
    """How many systemd-nspawn machines on this host belong to other labs (a shared host)."""
    ours = f"--directory={lab.state_dir}/".encode()
    others: set[bytes] = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv[0].endswith(b"systemd-nspawn") or any(a.startswith(ours) for a in argv):
            continue
        others.update(a for a in argv if a.startswith(b"--machine="))
    return len(others)


def load_module(name: str, path: Path) -> ModuleType:
    """Import the file `path` (a charm's or a test tier's module, not a package) under `name`,
    once per process."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def summary(values: list[float]) -> dict[str, Any]:
    """Median, max, min and count of a sample (None when empty), rounded."""
    if not values:
        return {"median": None, "max": None, "min": None, "n": 0}
    return {
        "median": round(statistics.median(values), 2),
        "max": round(max(values), 2),
        "min": round(min(values), 2),
        "n": len(values),
    }


def timed(call: Callable[[], object]) -> float:
    """Seconds a call takes."""
    started = time.monotonic()
    call()
    return time.monotonic() - started
