"""`slurm-autoscale` end to end over a fake model and recorded slurmrestd responses.

The fake model answers the jubilant calls the program makes (status, run, config, add_unit,
remove_unit) and records the changes, so each test asserts on what would change in Juju.
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
from slurm_autoscale import cli
from slurm_autoscale.slurm import SlurmUnreadable

FIXTURES = Path(__file__).parent / "fixtures"
POLICY = '[compute]\nmin = 0\nmax = 10\nidle-timeout = "1m"\nstep = 5\ncooldown = "5m"\n'


class FakeModel:
    def __init__(self, units: dict[str, list[str]]):
        self.units = units
        self.changes: list[tuple[Any, ...]] = []

    def status(self):
        def app(charm: str, names: list[str]):
            units = {
                name: SimpleNamespace(leader=i == 0, public_address=f"10.0.0.{i + 1}")
                for i, name in enumerate(names)
            }
            return SimpleNamespace(charm_name=charm, units=units)

        charms = {"slurmctld": "slurmctld", "slurmrestd": "slurmrestd", "login": "sackd"}
        apps = {name: app(charms.get(name, "slurmd"), names) for name, names in self.units.items()}
        return SimpleNamespace(apps=apps)

    def run(self, unit: str, action: str, params: dict[str, Any]):
        assert (unit, action, params["username"]) == ("slurmctld/0", "token", "root")
        return SimpleNamespace(results={"token": "a-token"})

    def config(self, app: str):
        return {"port": 6820}

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
            "slurmrestd": ["slurmrestd/0"],
            "compute": extra.pop("compute", ["compute/0", "compute/1"]),
            **extra,
        }
    )


@pytest.fixture
def slurm_state(monkeypatch: pytest.MonkeyPatch):
    """Serve a recorded state over the fake transport; returns the URLs asked."""
    asked: list[str] = []
    state = {"name": "pending"}

    def get(url: str, headers: dict[str, str]) -> tuple[int, str]:
        assert headers["X-SLURM-USER-TOKEN"] == "a-token"
        asked.append(url)
        endpoint = url.rsplit("/", 1)[1]
        return 200, (FIXTURES / f"{state['name']}-v0.0.41-{endpoint}.json").read_text()

    monkeypatch.setattr(cli, "http_get", get)
    return state, asked


def run(tmp_path: Path, juju: FakeModel, *extra: str, policy: str = POLICY) -> int:
    (tmp_path / "policy.toml").write_text(policy)
    argv = ["--policy", str(tmp_path / "policy.toml"), "--once"]
    argv += ["--state-file", str(tmp_path / "state.json"), *extra]
    return cli.run(argv, juju=juju)  # type: ignore[arg-type]


def test_one_pass_adds_the_units_pending_jobs_need(tmp_path, slurm_state, caplog):
    juju = model()
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("add", "compute", 3)]
    assert "compute: +3, 2 pending jobs need 4 nodes, 1 idle, 0 enlisting" in caplog.text
    assert slurm_state[1][0] == "http://10.0.0.1:6820/slurm/v0.0.41/jobs"
    # The next pass counts the 3 new units as enlisting: nothing is added twice.
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("add", "compute", 3)]
    assert "compute: no change, 2 pending jobs need 4 nodes, 1 idle, 3 enlisting" in caplog.text


def test_dry_run_changes_nothing(tmp_path, slurm_state, caplog):
    juju = model()
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju, "--dry-run") == 0
    assert juju.changes == []
    assert "(dry run) compute: +3" in caplog.text


def test_scale_in_removes_the_idle_unit(tmp_path, slurm_state):
    slurm_state[0]["name"] = "busy"
    juju = model()
    assert run(tmp_path, juju) == 0
    assert juju.changes == [("remove", "compute/1")]


def test_the_cooldown_in_the_state_file_holds_scale_in(tmp_path, slurm_state, caplog):
    slurm_state[0]["name"] = "busy"
    (tmp_path / "state.json").write_text(json.dumps({"compute": time.time() - 60}))
    juju = model()
    caplog.set_level(logging.INFO)
    assert run(tmp_path, juju) == 0
    assert juju.changes == []
    assert "scale-in cooling down (" in caplog.text


def test_an_unknown_application_is_bad_input(tmp_path, slurm_state, caplog):
    juju = model()
    assert run(tmp_path, juju, policy=POLICY.replace("[compute]", "[gpu]")) == 2
    assert juju.changes == [] and slurm_state[1] == []
    assert "'gpu', which the model does not have" in caplog.text


def test_an_application_that_is_not_slurmd_is_bad_input(tmp_path, slurm_state, caplog):
    juju = model(login=["login/0"])
    assert run(tmp_path, juju, policy=POLICY.replace("[compute]", "[login]")) == 2
    assert "'login' runs 'sackd', not slurmd" in caplog.text


def test_min_above_max_is_bad_input(tmp_path, slurm_state, caplog):
    juju = model()
    assert run(tmp_path, juju, policy=POLICY.replace("min = 0", "min = 11")) == 2
    assert juju.changes == []
    assert "min (11) > max (10)" in caplog.text


@pytest.mark.parametrize(
    "answer", [(503, "unavailable"), (200, "not json"), (200, '{"errors": [{"error": "x"}]}')]
)
def test_slurm_unreadable_never_scales(tmp_path, monkeypatch, caplog, answer):
    monkeypatch.setattr(cli, "http_get", lambda url, headers: answer)
    # Every node idle for long and min 0: a readable Slurm would allow scale-in.
    juju = model()
    assert run(tmp_path, juju) == 1
    assert juju.changes == []
    assert "cannot read Slurm" in caplog.text


def test_slurmrestd_unreachable_never_scales(tmp_path, monkeypatch, caplog):
    def unreachable(url, headers):
        raise SlurmUnreadable(f"slurmrestd unreachable at {url}: [Errno 111] refused")

    monkeypatch.setattr(cli, "http_get", unreachable)
    juju = model()
    assert run(tmp_path, juju) == 1
    assert juju.changes == []
    assert "unreachable" in caplog.text


def test_rest_via_unit_runs_curl_there(tmp_path):
    juju = model(login=["login/0"])
    body = (FIXTURES / "busy-v0.0.41-jobs.json").read_text()
    commands: list[str] = []

    def exec_(command: str, *, unit: str, wait: float):
        commands.append(command)
        endpoint = command.rsplit("/", 1)[1].strip("'")
        text = (FIXTURES / f"busy-v0.0.41-{endpoint}.json").read_text()
        return SimpleNamespace(stdout=f"{text}\n--http-status--200")

    juju.exec = exec_  # type: ignore[attr-defined]
    assert run(tmp_path, juju, "--rest-via-unit", "login/0", "--dry-run") == 0
    assert len(commands) == 3 and body
    assert "curl -sS" in commands[0] and "X-SLURM-USER-TOKEN: a-token" in commands[0]


def test_a_failed_juju_call_is_reported(tmp_path, slurm_state, caplog):
    juju = model()

    def refuse(app, *, num_units=1):
        raise jubilant.CLIError(1, ["juju", "add-unit"], stderr="quota exceeded")

    juju.add_unit = refuse  # type: ignore[method-assign]
    assert run(tmp_path, juju) == 1
    assert "juju failed: quota exceeded" in caplog.text
    assert not (tmp_path / "state.json").exists()
