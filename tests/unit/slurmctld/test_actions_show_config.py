"""Scenarios: `show-current-config` returns the files served to the nodes and no secret."""

import base64

import pytest
from ops import testing
from test_charm_slurmctld import running


@pytest.fixture
def configured(ctx, machine, tmp_path):
    """A controller that wrote its files (slurm.conf, cgroup.conf, keys) in an earlier hook."""
    state = ctx.run(ctx.on.update_status(), running())
    machine.commands.clear()
    return state


def test_returns_the_served_files_that_exist(ctx, configured, tmp_path):
    etc = tmp_path / "etc/slurm"

    ctx.run(ctx.on.action("show-current-config"), configured)

    results = ctx.action_results
    assert results is not None
    present = {"gres-conf": "gres.conf", "acct-gather-conf": "acct_gather.conf"}
    extra = {key for key, name in present.items() if (etc / name).exists()}
    assert set(results) == {"slurm-conf", "cgroup-conf", *extra}
    assert "acct-gather-conf" not in results  # the charm writes none: not shown
    assert results["slurm-conf"] == (etc / "slurm.conf").read_text()
    assert results["cgroup-conf"] == (etc / "cgroup.conf").read_text()
    assert "jwt_key=/etc/slurm/jwt_hs256.key" in results["slurm-conf"]  # a path, not a key


def test_gres_and_acct_gather_are_shown_when_present(ctx, configured, tmp_path):
    etc = tmp_path / "etc/slurm"
    (etc / "gres.conf").write_text("NodeName=compute-0 Name=gpu File=/dev/nvidia0\n")
    (etc / "acct_gather.conf").write_text("ProfileInfluxDBHost=db:8086\n")

    ctx.run(ctx.on.action("show-current-config"), configured)

    assert ctx.action_results is not None
    assert ctx.action_results["gres-conf"] == "NodeName=compute-0 Name=gpu File=/dev/nvidia0\n"
    assert ctx.action_results["acct-gather-conf"] == "ProfileInfluxDBHost=db:8086\n"


def test_no_key_and_no_password_appears(ctx, configured, tmp_path):
    etc = tmp_path / "etc/slurm"
    (etc / "acct_gather.conf").write_text(
        "ProfileInfluxDBUser=slurm\nProfileInfluxDBPass=hunter2\n"
    )
    with (etc / "slurm.conf").open("a") as conf:
        conf.write("AccountingStoragePass=s3cret JobCompPass=other\n")
    (etc / "slurmdbd.conf").write_text("StoragePass=dbpassword\n")

    ctx.run(ctx.on.action("show-current-config"), configured)

    results = ctx.action_results
    assert results is not None
    shown = "\n".join(results.values())
    for secret in ("hunter2", "s3cret", "other", "dbpassword"):
        assert secret not in shown
    assert "ProfileInfluxDBPass=REDACTED" in results["acct-gather-conf"]
    assert "AccountingStoragePass=REDACTED" in results["slurm-conf"].splitlines()
    assert "ProfileInfluxDBUser=slurm" in results["acct-gather-conf"]
    for key_file in ("slurm.key", "jwt_hs256.key"):
        key = base64.b64encode((etc / key_file).read_bytes()).decode()
        assert key[:24] not in shown


SECRET_LINES = [
    "AccountingStoragePass = spaced-secret",
    'JobCompPass="quoted secret tail"',
    "accountingstoragepass=lowercase-secret",
    "NodeName=x JobCompPass=second-key-secret",
    "#JobCompPass=commented-secret",
    "ProfileInfluxDBPass\t=\ttabbed-secret",
    "JobCompParams=token=x AuthToken='single quoted secret'",
]


def test_every_secret_bearing_key_form_is_redacted_as_a_whole_line(ctx, configured, tmp_path):
    etc = tmp_path / "etc/slurm"
    (etc / "acct_gather.conf").write_text("\n".join(SECRET_LINES) + "\n")

    ctx.run(ctx.on.action("show-current-config"), configured)

    assert ctx.action_results is not None
    shown = ctx.action_results["acct-gather-conf"]
    for word in ("secret", "spaced", "quoted", "tail", "lowercase", "second", "tabbed"):
        assert word not in shown
    assert shown.splitlines() == [
        "AccountingStoragePass=REDACTED",
        "JobCompPass=REDACTED",
        "accountingstoragepass=REDACTED",
        "JobCompPass=REDACTED",
        "JobCompPass=REDACTED",
        "ProfileInfluxDBPass=REDACTED",
        "token=REDACTED",
    ]


def test_slurmdbd_conf_is_never_served(ctx, configured, tmp_path):
    etc = tmp_path / "etc/slurm"
    (etc / "slurmdbd.conf").write_text("StorageHost=db-marker\nStoragePass=dbpassword\n")
    (etc / "gres.conf").write_text("AutoDetect=nvidia\n")
    (etc / "acct_gather.conf").write_text("ProfileInfluxDBHost=db:8086\n")

    ctx.run(ctx.on.action("show-current-config"), configured)

    results = ctx.action_results
    assert results is not None
    assert set(results) == {"slurm-conf", "cgroup-conf", "gres-conf", "acct-gather-conf"}
    shown = "\n".join(results.values())
    assert "db-marker" not in shown
    assert "dbpassword" not in shown


def test_before_any_configuration_the_action_fails(ctx, machine):
    with pytest.raises(testing.ActionFailed) as failure:
        ctx.run(
            ctx.on.action("show-current-config"),
            testing.State(leader=False, relations=[testing.PeerRelation("slurmctld-peer")]),
        )

    assert failure.value.message.startswith("slurmctld is not configured yet")
