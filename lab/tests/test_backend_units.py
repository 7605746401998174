"""The backend's pure parts, without machines: charm metadata, dependencies, hook order, status.

The lab-machine tests (test_backend.py) prove the whole; these pin the rules quickly.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import time
from pathlib import Path

import jubilant
import pytest
from slurm_lab.juju import LabJuju, charms, commit, lifecycle
from slurm_lab.juju.backend import _coerce_config
from slurm_lab.juju.engine import Controller
from slurm_lab.juju.model import App, Endpoint, ModelState, Relation, StatusValue, Unit, load, save
from slurm_lab.juju.status import build_status
from slurm_lab.proc import start_time


def test_charm_file_is_merged_over_the_common_file(tmp_path: Path):
    (tmp_path / "charmcraft-common.yaml").write_text(
        "type: charm\nconfig:\n  options:\n    shared: {type: string, default: a}\n"
        "assumes: [juju >= 3.6]\n"
    )
    charm = tmp_path / "mine"
    charm.mkdir()
    (charm / "charmcraft.yaml").write_text(
        "name: mine\nconfig:\n  options:\n    own: {type: int, default: 1}\nassumes: [juju]\n"
    )

    spec = charms.load_spec(charm)

    assert spec.name == "mine"
    assert set(spec.options) == {"shared", "own"}
    assert spec.meta["assumes"] == ["juju"]  # lists are replaced, not concatenated


def test_config_values_take_their_option_type_and_unknown_keys_fail():
    options = {
        "n": {"type": "int"},
        "on": {"type": "boolean"},
        "x": {"type": "float"},
        "s": {"type": "string"},
    }

    values = _coerce_config(options, {"n": "3", "on": "true", "x": 1, "s": 5}, "app")

    assert values == {"n": 3, "on": True, "x": 1.0, "s": "5"}
    with pytest.raises(jubilant.CLIError):
        _coerce_config(options, {"nope": 1}, "app")


class _NoLab:
    state_dir = Path("/nonexistent")
    shared_dir = Path("/nonexistent/shared")
    charms_dir = Path("/nonexistent/charms")


def _model_with(app: str, units: int, *, peers: bool = True) -> tuple[Controller, ModelState]:
    model = ModelState(uuid="0" * 8)
    ctl = Controller(model, _NoLab(), Path("/nonexistent/logs"), lambda: None)  # type: ignore[arg-type]
    model.apps[app] = App(name=app, charm_dir="", charm_name=app)
    if peers:
        lifecycle.new_relation(model, [Endpoint(app, "peers", "p", "peer")])
    for n in range(units):
        unit = Unit(f"{app}/{n}", app, f"m{n}", str(n), f"10.0.0.{n + 2}")
        model.units[unit.name] = unit
        model.apps[app].units.append(unit.name)
        model.apps[app].leader = model.apps[app].leader or unit.name
    return ctl, model


def recover_after_pid_reuse(ctl: Controller, unit: Unit) -> None:
    """Recover lost hooks while `unit`'s runner PID names another, younger, live process."""
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        unit.runner_pid, unit.runner_start = stranger.pid, start_time(stranger.pid) - 1
        ctl._recover_lost_hooks()  # pyright: ignore[reportPrivateUsage]
    finally:
        stranger.kill()
        stranger.wait()


def stand_in_hooks(ctl: Controller, model: ModelState, app: str) -> list[str]:
    """Make `app` a stand-in whose hooks only record themselves: `<unit> <event kind>`."""
    ran: list[str] = []
    model.apps[app].kind = "stand-in"
    ctl.builtin["stand-in"] = lambda unit, event: ran.append(f"{unit.name} {event['kind']}")
    return ran


def _kinds(model: ModelState, unit: str) -> list[str]:
    return [
        e["kind"] + (f":{e['remote_unit']}" if e.get("remote_unit") else "")
        for e in model.queue
        if e["unit"] == unit
    ]


def test_a_new_leader_unit_queues_setup_hooks_in_juju_order():
    ctl, model = _model_with("a", 1)

    ctl.enqueue_all(lifecycle.unit_added(model, model.units["a/0"]))

    assert _kinds(model, "a/0") == [
        "install",
        "relation_created",
        "_enter_scope",
        "leader_elected",
        "config_changed",
        "start",
    ]


