"""Slurm's own metrics endpoint (25.11 and newer): when the leader writes MetricsType, and the
scrape jobs offered to the COS collector, read from the unit's raw `cos-agent` databag.

`native-metrics=auto` (the default) turns it on once every reader of slurm.conf is known to
run 25.11 or newer: this slurmctld, the peer controllers (their peer host data), every login
and REST unit (the release each publishes) and every registered slurmd node (Slurm's own node
records, read with a narrow `sinfo`). An older one refuses MetricsType.
"""

import base64
import dataclasses
import hashlib
import hmac
import json
import time
from pathlib import Path

import metrics_auth
import pytest
from charm_testing import FakeMachine, already_installed
from ops import testing
from test_charm_slurmctld import auth_secret, jwt_secret, memory, slurm_conf

PEER = "slurmctld-peer"
NEWER = "26.05.5-1"
"""Debian forky's slurmctld package: the endpoint exists."""
OLDER = "24.11.5-1"
"""Debian 13's: no metrics/openmetrics plugin."""
METRICS_TYPE = "metricstype=metrics/openmetrics"
SHOW_NODES = ("sinfo",)
HELD = "native metrics off until every daemon runs 25.11 or newer: "
EXPORTER_JOB = {
    "job_name": "slurm_exporter",
    "metrics_path": "/metrics",
    "static_configs": [{"targets": ["localhost:9341"]}],
}
NATIVE_NODES_JOB = {
    "job_name": "slurm_native_nodes",
    "metrics_path": "/metrics/nodes",
    "static_configs": [{"targets": ["localhost:6817"]}],
    "metric_relabel_configs": [
        {
            "source_labels": ["__name__"],
            "regex": "slurm_(.*)",
            "target_label": "__name__",
            "replacement": "slurm_native_${1}",
            "action": "replace",
        }
    ],
    "follow_redirects": False,
}
"""One native job as the collector reads it: renamed series, a backup's 303 not followed."""


def nodes_answer(**releases: str) -> str:
    """What `NODES_QUERY` prints for nodes `name=release` ("" never registered: FUTURE).

    sinfo leaves FUTURE nodes out (it does not ask for them); a node in two partitions is on
    two lines.
    """
    lines = [
        f"{name.replace('_', '-')}|idle+dynamic_norm|{release}\n" * 2
        for name, release in releases.items()
        if release
    ]
    return "".join(lines)


def units(endpoint: str, app: str, *releases: str | None) -> testing.Relation:
    """An integration whose units published `releases` (None: a unit that said nothing)."""
    data = {i: {"version": json.dumps(r)} if r is not None else {} for i, r in enumerate(releases)}
    return testing.Relation(endpoint, remote_app_name=app, remote_units_data=data)


def cluster(
    machine: FakeMachine,
    package_version: str = NEWER,
    *,
    nodes: dict[str, str] | None = None,
    login: tuple[str | None, ...] = ("26.05.5",),
    rest: tuple[str | None, ...] = ("26.05.5",),
    peer_release: str = "26.05.5",
    leader: bool = True,
    remembered: bool | None = None,
    config: dict[str, str | bool] | None = None,
) -> testing.State:
    """A controller with slurmctld `package_version`, a collector on `cos-agent`, and a cluster.

    Every other reader of slurm.conf runs 26.05 unless told: a peer controller, a login unit,
    a REST unit, and the slurmd nodes `compute-0` and a FUTURE placeholder.
    """
    answer = nodes_answer(**(nodes if nodes is not None else {"compute_0": "26.05.5", "p_0": ""}))
    machine.responses[SHOW_NODES] = answer
    peer_host = {"hostname": "ctl1", "address": "10.0.0.2", "version": peer_release}
    app_data = {"native_metrics": json.dumps(remembered)} if remembered is not None else {}
    return testing.State(
        leader=leader,
        config=config or {},
        relations=[
            testing.PeerRelation(PEER, peers_data={1: peer_host}, local_app_data=app_data),
            testing.Relation("cos-agent", remote_app_name="otelcol"),
            units("login-node", "login", *login),
            units("slurmrestd", "rest", *rest),
        ],
        secrets=[auth_secret(), jwt_secret()],
        stored_states={already_installed("SlurmctldCharm", version=package_version)},
    )


def offered_jobs(state: testing.State) -> list[dict]:
    """The scrape jobs in the unit's raw cos-agent databag."""
    relation = next(r for r in state.relations if r.endpoint == "cos-agent")
    return json.loads(relation.local_unit_data["config"])["metrics_scrape_jobs"]


