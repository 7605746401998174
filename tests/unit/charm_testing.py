"""Helpers for the charms' unit tests: load a charm's modules, build its Context, fake the machine.

Every charm has modules called `charm` and `config`, so one process tests one charm: each
charm's folder here starts its conftest.py with `use_charm(<name>)`, which puts that charm's
`src` on sys.path, and then imports the charm's modules by their own names, as the charm
does (`import charm`, `from config import ...`). `just unit` runs each charm's folder in a
pytest process of its own (tools/unit_tests.py); a second charm in one process is refused
with a message saying so, never tested against the first one's `config`.

The machine is faked at hpc_libs' seams by `fake_machine`: `host.run` (every command hpc_libs
runs, including `dpkg-query`, `systemctl`, `journalctl` and `add-apt-repository`),
`apt.install` and `files.set_owner` (users such as slurm need not exist). Any command can be
made to fail or time out, and a command run without a timeout fails the test. Juju's port
hook tools (`open-port`, `close-port`, `opened-ports`) answer as the lab's do
(`slurm_lab.juju.hooktools`, one model of Juju's rules for both), on `opened_ports`.

This folder is on sys.path because pytest's default import mode puts the folder of a
conftest.py outside any package there (tests/unit/conftest.py).
"""

import copy
import functools
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ops
import pytest
import yaml
from hpc_libs.errors import PackageError
from hpc_libs.machine import apt, files, host
from ops import testing
from slurm_lab.juju import hooktools

CHARMS_DIR = Path(__file__).parents[2] / "charms"
SLURM_VERSION = "24.11.5-1"
"""The version `dpkg-query` reports for every installed package."""


def use_charm(name: str) -> None:
    """Put charm `name`'s `src` first on sys.path, so its modules import by their own names.

    Raises:
        pytest.UsageError: Another charm's `src` is on sys.path: its `charm` and `config`
            would shadow this one's. Run each charm's tests in a process of its own.

    """
    src = CHARMS_DIR / name / "src"
    others = [p for p in map(Path, sys.path) if p.parent.parent == CHARMS_DIR and p != src]
    if others:
        raise pytest.UsageError(
            f"the tests of charm {name} and of {others[0].parent.name} need a process each "
            "(their modules share names): run `just unit`, or one charm's folder at a time"
        )
    if str(src) not in sys.path:
        sys.path.insert(0, str(src))


def charm_context(
    name: str, charm_type: type[ops.CharmBase], unit_id: int = 0
) -> testing.Context[ops.CharmBase]:
    """A Context for charm `name`, with metadata, config and actions from its charmcraft.yaml."""
    project = copy.deepcopy(_charmcraft_project(name))
    config = {"options": project.pop("config", {}).get("options", {})}
    actions = project.pop("actions", None)
    return testing.Context(
        charm_type, meta=project, config=config, actions=actions, unit_id=unit_id
    )


@functools.cache
def _charmcraft_project(name: str) -> dict[str, Any]:
    """Charm `name`'s charmcraft.yaml, parsed once per process (each test gets a deep copy).

    Parsing it took a fifth of a charm scenario's time when every test's Context did it.
    """
    return yaml.safe_load((CHARMS_DIR / name / "charmcraft.yaml").read_text())


def manager_root(monkeypatch: pytest.MonkeyPatch, manager: type[Any], root: Path) -> Path:
    """Make each `manager` (a Slurm daemon's manager class) the charm builds work under `root`."""
    original: Callable[..., None] = manager.__init__
    monkeypatch.setattr(manager, "__init__", lambda self, root=root: original(self, root))
    return root


def charm_fixtures(name: str, charm_type: type[ops.CharmBase], manager: type[Any], root: str):
    """Return a charm's `ctx` fixture and its fixture `root`, which points `manager` at tmp_path.

    A charm's conftest binds both: `ctx, sackd_root = charm_fixtures("sackd", ...)`.
    """

    @pytest.fixture(name="ctx")
    def ctx() -> testing.Context[ops.CharmBase]:
        return charm_context(name, charm_type)

    @pytest.fixture(name=root)
    def manager_at_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
        return manager_root(monkeypatch, manager, tmp_path)

    return ctx, manager_at_tmp_path


def retried_once_mended(
    ctx: testing.Context[ops.CharmBase], machine: "FakeMachine", out: testing.State, service: str
) -> testing.State:
    """Mend the machine and forget its calls: the next event (update-status) restarts `service`."""
    machine.heal()
    machine.service_calls.clear()
    out = ctx.run(ctx.on.update_status(), out)
    assert machine.calls("restart") == [service]
    return out


