"""Run one charm event on a fresh fake machine per example; read back what it rendered.

Each example gets its own FakeMachine (tests/unit/charm_testing.py) and its own temporary
root: every Slurm manager of hpc_libs (and so every file a charm writes: /etc/slurm,
/etc/default, systemd drop-ins) is rooted there. `run` fails the example on a hook error (an
uncaught exception) and returns what the machine looks like afterwards (`Outcome`).
"""

import contextlib
import importlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

import ops
import pytest
from charm_testing import CHARMS_DIR, FakeMachine, charm_context, fake_machine
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.slurmd import SlurmdManager
from hpc_libs.slurm.slurmdbd import SlurmdbdManager
from hpc_libs.slurm.slurmrestd import SlurmrestdManager
from ops import testing
from scenario.state import _Event

_TYPES = {
    "sackd": "SackdCharm",
    "slurmctld": "SlurmctldCharm",
    "slurmd": "SlurmdCharm",
    "slurmdbd": "SlurmdbdCharm",
    "slurmrestd": "SlurmrestdCharm",
}
_MANAGERS = (SlurmManager, SlurmctldManager, SlurmdManager, SlurmdbdManager, SlurmrestdManager)
HARDWARE = (
    "NodeName=host0 CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=1000\nUpTime=0-01:00:00\n"
)
SHOW_NODE = ("scontrol", "show", "node")
REGISTERED = (
    '{"meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}}, '
    '"nodes": [{"name": "slurmd-0", "state": ["IDLE"]}]}'
)


@cache
def modules(charm: str) -> dict[str, ModuleType]:
    """Import the charm (`charm.py`, which imports the rest) once, as `<charm>_<module>` too.

    Unlike the unit tests (a process per charm, tests/unit/charm_testing.py `use_charm`),
    one fuzz session drives all five charms, whose modules share names (`charm`,
    `config`): each charm's are imported with its `src` on sys.path, then taken out of
    sys.modules, so that the next charm imports its own. The names are those of its `src`,
    so no list here has to follow the charm's modules.
    """
    src = str(CHARMS_DIR / charm / "src")
    names = sorted(path.stem for path in Path(src).glob("*.py"))
    shadowed = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, src)
    try:
        importlib.import_module("charm")
        loaded = {name: sys.modules[name] for name in names if name in sys.modules}
    finally:
        sys.path.remove(src)
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(shadowed)
    for name, module in loaded.items():
        sys.modules[f"{charm}_{name}"] = module
    return loaded


def context(charm: str) -> testing.Context[ops.CharmBase]:
    """A fresh Context for `charm` (its metadata, config and actions from charmcraft.yaml)."""
    return charm_context(charm, getattr(modules(charm)["charm"], _TYPES[charm]))


class _StillTime:
    """A clock that moves only when slept on (waits for a node or for jobs take no time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@contextlib.contextmanager
def fresh_machine(charm: str) -> Iterator[tuple[FakeMachine, Path]]:
    """A new fake machine with its own root directory, plugged in while the block runs."""
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fake = fake_machine(patch)  # the unit tests' seams, whatever they become
        for manager in _MANAGERS:
            patch.setattr(manager.__init__, "__defaults__", (root,))
        loaded = modules(charm)
        if charm == "slurmctld":
            patch.setattr(loaded["facts"].socket, "gethostname", lambda: "ctl0")
            mountinfo = root / "mountinfo"
            mountinfo.write_text("22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n")
            patch.setattr(loaded["network_state"], "MOUNTINFO", mountinfo)
        if charm == "slurmd":
            fake.responses[("slurmd", "-C")] = HARDWARE
            fake.responses[SHOW_NODE] = REGISTERED
            fake.responses[("nvidia-smi",)] = SlurmOpsError("nvidia-smi not found")
            fake.fail("pgrep", returncode=1)
            clock = _StillTime()
            patch.setattr(loaded["departure"], "time", clock)
            patch.setattr(loaded["node"], "time", clock)
        yield fake, root


@dataclass
class Outcome:
    """What one event left: the state out, the machine, and the files under the root."""

    state: testing.State
    machine: FakeMachine
    files: dict[str, str]
    """Every regular file under the root that a charm renders (path relative to the root)."""
    action_results: dict[str, object] | None = None
    action_error: str | None = None

    def file(self, path: str) -> str | None:
        return self.files.get(path)


RENDERED = ("etc/slurm", "etc/default", "etc/systemd", "var/lib/slurm")


def _read_rendered(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for top in RENDERED:
        for path in sorted((root / top).rglob("*")) if (root / top).is_dir() else ():
            if path.is_file() and not path.is_symlink() and not path.name.endswith(".key"):
                try:
                    found[str(path.relative_to(root))] = path.read_text()
                except UnicodeDecodeError:
                    continue
    return found


def run(
    charm: str,
    event: Callable[[testing.Context[ops.CharmBase]], _Event],
    state: testing.State,
    example: object,
    prepare: Callable[[FakeMachine, Path], None] | None = None,
) -> Outcome:
    """Fire `event` on `state` for `charm` on a fresh machine; fail on a hook error.

    `prepare` may change the machine (responses, files) before the event.
    """
    ctx = context(charm)
    with fresh_machine(charm) as (fake, root):
        if prepare is not None:
            prepare(fake, root)
        error: str | None = None
        try:
            out = ctx.run(event(ctx), state)
        except testing.errors.UncaughtCharmError as e:
            pytest.fail(f"hook error (crash) for input {short(example)}: {e.__cause__!r}")
        except testing.ActionFailed as e:
            assert isinstance(e.state, testing.State)
            out, error = e.state, e.message
        return Outcome(out, fake, _read_rendered(root), ctx.action_results, error)


def short(example: object, limit: int = 160) -> str:
    """An input as a failure message shows it (huge reproducers cut)."""
    text = repr(example)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