def assert_off(out: testing.State, tmp_path: Path) -> None:
    assert "metricstype" not in slurm_conf(tmp_path)
    assert offered_jobs(out) == [EXPORTER_JOB]
    assert memory(out).get("native_metrics") is False


def test_every_reader_of_slurm_conf_on_25_11_or_newer_turns_it_on_by_default(
    ctx, machine, tmp_path: Path
):
    out = ctx.run(ctx.on.config_changed(), cluster(machine))

    assert METRICS_TYPE in slurm_conf(tmp_path).splitlines()
    jobs = offered_jobs(out)
    assert [j["job_name"] for j in jobs] == [
        "slurm_exporter",
        "slurm_native_jobs",
        "slurm_native_nodes",
        "slurm_native_partitions",
        "slurm_native_scheduler",
    ]
    assert jobs[0] == EXPORTER_JOB
    assert jobs[2] == NATIVE_NODES_JOB
    assert all(j["follow_redirects"] is False for j in jobs[1:])
    assert all(j["static_configs"] == [{"targets": ["localhost:6817"]}] for j in jobs[1:])
    assert memory(out)["native_metrics"] is True  # Every controller unit offers the jobs.
    assert not out.unit_status.message.startswith(HELD)


@pytest.mark.parametrize(
    ("cluster_args", "held_by"),
    [
        (
            {"nodes": {"compute_0": "26.05.5", "compute_1": "24.11.5"}},
            "slurmd node compute-1 runs 24.11.5",
        ),
        (
            {"nodes": {"compute_0": "26.05.5", "compute_1": "25.05.3"}},
            "slurmd node compute-1 runs 25.05.3",
        ),
        ({"login": ("26.05.5", None)}, "login unit login/1 has not said its Slurm release"),
        ({"login": ("24.11.5",)}, "login unit login/0 runs 24.11.5"),
        ({"rest": (None,)}, "REST unit rest/0 has not said its Slurm release"),
        ({"peer_release": "24.11.5"}, "controller ctl1 runs 24.11.5"),
    ],
    ids=["old-node", "25.05-node", "login-unknown", "old-login", "rest-unknown", "old-peer"],
)
def test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it(
    ctx, machine, tmp_path: Path, cluster_args: dict, held_by: str
):
    """In a major upgrade the nodes keep the old release until their rollout: a 24.11 slurmd
    refuses a slurm.conf naming MetricsType."""
    out = ctx.run(ctx.on.config_changed(), cluster(machine, **cluster_args))

    assert_off(out, tmp_path)
    assert out.unit_status == testing.ActiveStatus(HELD + held_by)


def test_on_vouches_for_a_daemon_of_unknown_release(ctx, machine, tmp_path: Path):
    state = cluster(machine, login=(None,), rest=(None,), config={"native-metrics": "on"})

    ctx.run(ctx.on.config_changed(), state)

    assert METRICS_TYPE in slurm_conf(tmp_path).splitlines()


def test_on_still_refuses_a_daemon_known_to_be_older(ctx, machine, tmp_path: Path):
    state = cluster(machine, nodes={"compute_0": "24.11.5"}, config={"native-metrics": "on"})

    out = ctx.run(ctx.on.config_changed(), state)

    assert_off(out, tmp_path)
    assert out.unit_status == testing.ActiveStatus(HELD + "slurmd node compute-0 runs 24.11.5")


def test_on_with_an_older_slurmctld_says_why_it_is_off(ctx, machine, tmp_path: Path):
    out = ctx.run(
        ctx.on.config_changed(), cluster(machine, OLDER, config={"native-metrics": "on"})
    )

    assert_off(out, tmp_path)
    assert out.unit_status == testing.ActiveStatus(HELD + "this slurmctld runs 24.11.5-1")


@pytest.mark.parametrize(
    ("package_version", "config"),
    [
        (OLDER, {}),
        ("25.05.3-1", {}),
        ("", {}),
        (NEWER, {"native-metrics": "off"}),
        ("25.11.1-1", {"slurm-conf-parameters": "PrivateData=usage\n"}),
    ],
    ids=["24.11", "25.05", "version-unrecorded", "off", "25.11-privatedata"],
)
def test_no_endpoint_only_the_exporter_and_no_word_about_it(
    ctx, machine, tmp_path: Path, package_version: str, config: dict
):
    """Before 25.11 there is no plugin (auto says nothing: nothing to offer); under
    PrivateData the token check was measured on 26.05 only; `off` is the operator's."""
    out = ctx.run(ctx.on.config_changed(), cluster(machine, package_version, config=config))

    assert_off(out, tmp_path)
    assert not out.unit_status.message.startswith(HELD)
    if package_version == OLDER:
        assert machine.ran(*SHOW_NODES) == []  # A 24.11 cluster pays no RPC for it.