def test_units_in_scope_see_a_new_unit_join_only_after_its_relation_created():
    ctl, model = _model_with("a", 2)
    (peers,) = model.relations.values()
    peers.members, peers.in_scope = ["a/0"], ["a/0"]

    ctl.enqueue_all(lifecycle.unit_added(model, model.units["a/1"]))

    assert _kinds(model, "a/0") == []  # Juju's EnterScope comes after relation-created
    peers.members.append("a/1")  # its relation-created ran (the engine's `_before`)
    model.queue = [e for e in model.queue if e["kind"] != "relation_created"]
    ctl.enqueue_all(lifecycle.enter_scope(model, "a/1", peers.id))
    assert _kinds(model, "a/0") == ["relation_joined:a/1", "relation_changed:a/1"]
    assert _kinds(model, "a/1") == [
        "install",
        "_enter_scope",
        "leader_settings_changed",
        "config_changed",
        "start",
        "relation_joined:a/0",
        "relation_changed:a/0",
    ]
    assert peers.in_scope == ["a/0", "a/1"]


def test_integrated_units_join_each_other_once_both_are_in_scope():
    ctl, model = _model_with("a", 1, peers=False)
    model.apps["b"] = App(name="b", charm_dir="", charm_name="b")
    model.units["b/0"] = Unit("b/0", "b", "m9", "9", "10.0.0.9")
    model.apps["b"].units.append("b/0")
    rel = lifecycle.new_relation(
        model, [Endpoint("a", "x", "i", "provider"), Endpoint("b", "y", "i", "requirer")]
    )

    ctl.enqueue_all(lifecycle.integrated(model, rel))
    rel.members = ["a/0", "b/0"]  # both relation-created hooks ran
    model.queue = [e for e in model.queue if e["kind"] != "relation_created"]
    ctl.enqueue_all(lifecycle.enter_scope(model, "a/0", rel.id))
    first = (_kinds(model, "a/0"), _kinds(model, "b/0"))
    ctl.enqueue_all(lifecycle.enter_scope(model, "b/0", rel.id))

    assert first == (["_enter_scope"], ["_enter_scope"])  # a/0 in scope, b/0 not yet
    assert _kinds(model, "a/0")[1:] == ["relation_joined:b/0", "relation_changed:b/0"]
    assert _kinds(model, "b/0")[1:] == ["relation_joined:a/0", "relation_changed:a/0"]


def test_a_unit_whose_relation_created_failed_stays_out_of_scope_until_it_succeeds():
    ctl, model = _model_with("a", 2, peers=False)
    unit = model.units["a/1"]
    enter = {"unit": "a/1", "kind": "_enter_scope", "relation_id": 0}
    unit.failed_event = {"unit": "a/1", "kind": "relation_created", "relation_id": 0}

    held = ctl._blocked(enter, [], set())  # pyright: ignore[reportPrivateUsage]
    unit.failed_event = None
    released = ctl._blocked(enter, [], set())  # pyright: ignore[reportPrivateUsage]

    assert (held, released) == (True, False)


def test_a_leaving_unit_is_departed_elsewhere_then_departs_breaks_stops_and_is_removed():
    ctl, model = _model_with("a", 2)
    (peers,) = model.relations.values()
    peers.members = ["a/0", "a/1"]
    peers.seen = {"a/0": ["a/1"], "a/1": ["a/0"]}

    ctl.enqueue_all(lifecycle.departing(model, model.units["a/0"]))

    assert _kinds(model, "a/1") == ["relation_departed:a/0"]
    assert _kinds(model, "a/0") == ["relation_departed:a/1", "relation_broken", "stop", "remove"]
    assert all(e.get("departing_unit") in (None, "a/0") for e in model.queue)


def test_status_shows_a_failed_hook_as_error_and_derives_the_app_status(tmp_path: Path):
    _, model = _model_with("a", 2, peers=False)
    model.units["a/0"].workload = StatusValue("active", "ok")
    model.units["a/1"].workload = StatusValue("active", "ok")
    model.units["a/1"].failed_event = {"unit": "a/1", "kind": "config_changed"}
    save(model, tmp_path / "model.json")
    reloaded = load(tmp_path / "model.json")
    assert reloaded is not None

    status = jubilant.Status._from_dict(build_status(reloaded))  # pyright: ignore[reportPrivateUsage]

    assert status.apps["a"].units["a/1"].workload_status.message == 'hook failed: "config-changed"'
    assert status.apps["a"].app_status.current == "error"
    assert jubilant.any_error(status)
    assert not jubilant.all_active(status)
    assert status.apps["a"].units["a/0"].leader


def test_update_status_fires_every_five_minutes_by_default():
    default = inspect.signature(LabJuju).parameters["update_status_interval"].default

    assert default == 300.0


def test_a_failed_hook_is_retried_after_5_s_doubling_up_to_5_minutes():
    ctl, model = _model_with("a", 1)
    unit = model.units["a/0"]
    delays: list[float] = []

    for _ in range(9):
        ctl._failed(unit, {"unit": "a/0", "kind": "install"})  # pyright: ignore[reportPrivateUsage]
        delays.append(unit.retry_delay)

    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300]
    assert unit.in_error
    assert unit.retry_at > time.time() + 290
    ctl.retry_now(unit)
    assert unit.retry_at == 0.0


