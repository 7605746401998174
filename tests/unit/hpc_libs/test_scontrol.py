"""Scenarios for the typed scontrol wrapper, with Slurm 24.11 (v0.0.42) shaped output."""

import json
from pathlib import Path

import pytest
from hpc_libs.errors import ScontrolError
from hpc_libs.slurm.scontrol import ControllerPing, Scontrol
from hpc_libs_fakes import FakeRun

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

PING = {
    "pings": [
        {
            "hostname": "ctl-0",
            "pinged": "UP",
            "latency": 523,
            "responding": True,
            "mode": "primary",
            "primary": True,
        },
        {
            "hostname": "ctl-1",
            "pinged": "DOWN",
            "latency": 0,
            "responding": False,
            "mode": "backup",
            "primary": False,
        },
    ],
    "meta": {"plugin": {"data_parser": "data_parser/v0.0.42"}},
    "errors": [],
    "warnings": [],
}

NODE = {
    "name": "compute-0",
    "hostname": "juju-abc-1",
    "state": ["IDLE", "DRAIN"],
    "reason": "leaving the cluster",
    "features": ["compute"],
    "active_features": ["compute"],
    "partitions": ["compute"],
    "cpus": 2,
    "real_memory": 1000,
    "weight": 1,
    "energy": {"current_watts": {"set": False}},
}


def test_ping_lists_controllers_in_order(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "ping", "--json", stdout=json.dumps(PING))

    pings = Scontrol().ping()

    assert pings == [
        ControllerPing(
            hostname="ctl-0", pinged="UP", responding=True, mode="primary", primary=True
        ),
        ControllerPing(hostname="ctl-1", pinged="DOWN", responding=False, mode="backup"),
    ]
    assert [p.is_up for p in pings] == [True, False]


def test_show_node_parses_the_fields_charms_need(fake_run: FakeRun) -> None:
    fake_run.on(
        "scontrol", "show", "node", stdout=json.dumps({"meta": META_24_11, "nodes": [NODE]})
    )

    node = Scontrol().show_node("compute-0")

    assert fake_run.calls == [["scontrol", "show", "node", "compute-0", "--json"]]
    assert node is not None
    assert node.state == ["IDLE", "DRAIN"]
    assert node.has_state("drain") is True
    assert node.reason == "leaving the cluster"
    assert node.features == ["compute"]
    assert node.real_memory == 1000


def test_features_as_comma_separated_text_are_split(fake_run: FakeRun) -> None:
    node = NODE | {"features": "compute,gpu", "state": "IDLE"}
    fake_run.on(
        "scontrol", "show", "node", stdout=json.dumps({"meta": META_24_11, "nodes": [node]})
    )

    parsed = Scontrol().show_node("compute-0")

    assert parsed is not None
    assert parsed.features == ["compute", "gpu"]
    assert parsed.state == ["IDLE"]


def test_unknown_node_is_none(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "show", "node", returncode=1, stderr="Node compute-9 not found")

    assert Scontrol().show_node("compute-9") is None


def test_show_nodes(fake_run: FakeRun) -> None:
    other = NODE | {"name": "compute-1"}
    fake_run.on(
        "scontrol",
        "show",
        "nodes",
        stdout=json.dumps({"meta": META_24_11, "nodes": [NODE, other]}),
    )

    assert [n.name for n in Scontrol().show_nodes()] == ["compute-0", "compute-1"]


def test_update_node_passes_reason_as_one_argument(fake_run: FakeRun) -> None:
    Scontrol().update_node(["compute-0", "compute-1"], state="drain", reason="unit is leaving")

    assert fake_run.calls == [
        [
            "scontrol",
            "update",
            "nodename=compute-0,compute-1",
            "state=drain",
            "reason=unit is leaving",
        ]
    ]


def test_update_node_extra_parameters(fake_run: FakeRun) -> None:
    Scontrol().update_node("compute-0", weight=7, availablefeatures="a,b")

    assert fake_run.calls == [
        ["scontrol", "update", "nodename=compute-0", "weight=7", "availablefeatures=a,b"]
    ]


