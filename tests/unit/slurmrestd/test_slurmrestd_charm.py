"""slurmrestd joins the cluster: sackd fetches the configuration, slurmrestd serves the API.

Each scenario starts from an installed unit, fires one event (or a short sequence, each run on
the state the previous one left) and checks the machine, the files and the unit's status.
"""

import base64
import json
import stat
from pathlib import Path

import ops
import pytest
from charm_testing import FakeMachine, already_installed, retried_once_mended
from hpc_libs.charm import wake
from ops import testing

KEY = base64.b64encode(b"k" * 1024).decode()
JWT_CONF = "ClusterName=c\nSlurmctldHost=ctl0(10.0.0.1)\nAuthAltTypes=auth/jwt\n"
PING_UP = json.dumps(
    {"pings": [{"hostname": "ctl0", "pinged": "UP", "responding": True, "primary": True}]}
)
PING_DOWN = json.dumps({"pings": [{"hostname": "ctl0", "pinged": "DOWN", "responding": False}]})
DROP_IN = "etc/systemd/system/slurmrestd.service.d/charm.conf"
WATCH = "slurmrestd-charm-conf.path"
WATCH_DIR = "etc/systemd/system"
EXPECTED_DROP_IN = """\
# Written by the slurmrestd charm; changes are overwritten.
[Unit]
After=sackd.service
Requires=sackd.service
ConditionPathExists=

[Service]
User=slurmrestd
Group=slurmrestd
Environment=SLURM_CONF=/run/slurm/conf/slurm.conf
Environment=SLURM_JWT=daemon
ExecStart=
ExecStart=/usr/sbin/slurmrestd -a rest_auth/jwt -s openapi/slurmctld -t 20 \
--max-connections 124 :6820
"""


def slurmctld(raw: dict[str, str] | None = None, secret: testing.Secret | None = None):
    data = raw or {
        "controllers": json.dumps([{"hostname": "ctl0", "address": "10.0.0.1", "port": 6817}])
    }
    if secret is not None:
        data["auth_key_id"] = json.dumps(secret.id)
    return testing.Relation("slurmctld", remote_app_name="slurmctld", remote_app_data=data)


def ready_state(**config: str | int) -> tuple[testing.State, testing.Relation, testing.Relation]:
    secret = testing.Secret(tracked_content={"key": KEY})
    relation = slurmctld(secret=secret)
    portal = testing.Relation("rest-api", remote_app_name="portal")
    state = testing.State(
        config={"slurm-package-source": "archive", **config},
        relations={relation, portal},
        secrets={secret},
        stored_states={already_installed("SlurmrestdCharm")},
    )
    return state, relation, portal


def cache_conf(root: Path, text: str = JWT_CONF) -> None:
    path = root / "run/slurm/conf/slurm.conf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def serving(machine: FakeMachine, root: Path) -> FakeMachine:
    """A machine where sackd has fetched a configuration with JWT and a controller answers."""
    cache_conf(root)
    machine.responses[("scontrol", "ping")] = PING_UP
    return machine


def test_without_slurmctld_it_blocks_and_runs_nothing(ctx, machine: FakeMachine, root: Path):
    state = testing.State(stored_states={already_installed("SlurmrestdCharm")})

    out = ctx.run(ctx.on.start(), state)

    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")
    assert machine.service_calls == []
    assert not (root / DROP_IN).exists()
    assert machine.opened_ports == []


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("port", 0),
        ("port", 65536),
        ("threads", 0),
        ("threads", 1025),
        ("max-connections", 0),
        ("max-connections", 8193),
        ("listen-address", "0.0.0.0 -vv"),
        ("listen-address", "host\nExecStart=/bin/sh"),
        ("listen-address", "a,b"),
        ("listen-address", "fe80::1%$x"),
        ("listen-address", "fe80::1%a,b"),
        ("listen-address", "fe80::1%a b"),
        ("listen-address", "fe80::1%interface-too-long"),
    ],
)
def test_a_bad_option_blocks_naming_it_and_changes_nothing(
    ctx, serving: FakeMachine, root: Path, option: str, value: str | int
):
    state, _, _ = ready_state(**{option: value})

    out = ctx.run(ctx.on.config_changed(), state)

    assert isinstance(out.unit_status, ops.BlockedStatus)
    assert f"'{option}'" in out.unit_status.message
    assert serving.service_calls == []
    assert not (root / DROP_IN).exists()


