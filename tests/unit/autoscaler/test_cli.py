"""`slurm-autoscale` end to end over a fake model and recorded Slurm answers.

The fake model answers the jubilant calls the program makes (status, run, add_unit,
remove_unit) and records the changes, so each test asserts on what would change in Juju. Its
`scaling-view` action answers what the charm's action module makes of the recorded answers
(autoscaler_recorded).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jubilant
import pytest
from autoscaler_recorded import answers, results
from slurm_autoscale import cli

POLICY = '[compute]\nmin = 0\nmax = 10\nidle-timeout = "1m"\nstep = 5\ncooldown = "5m"\n'


class FakeModel:
    def __init__(self, units: dict[str, list[str]]):
        self.units = units
        self.changes: list[tuple[Any, ...]] = []
        self.actions: list[tuple[str, str, dict[str, Any]]] = []
        self.slurm = "pending"
        self.answer: Any = None
        """What the action answers instead of the recorded state (results, or an exception)."""

    def status(self):
        def app(charm: str, names: list[str]):
            units = {
                name: SimpleNamespace(leader=i == 0, public_address=f"10.0.0.{i + 1}")
                for i, name in enumerate(names)
            }
            return SimpleNamespace(charm_name=charm, units=units)

        charms = {"slurmctld": "slurmctld", "login": "sackd"}
        apps = {name: app(charms.get(name, "slurmd"), names) for name, names in self.units.items()}
        return SimpleNamespace(apps=apps)

    def run(self, unit: str, action: str, params: dict[str, Any], *, wait: float):
        self.actions.append((unit, action, params))
        if isinstance(self.answer, Exception):
            raise self.answer
        if self.answer is not None:
            return SimpleNamespace(results=self.answer)
        return SimpleNamespace(results=results(answers(self.slurm), int(time.time())))

    def add_unit(self, app: str, *, num_units: int = 1):
        self.changes.append(("add", app, num_units))
        start = len(self.units[app])
        self.units[app] += [f"{app}/{start + i}" for i in range(num_units)]

    def remove_unit(self, *units: str):
        self.changes.append(("remove", *units))


def model(**extra: list[str]) -> FakeModel:
    return FakeModel(
        {
            "slurmctld": ["slurmctld/0"],
            "compute": extra.pop("compute", ["compute/0", "compute/1"]),
            **extra,
        }
    )


def run(tmp_path: Path, juju: FakeModel, *extra: str, policy: str = POLICY) -> int:
    (tmp_path / "policy.toml").write_text(policy)
    argv = ["--policy", str(tmp_path / "policy.toml"), "--once"]
    argv += ["--state-file", str(tmp_path / "state.json"), *extra]
    return cli.run(argv, juju=juju)  # type: ignore[arg-type]


def test_one_pass_adds_the_units_pending_jobs_need(tmp_path, caplog):
    juju = model()
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("add", "compute", 3)]
    assert "compute: +3, 2 pending jobs need 4 nodes, 1 idle, 0 enlisting" in caplog.text
    # The read-only action on the controller's leader, for the policy's partitions: no token.
    assert juju.actions[0] == ("slurmctld/0", "scaling-view", {"partitions": "compute"})
    # The next pass counts the 3 new units as enlisting: nothing is added twice.
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("add", "compute", 3)]
    assert "compute: no change, 2 pending jobs need 4 nodes, 1 idle, 3 enlisting" in caplog.text


def test_api_version_overrides_the_actions_negotiation(tmp_path):
    juju = model()

    assert run(tmp_path, juju, "--api-version", "v0.0.41", "--dry-run") == 0

    assert juju.actions[0] == (
        "slurmctld/0",
        "scaling-view",
        {"partitions": "compute", "data-parser": "v0.0.41"},
    )


def test_dry_run_changes_nothing(tmp_path, caplog):
    juju = model()
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju, "--dry-run") == 0
    assert juju.changes == []
    assert "(dry run) compute: +3" in caplog.text


def test_scale_in_removes_the_idle_unit(tmp_path):
    juju = model()
    juju.slurm = "busy"
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("remove", "compute/1")]


def test_the_cooldown_in_the_state_file_holds_scale_in(tmp_path, caplog):
    (tmp_path / "state.json").write_text(json.dumps({"compute": time.time() - 60}))
    juju = model()
    juju.slurm = "busy"
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju) == 0
    assert juju.changes == []
    assert "scale-in cooling down (" in caplog.text


def test_an_unknown_application_is_bad_input(tmp_path, caplog):
    juju = model()
    assert run(tmp_path, juju, policy=POLICY.replace("[compute]", "[gpu]")) == 2
    assert juju.changes == [] and juju.actions == []
    assert "'gpu', which the model does not have" in caplog.text


def test_an_application_that_is_not_slurmd_is_bad_input(tmp_path, caplog):
    juju = model(login=["login/0"])
    assert run(tmp_path, juju, policy=POLICY.replace("[compute]", "[login]")) == 2
    assert "'login' runs 'sackd', not slurmd" in caplog.text


def test_min_above_max_is_bad_input(tmp_path, caplog):
    juju = model()
    assert run(tmp_path, juju, policy=POLICY.replace("min = 0", "min = 11")) == 2
    assert juju.changes == []
    assert "min (11) > max (10)" in caplog.text


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (
            jubilant.TaskError(
                jubilant.Task(
                    id="1", status="failed", message="cannot read Slurm: Unable to contact"
                )
            ),
            "scaling-view on slurmctld/0 failed: cannot read Slurm: Unable to contact",
        ),
        (
            jubilant.CLIError(1, ["juju", "run"], stderr="ERROR permission denied\n"),
            "scaling-view on slurmctld/0 failed: ERROR permission denied",
        ),
        ({}, "unexpected scaling-view answer"),
        ({"parts": "1", "part-0": "not json"}, "unexpected scaling-view answer"),
        # Malformed answers that crashed the loop (AttributeError, OverflowError).
        ({"parts": "1", "part-0": "[]"}, "unexpected scaling-view answer"),
        ({"parts": "1", "part-0": '{"time": 1e400}'}, "unexpected scaling-view answer at time"),
    ],
)
def test_slurm_unreadable_never_scales(tmp_path, caplog, answer, why):
    # Every node idle for long and min 0: a readable Slurm would allow scale-in.
    juju = model()
    juju.answer = answer
    assert run(tmp_path, juju) == 1
    assert juju.changes == []
    assert f"cannot read Slurm: {why}" in caplog.text


def test_the_loop_goes_on_after_an_unreadable_answer(tmp_path, monkeypatch, caplog):
    juju = model()
    juju.answer = {"parts": "1", "part-0": '{"time": 99999999999999999999999}'}
    passes: list[float] = []

    def sleep(seconds: float) -> None:
        passes.append(seconds)
        juju.answer = None  # Slurm answers well from the second pass on.
        if len(passes) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli.time, "sleep", sleep)
    (tmp_path / "policy.toml").write_text(POLICY)
    argv = ["--policy", str(tmp_path / "policy.toml"), "--interval", "7"]
    with pytest.raises(KeyboardInterrupt):
        cli.run([*argv, "--state-file", str(tmp_path / "state.json")], juju=juju)  # type: ignore[arg-type]
    assert passes == [7, 7]
    assert "cannot read Slurm" in caplog.text
    assert juju.changes == [("add", "compute", 3)]


def test_without_a_juju_program_a_pass_logs_why_and_exits_1(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))
    (tmp_path / "policy.toml").write_text(POLICY)
    argv = ["--policy", str(tmp_path / "policy.toml"), "--once", "--dry-run"]
    assert cli.run([*argv, "--state-file", str(tmp_path / "state.json")]) == 1
    assert "No such file or directory: 'juju'" in caplog.text
    assert "unexpected failure" not in caplog.text  # A known failure, said in one line.


def test_the_juju_option_names_the_program(tmp_path, caplog):
    program = tmp_path / "my-juju"
    program.write_text('#!/bin/sh\necho "ERROR not logged in: $*" >&2\nexit 1\n')
    program.chmod(0o755)
    (tmp_path / "policy.toml").write_text(POLICY)
    argv = ["--policy", str(tmp_path / "policy.toml"), "--once", "--juju", str(program)]
    assert cli.run([*argv, "--state-file", str(tmp_path / "state.json")]) == 1
    assert "juju failed: ERROR not logged in: status --format json" in caplog.text


def test_an_unexpected_failure_is_logged_and_exits_1(tmp_path, caplog):
    juju = model()
    juju.answer = RuntimeError("surprise")
    assert run(tmp_path, juju) == 1
    assert "unexpected failure; the next pass tries again" in caplog.text


def test_a_failed_juju_call_is_reported(tmp_path, caplog):
    juju = model()

    def refuse(app, *, num_units=1):
        raise jubilant.CLIError(1, ["juju", "add-unit"], stderr="quota exceeded")

    juju.add_unit = refuse  # type: ignore[method-assign]
    assert run(tmp_path, juju) == 1
    assert "juju failed: quota exceeded" in caplog.text
    assert not (tmp_path / "state.json").exists()