def test_update_partition(fake_run: FakeRun) -> None:
    Scontrol().update_partition("compute", maxtime=60, state="up")

    assert fake_run.calls == [
        ["scontrol", "update", "partitionname=compute", "maxtime=60", "state=up"]
    ]


def test_delete_node_and_reconfigure(fake_run: FakeRun) -> None:
    scontrol = Scontrol()

    scontrol.delete_node("compute-0")
    scontrol.reconfigure()

    assert fake_run.calls == [
        ["scontrol", "delete", "nodename=compute-0"],
        ["scontrol", "reconfigure"],
    ]


def test_takeover_names_the_backup_by_its_index(fake_run: FakeRun) -> None:
    Scontrol().takeover(2)

    assert fake_run.calls == [["scontrol", "takeover", "2"]]


def test_failures_are_scontrol_errors_with_stderr(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "delete", returncode=1, stderr="Node has jobs running")

    with pytest.raises(ScontrolError) as caught:
        Scontrol().delete_node("compute-0")

    assert caught.value.stderr == "Node has jobs running"
    assert caught.value.returncode == 1
    assert caught.value.command == ["scontrol", "delete", "nodename=compute-0"]


def test_unparsable_json_is_a_scontrol_error(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "ping", stdout="Slurmctld(primary) at ctl-0 is UP")

    with pytest.raises(ScontrolError, match="cannot parse"):
        Scontrol().ping()


def test_missing_scontrol_is_a_scontrol_error(fake_run: FakeRun) -> None:
    fake_run.missing("scontrol")

    with pytest.raises(ScontrolError):
        Scontrol().reconfigure()


def test_cancel_node_jobs_uses_scancel(fake_run: FakeRun) -> None:
    Scontrol().cancel_node_jobs("compute-0")

    assert fake_run.calls == [["scancel", "--nodelist=compute-0"]]


def test_unknown_node_reported_in_json_is_none(fake_run: FakeRun) -> None:
    errors = {"nodes": [], "errors": [{"description": "Invalid node name specified"}]}
    fake_run.on("scontrol", "show", "node", returncode=1, stdout=json.dumps(errors))

    assert Scontrol().show_node("compute-9") is None


def test_failed_query_is_a_scontrol_error_with_stderr(fake_run: FakeRun) -> None:
    fake_run.on(
        "scontrol",
        "ping",
        returncode=1,
        stderr="slurm_load_ctl_conf error: Unable to contact slurm controller",
    )

    with pytest.raises(ScontrolError) as caught:
        Scontrol().ping()

    assert "Unable to contact" in caught.value.stderr
    assert caught.value.command == ["scontrol", "ping", "--json"]


VECTORS_24_11 = Path(__file__).parent / "vectors" / "slurm-24.11"


def test_jobs_and_nodes_after_a_takeover_parse_slurms_times(fake_run: FakeRun) -> None:
    """Slurm 24.11's vectors of a job held after a refused launch and the node it drained."""
    job_vector = (VECTORS_24_11 / "job-launch-failed-requeued-held.json").read_text()
    node_vector = (VECTORS_24_11 / "node-drained-duplicate-jobid.json").read_text()
    fake_run.on("scontrol", "show", "jobs", "--json", stdout=job_vector)
    fake_run.on("scontrol", "show", "nodes", "--json", stdout=node_vector)

    [job] = Scontrol().show_jobs()
    [node] = Scontrol().show_nodes()

    assert (job.job_id, job.job_state, job.restart_cnt) == (1, ["PENDING"], 1)
    assert job.state_description == "launch failed requeued held"
    assert job.submit_time == 1795619074
    assert job.requeueable
    assert (node.reason, node.reason_set_by_user) == ("Duplicate jobid", "slurm")
    assert node.reason_changed_at == 1795619074
    assert node.has_state("drain")


def test_release_names_the_jobs(fake_run: FakeRun) -> None:
    Scontrol().release([3, 4])

    assert fake_run.calls[-1] == ["scontrol", "release", "3,4"]
