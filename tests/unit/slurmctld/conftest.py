"""Load the slurmctld charm's modules for its unit tests.

Both charms have modules called `charm` and `config`, so their `src` directories cannot both
sit on sys.path. The charm's modules are imported once with its `src` on sys.path and then
kept under unique names (`slurmctld_charm`, ...), which lets `uv run pytest tests/unit` run
every charm's tests in one process.
"""

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators
import ops
import pytest
import slurmutils.core.base
import yaml
from ops import testing

CHARM_DIR = Path(__file__).parents[3] / "charms" / "slurmctld"
SRC = CHARM_DIR / "src"
MODULES = ("config", "cluster", "charm")


def _load(src: Path, names: tuple[str, ...], prefix: str) -> dict[str, ModuleType]:
    shadowed = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(src))
    try:
        loaded = {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(src))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(shadowed)
    for name, module in loaded.items():
        sys.modules[f"{prefix}_{name}"] = module
    return loaded


_MODULES = _load(SRC, MODULES, "slurmctld")


@pytest.fixture
def charm_module() -> ModuleType:
    return _MODULES["charm"]


@pytest.fixture
def cluster_module() -> ModuleType:
    return _MODULES["cluster"]


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    """A Context for the charm, with metadata, config and actions from its charmcraft.yaml.

    Given explicitly because the charm module is not importable under its own name.
    """
    project = yaml.safe_load((CHARM_DIR / "charmcraft.yaml").read_text())
    config = {"options": project.pop("config", {}).get("options", {})}
    actions = project.pop("actions", {})
    charm_type = _MODULES["charm"].SlurmctldCharm
    return testing.Context(charm_type, meta=project, config=config, actions=actions)


class Machine:
    """A fake machine behind hpc_libs' seams: commands, systemd services, packages, owners.

    `responses` maps an argv prefix to the stdout to return, or to an exception to raise.
    """

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.responses: dict[tuple[str, ...], str | Exception] = {}
        self.active: set[str] = set()
        self.service_calls: list[tuple[str, str]] = []
        self.installed: set[str] = set()

    def run(self, argv, *, input=None, timeout=None, check=True):
        argv = [str(a) for a in argv]
        self.commands.append(argv)
        for prefix, response in self.responses.items():
            if tuple(argv[: len(prefix)]) == prefix:
                if isinstance(response, Exception):
                    raise response
                return subprocess.CompletedProcess(argv, 0, response, "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def ran(self, *prefix: str) -> list[list[str]]:
        """The commands run that start with `prefix`."""
        return [c for c in self.commands if tuple(c[: len(prefix)]) == prefix]

    def calls(self, verb: str) -> list[str]:
        """The services a systemd verb (start, restart, ...) was applied to."""
        return [name for v, name in self.service_calls if v == verb]


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Machine:
    """Fake the workload at the hpc_libs boundary, with files under tmp_path."""
    from hpc_libs.machine import apt, files, host, systemd
    from hpc_libs.slurm import slurmctld

    fake = Machine()
    monkeypatch.setattr(host, "run", fake.run)
    monkeypatch.setattr(files, "set_owner", lambda path, owner, group: None)

    def verb(name: str, effect):
        def call(service: systemd.Service) -> None:
            fake.service_calls.append((name, service.name))
            effect(service.name)

        return call

    monkeypatch.setattr(systemd.Service, "start", verb("start", fake.active.add))
    monkeypatch.setattr(systemd.Service, "restart", verb("restart", fake.active.add))
    monkeypatch.setattr(systemd.Service, "stop", verb("stop", fake.active.discard))
    monkeypatch.setattr(systemd.Service, "enable", verb("enable", lambda _: None))
    monkeypatch.setattr(systemd.Service, "is_active", lambda s: s.name in fake.active)
    monkeypatch.setattr(
        apt, "installed_version", lambda p: "24.11.5" if p in fake.installed else None
    )
    monkeypatch.setattr(apt, "add_repository", lambda *a, **k: fake.commands.append(["ppa"]))
    monkeypatch.setattr(apt, "install", lambda ps: bool(fake.installed.update(ps)) or True)
    real = slurmctld.SlurmctldManager
    monkeypatch.setattr(_MODULES["charm"], "SlurmctldManager", lambda: real(root=tmp_path))
    monkeypatch.setattr(_MODULES["charm"].socket, "gethostname", lambda: "ctl0")
    return fake


@pytest.fixture(autouse=True)
def fast_schema_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Validate slurmutils models without re-checking the schema itself on every call.

    `jsonschema.validate` checks the schema against its metaschema each time, which makes
    one reconcile take seconds; the result is the same with a validator built once.
    """
    validators: dict[int, jsonschema.protocols.Validator] = {}
    schemas: list[object] = []  # Keep schemas alive so their ids stay unique.

    def validate(instance: Any, schema: dict[str, Any]) -> None:
        validator = validators.get(id(schema))
        if validator is None:
            validator = jsonschema.validators.validator_for(schema)(schema)
            validators[id(schema)] = validator
            schemas.append(schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error

    monkeypatch.setattr(slurmutils.core.base, "validate", validate)
