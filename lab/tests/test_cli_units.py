"""`slurm-lab juju VERB`: juju's argument shapes map to the right LabJuju calls (no machines).

Each test runs the real `slurm-lab` parser against a fake model that records its calls.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jubilant
import pytest
import yaml
from slurm_lab import cli
from slurm_lab.juju import cli as juju_cli
from slurm_lab.juju.cli import filter_log
from slurm_lab.juju.model import App, ModelState
from slurm_lab.juju.shell import command_string

STATUS: dict[str, Any] = {
    "model": {
        "name": "lab",
        "controller": "lab",
        "cloud": "lab",
        "region": "local",
        "version": "3.6.14",
    },
    "machines": {
        "0": {
            "juju-status": {"current": "started"},
            "dns-name": "10.0.0.2",
            "instance-id": "juju-abc123-0",
            "base": {"name": "debian", "channel": "13"},
        },
        "1": {
            "juju-status": {"current": "started"},
            "dns-name": "10.0.0.3",
            "instance-id": "juju-abc123-1",
            "base": {"name": "debian", "channel": "13"},
        },
    },
    "applications": {
        "slurmd": {
            "charm-name": "slurmd",
            "version": "24.11.5",
            "scale": 2,
            "application-status": {"current": "blocked", "message": "bad key"},
            "units": {
                "slurmd/0": {
                    "workload-status": {"current": "active", "message": ""},
                    "juju-status": {"current": "idle"},
                    "leader": True,
                    "machine": "0",
                    "public-address": "10.0.0.2",
                    "open-ports": ["6818/tcp"],
                },
                "slurmd/1": {
                    "workload-status": {"current": "blocked", "message": "bad key"},
                    "juju-status": {"current": "idle"},
                    "leader": False,
                    "machine": "1",
                    "public-address": "10.0.0.3",
                },
            },
        }
    },
}


CHARMCRAFT = """\
name: slurmd
config:
  options:
    n:
      type: int
      default: 3
      description: How many.
    partition-config:
      type: string
      default: ""
      description: |
        Extra parameters of this application's partition.
        An unknown key blocks the units.
    reset:
      type: boolean
      default: false
      description: Start again.
    token:
      type: string
      description: No default, so unset until given.
