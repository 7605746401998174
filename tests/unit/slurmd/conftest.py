"""Load the slurmd charm's modules; fake its machine, with its files under tmp_path."""

# ruff: noqa: E402 (the charm's src goes first on sys.path before its modules are imported)

from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import FakeMachine, FakeProcesses, charm_context, use_charm
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm.slurmd import SlurmdManager
from ops import testing

use_charm("slurmd")
import charm
import departure
import node
from test_charm_slurmd import (
    REGISTERED,
    SHOW_NODE,
    auth_secret,
    controller_relation,
    installed,
)

HARDWARE = (
    "NodeName=host0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=1000\nUpTime=0-01:00:00\n"
)


class FakeTime:
    """A clock that moves only when slept on: `sleeps` records each sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: list[Callable[[int], None]] = []
        """Called with the number of sleeps so far, after each sleep (to change the machine)."""

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        """The wall clock: the monotonic one from a fixed epoch (2026-11-18)."""
        return 1_795_000_000 + self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for callback in self.on_sleep:
            callback(len(self.sleeps))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """The time the departure and the registration wait see; sleeping takes no time."""
    fake = FakeTime()
    monkeypatch.setattr(departure, "time", fake)
    monkeypatch.setattr(node, "time", fake)
    return fake


@pytest.fixture
def processes(tmp_path: Path) -> FakeProcesses:
    """No process runs until a test starts one."""
    return FakeProcesses(tmp_path)


@pytest.fixture
def machine(
    machine: FakeMachine,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    clock: FakeTime,
    processes: FakeProcesses,
) -> FakeMachine:
    """The shared fake machine (tests/unit/conftest.py) with HARDWARE and no GPU.

    slurmctld knows the node, idle; no job step runs (see `processes`). Waits (for the node to
    register, for jobs to end) take no time (see `clock`).
    """
    machine.responses[("slurmd", "-C")] = HARDWARE
    machine.responses[SHOW_NODE] = REGISTERED
    machine.responses[("nvidia-smi",)] = SlurmOpsError("nvidia-smi not found")
    monkeypatch.setattr(charm, "SlurmdManager", partial(SlurmdManager, root=tmp_path))
    return machine


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("slurmd", charm.SlurmdCharm)


@pytest.fixture
def node_module() -> ModuleType:
    return node


@pytest.fixture
def enlisted(ctx: testing.Context[ops.CharmBase], machine: FakeMachine) -> testing.State:
    """A unit whose node has enlisted with the detected hardware; records then cleared."""
    secret = auth_secret()
    relation = controller_relation(secret)
    out = ctx.run(ctx.on.relation_changed(relation), installed(relation, secrets=[secret]))
    machine.commands.clear()
    machine.service_calls.clear()
    machine.timeouts.clear()
    return out
