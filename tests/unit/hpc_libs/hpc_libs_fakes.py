"""A scripted stand-in for `hpc_libs.machine.host.run`, and relations the interface tests share."""

import json
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import parameters, slurmd
from ops import testing
from slurmutils import Node


@dataclass
class FakeRun:
    """Records argv lists and answers with scripted results (by argv prefix)."""

    calls: list[list[str]] = field(default_factory=list[list[str]])
    envs: list[dict[str, str]] = field(default_factory=list[dict[str, str]])
    """The variables each call added to the environment (`env`), in call order."""
    answers: list[
        tuple[tuple[str, ...], Callable[[list[str]], subprocess.CompletedProcess[str]]]
    ] = field(default_factory=list)

    def on(self, *prefix: str, stdout: str = "", stderr: str = "", returncode: int = 0) -> None:
        """Answer commands starting with `prefix` (latest registration wins)."""

        def answer(argv: list[str]) -> subprocess.CompletedProcess[str]:
            return subprocess.CompletedProcess(argv, returncode, stdout, stderr)

        self.answers.insert(0, (prefix, answer))

    def on_call(
        self, *prefix: str, answer: Callable[[list[str]], subprocess.CompletedProcess[str]]
    ) -> None:
        """Answer commands starting with `prefix` by calling `answer` (it sees the machine
        as the command would: files it names, `envs[-1]`)."""
        self.answers.insert(0, (prefix, answer))

    def dpkg(self, version: str, *packages: str) -> None:
        """Answer `dpkg-query --show` as dpkg does: one line per installed package asked for
        (`packages`, or every package when none is named), exit status 1 if one is unknown."""

        def answer(argv: list[str]) -> subprocess.CompletedProcess[str]:
            asked = [a for a in argv[1:] if not a.startswith("-")]
            found = [p for p in asked if not packages or p in packages]
            unknown = "".join(
                f"dpkg-query: no packages found matching {p}\n" for p in asked if p not in found
            )
            lines = "".join(f"{p} installed {version}\n" for p in found)
            return subprocess.CompletedProcess(argv, 1 if unknown else 0, lines, unknown)

        self.answers.insert(0, (("dpkg-query",), answer))

    def missing(self, *prefix: str) -> None:
        """Make commands starting with `prefix` behave as a binary that does not exist."""

        def answer(argv: list[str]) -> subprocess.CompletedProcess[str]:
            raise SlurmOpsError(f"command {argv[0]!r} not found", command=argv)

        self.answers.insert(0, (prefix, answer))

    def __call__(
        self,
        argv: Sequence[str],
        *,
        input: str | None = None,
        timeout: float | None = None,
        check: bool = True,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        command = list(argv)
        if timeout is None or timeout <= 0:
            pytest.fail(f"{command} was run without a timeout")
        self.calls.append(command)
        self.envs.append(dict(env or {}))
        for prefix, answer in self.answers:
            if tuple(command[: len(prefix)]) == prefix:
                result = answer(command)
                break
        else:
            result = subprocess.CompletedProcess(command, 0, "", "")
        if check and result.returncode != 0:
            raise SlurmOpsError(
                f"command {command} failed with exit status {result.returncode}",
                command=command,
                stderr=result.stderr,
                returncode=result.returncode,
            )
        return result


def parse_config_line(model: Any, text: str) -> Any:
    """A partition or node line read with hpc_libs' one parser, no key owned by a charm."""
    return model.from_dict(parameters.parse(parameters.Policy(model), text))


def node_config(hardware: Mapping[str, int | str], feature: str, admin: str = "") -> str:
    """The `--conf` line as the slurmd charm builds it: hardware, feature, admin parameters."""
    admin_node = Node.from_dict(parameters.parse(slurmd.NODE_LINE, admin))
    return str(slurmd.merge_node(hardware, feature, admin_node))


def granted_relation(secret: testing.Secret) -> testing.Relation:
    """slurmctld's side of a relation that granted `secret` (the key) and names two controllers."""
    return testing.Relation(
        "slurmctld",
        remote_app_name="slurmctld",
        remote_app_data={
            "auth_key_id": json.dumps(secret.id),
            "controllers": json.dumps(
                [
                    {"hostname": "ctl-0", "address": "10.0.0.1"},
                    {"hostname": "ctl-1", "address": "10.0.0.2", "port": 7817},
                ]
            ),
        },
    )


def daemon_meta(name: str, interface: str) -> dict[str, Any]:
    """Metadata of a test charm `name` at a daemon's end of `interface`: one controller app."""
    return {"name": name, "provides": {"slurmctld": {"interface": interface, "limit": 1}}}


def controller_meta(endpoint: str, interface: str, name: str = "slurmctld") -> dict[str, Any]:
    """Metadata of a test charm at the controller's end of `interface`, named `endpoint`."""
    return {"name": name, "requires": {endpoint: {"interface": interface}}}