def test_an_ipv6_scope_id_reaches_slurmrestd_unchanged_through_systemd(
    ctx, serving: FakeMachine, root: Path
):
    state, _, _ = ready_state(**{"listen-address": "fe80::1%eth0"})

    ctx.run(ctx.on.config_changed(), state)

    (exec_start,) = [
        line
        for line in (root / DROP_IN).read_text().splitlines()
        if line.startswith("ExecStart=/")
    ]
    assert exec_start.endswith(" [fe80::1%%eth0]:6820")  # systemd reads %% as %.


def test_ready_data_starts_sackd_then_slurmrestd_through_the_drop_in(
    ctx, serving: FakeMachine, root: Path
):
    state, relation, portal = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert (root / DROP_IN).read_text() == EXPECTED_DROP_IN
    assert serving.calls("restart") == ["sackd", "slurmrestd"]
    assert serving.calls("enable") == ["sackd", WATCH, "slurmrestd"]
    assert serving.calls("start") == [WATCH]
    assert serving.ran("systemctl", "daemon-reload") == [["systemctl", "daemon-reload"]] * 2
    key = root / "etc/slurm/slurm.key"
    assert key.read_bytes() == b"k" * 1024
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (root / "etc/default/sackd").read_text().splitlines()[1] == (
        'SACKD_OPTIONS="--conf-server 10.0.0.1:6817"'
    )
    assert not (root / "etc/slurm/jwt_hs256.key").exists()
    assert serving.opened_ports == ["6818/tcp", "6820/tcp"]  # sackd's too: configs pushed
    url = "http://192.0.2.0:6820"
    assert out.get_relation(portal.id).local_unit_data["url"] == json.dumps(url)
    assert out.unit_status == ops.ActiveStatus(f"serving {url}; controller answers")
    ping = serving.ran("scontrol", "ping")
    assert ping == [["scontrol", "ping", "--json"]]
    assert {tuple(c): t for c, t in serving.timeouts}[("scontrol", "ping", "--json")] <= 10


def test_a_running_unit_tells_slurmctld_its_slurm_release_beside_its_key(ctx, serving):
    """slurmctld writes keys an older release refuses only once every REST unit says so."""
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    mine = out.get_relation(relation.id).local_unit_data
    assert json.loads(mine["version"]) == "24.11.5"
    assert "auth_key_digest" in mine


def test_a_unit_whose_sackd_failed_to_start_tells_no_release(ctx, serving: FakeMachine):
    state, relation, _ = ready_state()
    serving.service_fails("sackd", "fatal: no")

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert "version" not in out.get_relation(relation.id).local_unit_data


def test_the_unprivileged_user_is_created_when_missing(ctx, serving: FakeMachine):
    serving.fail("getent", returncode=2)
    state, relation, _ = ready_state()

    ctx.run(ctx.on.relation_changed(relation), state)

    assert serving.ran("useradd") == [
        [
            "useradd",
            "--system",
            "--user-group",
            "--no-create-home",
            "--home-dir",
            "/nonexistent",
            "--shell",
            "/usr/sbin/nologin",
            "slurmrestd",
        ]
    ]


def test_an_existing_user_is_kept(ctx, serving: FakeMachine):
    state, relation, _ = ready_state()

    ctx.run(ctx.on.relation_changed(relation), state)

    assert serving.ran("getent", "passwd", "slurmrestd")
    assert serving.ran("useradd") == []


def test_a_user_lookup_failure_is_a_status_and_starts_nothing_more(ctx, serving: FakeMachine):
    serving.fail("getent", returncode=1, stderr="nss broken")
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.BlockedStatus("cannot look up user slurmrestd: nss broken")
    assert "slurmrestd" not in serving.calls("restart")


def test_options_reach_the_drop_in_and_the_port(ctx, serving: FakeMachine, root: Path):
    state, relation, portal = ready_state(
        **{"listen-address": "fd00::5", "port": 8080, "threads": 8, "max-connections": 64}
    )

    out = ctx.run(ctx.on.relation_changed(relation), state)

    exec_start = (root / DROP_IN).read_text().splitlines()[-1]
    assert exec_start.endswith(" -t 8 --max-connections 64 [fd00::5]:8080")
    assert serving.opened_ports == ["6818/tcp", "8080/tcp"]
    assert out.get_relation(portal.id).local_unit_data["url"] == '"http://[fd00::5]:8080"'