def already_installed(charm_type: str, version: str = SLURM_VERSION) -> testing.StoredState:
    """Stored state saying the charm's `SlurmInstaller` installed `version` in an earlier hook.

    `charm_type` is the charm class's name, e.g. `SackdCharm`.
    """
    return testing.StoredState(
        owner_path=f"{charm_type}/SlurmInstaller[installer]",
        content={"installed": True, "version": version},
    )


@dataclass
class FakeMachine:
    """What the charm did to the machine: packages, commands run, service operations.

    `responses` maps an argv prefix to the stdout to return, or to an exception to raise.
    `fail` and `time_out` make any command fail as `host.run` would: with a return code and
    stderr, or killed at its timeout. `dpkg-query` reports the packages in `installed`;
    `apt_fails` makes installing fail. `systemctl` runs are services: `active` holds the
    running ones (`NeedDaemonReload` is yes for them), `service_calls` the verbs applied (not
    in `commands`, but `daemon-reload` is), and `service_fails` makes a start or restart fail
    with a journal reason.

    Every command must be run with a timeout: one without fails the test, so dropping a
    timeout argument anywhere is seen by the unit tests.
    """

    installed: set[str] = field(default_factory=set[str])
    commands: list[list[str]] = field(default_factory=list[list[str]])
    responses: dict[tuple[str, ...], str | Exception] = field(
        default_factory=dict[tuple[str, ...], str | Exception]
    )
    apt_installs: list[list[str]] = field(default_factory=list[list[str]])
    apt_fails: bool = False
    active: set[str] = field(default_factory=set[str])
    service_calls: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    journals: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    opened_ports: list[str] = field(default_factory=list[str])
    """The unit's opened ports in Juju's notation (`6818/tcp`), as the hook tools left them."""
    timeouts: list[tuple[list[str], float]] = field(default_factory=list[tuple[list[str], float]])
    _failures: dict[tuple[str, ...], tuple[int, str]] = field(
        default_factory=dict[tuple[str, ...], tuple[int, str]]
    )
    _timing_out: set[tuple[str, ...]] = field(default_factory=set[tuple[str, ...]])
    _failing_services: dict[tuple[str, str], str] = field(
        default_factory=dict[tuple[str, str], str]
    )

    def fail(self, *prefix: str, returncode: int = 1, stderr: str = "") -> None:
        """Make commands starting with `prefix` exit with `returncode` and `stderr`."""
        self._failures[prefix] = (returncode, stderr)

    def time_out(self, *prefix: str) -> None:
        """Make commands starting with `prefix` run past their timeout."""
        self._timing_out.add(prefix)

    def service_fails(
        self, service: str, reason: str, *, verbs: Sequence[str] = ("start", "restart")
    ) -> None:
        """Make `systemctl <verb> service` fail, with `reason` as the journal's last line."""
        for verb in verbs:
            self._failing_services[(verb, service)] = reason

    def heal(self) -> None:
        """Undo `fail`, `time_out` and `service_fails`: the next event finds a healthy machine."""
        self._failures.clear()
        self._timing_out.clear()
        self._failing_services.clear()

    def run(
        self,
        argv: Sequence[object],
        *,
        input: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        del input, env
        command = [str(a) for a in argv]
        if timeout is None or timeout <= 0:
            pytest.fail(f"{command} was run without a timeout")
        self.timeouts.append((command, timeout))
        if command[0] != "systemctl" or command[1:2] == ["daemon-reload"]:
            self.commands.append(command)
        result = self._answer(command, timeout)
        if check and result.returncode != 0:
            raise host.command_failed(command, result.returncode, result.stderr)
        return result

    def _answer(self, command: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
        if any(_starts(command, prefix) for prefix in self._timing_out):
            raise host.command_timed_out(command, timeout)
        for prefix, (returncode, stderr) in self._failures.items():
            if _starts(command, prefix):
                return subprocess.CompletedProcess(command, returncode, "", stderr)
        for prefix, response in self.responses.items():
            if _starts(command, prefix):
                if isinstance(response, Exception):
                    raise response
                return subprocess.CompletedProcess(command, 0, response, "")
        return self._machine(command)

    def _machine(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        """Answer as the machine (and Juju's hook tools) would, nothing faked on request."""
        if command[0] in hooktools.TOOLS:
            code, out, err, self.opened_ports = hooktools.run_tool(
                command[0], command[1:], self.opened_ports
            )
            return subprocess.CompletedProcess(command, code, out, err)
        if command[0] == "dpkg-query":
            return self._dpkg_query(command)
        if command[0] == "systemctl":
            return self._systemctl(command)
        if command[0] == "journalctl":
            lines = self.journals.get(command[command.index("-u") + 1], [])
            return subprocess.CompletedProcess(command, 0, "".join(f"{x}\n" for x in lines), "")
        return subprocess.CompletedProcess(command, 0, "", "")

    def _systemctl(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        verb, name = command[1], command[-1]
        if verb == "is-active":
            return subprocess.CompletedProcess(command, 0 if name in self.active else 3, "", "")
        if verb == "show" and "--property=NeedDaemonReload" in command:
            # systemd holds a running unit loaded (a changed file: stale); an inactive one it
            # loads afresh when asked.
            held = "yes" if name in self.active else "no"
            return subprocess.CompletedProcess(command, 0, f"{held}\n", "")
        if verb == "show" and "--property=InvocationID" in command:
            # The journal here is per unit, not per run: no run has an id of its own.
            return subprocess.CompletedProcess(command, 0, "\n", "")
        if verb == "daemon-reload":
            return subprocess.CompletedProcess(command, 0, "", "")
        self.service_calls.append((verb, name))
        if (reason := self._failing_services.get((verb, name))) is not None:
            self.active.discard(name)
            self.journals.setdefault(name, []).append(reason)
            stderr = f"Job for {name}.service failed because the control process exited."
            return subprocess.CompletedProcess(command, 1, "", stderr)
        if verb in ("start", "restart"):
            self.active.add(name)
        elif verb == "stop":
            self.active.discard(name)
        return subprocess.CompletedProcess(command, 0, "", "")

    def apt_install(
        self, packages: Sequence[str], *, upgrade: bool = False, refresh: bool = True
    ) -> bool:
        del upgrade, refresh
        if self.apt_fails:
            raise PackageError(f"cannot install {list(packages)}", stderr="E: unable to fetch")
        self.apt_installs.append(list(packages))
        self.installed.update(packages)
        return True

    def ran(self, *prefix: str) -> list[list[str]]:
        """The commands run that start with `prefix`."""
        return [c for c in self.commands if tuple(c[: len(prefix)]) == prefix]

    def calls(self, verb: str) -> list[str]:
        """The services a systemd verb (start, restart, ...) was applied to."""
        return [name for v, name in self.service_calls if v == verb]

    def _dpkg_query(self, command: list[str]) -> subprocess.CompletedProcess[str]:
        asked = [a for a in command[1:] if not a.startswith("-")]
        lines = "".join(f"{p} installed {self.version}\n" for p in asked if p in self.installed)
        unknown = [p for p in asked if p not in self.installed]
        errors = "".join(f"dpkg-query: no packages found matching {p}\n" for p in unknown)
        return subprocess.CompletedProcess(command, 1 if unknown else 0, lines, errors)

    version: str = SLURM_VERSION
    """The version `dpkg-query` reports for installed packages."""


def _starts(command: list[str], prefix: tuple[str, ...]) -> bool:
    return tuple(command[: len(prefix)]) == prefix


def fake_machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """Plug a new FakeMachine in at hpc_libs' seams (undone when the test ends).

    The seams: `host.run` (every command, systemctl and journalctl included), `apt.install`
    (so no apt-get runs) and `files.set_owner` (users such as slurm need not exist).
    """
    fake = FakeMachine()
    monkeypatch.setattr(host, "run", fake.run)
    monkeypatch.setattr(apt, "install", fake.apt_install)
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group, fd=None: None)
    return fake


def systemd_expands(word: str) -> str:
    """One word of a transient unit's command as systemd passes it on to the program.

    The service manager reads `$$` as `$` and replaces `${NAME}` (here: unset, so empty) in
    each word of a command, transient units' included (systemd.service(5), "Command lines").
    """
    return re.sub(r"\$\$|\$\{[A-Za-z_][A-Za-z0-9_]*\}", _expanded, word)


def _expanded(match: re.Match[str]) -> str:
    return "$" if match[0] == "$$" else ""


class FakeProcesses:
    """The machine's processes, as `/proc` under the unit's root (`SlurmdManager.running_jobs`)."""

    def __init__(self, root: Path) -> None:
        self.proc = root / "proc"
        self.proc.mkdir(exist_ok=True)
        self.next_pid = 100

    def run(self, title: str, *, name: str = "slurmstepd", uid: int = 0) -> None:
        """Start a process named `name` (its comm), of user `uid`, whose title is `title`."""
        self.next_pid += 1
        process = self.proc / str(self.next_pid)
        process.mkdir()
        (process / "comm").write_text(f"{name}\n")
        (process / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
        (process / "cmdline").write_bytes(title.encode() + b"\0" * 8)

    def steps(self, *jobs: int) -> None:
        """Exactly the batch steps of `jobs` run (none: no job runs)."""
        self.end_all()
        for job in jobs:
            self.run(f"slurmstepd: [{job}.batch]")

    def end_all(self) -> None:
        for process in self.proc.iterdir():
            for entry in process.iterdir():
                entry.unlink()
            process.rmdir()