def test_the_last_node_upgraded_turns_it_on_with_one_reconfigure_and_no_restart(
    ctx, machine, tmp_path: Path, settled
):
    before = settled(cluster(machine, nodes={"compute_0": "24.11.5"}))
    assert "metricstype" not in slurm_conf(tmp_path)
    machine.responses[SHOW_NODES] = nodes_answer(compute_0="26.05.5")

    out = ctx.run(ctx.on.update_status(), before)

    assert METRICS_TYPE in slurm_conf(tmp_path).splitlines()
    assert machine.ran("scontrol", "reconfigure") == [["scontrol", "reconfigure"]]
    assert machine.calls("restart") == []
    assert len(offered_jobs(out)) == 5
    again = ctx.run(ctx.on.update_status(), out)
    assert machine.ran("scontrol", "reconfigure") == [["scontrol", "reconfigure"]]
    assert len(offered_jobs(again)) == 5


@pytest.mark.parametrize("remembered", [True, False])
def test_node_records_that_cannot_be_read_keep_the_last_decision(
    ctx, machine, tmp_path: Path, settled, remembered: bool
):
    """A busy controller timing out never toggles the endpoint (nor reconfigures for it)."""
    nodes = {"compute_0": "26.05.5" if remembered else "24.11.5"}
    before = settled(cluster(machine, nodes=nodes))
    assert memory(before)["native_metrics"] is remembered
    machine.time_out(*SHOW_NODES)

    out = ctx.run(ctx.on.update_status(), before)

    assert (METRICS_TYPE in slurm_conf(tmp_path).splitlines()) is remembered
    assert memory(out)["native_metrics"] is remembered
    assert machine.ran("scontrol", "reconfigure") == []


def test_per_user_option_adds_the_users_and_accounts_path(ctx, machine):
    out = ctx.run(ctx.on.config_changed(), cluster(machine, config={"metrics-per-user": True}))

    users = [j for j in offered_jobs(out) if j["job_name"] == "slurm_native_jobs_users_accts"]
    assert [j["metrics_path"] for j in users] == ["/metrics/jobs-users-accts"]


@pytest.mark.parametrize(("remembered", "jobs"), [(True, 5), (False, 1), (None, 1)])
def test_a_backup_offers_the_jobs_the_leader_turned_on(
    ctx, machine, remembered: bool | None, jobs: int
):
    """The backup reads the leader's decision from the peer databag; it decides nothing."""
    state = cluster(machine, leader=False, remembered=remembered)

    out = ctx.run(ctx.on.update_status(), state)

    assert len(offered_jobs(out)) == jobs
    assert machine.ran(*SHOW_NODES) == []


def test_a_collector_joining_gets_the_native_jobs_without_a_reconcile(ctx, machine):
    state = cluster(machine, remembered=True)
    relation = next(r for r in state.relations if r.endpoint == "cos-agent")

    out = ctx.run(ctx.on.relation_joined(relation), state)

    names = [j["job_name"] for j in offered_jobs(out)]
    assert names[:2] == ["slurm_exporter", "slurm_native_jobs"]


def test_the_leader_reads_each_nodes_release_with_one_narrow_sinfo(ctx, machine):
    """Never every node's whole record as JSON on every leader hook (issue 33, A4)."""
    ctx.run(ctx.on.config_changed(), cluster(machine))

    assert machine.ran("scontrol", "show", "nodes") == []
    assert machine.ran("sinfo") == [
        [
            "sinfo",
            "--all",
            "--noheader",
            "--Node",
            "--Format=NodeList:|,StateComplete:|,Version:0",
        ]
    ]


@pytest.mark.parametrize(
    "line",
    [
        "compute-1|idle|26.05.5\r|idle|24.11.5",
        "compute-1|idle|26.05.5|extra",
        "compute-1|idle",
        "compute\u20281|idle|26.05.5",
    ],
)
def test_a_line_of_sinfo_that_is_no_nodes_keeps_the_last_decision(
    ctx, machine, tmp_path: Path, settled, line: str
):
    """Nothing is guessed from a line that is not a whole record: it may hide an older node."""
    before = settled(cluster(machine, nodes={"compute_0": "24.11.5"}))
    machine.responses[SHOW_NODES] = nodes_answer(compute_0="26.05.5") + line + "\n"

    out = ctx.run(ctx.on.update_status(), before)

    assert memory(out)["native_metrics"] is False
    assert "metricstype" not in slurm_conf(tmp_path)


