"""`Interface` parses each databag once per dispatch, and again once its content changed.

The charm reads its databags many times a dispatch (slurmctld's peer memory at nine call
sites); parsing is the cost (pydantic, slurmutils and Slurm's grammar on every field).
The databags are given raw, as Juju holds them.
"""

import json
from typing import Any, ClassVar

import ops
import pytest
from hpc_libs.interfaces.base import DatabagModel, Interface
from ops import testing
from pydantic import field_validator


class Counted(DatabagModel):
    """A databag model that counts how often a databag was parsed."""

    parsed: ClassVar[int] = 0
    name: str | None = None

    @field_validator("name")
    @classmethod
    def _count(cls, value: str | None) -> str | None:
        Counted.parsed += 1
        if value == "bad":
            raise ValueError("a bad name")
        return value


class ReaderCharm(ops.CharmBase):
    """Runs the scenario's `steps` against its interface in one dispatch; keeps what they saw."""

    steps: ClassVar[list[str]] = []
    seen: ClassVar[list[Any]] = []

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.interface = Interface(self, "data")
        framework.observe(self.on.update_status, self._on_update_status)

    def _on_update_status(self, _: ops.UpdateStatusEvent) -> None:
        relation = self.interface.relation
        assert relation is not None
        for step in ReaderCharm.steps:
            if step == "load remote":
                found = self.interface.load(Counted, relation, relation.app)
                ReaderCharm.seen.append(found and found.name)
            elif step == "problem remote":
                ReaderCharm.seen.append(self.interface.problem(Counted, relation, relation.app))
            elif step == "load own":
                found = self.interface.load(Counted, relation, self.app)
                ReaderCharm.seen.append(found and found.name)
            elif step.startswith("save own "):
                saved = self.interface.save(Counted(name=step[9:]), relation, self.app)
                ReaderCharm.seen.append(saved)
            elif step.startswith("write own "):  # A write that bypasses `save`.
                relation.data[self.app]["name"] = json.dumps(step[10:])


META = {"name": "reader", "requires": {"data": {"interface": "data"}}}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    Counted.parsed = 0
    ReaderCharm.seen = []


def dispatch(steps: list[str], remote: dict[str, str], own: dict[str, str] | None = None):
    ReaderCharm.steps = steps
    relation = testing.Relation(
        "data", remote_app_name="remote", remote_app_data=remote, local_app_data=own or {}
    )
    ctx = testing.Context(ReaderCharm, meta=META)
    return ctx.run(ctx.on.update_status(), testing.State(leader=True, relations={relation}))


def test_a_databag_read_three_times_is_parsed_once():
    dispatch(["load remote", "load remote", "problem remote"], {"name": '"compute"'})

    assert ReaderCharm.seen == ["compute", "compute", None]
    assert Counted.parsed == 1


def test_invalid_data_is_parsed_once_and_still_logged_and_named(caplog):
    dispatch(["load remote", "load remote", "problem remote"], {"name": '"bad"'})

    assert ReaderCharm.seen == [None, None, "remote sent an invalid name: a bad name"]
    assert Counted.parsed == 1
    assert caplog.text.count("ignoring invalid Counted data in relation data:") == 2


def test_each_dispatch_parses_anew():
    dispatch(["load remote"], {"name": '"compute"'})
    dispatch(["load remote"], {"name": '"compute"'})

    assert Counted.parsed == 2


def test_a_save_by_this_unit_is_read_back():
    dispatch(["load own", "save own new", "load own", "save own new"], {}, {"name": '"old"'})

    assert ReaderCharm.seen == ["old", True, "new", False]


def test_a_write_that_bypasses_save_is_read_back():
    dispatch(["load own", "write own new", "load own", "load own"], {}, {"name": '"old"'})

    assert ReaderCharm.seen == ["old", "new", "new"]
    assert Counted.parsed == 2


def test_each_databag_is_kept_apart():
    dispatch(["load remote", "load own", "load remote"], {"name": '"r"'}, {"name": '"o"'})

    assert ReaderCharm.seen == ["r", "o", "r"]
    assert Counted.parsed == 2
