"""Load the sackd charm's modules and fake the machine for its unit tests.

Every charm has modules called `charm` and `config`, so their `src` directories cannot all sit
on sys.path. The charm's modules are imported once with its `src` on sys.path and then kept
under unique names (`sackd_charm`, ...), which lets `uv run pytest tests/unit` run every
charm's tests in one process.

The machine is faked at hpc_libs' seams (see sackd_fakes).
"""

import importlib
import sys
from pathlib import Path
from types import ModuleType

import ops
import pytest
import yaml
from hpc_libs.machine import apt, host, systemd
from ops import testing
from sackd_fakes import FakeMachine

CHARM_DIR = Path(__file__).parents[3] / "charms" / "sackd"
MODULES = ("config", "charm")


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


_MODULES = _load(CHARM_DIR / "src", MODULES, "sackd")


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    fake = FakeMachine()
    monkeypatch.setattr(host, "run", fake.run)
    monkeypatch.setattr(apt, "install", fake.apt_install)
    for verb in ("start", "stop", "restart", "enable", "disable"):

        def record(service: systemd.Service, verb: str = verb) -> None:
            fake.service_calls.append((verb, service.name))

        monkeypatch.setattr(systemd.Service, verb, record)
    monkeypatch.setattr(systemd.Service, "is_active", lambda _: False)
    return fake


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    """A Context for the charm, with metadata and config from its charmcraft.yaml.

    Given explicitly because the charm module is not importable under its own name.
    """
    project = yaml.safe_load((CHARM_DIR / "charmcraft.yaml").read_text())
    config = {"options": project.pop("config", {}).get("options", {})}
    return testing.Context(_MODULES["charm"].SackdCharm, meta=project, config=config)
