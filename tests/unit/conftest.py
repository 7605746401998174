"""Fixtures every charm's unit tests share; the helpers behind them are in charm_testing.

pytest's default ("prepend") import mode puts this folder on sys.path before importing this
file, because it is in no package; so every test module and conftest below can import
`charm_testing`.
"""

from collections.abc import Iterator
from functools import partial
from types import SimpleNamespace

import pytest
import scenario._runtime
import yaml
from charm_testing import FakeMachine, fake_machine
from hpc_libs.slurm import schema_cache


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> FakeMachine:
    """A fake machine behind hpc_libs' seams (see charm_testing.FakeMachine)."""
    return fake_machine(monkeypatch)


@pytest.fixture(scope="session", autouse=True)
def _slurmutils_schema_cache() -> None:
    """Validate with slurmutils' schemas unchecked, as every charm does when built (SlurmCharm).

    Without it a test of hpc_libs alone (no charm built first) pays the schema check on
    every model: the grammar's property tests took minutes instead of seconds.
    """
    schema_cache.install()


@pytest.fixture(scope="session", autouse=True)
def _scenario_writes_metadata_with_libyaml() -> Iterator[None]:
    """Let Scenario write the charm's metadata files with libyaml's emitter, not pure Python's.

    Every `Context.run` writes metadata.yaml, config.yaml and actions.yaml for ops to read back
    (`scenario._runtime`, `yaml.safe_dump`); for slurmctld's large charmcraft.yaml that took
    two fifths of a scenario's time. libyaml's safe dumper writes the same documents, faster.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            scenario._runtime,
            "yaml",
            SimpleNamespace(safe_dump=partial(yaml.dump, Dumper=yaml.CSafeDumper)),
        )
        yield