def test_a_units_events_wait_for_its_running_hook_but_not_other_units():
    ctl, model = _model_with("a", 2, peers=False)
    model.units["a/0"].running = {"unit": "a/0", "kind": "stop"}
    model.queue = [
        {"unit": "a/0", "kind": "remove"},
        {"unit": "a/0", "kind": "_destroy_unit"},
        {"unit": "a/1", "kind": "update_status"},
    ]
    ran = stand_in_hooks(ctl, model, "a")

    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]

    assert ran == ["a/1 update_status"]
    assert [e["kind"] for e in model.queue] == ["remove", "_destroy_unit"]
    assert "a/0" in model.units  # its machine waits for its hooks


def test_a_hook_whose_runner_died_is_retried_even_once_its_pid_names_another_process(
    tmp_path: Path,
):
    """A CLI killed mid-hook leaves the unit running; its PID may go to any process since."""
    ctl, model = _model_with("a", 1, peers=False)
    ctl.log_dir = tmp_path
    unit = model.units["a/0"]
    unit.running, unit.agent = {"unit": "a/0", "kind": "config_changed"}, "executing"

    recover_after_pid_reuse(ctl, unit)

    assert unit.running is None
    assert unit.in_error
    assert unit.failed_event == {"unit": "a/0", "kind": "config_changed"}
    assert 'hook "config-changed" lost' in (tmp_path / "unit-a-0.log").read_text()


def test_a_hook_whose_runner_still_runs_is_left_to_it():
    ctl, model = _model_with("a", 1, peers=False)
    unit = model.units["a/0"]
    unit.running, unit.agent = {"unit": "a/0", "kind": "config_changed"}, "executing"
    unit.runner_pid, unit.runner_start = os.getppid(), start_time(os.getppid())

    ctl._recover_lost_hooks()  # pyright: ignore[reportPrivateUsage]

    assert unit.running == {"unit": "a/0", "kind": "config_changed"}
    assert not unit.in_error


def test_only_the_leader_changes_an_application_secret():
    """A non-leader's secret calls (refused by its tools) must never change the secret."""
    from slurm_lab.juju.model import Secret, SecretRevision

    _, model = _model_with("ctl", 2)
    secret = Secret("secret:k", "ctl", "app", [SecretRevision(1, {"key": "x"})])
    secret.grants = {"2": ["login"]}
    model.secrets[secret.id] = secret
    model.relations["2"] = Relation(
        2, [Endpoint("ctl", "a", "i", "provider"), Endpoint("login", "b", "i", "requirer")]
    )
    revoke = [{"op": "revoke", "id": secret.id, "relation": "2", "unit": None, "app": None}]

    commit.apply_secret_ops(model, model.units["ctl/1"], revoke)
    assert secret.grants == {"2": ["login"]}

    commit.apply_secret_ops(model, model.units["ctl/0"], revoke)
    assert secret.grants == {}


def _commit_secret_ops(ctl: Controller, unit: Unit, *ops: dict[str, object]) -> None:
    """Commit a hook (exit 0) whose only changes are these secret-tool calls (jujuc's ops)."""
    ctl.commit(unit, {"out": {"secret_ops": list(ops)}})


def test_secret_remove_goes_to_the_owners_leader_once_no_consumer_tracks_a_revision():
    """Juju: a revision that is not the latest and that no consumer tracks is obsolete."""
    from slurm_lab.juju.model import Consumer, Secret, SecretRevision

    ctl, model = _model_with("ctl", 2)
    model.units["login/0"] = Unit("login/0", "login", "m9", "9", "10.0.0.9")
    model.apps["login"] = App(name="login", charm_dir="", charm_name="login", leader="login/0")
    secret = Secret("secret:k", "ctl", "app", [SecretRevision(1, {"key": "a"})])
    secret.consumers = {"login/0": Consumer(1)}
    model.secrets[secret.id] = secret
    model.queue.clear()
    leader = model.units["ctl/0"]

    _commit_secret_ops(ctl, leader, {"op": "set", "id": secret.id, "content": {"key": "b"}})
    assert [e["kind"] for e in model.queue] == ["secret_changed"]  # login/0 still tracks 1.

    model.queue.clear()
    refresh = {"op": "track", "id": secret.id, "revision": 2}  # secret-get --refresh
    _commit_secret_ops(ctl, model.units["login/0"], refresh)
    assert model.queue == [
        {"unit": "ctl/0", "kind": "secret_remove", "secret_id": secret.id, "revision": 1}
    ]

    model.queue.clear()
    _commit_secret_ops(ctl, model.units["login/0"], refresh)
    assert model.queue == []  # Once per revision.

    remove = {"op": "remove", "id": secret.id, "revision": 1}  # secret-remove --revision 1
    _commit_secret_ops(ctl, model.units["ctl/1"], remove)
    assert [r.revision for r in secret.revisions] == [1, 2]  # Only the leader removes.
    _commit_secret_ops(ctl, leader, {"op": "remove", "id": secret.id, "revision": 2})
    assert [r.revision for r in secret.revisions] == [1, 2]  # The latest stays.
    _commit_secret_ops(ctl, leader, remove)
    assert [r.revision for r in secret.revisions] == [2]


