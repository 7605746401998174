"""Controller faults on real lab machines: a killed daemon, a power cut, a cut network cable.

Each fault must make the machine (or its daemon) stop answering, and its undo must make it
answer again. Network checks only ever run inside the lab's own namespaces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from slurm_lab import cli, rootfs
from slurm_lab.errors import LabError
from slurm_lab.juju.model import Endpoint, JsonDict, ModelState, Relation, Unit
from slurm_lab.juju.standins import FilesystemClient
from slurm_lab.machines import Lab, Machine

pytestmark = pytest.mark.lab

# A service that systemd restarts at once, to prove a killed one stays down.
RESTARTING_UNIT = """\
[Service]
ExecStart=/bin/sleep infinity
Restart=always
RestartSec=100ms
"""


@pytest.fixture(scope="module")
def pair(lab: Lab) -> tuple[str, str]:
    lab.create("fault-a")
    lab.create("fault-b")
    return "fault-a", "fault-b"


def answers(lab: Lab, source: str, target: str) -> bool:
    """Whether `target` answers a ping from `source` (one packet, one second)."""
    return lab.get(source).exec(["ping", "-c", "1", "-W", "1", target]).returncode == 0


def eventually(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def main_pid(machine: Machine, service: str) -> int:
    out = machine.exec(["systemctl", "show", "-P", "MainPID", service], check=True).stdout
    return int(out.strip() or 0)


def test_a_killed_service_stays_down_until_revived(lab: Lab, pair: tuple[str, str]) -> None:
    machine = lab.get(pair[0])
    machine.write_file("/usr/lib/systemd/system/labfault.service", RESTARTING_UNIT)
    machine.exec(["systemctl", "daemon-reload"], check=True)
    machine.exec(["systemctl", "start", "labfault"], check=True)
    before = main_pid(machine, "labfault")
    assert before and machine.service_is_active("labfault")

    machine.kill_service("labfault")

    time.sleep(1)  # ten times RestartSec
    assert not machine.service_is_active("labfault")
    assert machine.exec(["pgrep", "-x", "sleep"]).returncode != 0, "SIGKILL left a process"
    assert machine.exec(["systemctl", "start", "labfault"]).returncode != 0, "not kept down"

    machine.revive_service("labfault")

    assert machine.service_is_active("labfault")
    assert main_pid(machine, "labfault") not in (0, before)


def test_a_cut_network_stops_answering_until_restored(lab: Lab, pair: tuple[str, str]) -> None:
    victim, peer = pair
    assert answers(lab, peer, victim)

    lab.cut_network(victim)

    assert not lab.network_is_up(victim)
    assert not answers(lab, peer, victim)
    assert not answers(lab, victim, peer)
    assert lab.get(victim).exec(["true"]).returncode == 0  # the machine itself still runs

    lab.restore_network(victim)

    assert lab.network_is_up(victim)
    assert eventually(lambda: answers(lab, peer, victim))


def test_a_powered_off_machine_comes_back_as_it_was(lab: Lab, pair: tuple[str, str]) -> None:
    victim, peer = pair
    before = lab.get(victim)
    before.write_file("/root/kept", "still here\n")

    lab.power_off(victim)

    assert not lab.is_running(victim)
    with pytest.raises(LabError, match="not running"):
        lab.get(victim).exec(["true"])
    assert not answers(lab, peer, victim)

    started = time.monotonic()
    after = lab.power_on(victim)
    print(f"\n[lab timing] power on: {time.monotonic() - started:.1f}s")

    assert lab.is_running(victim)
    assert (after.name, after.address) == (before.name, before.address)
    assert after.exec(["hostname"], check=True).stdout.strip() == victim
    assert after.exec(["cat", "/root/kept"], check=True).stdout == "still here\n"
    assert eventually(lambda: answers(lab, peer, victim))
    with pytest.raises(LabError, match="already running"):
        lab.power_on(victim)


def test_faults_name_unknown_machines(lab: Lab) -> None:
    for fault in (lab.power_off, lab.power_on, lab.cut_network, lab.restore_network):
        with pytest.raises(LabError, match="no lab machine"):
            fault("nowhere")


def test_a_machine_powered_off_is_destroyed_cleanly(lab: Lab, pair: tuple[str, str]) -> None:
    del pair
    lab.create("fault-c")
    lab.power_off("fault-c")

    lab.destroy("fault-c")

    assert "fault-c" not in [m.name for m in lab.machines()]
    assert not rootfs.mounts_under(Path(lab.state_dir) / "machines" / "fault-c")


def test_the_cli_injects_and_undoes_a_fault(
    lab: Lab, pair: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    victim, peer = pair
    state = ["--state-dir", str(lab.state_dir), "fault"]

    assert cli.main([*state, "cut-network", victim]) == 0
    assert not answers(lab, peer, victim)
    assert cli.main([*state, "restore-network", victim]) == 0
    assert eventually(lambda: answers(lab, peer, victim))
    assert cli.main([*state, "power-off", "nowhere"]) == 1
    assert "no lab machine named 'nowhere'" in capsys.readouterr().err


class _Ctl:
    """The little of the Juju engine the filesystem-client stand-in uses."""

    def __init__(self, lab: Lab, model: ModelState) -> None:
        self.lab = lab
        self.model = model
        self.logs: list[str] = []

    def machine(self, unit: Unit) -> Machine:
        return self.lab.get(unit.machine)

    def log(self, unit: Unit, level: str, message: str) -> None:
        self.logs.append(f"{unit.name} {level} {message}")

    def enqueue(self, unit: str, kind: str, **fields: object) -> None:
        del unit, kind, fields

    def enqueue_all(self, events: Iterable[JsonDict]) -> None:
        del events


def test_the_filesystem_client_stand_in_shares_one_directory_and_survives_a_reboot(
    lab: Lab, pair: tuple[str, str]
) -> None:
    model = ModelState()
    relation = Relation(
        id=1,
        endpoints=[
            Endpoint("ctl", "mount", "mount_info", "provider", "container"),
            Endpoint("fs", "mount", "mount_info", "requirer", "container"),
        ],
        app_data={"ctl": {"mountpoint": '"/var/lib/slurm/checkpoint"', "read_only": "false"}},
    )
    model.relations["1"] = relation
    units = [Unit(f"fs/{i}", "fs", name, str(i), "") for i, name in enumerate(pair)]
    client = FilesystemClient(_Ctl(lab, model))

    for unit in units:
        client.handle(unit, {"kind": "relation_changed", "relation_id": 1})

    assert [relation.unit_data[u.name] for u in units] == [{"mounted": "true"}] * 2
    first, second = (lab.get(name) for name in pair)
    first.write_file("/var/lib/slurm/checkpoint/hello", "from a\n")
    assert second.exec(["cat", "/var/lib/slurm/checkpoint/hello"]).stdout == "from a\n"

    lab.power_off(pair[1])
    second = lab.power_on(pair[1])
    assert second.exec(["mountpoint", "-q", "/var/lib/slurm/checkpoint"]).returncode == 0
    assert second.exec(["cat", "/var/lib/slurm/checkpoint/hello"]).stdout == "from a\n"

    # A cut network takes the shared filesystem with it, as NFS or CephFS would.
    write = ["sh", "-c", "echo b > /var/lib/slurm/checkpoint/from-b"]
    lab.cut_network(pair[1])
    assert second.exec(write).returncode != 0
    lab.restore_network(pair[1])
    assert second.exec(write).returncode == 0
    assert first.exec(["cat", "/var/lib/slurm/checkpoint/from-b"]).stdout == "b\n"

    relation.app_data["ctl"] = {"mountpoint": "/var/lib/slurm/checkpoint"}  # unquoted
    client.handle(units[0], {"kind": "relation_changed", "relation_id": 1})
    assert relation.unit_data[units[0].name] == {"mounted": "false"}
    assert units[0].workload.name == "blocked"
