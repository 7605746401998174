"""Helpers for the charms' unit tests: load a charm's modules, build its Context, fake the machine.

Every charm has modules called `charm` and `config`, so their `src` directories cannot all
sit on sys.path. `load_charm` imports a charm's modules once with its `src` on sys.path and
keeps them under unique names (`sackd_charm`, ...), which lets `uv run pytest tests/unit` run
every charm's tests in one process.

The machine is faked at hpc_libs' seams by `fake_machine`: `host.run` (every command hpc_libs
runs itself, including `dpkg-query` and `add-apt-repository`), `apt.install` (which goes
through charmlibs-apt), `systemd.Service` and `systemd.daemon_reload` (charmlibs-systemd) and
`files.set_owner` (users such as slurm need not exist).

This folder is on sys.path because pytest's default import mode puts the folder of a
conftest.py outside any package there (tests/unit/conftest.py).
"""

import importlib
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import ops
import pytest
import yaml
from hpc_libs.errors import PackageError
from hpc_libs.machine import apt, files, host, systemd
from ops import testing

CHARMS_DIR = Path(__file__).parents[2] / "charms"
SLURM_VERSION = "24.11.5-1"
"""The version `dpkg-query` reports for every installed package."""


def load_charm(name: str, modules: Sequence[str] = ("config", "charm")) -> dict[str, ModuleType]:
    """Import charm `name`'s `modules` (dependencies first) and keep them as `<name>_<module>`.

    Modules of another charm with the same names are put back afterwards.
    """
    src = str(CHARMS_DIR / name / "src")
    shadowed = {module: sys.modules.pop(module) for module in modules if module in sys.modules}
    sys.path.insert(0, src)
    try:
        loaded = {module: importlib.import_module(module) for module in modules}
    finally:
        sys.path.remove(src)
        for module in modules:
            sys.modules.pop(module, None)
        sys.modules.update(shadowed)
    for module_name, module in loaded.items():
        sys.modules[f"{name}_{module_name}"] = module
    return loaded


def charm_context(name: str, charm_type: type[ops.CharmBase]) -> testing.Context[ops.CharmBase]:
    """A Context for charm `name`, with metadata, config and actions from its charmcraft.yaml.

    Given explicitly because the charm module is not importable under its own name.
    """
    project = yaml.safe_load((CHARMS_DIR / name / "charmcraft.yaml").read_text())
    config = {"options": project.pop("config", {}).get("options", {})}
    actions = project.pop("actions", None)
    return testing.Context(charm_type, meta=project, config=config, actions=actions)


def already_installed(charm_type: str) -> testing.StoredState:
    """Stored state saying the charm's `SlurmInstaller` installed the packages in an earlier hook.

    `charm_type` is the charm class's name, e.g. `SackdCharm`.
    """
    return testing.StoredState(
        owner_path=f"{charm_type}/SlurmInstaller[installer]", content={"installed": True}
    )


@dataclass
class FakeMachine:
    """What the charm did to the machine: packages, commands run, service operations.

    `responses` maps an argv prefix to the stdout to return, or to an exception to raise.
    `dpkg-query` reports the packages in `installed`; `apt_fails` makes installing fail.
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

    def run(self, argv: Sequence[object], **_: object) -> subprocess.CompletedProcess[str]:
        command = [str(a) for a in argv]
        self.commands.append(command)
        for prefix, response in self.responses.items():
            if tuple(command[: len(prefix)]) == prefix:
                if isinstance(response, Exception):
                    raise response
                return subprocess.CompletedProcess(command, 0, response, "")
        if command[0] == "dpkg-query":
            return self._dpkg_query(command)
        return subprocess.CompletedProcess(command, 0, "", "")

    def apt_install(self, packages: Sequence[str]) -> bool:
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
        package = command[-1]
        if package in self.installed:
            return subprocess.CompletedProcess(command, 0, f"installed {SLURM_VERSION}", "")
        return subprocess.CompletedProcess(command, 1, "", f"no packages found: {package}")


def fake_machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """Plug a new FakeMachine in at hpc_libs' seams (undone when the test ends)."""
    fake = FakeMachine()
    monkeypatch.setattr(host, "run", fake.run)
    monkeypatch.setattr(apt, "install", fake.apt_install)
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group: None)
    effects: dict[str, Callable[[str], None]] = {
        "start": fake.active.add,
        "restart": fake.active.add,
        "stop": fake.active.discard,
        "enable": lambda _: None,
        "disable": lambda _: None,
    }
    for verb, effect in effects.items():

        def call(
            service: systemd.Service, verb: str = verb, effect: Callable[[str], None] = effect
        ) -> None:
            fake.service_calls.append((verb, service.name))
            effect(service.name)

        monkeypatch.setattr(systemd.Service, verb, call)
    monkeypatch.setattr(systemd.Service, "is_active", lambda service: service.name in fake.active)
    monkeypatch.setattr(
        systemd, "daemon_reload", lambda: fake.commands.append(["systemctl", "daemon-reload"])
    )
    return fake