def test_accounting_through_slurmdbd_loads_the_slurmdbd_openapi_plugin(
    ctx, serving: FakeMachine, root: Path
):
    cache_conf(root, JWT_CONF + "AccountingStorageType=accounting_storage/slurmdbd\n")
    state, relation, _ = ready_state()

    ctx.run(ctx.on.relation_changed(relation), state)

    assert " -s openapi/slurmctld,openapi/slurmdbd " in (root / DROP_IN).read_text()


def test_before_sackd_fetched_the_configuration_slurmrestd_waits(
    ctx, machine: FakeMachine, root: Path
):
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert machine.calls("restart") == ["sackd"]
    assert not (root / DROP_IN).exists()
    assert out.unit_status == ops.WaitingStatus(
        "waiting for sackd to fetch the cluster's configuration"
    )


def test_without_auth_jwt_in_the_cluster_slurmrestd_waits(ctx, machine: FakeMachine, root: Path):
    cache_conf(root, "ClusterName=c\nAuthAltTypes=auth/none\n")
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert "slurmrestd" not in machine.calls("restart")
    assert out.unit_status == ops.WaitingStatus("waiting for slurmctld to enable auth/jwt")


def test_a_silent_controller_is_waiting_with_the_url(ctx, serving: FakeMachine):
    serving.responses[("scontrol", "ping")] = PING_DOWN
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.WaitingStatus(
        "serving http://192.0.2.0:6820; no controller answers"
    )


def test_a_ping_that_times_out_is_waiting(ctx, serving: FakeMachine):
    serving.time_out("scontrol", "ping")
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith("serving http://192.0.2.0:6820; no controller")


def test_a_failed_restart_shows_the_journal_reason_and_is_retried(ctx, serving: FakeMachine):
    reason = "slurmrestd: fatal: Failure loading plugin path bindings"
    serving.service_fails("slurmrestd", reason)
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert out.unit_status == ops.BlockedStatus(
        "slurmrestd cannot restart: fatal: Failure loading plugin path bindings"
    )
    out = retried_once_mended(ctx, serving, out, "slurmrestd")

    assert out.unit_status == ops.ActiveStatus("serving http://192.0.2.0:6820; controller answers")


def test_a_stopped_sackd_is_blocked_with_its_reason(ctx, serving: FakeMachine):
    state, relation, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.active.discard("sackd")
    serving.journals["sackd"] = ["sackd: fatal: Unable to contact slurmctld"]
    serving.service_fails("sackd", "sackd: fatal: Unable to contact slurmctld")

    out = ctx.run(ctx.on.update_status(), out)

    assert out.unit_status == ops.BlockedStatus(
        "sackd cannot restart: fatal: Unable to contact slurmctld"
    )


def test_nothing_changed_restarts_nothing(ctx, serving: FakeMachine):
    state, relation, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.service_calls.clear()

    ctx.run(ctx.on.update_status(), out)

    assert serving.calls("restart") == []


def running_then_refetched(ctx, serving: FakeMachine, root: Path, added: str) -> testing.State:
    """slurmrestd runs; then sackd refetches slurm.conf with `added` (calls so far forgotten)."""
    state, relation, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.service_calls.clear()
    cache_conf(root, JWT_CONF + added)
    return out


def test_a_configuration_sackd_refetched_restarts_slurmrestd_only(
    ctx, serving: FakeMachine, root: Path
):
    out = running_then_refetched(ctx, serving, root, "SlurmctldHost=ctl1(10.0.0.2)\n")

    ctx.run(ctx.on.update_status(), out)

    assert serving.calls("restart") == ["slurmrestd"]


def test_new_controllers_restart_sackd_and_slurmrestd(ctx, serving: FakeMachine, root: Path):
    state, relation, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.service_calls.clear()
    moved = testing.Relation(
        "slurmctld",
        id=relation.id,
        remote_app_name="slurmctld",
        remote_app_data={
            **relation.remote_app_data,
            "controllers": json.dumps([{"address": "10.0.0.1"}, {"address": "10.0.0.2"}]),
        },
    )
    out = ctx.run(
        ctx.on.relation_changed(moved),
        testing.State(
            config=out.config,
            relations={moved, *(r for r in out.relations if r.id != relation.id)},
            secrets=out.secrets,
            stored_states=out.stored_states,
        ),
    )

    assert serving.calls("restart") == ["sackd", "slurmrestd"]
    assert "--conf-server 10.0.0.1:6817,10.0.0.2:6817" in (root / "etc/default/sackd").read_text()


