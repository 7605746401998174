"""A charm that breaks under Juju's hook runtime breaks on the lab too.

The lab runs each hook through the charm's `dispatch` with hook tools backed by the lab's
model (slurm_lab.juju.runner, slurm_lab.juju.jujuc), with Juju's commit-at-hook-end rules.
The `misuse` test charm relies, one `mode` at a time, on something Scenario's in-memory
backend allowed and Juju does not; each test shows the lab refuses it as Juju would. The
`nomain` charm forgets `ops.main` (dispatch runs nothing), `undeclared` (test_backend.py)
misses a dependency in its venv.

One lab for the module: `pair` (2 units, peers), `owner` -> `consumer` over share/use.
"""

from __future__ import annotations

from pathlib import Path

import jubilant
import pytest
from slurm_lab.errors import LabError
from slurm_lab.juju import LabJuju

pytestmark = pytest.mark.lab

CHARMS = Path(__file__).parent / "charms"


@pytest.fixture(scope="module")
def juju(lab_juju: LabJuju) -> LabJuju:
    lab_juju.deploy(CHARMS / "misuse", "pair", num_units=2)
    lab_juju.deploy(CHARMS / "misuse", "owner")
    lab_juju.deploy(CHARMS / "misuse", "consumer")
    lab_juju.integrate("owner:share", "consumer:use")
    lab_juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.2)
    return lab_juju


def in_error(status: jubilant.Status, unit: str) -> bool:
    app = unit.split("/", maxsplit=1)[0]
    return status.apps[app].units[unit].workload_status.current == "error"


def settle(juju: LabJuju, app: str) -> None:
    """Put the app's mode back and wait for its failed hooks' retries to pass."""
    juju.config(app, {"mode": ""})
    juju.wait(lambda s: jubilant.all_active(s, app), delay=0.5, timeout=120)


def test_a_follower_writing_application_data_is_refused(juju: LabJuju):
    juju.config("pair", {"mode": "follower-app-data"})

    status = juju.wait(lambda s: in_error(s, "pair/1"), delay=0.5, timeout=60)

    assert not in_error(status, "pair/0")  # the leader may write it
    assert "ERROR cannot write relation settings" in juju.unit_log("pair/1")
    settle(juju, "pair")


def test_data_read_back_within_the_hook_is_not_seen_by_others_yet(juju: LabJuju):
    juju.config("pair", {"mode": "read-back"})

    juju.wait(lambda s: in_error(s, "pair/0"), delay=0.5, timeout=60)

    assert "no unit acknowledged ping" in juju.unit_log("pair/0")
    settle(juju, "pair")


def test_a_failed_hook_drops_what_it_wrote(juju: LabJuju):
    juju.config("pair", {"mode": "write-then-fail"})

    def failed_twice(status: jubilant.Status) -> bool:
        return in_error(status, "pair/0") and juju.unit_log("pair/0").count("failing after") >= 2

    juju.wait(failed_twice, delay=0.5, timeout=60)  # the retry did not find its write

    seen_by_peer = juju.run("pair/1", "peer-data").results["bags"]
    assert "stuck" not in seen_by_peer
    settle(juju, "pair")


@pytest.mark.parametrize("params", [{"count": 0}, {"count": "two"}, {}, {"count": 1, "x": 1}])
def test_action_parameters_outside_the_schema_never_reach_the_charm(
    juju: LabJuju, params: dict[str, object]
):
    before = juju.unit_log("pair/0").count('ran "action take"')

    with pytest.raises(jubilant.CLIError, match="validation failed"):
        juju.run("pair/0", "take", params)

    assert juju.unit_log("pair/0").count('ran "action take"') == before
    assert juju.run("pair/0", "take", {"count": 2}).results == {"took": "2"}


def test_a_secret_is_read_at_the_revision_the_consumer_tracks(juju: LabJuju):
    juju.config("consumer", {"mode": "trust-tracked"})
    juju.config("owner", {"token": "second"})

    juju.wait(lambda s: in_error(s, "consumer/0"), delay=0.5, timeout=60)

    assert "secret content 'first' does not match 'second'" in juju.unit_log("consumer/0")
    settle(juju, "consumer")  # with --refresh the retry reads the new revision
    assert "secret content matches second" in juju.unit_log("consumer/0")


def test_a_charm_that_never_calls_ops_main_does_nothing(juju: LabJuju):
    juju.deploy(CHARMS / "nomain")
    juju.wait(lambda s: s.apps["nomain"].units["nomain/0"].juju_status.current == "idle")

    status = juju.status().apps["nomain"].units["nomain/0"]
    assert status.workload_status.current != "active"
    assert "Emitting Juju event" not in juju.unit_log("nomain/0")


def test_juju_reboot_reboots_the_machine_after_the_hook_and_start_runs_again(juju: LabJuju):
    juju.config("owner", {"mode": "reboot"})

    def started_twice(_: jubilant.Status) -> bool:
        starts = juju.exec("cat /var/lib/misuse/starts", unit="owner/0").stdout
        return starts.count("start") == 2

    juju.wait(started_twice, delay=1, timeout=120)

    assert juju.exec("test -e /run/misuse-up || echo gone", unit="owner/0").stdout == "gone\n"
    status = juju.wait(lambda s: jubilant.all_active(s, "owner"), delay=0.5, timeout=60)
    assert status.apps["owner"].units["owner/0"].workload_status.message == "reboot"


def test_reboot_in_the_machine_gives_a_new_boot_time_and_start_runs_again(juju: LabJuju):
    def boot(unit: str) -> tuple[float, int, int]:
        """The machine's uptime, boot time (/proc/stat btime) and `start` hooks run so far."""
        out = juju.exec(
            "cut -d' ' -f1 /proc/uptime; sed -n 's/^btime //p' /proc/stat;"
            " cat /var/lib/misuse/starts",
            unit=unit,
        ).stdout.split()
        return float(out[0]), int(out[1]), out[2:].count("start")

    def started_again(_: jubilant.Status) -> bool:
        try:
            return boot("consumer/0")[2] == starts + 1
        except LabError:  # the machine is off (rebooting)
            return False
        except jubilant.TaskError as e:
            # Going down: the shutdown killed the command (return code -9), or the hook's
            # prelude found the charms' mount already gone (the lab runner's message).
            if e.task.return_code >= 0 and "the charms' mount is gone" not in e.task.stderr:
                raise
            return False

    uptime, boot_time, starts = boot("consumer/0")
    # A timer's default accuracy is a minute: without its own, the reboot comes 1-61 s later.
    reboot = "systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot"
    juju.exec(reboot, unit="consumer/0")
    juju.wait(started_again, delay=1, timeout=120)

    new_uptime, new_boot_time, _ = boot("consumer/0")
    assert new_uptime < 60 and new_uptime < uptime + 60  # its own clock, from 0 at each boot
    assert new_boot_time > boot_time
    assert uptime < float(Path("/proc/uptime").read_text().split()[0])  # not the host's
    juju.wait(lambda s: jubilant.all_active(s, "consumer"), delay=0.5, timeout=60)