"""


class FakeJuju:
    """Records every call; answers from canned values, or raises what a test sets."""

    def __init__(self, charm_dir: Path) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.config_values: dict[str, Any] = {"partition-config": "", "reset": False, "n": 3}
        app = App("slurmd", str(charm_dir), "slurmd", config={"partition-config": ""})
        self.state = ModelState(apps={"slurmd": app})
        self.task = jubilant.Task(id="1", status="completed")
        self.log = ""
        self.raises: Exception | None = None

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if self.raises is not None:
            raise self.raises

    def deploy(self, charm: Any, app: str | None = None, **kwargs: Any) -> None:
        self._record("deploy", charm, app, kwargs)

    def wait(self, ready: Any, **kwargs: Any) -> None:
        self._record("wait", ready, kwargs)

    def add_unit(self, app: str, **kwargs: Any) -> None:
        self._record("add_unit", app, kwargs)

    def remove_unit(self, *units: str, **kwargs: Any) -> None:
        self._record("remove_unit", units, kwargs)

    def remove_application(self, *apps: str, **kwargs: Any) -> None:
        self._record("remove_application", apps, kwargs)

    def integrate(self, app1: str, app2: str) -> None:
        self._record("integrate", app1, app2)

    def remove_relation(self, app1: str, app2: str, **kwargs: Any) -> None:
        self._record("remove_relation", app1, app2, kwargs)

    def config(
        self, app: str, values: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Mapping[str, Any] | None:
        self._record("config", app, values, kwargs)
        return self.config_values if values is None and not kwargs.get("reset") else None

    def run(self, unit: str, action: str, params: Mapping[str, Any] | None = None) -> Any:
        self._record("run", unit, action, params)
        self.task.raise_on_failure()
        return self.task

    def exec(self, command: str, *args: str, **kwargs: Any) -> Any:
        self._record("exec", command, args, kwargs)
        self.task.raise_on_failure()
        return self.task

    def status_dict(self) -> dict[str, Any]:
        self._record("status_dict")
        return STATUS

    def debug_log(self, *, limit: int = 0) -> str:
        self._record("debug_log", limit)
        return self.log

    def destroy_lab_model(self) -> None:
        self._record("destroy_lab_model")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeJuju:
    charm_dir = tmp_path / "charm-slurmd"
    charm_dir.mkdir()
    (charm_dir / "charmcraft.yaml").write_text(CHARMCRAFT)
    juju = FakeJuju(charm_dir)
    monkeypatch.setattr(juju_cli, "make_backend", lambda args: juju)
    return juju


def lab(*argv: str) -> int:
    return cli.main(["juju", *argv])


# --- deploy and scale ----------------------------------------------------------------------------


def test_deploy_a_charm_dir_passes_its_path_name_units_and_config(
    fake: FakeJuju, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slurmd").mkdir()

    code = lab(
        "deploy", "./slurmd", "compute", "-n", "3",
        "--config", "partition-config=MaxTime=60 Default=YES",
        "--config", "slurm-package-source=archive",
    )  # fmt: skip

    assert code == 0
    assert fake.calls == [
        (
            "deploy",
            tmp_path / "slurmd",
            "compute",
            {
                "config": {
                    "partition-config": "MaxTime=60 Default=YES",
                    "slurm-package-source": "archive",
                },
                "constraints": None,
                "num_units": 3,
            },
        )
    ]


def test_deploy_a_charm_name_passes_it_as_is_with_one_unit_and_no_config(fake: FakeJuju):
    assert lab("deploy", "slurmctld") == 0

    assert fake.calls == [
        ("deploy", "slurmctld", None, {"config": None, "constraints": None, "num_units": 1})
    ]


def test_deploy_passes_lab_gpu_constraints(fake: FakeJuju):
    assert lab("deploy", "slurmd", "gpu", "--constraints", "lab-gpus=2:Tesla T4") == 0

    assert fake.calls == [
        (
            "deploy",
            "slurmd",
            "gpu",
            {"config": None, "constraints": {"lab-gpus": "2:Tesla T4"}, "num_units": 1},
        )
    ]


def test_deploy_a_bundle_deploys_the_file_and_does_not_wait(fake: FakeJuju, tmp_path: Path):
    bundle = tmp_path / "lab.yaml"
    bundle.write_text("applications: {}\n")

    assert lab("deploy", str(bundle)) == 0

    assert fake.calls == [("deploy", bundle, None, {})]


@pytest.mark.parametrize(
    "extra", [["-n", "2"], ["name"], ["--config", "a=b"], ["--constraints", "lab-gpus=1"]]
)
def test_a_bundle_takes_no_app_name_units_or_config(
    fake: FakeJuju, tmp_path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
):
    bundle = tmp_path / "lab.yaml"
    bundle.write_text("applications: {}\n")

    assert lab("deploy", str(bundle), *extra) == 1

    assert fake.calls == []
    assert "a bundle takes no" in capsys.readouterr().err


def test_deploy_of_a_missing_bundle_fails_before_touching_the_model(fake: FakeJuju):
    assert lab("deploy", "no/such/bundle.yaml") == 1
    assert fake.calls == []


def test_deploy_wait_waits_for_all_active_and_prints_the_status(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("deploy", "slurmd", "--wait", "--timeout", "10m") == 0

    wait = fake.calls[1]
    assert wait[:2] == ("wait", jubilant.all_active)
    assert wait[2] == {"error": jubilant.any_error, "timeout": 600.0}
    assert "slurmd/0*" in capsys.readouterr().out


def test_deploy_wait_exits_1_with_status_and_log_when_a_unit_errors(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    def wait(ready: Any, **kwargs: Any) -> None:
        raise jubilant.WaitError("error function any_error returned true\nStatus(...)")

    monkeypatch.setattr(fake, "wait", wait)
    fake.log = "unit-slurmd-0: 2025 ERROR hook failed\n"

    assert lab("deploy", "slurmd", "--wait") == 1

    out, err = capsys.readouterr()
    assert "slurmd/1" in out
    assert "unit-slurmd-0: 2025 ERROR hook failed" in err
    assert "ERROR error function any_error returned true" in err


def test_add_unit_takes_num_units(fake: FakeJuju):
    assert lab("add-unit", "slurmd", "-n", "2") == 0
    assert lab("add-unit", "slurmd") == 0

    assert fake.calls == [
        ("add_unit", "slurmd", {"num_units": 2}),
        ("add_unit", "slurmd", {"num_units": 1}),
    ]


def test_num_units_below_one_is_a_usage_error(fake: FakeJuju):
    with pytest.raises(SystemExit) as exit_:
        lab("add-unit", "slurmd", "-n", "0")
    assert exit_.value.code == 2
    assert fake.calls == []


def test_remove_unit_removes_every_unit_named_in_one_call(fake: FakeJuju):
    assert lab("remove-unit", "slurmd/0", "slurmd/1", "--no-prompt") == 0

    assert fake.calls == [("remove_unit", ("slurmd/0", "slurmd/1"), {"force": False})]


def test_remove_unit_refuses_an_application_name(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("remove-unit", "slurmd/0", "slurmd") == 1

    assert fake.calls == []
    assert '"slurmd" is not a unit' in capsys.readouterr().err


def test_remove_application_and_force(fake: FakeJuju):
    assert lab("remove-application", "login", "slurmd", "--force") == 0

    assert fake.calls == [("remove_application", ("login", "slurmd"), {"force": True})]


def test_integrate_and_remove_relation_pass_app_and_endpoint(fake: FakeJuju):
    assert lab("integrate", "slurmctld:slurmd", "slurmd") == 0
    assert lab("remove-relation", "slurmctld", "slurmd:slurmctld") == 0

    assert fake.calls == [
        ("integrate", "slurmctld:slurmd", "slurmd"),
        ("remove_relation", "slurmctld", "slurmd:slurmctld", {"force": False}),
    ]


# --- config --------------------------------------------------------------------------------------


def test_config_without_keys_prints_every_option_as_juju_yaml(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("config", "slurmd") == 0

    doc = yaml.safe_load(capsys.readouterr().out)
    assert {key: doc[key] for key in ("application", "charm")} == {
        "application": "slurmd",
        "charm": "slurmd",
    }
    assert {key: setting.get("value") for key, setting in doc["settings"].items()} == {
        "n": 3,
        "partition-config": "",
        "reset": False,
        "token": None,
    }


def test_config_shows_each_option_with_its_description_default_type_and_source(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("config", "slurmd") == 0

    out = capsys.readouterr().out
    settings = yaml.safe_load(out)["settings"]
    assert settings["partition-config"] == {
        "default": "",
        "description": "Extra parameters of this application's partition.\n"
        "An unknown key blocks the units.\n",
        "source": "user",  # set at deploy, even to its default
        "type": "string",
        "value": "",
    }
    assert settings["n"] == {
        "default": 3,
        "description": "How many.",
        "source": "default",
        "type": "int",
        "value": 3,
    }
    assert settings["token"] == {
        "description": "No default, so unset until given.",
        "source": "unset",
        "type": "string",
    }
    assert "    description: |\n      Extra parameters" in out  # a block, as juju prints it


@pytest.mark.parametrize(("key", "printed"), [("n", "3\n"), ("reset", "false\n")])
def test_config_with_one_key_prints_its_value(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str], key: str, printed: str
):
    assert lab("config", "slurmd", key) == 0
    assert capsys.readouterr().out == printed


def test_config_of_an_unknown_key_fails(fake: FakeJuju, capsys: pytest.CaptureFixture[str]):
    assert lab("config", "slurmd", "nope") == 1
    assert 'no option "nope"' in capsys.readouterr().err


def test_config_sets_values_split_at_the_first_equals_sign(fake: FakeJuju):
    assert lab("config", "slurmd", "partition-config=MaxTime=60 Default=YES", "n=4") == 0

    assert fake.calls == [
        (
            "config",
            "slurmd",
            {"partition-config": "MaxTime=60 Default=YES", "n": "4"},
            {"reset": []},
        )
    ]


def test_config_reset_takes_commas_and_repeats(fake: FakeJuju):
    assert lab("config", "slurmd", "--reset", "a,b", "--reset", "c") == 0

    assert fake.calls == [("config", "slurmd", None, {"reset": ["a", "b", "c"]})]


def test_config_sets_and_resets_in_one_call(fake: FakeJuju):
    assert lab("config", "slurmd", "n=1", "--reset", "a") == 0

    assert fake.calls == [("config", "slurmd", {"n": "1"}, {"reset": ["a"]})]


@pytest.mark.parametrize(
    "argv", [["n", "m=1"], ["n", "--reset", "m"], ["n", "m"]], ids=["get+set", "get+reset", "2get"]
)
def test_config_refuses_mixing_a_get_with_anything_else(fake: FakeJuju, argv: list[str]):
    assert lab("config", "slurmd", *argv) == 1
    assert fake.calls == []


def test_a_refusal_from_the_model_prints_like_juju(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.raises = jubilant.CLIError(1, ["juju"], "", 'ERROR unknown option "x"\n')

    assert lab("config", "slurmd", "x=1") == 1

    assert capsys.readouterr().err == 'ERROR unknown option "x"\n'


# --- run -----------------------------------------------------------------------------------------


def test_run_reads_parameter_values_as_yaml_and_prints_results_as_yaml(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.task = jubilant.Task(id="1", status="completed", results={"node": {"weight": "10"}})

    code = lab(
        "run", "slurmd/0", "node-config", "parameters=Weight=10 Features=fast", "reset=true", "n=2"
    )

    assert code == 0
    assert fake.calls == [
        (
            "run",
            "slurmd/0",
            "node-config",
            {"parameters": "Weight=10 Features=fast", "reset": True, "n": 2},
        )
    ]
    assert yaml.safe_load(capsys.readouterr().out) == {"node": {"weight": "10"}}


def test_run_string_args_keeps_every_value_a_string(fake: FakeJuju):
    assert lab("run", "slurmd/0", "node-config", "reset=true", "n=2", "--string-args") == 0

    assert fake.calls[0][3] == {"reset": "true", "n": "2"}


def test_run_without_parameters_passes_none(fake: FakeJuju):
    assert lab("run", "slurmctld/leader", "resume") == 0

    assert fake.calls == [("run", "slurmctld/leader", "resume", None)]


def test_a_failed_action_exits_1_with_its_message_and_results(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.task = jubilant.Task(
        id="2", status="failed", results={"partial": "yes"}, message="Weight: not a number"
    )

    assert lab("run", "slurmd/0", "node-config", "parameters=Weight=x") == 1

    out, err = capsys.readouterr()
    assert yaml.safe_load(out) == {"partial": "yes"}
    assert 'action "node-config" on slurmd/0 failed: Weight: not a number' in err


def test_a_crashed_action_shows_its_traceback_and_exit_status(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.task = jubilant.Task(id="3", status="failed", return_code=1, stderr="Traceback ...\n")

    assert lab("run", "slurmd/0", "destroy-jobs") == 1

    err = capsys.readouterr().err
    assert "Traceback ...\n" in err
    assert "failed: exit status 1" in err


def test_run_needs_key_value_parameters(fake: FakeJuju):
    with pytest.raises(SystemExit):
        lab("run", "slurmd/0", "node-config", "reset")
    assert fake.calls == []


def test_an_unknown_unit_or_action_exits_1_with_the_reason(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.raises = ValueError('unit "slurmd/9" not found')

    assert lab("run", "slurmd/9", "resume") == 1

    assert capsys.readouterr().err == 'ERROR unit "slurmd/9" not found\n'


# --- exec ----------------------------------------------------------------------------------------


def words_seen_by_the_shell(script: str) -> list[str]:
    """Run the script's command as `printf` under bash, as the lab machine's shell would."""
    done = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {script}"], capture_output=True, text=True, check=True
    )
    return done.stdout.split("\0")[:-1]


def test_exec_sbatch_wrap_reaches_the_machine_as_one_argument(fake: FakeJuju):
    assert lab("exec", "--unit", "login/0", "--", "sbatch", "--wrap", "sleep 5") == 0

    (call,) = fake.calls
    assert call == ("exec", 'sbatch --wrap "sleep 5"', (), {"unit": "login/0", "wait": 300.0})
    assert words_seen_by_the_shell(call[1].removeprefix("sbatch ")) == ["--wrap", "sleep 5"]


def test_exec_takes_the_unit_before_the_double_dash_too(fake: FakeJuju):
    assert lab("exec", "login/0", "--", "sbatch", "--wrap", "sleep 5") == 0
    assert lab("exec", "-u", "login/0", "sinfo", "-N") == 0

    assert [c[1:] for c in fake.calls] == [
        ('sbatch --wrap "sleep 5"', (), {"unit": "login/0", "wait": 300.0}),
        ("sinfo -N", (), {"unit": "login/0", "wait": 300.0}),
    ]


def test_exec_runs_a_single_argument_as_a_script(fake: FakeJuju):
    assert lab("exec", "--unit", "login/0", "--", "squeue; sinfo -N | tail -1") == 0

    assert fake.calls[0][1] == "squeue; sinfo -N | tail -1"


@pytest.mark.parametrize(
    "words",
    [
        ["a b", "c\td"],
        ['say "hi"', "it's here"],
        ["$HOME", "${USER}s", "back\\slash", "trailing\\"],
        ["--wrap", "srun hostname && echo $SLURM_JOB_ID"],
    ],
)
def test_words_with_spaces_quotes_dollars_or_backslashes_survive_the_shell(words: list[str]):
    assert words_seen_by_the_shell(command_string(words)) == words


def test_other_shell_syntax_in_separate_words_acts_on_the_machine_as_with_juju():
    assert command_string(["echo", "a", "|", "tr", "a", "b"]) == "echo a | tr a b"
    assert command_string(["echo", "x;y"]) == "echo x;y"
    assert command_string(["echo", "it's"]) == "echo it's"  # an open quote, as with juju


def test_exec_passes_stdout_stderr_and_the_return_code_through(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.task = jubilant.Task(id="4", status="failed", return_code=3, stdout="o\n", stderr="e\n")

    assert lab("exec", "--unit", "login/0", "--wait", "10m", "--", "false") == 3

    assert fake.calls[0][3] == {"unit": "login/0", "wait": 600.0}
    assert capsys.readouterr() == ("o\n", "e\n")


@pytest.mark.parametrize(
    "argv",
    [["--unit", "login/0", "--"], ["login/0", "sinfo"], ["--", "sinfo"], ["login/0"]],
    ids=["no-command", "no-dashes", "no-unit", "unit-only"],
)
def test_exec_without_a_unit_or_a_command_fails_before_running(fake: FakeJuju, argv: list[str]):
    assert lab("exec", *argv) == 1
    assert fake.calls == []


def test_the_lab_readme_says_how_long_exec_waits_and_how_to_wait_longer():
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    minutes = f"{juju_cli.EXEC_WAIT / 60:g} minutes"

    paragraph = next(p for p in readme.split("\n\n") if "slurm-lab juju exec" in p)
    assert minutes in paragraph
    assert "--wait" in paragraph
    assert "ERROR timed out waiting for command" in paragraph


@pytest.mark.parametrize("wait", ["5x", "m", "10m5"])
def test_exec_wait_must_be_a_duration(fake: FakeJuju, wait: str):
    with pytest.raises(SystemExit):
        lab("exec", "--unit", "login/0", "--wait", wait, "--", "true")


def test_exec_timeout_exits_1(fake: FakeJuju, capsys: pytest.CaptureFixture[str]):
    fake.raises = TimeoutError("timed out waiting for command")

    assert lab("exec", "--unit", "login/0", "--", "sleep 999") == 1

    assert "ERROR timed out" in capsys.readouterr().err


# --- status, debug-log, destroy-model ------------------------------------------------------------


def test_status_json_and_yaml_print_the_model_document(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("status", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out) == STATUS
    assert lab("status", "--format", "yaml") == 0
    assert yaml.safe_load(capsys.readouterr().out) == STATUS


def test_tabular_status_aligns_apps_units_and_machines_like_juju(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    assert lab("status") == 0

    lines = capsys.readouterr().out.splitlines()
    units = lines[lines.index(next(line for line in lines if line.startswith("Unit"))) :]
    assert units[1].split() == ["slurmd/0*", "active", "idle", "0", "10.0.0.2", "6818/tcp"]
    assert units[2].split() == ["slurmd/1", "blocked", "idle", "1", "10.0.0.3", "bad", "key"]
    assert units[1].index("active") == units[2].index("blocked")
    assert any(line.split()[:3] == ["slurmd", "24.11.5", "blocked"] for line in lines)
    assert any(
        line.split() == ["1", "started", "10.0.0.3", "juju-abc123-1", "debian@13"]
        for line in lines
    )


def test_status_of_an_empty_model_says_so(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(
        fake, "status_dict", lambda: {**STATUS, "applications": {}, "machines": {}}
    )

    assert lab("status") == 0

    assert "Model 'lab' is empty." in capsys.readouterr().out


LOG = """\
unit-slurmd-0: t INFO ran "install" hook (1.00s)
unit-slurmd-10: t ERROR hook "start" failed:
Traceback (most recent call last):
  boom
