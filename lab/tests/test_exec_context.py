"""`juju exec` on the lab as on Juju 3.6: a unit's hook context, a machine's plain shell.

One machine: a single unit of the `labtest` charm (its peer relation gives the command a
databag to write). `exec --unit` runs with the hook tools on PATH after the unit's running
hook, and what it sets through them commits only if it exits 0; `exec --machine` has no hook
context; `ssh` goes straight to the machine, beside the unit's running hook.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jubilant
import pytest
from slurm_lab.juju import LabJuju
from slurm_lab.juju.runner import MACHINE_PATH
from slurm_lab.machines import Lab

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

CHARM = Path(__file__).parent / "charms" / "labtest"
UNIT = "solo/0"


@pytest.fixture(scope="module")
def juju(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LabJuju]:
    lab = Lab(tmp_path_factory.mktemp("lab-exec"))
    backend = LabJuju(lab)
    try:
        backend.deploy(CHARM, "solo")
        backend.wait(jubilant.all_active, delay=0.5, timeout=300)
        yield backend
    finally:
        if request.session.testsfailed:
            print(backend.dump_logs(journal_lines=50))
        lab.down()


def test_exec_on_a_unit_has_the_hook_tools_and_the_machines_path(juju: LabJuju):
    out = juju.exec(
        'is-leader; config-get slow; echo "$JUJU_UNIT_NAME"; pwd; echo "$PATH"; command -v bash',
        unit=UNIT,
    ).stdout.split("\n")

    assert out[:4] == ["True", "", UNIT, "/var/lib/juju/agents/unit-solo-0/charm"]
    assert out[4].endswith(f":{MACHINE_PATH}")  # the tools first, then the machine's own PATH
    assert out[5] == "/usr/bin/bash"


def test_exec_on_a_machine_is_a_plain_shell(juju: LabJuju):
    machine = juju.status().apps["solo"].units[UNIT].machine

    task = juju.exec("command -v is-leader || echo none", machine=machine)

    assert task.stdout == "none\n"


def test_what_an_exec_sets_commits_only_if_it_exits_0(juju: LabJuju):
    relation = juju.exec("relation-ids peers", unit=UNIT).stdout.strip()
    with pytest.raises(jubilant.TaskError) as failed:
        juju.exec(f"relation-set -r {relation} dropped=yes; exit 4", unit=UNIT)
    assert failed.value.task.return_code == 4

    juju.exec(f"relation-set -r {relation} kept=yes", unit=UNIT)

    command = f"relation-get --format=json -r {relation} - {UNIT}"
    bag = json.loads(juju.exec(command, unit=UNIT).stdout)
    assert bag.get("kept") == "yes"
    assert "dropped" not in bag


def test_exec_waits_for_the_units_running_hook(juju: LabJuju):
    juju.config("solo", {"slow": f"{UNIT}:config-changed:20"})  # back after the grace period
    assert juju.status().apps["solo"].units[UNIT].juju_status.current == "executing"
    started = time.monotonic()

    log = juju.exec("cat /var/lib/labtest/events.log", unit=UNIT).stdout

    assert time.monotonic() - started > 1
    assert log.split("\n")[-2] == "config_changed"
    tag = f"unit-{UNIT.replace('/', '-')}:"
    ran = [
        line.split('ran "')[1].split('"')[0]
        for line in juju.debug_log().split("\n")
        if line.startswith(tag) and 'ran "' in line
    ]
    assert ran[-2:] == ["config-changed", "juju-exec"]  # the exec started once the hook ended
    juju.config("solo", {"slow": ""})


def test_an_exec_in_a_thread_holds_its_unit_not_the_model(juju: LabJuju):
    machine = juju.status().apps["solo"].units[UNIT].machine
    started = time.monotonic()
    slow = threading.Thread(target=lambda: juju.exec("sleep 4", unit=UNIT))
    slow.start()
    time.sleep(1)

    assert juju.status().apps["solo"].units[UNIT].juju_status.current == "executing"
    juju.exec("true", machine=machine)
    others_done = time.monotonic() - started
    juju.exec("true", unit=UNIT)  # the same unit: after the other command
    same_unit_done = time.monotonic() - started
    slow.join()

    assert others_done < 3.5
    assert same_unit_done >= 4
    assert juju.status().apps["solo"].units[UNIT].juju_status.current == "idle"


def test_ssh_goes_straight_to_the_machine_while_the_unit_runs_a_hook(juju: LabJuju):
    juju.config("solo", {"slow": f"{UNIT}:config-changed:30"})  # back after the grace period
    started = time.monotonic()

    out = juju.ssh(UNIT, "command -v is-leader || echo", "none")

    assert time.monotonic() - started < 5  # it did not wait for the hook
    assert out == "none\n"  # no hook context
    assert juju.status().apps["solo"].units[UNIT].juju_status.current == "executing"
    with pytest.raises(jubilant.CLIError) as failed:
        juju.ssh(UNIT, "echo why >&2; exit 3")
    assert (failed.value.returncode, failed.value.stderr) == (3, "why\n")
    juju.config("solo", {"slow": ""})
