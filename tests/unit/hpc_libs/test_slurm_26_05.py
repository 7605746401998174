"""hpc_libs against Slurm 26.05 (data_parser v0.0.45): real output captured on the lab.

The vectors in `vectors/slurm-26.05/` are what Debian testing's Slurm 26.05.5 printed on a
`SLURM_LAB_SUITE=forky` lab running the charms (controller `juju-b7c1c6-0`, the slurmd
application `compute`, dynamic nodes `compute-0` and `compute-1`; job 6 running on
`compute-1`); the ping vectors of both versions come from a one-machine lab (`pingctl`),
before and after `systemctl stop slurmctld`. What differs from 24.11: `scontrol ping --json`
has no `pinged` and no `mode` any more (it has `status`). What reads the same: the node
and job fields the charms use, unknown objects (exit 0, an empty list and a
warning), `slurmd -C`.
"""

import json
from pathlib import Path

import pytest
from hpc_libs.slurm import version
from hpc_libs.slurm.scontrol import ControllerPing, Scontrol
from hpc_libs.slurm.slurmd import parse_slurmd_c
from hpc_libs_fakes import FakeRun

VECTORS = Path(__file__).parent / "vectors" / "slurm-26.05"


def vector(name: str) -> str:
    return (VECTORS / name).read_text()


def test_vectors_are_slurm_26_05_with_data_parser_v0_0_45() -> None:
    meta = json.loads(vector("ping.json"))["meta"]
    assert meta["slurm"]["version"] == {"major": "26", "minor": "05", "micro": "5"}
    assert meta["plugin"]["data_parser"] == "data_parser/v0.0.45"


def test_a_responding_controller_is_up_without_pinged_or_mode(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "ping", "--json", stdout=vector("ping.json"))

    pings = Scontrol().ping()

    assert pings == [ControllerPing(hostname="juju-b7c1c6-0", responding=True, primary=True)]
    assert pings[0].is_up


def test_a_stopped_controller_is_down(fake_run: FakeRun) -> None:
    # ping-down.json: a one-machine forky lab (`pingctl`) after `systemctl stop slurmctld`;
    # scontrol exits 0 with --json (1 without it).
    fake_run.on("scontrol", "ping", "--json", stdout=vector("ping-down.json"))

    pings = Scontrol().ping()

    assert pings == [ControllerPing(hostname="pingctl", responding=False, primary=True)]
    assert not pings[0].is_up


@pytest.mark.parametrize(
    ("file", "up"), [("ping.json", True), ("ping-down.json", False)], ids=["up", "stopped"]
)
def test_slurm_24_11_pings_read_the_same(fake_run: FakeRun, file: str, up: bool) -> None:
    document = (VECTORS.parent / "slurm-24.11" / file).read_text()
    fake_run.on("scontrol", "ping", "--json", stdout=document)

    (ping,) = Scontrol().ping()

    assert (ping.hostname, ping.primary, ping.mode) == ("pingctl", True, "primary")
    assert ping.pinged == ("UP" if up else "DOWN")
    assert ping.is_up is up


@pytest.mark.parametrize(
    ("pinged", "responding", "up"),
    [("UP", True, True), ("DOWN", False, False), ("UP", False, False), ("DOWN", True, False)],
)
def test_on_24_11_pinged_must_agree(pinged: str, responding: bool, up: bool) -> None:
    assert ControllerPing(hostname="c", pinged=pinged, responding=responding).is_up is up


def test_show_nodes_reads_the_dynamic_nodes(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "show", "nodes", "--json", stdout=vector("nodes.json"))

    nodes = {node.name: node for node in Scontrol().show_nodes()}

    assert sorted(nodes) == ["compute-0", "compute-1"]
    node = nodes["compute-0"]
    assert node.state == ["IDLE", "DYNAMIC_NORM"]
    assert node.has_state("idle") and not node.has_state("drain")
    assert node.features == node.active_features == ["compute"]
    assert node.partitions == ["compute"]
    assert (node.cpus, node.real_memory, node.weight) == (2, 24105, 1)


@pytest.mark.parametrize(
    ("argv", "file"),
    [
        (("show", "node", "nosuch"), "node-unknown.json"),
        (("show", "job", "999999"), "job-unknown.json"),
    ],
)
def test_an_unknown_object_exits_0_with_an_empty_list_and_reads_as_none(
    fake_run: FakeRun, argv: tuple[str, ...], file: str
) -> None:
    fake_run.on("scontrol", *argv, "--json", stdout=vector(file))
    scontrol = Scontrol()

    found = {
        "node": lambda: scontrol.show_node("nosuch"),
        "job": lambda: scontrol.show_job(999999),
    }[argv[1]]()

    assert found is None


def test_slurmd_c_reads_as_on_24_11() -> None:
    hardware = parse_slurmd_c(vector("slurmd-C.out"))

    assert hardware == {
        "CPUs": 2,
        "Boards": 1,
        "SocketsPerBoard": 1,
        "CoresPerSocket": 2,
        "ThreadsPerCore": 1,
        "RealMemory": 24105,
    }


def test_slurm_26_05_is_supported() -> None:
    assert version.parse("26.05.5-1") == version.SlurmVersion(26, 5, 5)
    assert version.unsupported_reason("26.05.5-1") is None


def test_show_job_reads_a_running_requeueable_batch_job(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "show", "job", "6", "--json", stdout=vector("job-running.json"))

    job = Scontrol().show_job(6)

    assert job is not None
    assert job.job_state == ["RUNNING"]
    assert job.requeueable