unit-slurmctld-0: t INFO ran "install" hook (2.00s)
unit-slurmd-1: t INFO ran "start" hook (0.50s)
"""


def test_debug_log_include_keeps_whole_entries_of_the_units_named():
    assert filter_log(LOG, ["slurmd/10"]) == (
        'unit-slurmd-10: t ERROR hook "start" failed:\nTraceback (most recent call last):\n'
        "  boom\n"
    )
    assert filter_log(LOG, ["unit-slurmd-1"]).splitlines() == [
        'unit-slurmd-1: t INFO ran "start" hook (0.50s)'
    ]
    assert len(filter_log(LOG, ["slurmd"]).splitlines()) == 5
    assert filter_log(LOG, ["slurmctld", "slurmd/1"]).count("\n") == 2


def test_debug_log_lines_counts_entries_from_the_end():
    assert filter_log(LOG, [], 2).splitlines()[0].startswith("unit-slurmctld-0")
    assert filter_log(LOG, [], 0) == LOG
    assert filter_log(LOG, ["slurmd"], 1).startswith("unit-slurmd-1:")


LEVELS_LOG = """\
unit-slurmd-0: t DEBUG install output:
Reading package lists...
unit-slurmd-0: t INFO ran "install" hook (1.00s)
unit-slurmd-0: t WARNING slow
unit-slurmd-0: t ERROR hook "start" failed:
  boom
