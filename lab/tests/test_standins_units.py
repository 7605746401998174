"""The stand-ins' shared base (`standins.base`): what a stand-in writes reaches whom, without
machines. The stand-ins themselves run on lab machines in test_faults.py (filesystem-client),
test_mysql_standin.py and tests/integration/test_observability.py (COS, Prometheus).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from slurm_lab.juju.model import App, Endpoint, JsonDict, ModelState, Relation, StatusValue, Unit
from slurm_lab.juju.standins import STANDINS, CosCollector, FilesystemClient, MysqlStandIn


class _Lab:
    shared_dir = Path("/nonexistent/shared")


class _Host:
    """The engine as a stand-in sees it: the model, a log, a queue; no machine answers."""

    def __init__(self, model: ModelState) -> None:
        self.model = model
        self.lab = _Lab()
        self.logs: list[str] = []
        self.queued: list[tuple[str, str, dict[str, Any]]] = []

    def machine(self, unit: Unit) -> Any:
        raise AssertionError(f"no machine expected ({unit.name})")

    def log(self, unit: Unit, level: str, message: str) -> None:
        self.logs.append(f"{unit.name} {level} {message}")

    def enqueue(self, unit: str, kind: str, **fields: Any) -> None:
        self.queued.append((unit, kind, fields))

    def enqueue_all(self, events: Iterable[JsonDict]) -> None:
        for event in events:
            fields = {k: v for k, v in event.items() if k not in ("unit", "kind")}
            self.enqueue(event["unit"], event["kind"], **fields)


def _model() -> tuple[ModelState, Relation]:
    """mysql/0 provides `database` to dbd/0 and dbd/1; dbd/1 has not seen mysql/0 join yet."""
    model = ModelState()
    model.apps["mysql"] = MysqlStandIn.new_app("mysql", None)
    model.apps["dbd"] = App("dbd", "/charms/dbd", "slurmdbd")
    for name in ("mysql/0", "dbd/0", "dbd/1"):
        app, number = name.split("/")
        model.units[name] = Unit(name, app, f"m-{app}-{number}", number, "10.0.0.2")
        model.apps[app].units.append(name)
    relation = Relation(
        id=3,
        endpoints=[
            Endpoint("mysql", "database", "mysql_client", "provider"),
            Endpoint("dbd", "database", "mysql_client", "requirer"),
        ],
        seen={"dbd/0": ["mysql/0"], "dbd/1": [], "mysql/0": ["dbd/0"]},
        members=["mysql/0", "dbd/0", "dbd/1"],
    )
    model.relations["3"] = relation
    return model, relation


def test_an_app_databag_change_reaches_the_other_side_once():
    model, relation = _model()
    host = _Host(model)
    standin = MysqlStandIn(host)
    mysql = model.units["mysql/0"]

    standin.publish_app(mysql, relation, {"database": "acct"})
    standin.publish_app(mysql, relation, {"database": "acct"})  # unchanged: nothing queued

    assert relation.app_data["mysql"] == {"database": "acct"}
    assert host.queued == [
        ("dbd/0", "relation_changed", {"relation_id": 3, "remote_unit": None}),
    ]


def test_a_unit_databag_change_reaches_the_units_that_saw_it_join():
    model, relation = _model()
    host = _Host(model)

    MysqlStandIn(host).publish_unit(model.units["mysql/0"], relation, {"remote_write": "{}"})

    assert relation.unit_data["mysql/0"] == {"remote_write": "{}"}
    assert host.queued == [
        ("dbd/0", "relation_changed", {"relation_id": 3, "remote_unit": "mysql/0"}),
    ]


def test_blocking_sets_the_status_and_logs_the_reason():
    model, _ = _model()
    host = _Host(model)
    mysql = model.units["mysql/0"]

    MysqlStandIn(host).block(mysql, "mariadb failed: x", log="mariadb setup: x\n")

    assert mysql.workload == StatusValue("blocked", "mariadb failed: x")
    assert host.logs == ["mysql/0 ERROR mariadb setup: x\n"]


def test_each_principal_unit_gets_one_subordinate_unit_waiting_for_its_data():
    model = ModelState()
    model.apps["ctl"] = App("ctl", "/charms/ctl", "slurmctld")
    model.apps["otel"] = CosCollector.new_app("otel", None)
    for number in ("0", "1"):
        unit = Unit(f"ctl/{number}", "ctl", f"m{number}", number, f"10.0.0.{number}")
        model.units[unit.name] = unit
        model.apps["ctl"].units.append(unit.name)
    relation = Relation(
        id=1,
        endpoints=[
            Endpoint("ctl", "cos-agent", "cos_agent", "provider", "container"),
            Endpoint("otel", "cos-agent", "cos_agent", "requirer", "container"),
        ],
    )
    host = _Host(model)

    FilesystemClient(host).add_subordinate_units(relation)  # not its kind: nothing
    CosCollector(host).add_subordinate_units(relation)
    CosCollector(host).add_subordinate_units(relation)  # idempotent

    units = [model.units[name] for name in model.apps["otel"].units]
    assert [(u.name, u.principal, u.machine) for u in units] == [
        ("otel/0", "ctl/0", "m0"),
        ("otel/1", "ctl/1", "m1"),
    ]
    assert [u.workload for u in units] == [
        StatusValue("waiting", "waiting for cos-agent data")
    ] * 2
    assert model.apps["otel"].subordinate
    assert model.apps["otel"].leader == "otel/0"


def test_a_program_runs_with_its_values_as_arguments_never_as_shell_text():
    ran: list[list[str]] = []

    class _Machine:
        def exec(
            self, argv: list[str], *, input: str | None = None, timeout: float | None = 120
        ) -> subprocess.CompletedProcess[str]:
            ran.append(argv)
            return subprocess.CompletedProcess(argv, 0, "", "")

    model, _ = _model()
    host = _Host(model)
    host.machine = lambda unit: _Machine()  # type: ignore[method-assign]

    MysqlStandIn(host).run(model.units["mysql/0"], "mysql-setup.sh", "a b; c")

    (argv,) = ran
    assert argv[:2] == ["sh", "-c"]
    assert argv[2].startswith("#!/bin/sh\n")
    assert argv[3:] == ["mysql-setup.sh", "a b; c"]


def test_the_six_stand_ins_are_deployed_by_their_charm_names():
    assert {cls.KIND: cls.SUBORDINATE for cls in STANDINS} == {
        "mysql": False,
        "prometheus": False,
        "opentelemetry-collector": True,
        "filesystem-client": True,
        "ldap": False,
        "sssd": True,
    }