@pytest.mark.parametrize("remembered", [True, False])
def test_a_node_not_registered_again_since_a_failover_keeps_the_last_decision(
    ctx, machine, tmp_path: Path, settled, remembered: bool
):
    """Slurm saves no node's release: the slurmctld that just took control (or restarted)
    lists every node with none until it registers again. Counted as old, that window turned
    the endpoint off and on at every failover (forky lab)."""
    before = settled(cluster(machine, nodes={"compute_0": "26.05.5" if remembered else "24.11.5"}))
    machine.responses[SHOW_NODES] = "compute-0|idle+dynamic_norm|N/A\n"

    out = ctx.run(ctx.on.update_status(), before)

    assert (METRICS_TYPE in slurm_conf(tmp_path).splitlines()) is remembered
    assert memory(out)["native_metrics"] is remembered
    assert machine.ran("scontrol", "reconfigure") == []
    if not remembered:
        held = HELD + "slurmd node compute-0 has not said its Slurm release"
        assert out.unit_status == testing.ActiveStatus(held)


def test_a_node_known_older_still_holds_it_off_beside_one_not_registered_again(
    ctx, machine, tmp_path: Path, settled
):
    before = settled(cluster(machine))
    machine.responses[SHOW_NODES] = (
        "compute-0|idle+dynamic_norm|N/A\ncompute-1|idle+dynamic_norm|24.11.5\n"
    )

    out = ctx.run(ctx.on.update_status(), before)

    assert_off(out, tmp_path)
    assert out.unit_status == testing.ActiveStatus(HELD + "slurmd node compute-1 runs 24.11.5")


def test_a_future_placeholder_sinfo_lists_after_all_holds_nothing(ctx, machine, tmp_path: Path):
    """sinfo leaves FUTURE nodes out, unless its environment says otherwise (SINFO_FUTURE)."""
    state = cluster(machine, nodes={"compute_0": "26.05.5"})
    machine.responses[SHOW_NODES] += "p-0|future|N/A\n"

    ctx.run(ctx.on.config_changed(), state)

    assert METRICS_TYPE in slurm_conf(tmp_path).splitlines()


# Under PrivateData: a token of the endpoint's own (metrics_auth).

PRIVATE: dict[str, str | bool] = {"slurm-conf-parameters": "PrivateData=usage\n"}
TOKEN_FILE = "var/snap/opentelemetry-collector/common/slurmctld-metrics.token"
METRICS_KEY = base64.b64encode(b"m" * 32).decode()


def metrics_secret() -> testing.Secret:
    return testing.Secret(
        tracked_content={"key": METRICS_KEY}, owner="app", label="slurm-metrics-jwt-key"
    )


def private_cluster(machine: FakeMachine, **kwargs) -> testing.State:
    """`cluster` with PrivateData; `with_key`: the leader made the metrics key earlier.

    The machine has no `slurm-metrics` user yet (getent: 2, not found).
    """
    with_key = kwargs.pop("with_key", False)
    machine.fail("getent", "passwd", "slurm-metrics", returncode=2)
    state = cluster(machine, config=PRIVATE, **kwargs)
    extra = [metrics_secret()] if with_key else []
    return dataclasses.replace(state, secrets=[*state.secrets, *extra])


