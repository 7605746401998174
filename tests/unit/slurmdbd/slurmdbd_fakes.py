"""A fake machine for the slurmdbd charm's tests, plugged in at hpc_libs' seams.

`host.run` (every command hpc_libs runs itself), `apt.install` (which goes through
charmlibs-apt) and `systemd.Service` (charmlibs-systemd) are replaced by the `machine` fixture
in conftest.py. The module has a unique name because every charm's tests have one.
"""

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

from hpc_libs.errors import PackageError

SLURM_VERSION = "24.11.5-1"


@dataclass
class FakeMachine:
    """What the charm did to the machine: packages, commands run, service operations."""

    installed: set[str] = field(default_factory=set[str])
    commands: list[list[str]] = field(default_factory=list[list[str]])
    apt_installs: list[list[str]] = field(default_factory=list[list[str]])
    service_calls: list[tuple[str, str]] = field(default_factory=list[tuple[str, str]])
    apt_fails: bool = False

    def run(self, argv: Sequence[str], **_: object) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        self.commands.append(command)
        if command[0] == "dpkg-query":
            package = command[-1]
            if package in self.installed:
                return subprocess.CompletedProcess(command, 0, f"installed {SLURM_VERSION}", "")
            return subprocess.CompletedProcess(command, 1, "", f"no packages found: {package}")
        return subprocess.CompletedProcess(command, 0, "", "")

    def apt_install(self, packages: Sequence[str]) -> bool:
        if self.apt_fails:
            raise PackageError(f"cannot install {list(packages)}", stderr="E: unable to fetch")
        self.apt_installs.append(list(packages))
        self.installed.update(packages)
        return True

    def ran(self, program: str) -> list[list[str]]:
        return [c for c in self.commands if c[0] == program]