@pytest.mark.parametrize(
    "raw",
    [
        {"auth_key_id": '"secret:x"', "controllers": '[{"address": "ctl --foo"}]'},
        {"auth_key_id": '"secret:x"', "controllers": '[{"address": "ctl\\nExecStart=/bin/sh"}]'},
    ],
)
def test_hostile_controller_data_is_refused_and_named(ctx, serving: FakeMachine, raw):
    relation = slurmctld(raw)
    state = testing.State(
        relations={relation}, stored_states={already_installed("SlurmrestdCharm")}
    )

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert isinstance(out.unit_status, ops.WaitingStatus)
    assert out.unit_status.message.startswith("slurmctld sent an invalid controllers")
    assert serving.service_calls == []


def test_leaving_stops_both_deletes_the_key_closes_the_port_and_withdraws_the_url(
    ctx, serving: FakeMachine, root: Path
):
    state, relation, portal = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.service_calls.clear()

    out = ctx.run(ctx.on.relation_broken(out.get_relation(relation.id)), out)

    assert serving.calls("stop") == [WATCH, "slurmrestd", "sackd"]
    assert not (root / "etc/slurm/slurm.key").exists()
    assert not (root / WATCH_DIR / WATCH).exists()
    assert not (root / WATCH_DIR / "slurmrestd-charm-conf.service").exists()
    assert serving.opened_ports == []
    assert "url" not in out.get_relation(portal.id).local_unit_data
    assert out.unit_status == ops.BlockedStatus("needs a slurmctld integration")


# A new slurm.conf from sackd wakes the charm (conf_watch), not the next update-status.


def test_a_path_unit_watches_sackds_copy_and_dispatches_the_charms_event(
    ctx, serving: FakeMachine, root: Path
):
    state, relation, _ = ready_state()

    ctx.run(ctx.on.relation_changed(relation), state)

    path_unit = (root / WATCH_DIR / WATCH).read_text()
    assert "PathChanged=/run/slurm/conf/slurm.conf\n" in path_unit
    assert "Unit=slurmrestd-charm-conf.service\n" in path_unit
    service = (root / WATCH_DIR / "slurmrestd-charm-conf.service").read_text()
    (exec_start,) = [line for line in service.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.startswith("ExecStart=juju-exec -u slurmrestd/0 ")
    assert '"JUJU_DISPATCH_PATH=hooks/slurmrestd-conf-changed /' in exec_start
    assert exec_start.endswith('/dispatch"')
    assert "Type=oneshot" in service


def test_the_watch_is_written_once_and_restarted_only_if_it_stopped(
    ctx, serving: FakeMachine, root: Path, monkeypatch: pytest.MonkeyPatch
):
    # Juju's charm directory is the same from hook to hook; the Context's is a new temporary
    # one for each run, so pin it where the service unit names it.
    real = wake.dispatch_command
    monkeypatch.setattr(
        wake,
        "dispatch_command",
        lambda unit, _, event: real(unit, "/var/lib/juju/agents/unit-slurmrestd-0/charm", event),
    )
    state, relation, _ = ready_state()
    out = ctx.run(ctx.on.relation_changed(relation), state)
    serving.service_calls.clear()
    before = len(serving.ran("systemctl", "daemon-reload"))

    out = ctx.run(ctx.on.update_status(), out)

    assert len(serving.ran("systemctl", "daemon-reload")) == before
    assert serving.calls("start") == []
    serving.active.discard(WATCH)

    ctx.run(ctx.on.update_status(), out)

    assert serving.calls("start") == [WATCH]


def test_the_dispatched_event_loads_the_slurmdbd_plugin_at_once(
    ctx, serving: FakeMachine, root: Path
):
    accounting = "AccountingStorageType=accounting_storage/slurmdbd\n"
    out = running_then_refetched(ctx, serving, root, accounting)

    with ctx(ctx.on.update_status(), out) as manager:
        manager.charm.on.slurmrestd_conf_changed.emit()  # what the path unit dispatches
        assert "-s openapi/slurmctld,openapi/slurmdbd " in (root / DROP_IN).read_text()
        assert serving.calls("restart") == ["slurmrestd"]
        manager.run()

    assert serving.calls("restart") == ["slurmrestd"]


def test_a_watch_that_cannot_start_is_logged_and_the_api_still_served(
    ctx, serving: FakeMachine, root: Path
):
    serving.fail("systemctl", "start", WATCH, stderr="Failed to start")
    state, relation, _ = ready_state()

    out = ctx.run(ctx.on.relation_changed(relation), state)

    assert serving.calls("restart") == ["sackd", "slurmrestd"]
    assert out.unit_status.name == "active"