def claims(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def signed_with(token: str, key: bytes) -> bool:
    header, payload, signature = token.split(".")
    digest = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode() == signature


def test_privatedata_turns_it_on_with_a_token_check_of_its_own(ctx, machine, tmp_path: Path):
    """slurmctld checks the tokens with a key of the endpoint's own, for one user that is not
    Slurm's: the token opens /metrics and nothing else (measured on the forky lab)."""
    out = ctx.run(ctx.on.config_changed(), private_cluster(machine))

    conf = slurm_conf(tmp_path).splitlines()
    assert METRICS_TYPE in conf
    assert "include metrics-auth.conf" in conf
    assert (tmp_path / "etc/slurm/metrics-auth.conf").read_text() == (
        f"SlurmctldHttpAuthParameters=jwt_key={tmp_path}/etc/slurm/metrics_jwt_hs256.key\n"
        "MetricsAuthUsers=slurm-metrics\n"
    )
    secret = next(s for s in out.secrets if s.label == "slurm-metrics-jwt-key")
    key = base64.b64decode(secret.tracked_content["key"])
    key_file = tmp_path / "etc/slurm/metrics_jwt_hs256.key"
    assert key_file.read_bytes() == key
    assert key_file.stat().st_mode & 0o777 == 0o600
    assert key != base64.b64decode(jwt_secret().tracked_content["key"])
    assert machine.ran("useradd")[0][-1] == "slurm-metrics"
    assert memory(out)["native_metrics"] is True


def test_each_job_names_the_token_file_and_no_databag_holds_the_token(
    ctx, machine, tmp_path: Path
):
    out = ctx.run(ctx.on.config_changed(), private_cluster(machine))

    token_file = tmp_path / TOKEN_FILE
    token = token_file.read_text()
    assert token_file.stat().st_mode & 0o777 == 0o600
    assert signed_with(token, (tmp_path / "etc/slurm/metrics_jwt_hs256.key").read_bytes())
    assert claims(token)["sun"] == "slurm-metrics"
    assert 0 < claims(token)["exp"] - time.time() <= 12 * 3600
    native = offered_jobs(out)[1:]
    assert len(native) == 4
    assert all(
        j["authorization"] == {"type": "Bearer", "credentials_file": f"/{TOKEN_FILE}"}
        for j in native
    )
    assert all(j["follow_redirects"] is False for j in native)  # A backup's 303: no copy.
    relation = next(r for r in out.relations if r.endpoint == "cos-agent")
    assert token not in json.dumps([dict(r.local_unit_data) for r in out.relations])
    assert token not in relation.local_unit_data["config"]
    assert token not in out.unit_status.message


def test_a_daemon_before_26_05_keeps_it_off_under_privatedata(ctx, machine, tmp_path: Path):
    out = ctx.run(
        ctx.on.config_changed(), private_cluster(machine, nodes={"compute_0": "25.11.1"})
    )

    assert_off(out, tmp_path)
    assert out.unit_status == testing.ActiveStatus(
        "native metrics off until every daemon runs 26.05 or newer: "
        "slurmd node compute-0 runs 25.11.1"
    )
    assert not (tmp_path / TOKEN_FILE).exists()


def test_a_backup_signs_its_own_token_with_the_leaders_key(ctx, machine, tmp_path: Path):
    """Each controller's collector scrapes its own machine: each unit writes its token."""
    state = private_cluster(machine, leader=False, remembered=True, with_key=True)

    out = ctx.run(ctx.on.update_status(), state)

    token = (tmp_path / TOKEN_FILE).read_text()
    assert signed_with(token, b"m" * 32)
    assert len(offered_jobs(out)) == 5
    assert machine.ran("useradd")  # slurmctld looks the token's user up where it runs.
    assert not (tmp_path / "etc/slurm/metrics-auth.conf").exists()  # The leader's file.


@pytest.mark.parametrize(("left", "renewed"), [(3600, True), (11 * 3600, False)])
def test_update_status_renews_a_token_well_before_it_expires(
    ctx, machine, tmp_path: Path, left: int, renewed: bool
):
    now = int(time.time())
    old = metrics_auth.sign(b"m" * 32, "slurm-metrics", now - 12 * 3600 + left)
    token_file = tmp_path / TOKEN_FILE
    token_file.parent.mkdir(parents=True)
    token_file.write_text(old)
    state = private_cluster(machine, leader=False, remembered=True, with_key=True)

    ctx.run(ctx.on.update_status(), state)

    assert (token_file.read_text() != old) is renewed


def test_a_token_signed_with_another_key_is_replaced(ctx, machine, tmp_path: Path):
    token_file = tmp_path / TOKEN_FILE
    token_file.parent.mkdir(parents=True)
    token_file.write_text(metrics_auth.sign(b"x" * 32, "slurm-metrics", int(time.time())))
    state = private_cluster(machine, leader=False, remembered=True, with_key=True)

    ctx.run(ctx.on.update_status(), state)

    assert signed_with(token_file.read_text(), b"m" * 32)


def test_lifting_privatedata_removes_the_token_and_the_jobs_send_none(
    ctx, machine, tmp_path: Path
):
    first = ctx.run(ctx.on.config_changed(), private_cluster(machine))
    assert (tmp_path / TOKEN_FILE).exists()

    out = ctx.run(ctx.on.config_changed(), dataclasses.replace(first, config={}))

    assert not (tmp_path / TOKEN_FILE).exists()
    assert "include metrics-auth.conf" not in slurm_conf(tmp_path).splitlines()
    assert all("authorization" not in j for j in offered_jobs(out))
    assert len(offered_jobs(out)) == 5
