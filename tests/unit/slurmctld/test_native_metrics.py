"""Slurm's own metrics endpoint (25.11 and newer): slurm.conf's MetricsType and the scrape jobs
offered to the COS collector, read from the unit's raw `cos-agent` databag."""

import json
from pathlib import Path

import pytest
from charm_testing import already_installed
from ops import testing
from test_charm_slurmctld import auth_secret, jwt_secret, slurm_conf

PEER = "slurmctld-peer"
NEWER = "26.05.5-1"
"""Debian forky's slurmctld package: the endpoint exists."""
OLDER = "24.11.5-1"
"""Debian 13's: no metrics/openmetrics plugin."""
METRICS_TYPE = "metricstype=metrics/openmetrics"
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


def controller(package_version: str, **config: str | bool) -> testing.State:
    """A leader with slurmctld `package_version` installed and a collector on `cos-agent`.

    The operator asked for the endpoint (`native-metrics`) unless `config` says otherwise.
    """
    return testing.State(
        leader=True,
        config={"native-metrics": True, **config},
        relations=[
            testing.PeerRelation(PEER),
            testing.Relation("cos-agent", remote_app_name="otelcol"),
        ],
        secrets=[auth_secret(), jwt_secret()],
        stored_states={already_installed("SlurmctldCharm", version=package_version)},
    )


def offered_jobs(state: testing.State) -> list[dict]:
    """The scrape jobs in the unit's raw cos-agent databag."""
    relation = state.get_relations("cos-agent")[0]
    return json.loads(relation.local_unit_data["config"])["metrics_scrape_jobs"]


def test_newer_slurm_serves_its_metrics_and_offers_them_renamed_from_the_primary_only(
    ctx, machine, tmp_path: Path
):
    out = ctx.run(ctx.on.config_changed(), controller(NEWER))

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


def test_per_user_option_adds_the_users_and_accounts_path(ctx, machine):
    out = ctx.run(ctx.on.config_changed(), controller(NEWER, **{"metrics-per-user": True}))

    users = [j for j in offered_jobs(out) if j["job_name"] == "slurm_native_jobs_users_accts"]
    assert [j["metrics_path"] for j in users] == ["/metrics/jobs-users-accts"]


@pytest.mark.parametrize(
    ("package_version", "config"),
    [
        (OLDER, {}),
        ("25.05.3-1", {}),
        ("", {}),
        (NEWER, {"slurm-conf-parameters": "PrivateData=usage\n"}),
        (NEWER, {"slurm-conf-parameters": "PrivateData=jobs,nodes\n"}),
        (NEWER, {"native-metrics": False}),
    ],
    ids=[
        "24.11",
        "25.05",
        "version-unrecorded",
        "privatedata-usage",
        "privatedata-jobs-nodes",
        "not-asked-for",
    ],
)
def test_no_endpoint_and_only_the_exporter_offered(
    ctx, machine, tmp_path: Path, package_version: str, config: dict
):
    """Before 25.11 there is no plugin; with any PrivateData slurmctld answers every scrape 401;
    and an older daemon (a major upgrade's nodes) refuses MetricsType until the operator asks."""
    out = ctx.run(ctx.on.config_changed(), controller(package_version, **config))

    assert "metricstype" not in slurm_conf(tmp_path)
    assert offered_jobs(out) == [EXPORTER_JOB]


def test_setting_privatedata_later_withdraws_the_jobs(ctx, machine, tmp_path: Path):
    first = ctx.run(ctx.on.config_changed(), controller(NEWER))
    assert len(offered_jobs(first)) == 5

    later = testing.State(
        leader=True,
        config={"slurm-conf-parameters": "PrivateData=jobs\n"},
        relations=list(first.relations),
        secrets=list(first.secrets),
        stored_states=first.stored_states,
    )
    out = ctx.run(ctx.on.config_changed(), later)

    assert "metricstype" not in slurm_conf(tmp_path)
    assert "privatedata=jobs" in slurm_conf(tmp_path).splitlines()
    assert offered_jobs(out) == [EXPORTER_JOB]


def test_a_collector_joining_gets_the_native_jobs_without_a_reconcile(ctx, machine):
    state = controller(NEWER)
    relation = state.get_relations("cos-agent")[0]

    out = ctx.run(ctx.on.relation_joined(relation), state)

    names = [j["job_name"] for j in offered_jobs(out)]
    assert names[:2] == ["slurm_exporter", "slurm_native_jobs"]