"""


def test_debug_log_shows_info_and_up_unless_a_level_is_given(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.log = LEVELS_LOG

    assert lab("debug-log") == 0
    assert "DEBUG" not in capsys.readouterr().out
    assert lab("debug-log", "--level", "debug") == 0
    assert capsys.readouterr().out == LEVELS_LOG
    assert lab("debug-log", "--level", "WARNING") == 0
    assert capsys.readouterr().out == (
        'unit-slurmd-0: t WARNING slow\nunit-slurmd-0: t ERROR hook "start" failed:\n  boom\n'
    )


def test_a_message_holding_a_carriage_return_or_line_separator_stays_one_entry():
    text = "unit-a-0: t INFO x\runit-b-0: t INFO forged\u2028unit-b-0: t INFO forged too\n"

    assert filter_log(text, ["b"]) == ""
    assert filter_log(text, ["a"]) == text


def test_debug_log_verb_reads_the_whole_log_then_filters(
    fake: FakeJuju, capsys: pytest.CaptureFixture[str]
):
    fake.log = LOG

    assert lab("debug-log", "--include", "slurmctld", "-n", "5") == 0

    assert fake.calls == [("debug_log", 0)]
    assert capsys.readouterr().out == 'unit-slurmctld-0: t INFO ran "install" hook (2.00s)\n'


def test_destroy_model(fake: FakeJuju):
    assert lab("destroy-model") == 0
    assert fake.calls == [("destroy_lab_model",)]


@pytest.mark.parametrize("old", ["deploy-bundle", "juju-status", "juju-exec", "juju-run"])
def test_the_old_dashed_commands_are_gone(old: str):
    with pytest.raises(SystemExit) as exit_:
        cli.main([old])
    assert exit_.value.code == 2


def test_juju_needs_a_verb():
    with pytest.raises(SystemExit) as exit_:
        cli.main(["juju"])
    assert exit_.value.code == 2