def test_a_revision_no_one_ever_read_is_obsolete_as_soon_as_a_newer_one_exists():
    from slurm_lab.juju.model import Secret, SecretRevision

    ctl, model = _model_with("ctl", 1)
    secret = Secret("secret:k", "ctl", "app", [SecretRevision(1, {"key": "a"})])
    model.secrets[secret.id] = secret
    model.queue.clear()

    _commit_secret_ops(
        ctl, model.units["ctl/0"], {"op": "set", "id": secret.id, "content": {"key": "b"}}
    )

    assert model.queue == [
        {"unit": "ctl/0", "kind": "secret_remove", "secret_id": secret.id, "revision": 1}
    ]


LABTEST = Path(__file__).parent / "charms" / "labtest"


def test_an_exec_holds_its_units_hooks_until_it_ends_but_not_other_units(tmp_path: Path):
    ctl, model = _model_with("a", 2, peers=False)
    ctl.log_dir = tmp_path
    model.apps["a"].charm_dir = str(LABTEST)
    event, run = ctl.start_exec(model.units["a/0"], "is-leader")
    model.queue = [
        {"unit": "a/0", "kind": "update_status"},
        {"unit": "a/1", "kind": "update_status"},
    ]
    ran = stand_in_hooks(ctl, model, "a")

    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]
    assert ran == ["a/1 update_status"]  # a/0's waits for the command
    assert run.env()["PATH"].startswith("/var/lib/juju/tools/unit-a-0:")  # the hook tools first

    ctl.end_exec("a/0", event, {"ok": False, "code": 3, "error": "exit status 3", "context": None})
    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]

    assert ran == ["a/1 update_status", "a/0 update_status"]
    assert not model.units["a/0"].in_error  # a failing command is not a failed hook


def test_an_exec_whose_process_died_frees_its_unit_without_an_error(tmp_path: Path):
    ctl, model = _model_with("a", 1, peers=False)
    ctl.log_dir = tmp_path
    unit = model.units["a/0"]
    unit.running, unit.agent = {"unit": "a/0", "kind": "custom", "name": "juju-exec"}, "x"

    recover_after_pid_reuse(ctl, unit)

    assert unit.running is None
    assert not unit.in_error


class _LabWithAMachineDown(_NoLab):
    """m0 is powered off; every other machine runs."""

    @staticmethod
    def is_running(name: str) -> bool:
        return name != "m0"


def test_a_machine_that_is_down_runs_no_hook_nor_retry_until_it_is_up_again():
    ctl, model = _model_with("a", 2, peers=False)
    ctl.lab = _LabWithAMachineDown()  # type: ignore[assignment]
    ran = stand_in_hooks(ctl, model, "a")
    model.queue = [
        {"unit": "a/0", "kind": "config_changed"},
        {"unit": "a/1", "kind": "config_changed"},
    ]

    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]

    assert ran == ["a/1 config_changed"]
    assert model.queue == [{"unit": "a/0", "kind": "config_changed"}]
    ctl._failed(model.units["a/0"], {"unit": "a/0", "kind": "install"})  # pyright: ignore[reportPrivateUsage]
    model.units["a/0"].retry_at = 0.0  # due
    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]
    assert ran == ["a/1 config_changed"]  # no retry while down
    assert model.units["a/0"].in_error

    ctl.lab = _NoLab()  # type: ignore[assignment]  # m0 is back (a lab without is_running: all up)
    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]

    assert ran == ["a/1 config_changed", "a/0 install"]  # the retry first, then the rest
    ctl._start_runnable()  # pyright: ignore[reportPrivateUsage]
    assert ran[-1] == "a/0 config_changed"


def test_a_leader_change_moves_leadership_to_the_next_unit_which_gets_leader_elected():
    _, model = _model_with("a", 3, peers=False)

    leader, events = commit.move_leadership(model, "a")

    assert leader == model.apps["a"].leader == "a/1"
    assert events == [{"unit": "a/1", "kind": "leader_elected"}]
    assert commit.move_leadership(model, "a")[0] == "a/2"
    assert commit.move_leadership(model, "a")[0] == "a/0"  # wraps around
    _, alone = _model_with("b", 1, peers=False)
    with pytest.raises(ValueError, match="no other unit"):
        commit.move_leadership(alone, "b")
