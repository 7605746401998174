"""The lab's Juju backend, driven through the jubilant API with the `labtest` charm.

One lab model for the module (machines boot in seconds, but CI has two cores): `alpha` and
`beta` are two apps of the same test charm, related alpha:provide -> beta:require. The tests run
in order, each one a step of the scenario, and read what the charm recorded: the events its
hooks saw (stored state, and a file written inside its machine), the databags it received, the
secret content it read.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import jubilant
import pytest
from slurm_lab.juju import LabJuju
from slurm_lab.machines import Lab

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn"),
        reason="the lab needs root, debootstrap and systemd-nspawn",
    ),
]

CHARM = Path(__file__).parent / "charms" / "labtest"
SETUP = ["install", "peers_relation_created", "leader_elected", "config_changed", "start"]


@pytest.fixture(scope="module")
def juju(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LabJuju]:
    lab = Lab(tmp_path_factory.mktemp("lab-backend"))
    backend = LabJuju(lab, update_status_interval=3600)
    try:
        yield backend
    finally:
        if request.session.testsfailed:
            print(backend.dump_logs(journal_lines=50))
        times = backend.ctl.hook_times
        if times:
            ordered = sorted(times)
            print(
                f"\n[lab timing] {len(times)} hooks, median {ordered[len(ordered) // 2]:.2f}s,"
                f" max {ordered[-1]:.2f}s"
            )
        lab.down()


def state(juju: jubilant.Juju, unit: str) -> dict[str, object]:
    """What the charm on unit reports (the get-state action), JSON fields decoded."""
    results = juju.run(unit, "get-state").results
    return {
        k: json.loads(v) if k in ("events", "received", "mine") else v for k, v in results.items()
    }


def events(juju: jubilant.Juju, unit: str) -> list[str]:
    """The hooks the unit's charm saw, in order (actions and update-status left out)."""
    seen: list[str] = state(juju, unit)["events"]  # type: ignore[assignment]
    return [e for e in seen if not e.endswith("_action") and e != "update_status"]


def mine(juju: jubilant.Juju, unit: str, endpoint: str) -> dict[str, str]:
    """The unit's own databag on its only relation over endpoint."""
    bags: dict[str, dict[str, dict[str, str]]] = state(juju, unit)["mine"]  # type: ignore[assignment]
    (bag,) = bags[endpoint].values()
    return bag


def test_deploy_runs_setup_hooks_in_juju_order(juju: LabJuju):
    started = time.monotonic()
    juju.deploy(CHARM, "alpha")
    juju.deploy(CHARM, "beta", num_units=2)
    print(f"\n[lab timing] deploy of 3 units: {time.monotonic() - started:.1f}s")

    status = juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.1)

    assert events(juju, "alpha/0") == SETUP
    assert events(juju, "beta/1") == [
        "install",
        "peers_relation_created",
        "config_changed",
        "start",
        "peers_relation_joined:beta/0",
        "peers_relation_changed:beta/0",
    ]
    assert status.apps["beta"].units["beta/0"].leader
    assert not status.apps["beta"].units["beta/1"].leader
    assert status.apps["beta"].units["beta/1"].workload_status.message.startswith("follower")
    # The hooks ran inside the unit's own machine, which has the unit's address.
    on_machine = juju.exec("cat /var/lib/labtest/events.log", unit="alpha/0").stdout.split()
    assert on_machine[: len(SETUP)] == SETUP
    address = status.apps["alpha"].units["alpha/0"].address
    assert state(juju, "alpha/0")["address"] == address
    assert juju.exec("hostname -I", unit="alpha/0").stdout.split() == [address]


def test_peer_units_see_each_others_data(juju: LabJuju):
    received: dict[str, dict[str, dict[str, str]]] = state(juju, "beta/0")["received"]  # type: ignore[assignment]
    peers = next(bags for bags in received.values() if "beta/1" in bags)
    assert peers["beta/1"]["hello"] == "beta/1"


def test_integrate_runs_relation_hooks_and_data_flows_both_ways(juju: LabJuju):
    before = len(events(juju, "alpha/0"))

    juju.integrate("alpha:provide", "beta:require")

    seen = events(juju, "alpha/0")[before:]
    assert seen[:5] == [
        "provide_relation_created",
        "provide_relation_joined:beta/0",
        "provide_relation_changed:beta/0",
        "provide_relation_joined:beta/1",
        "provide_relation_changed:beta/1",
    ]
    # then one relation-changed per beta unit that answered in its databag
    assert sorted(seen[5:]) == [
        "provide_relation_changed:beta/0",
        "provide_relation_changed:beta/1",
    ]
    # provider -> requirer: app data, unit data and a secret granted to the relation
    got = mine(juju, "beta/1", "require")
    assert got["got-from"] == "alpha"
    assert got["unit-alpha-0"] == "alpha/0"
    assert got["token"] == "first"
    # requirer -> provider: beta's unit databags, as alpha/0 received them
    received: dict[str, dict[str, dict[str, str]]] = state(juju, "alpha/0")["received"]  # type: ignore[assignment]
    provide = next(bags for bags in received.values() if "beta/0" in bags)
    assert provide["beta/0"]["got-from"] == "alpha"
    assert provide["beta/1"]["token"] == "first"
    status = juju.status()
    assert status.apps["beta"].relations["require"][0].related_app == "alpha"


def test_new_secret_revision_fires_secret_changed_on_observers(juju: LabJuju):
    juju.config("alpha", {"token": "second"})

    for unit in ("beta/0", "beta/1"):
        assert events(juju, unit)[-1] == "secret_changed"
        assert mine(juju, unit, "require")["token"] == "second"
    assert "secret_changed" not in events(juju, "alpha/0")  # the owner is no observer
    assert juju.config("alpha")["token"] == "second"


def test_actions_return_results_and_fail_like_juju(juju: LabJuju):
    task = juju.run("alpha/0", "get-state")
    assert task.status == "completed"
    assert task.results["leader"] == "True"

    with pytest.raises(jubilant.TaskError) as failed:
        juju.run("alpha/0", "fail", {"message": "asked to"})
    assert failed.value.task.status == "failed"
    assert failed.value.task.message == "asked to"
    assert failed.value.task.log == ["about to fail"]

    with pytest.raises(ValueError):
        juju.run("alpha/0", "no-such-action")


def test_exec_returns_output_and_raises_on_failure(juju: LabJuju):
    task = juju.exec("echo", "out;", "echo err >&2", unit="beta/leader")
    assert (task.stdout, task.stderr, task.return_code) == ("out\n", "err\n", 0)
    with pytest.raises(jubilant.TaskError) as failed:
        juju.exec("exit 3", unit="beta/0")
    assert failed.value.task.return_code == 3


def test_hook_that_raises_leaves_unit_in_error_until_it_succeeds(juju: LabJuju):
    juju.config("beta", {"fail-on": "update-status"})
    juju.update_status("beta/0")

    status = juju.status()
    unit = status.apps["beta"].units["beta/0"]
    assert unit.workload_status.current == "error"
    assert unit.workload_status.message == 'hook failed: "update-status"'
    assert jubilant.any_error(status)
    assert "RuntimeError: failing on update_status as configured" in juju.unit_log("beta/0")
    assert "RuntimeError" in juju.debug_log()

    juju.config("beta", {"fail-on": ""})  # the failed hook is retried first, then succeeds

    juju.wait(jubilant.all_active, delay=0.1, timeout=60)


def test_filesystem_client_mounts_one_shared_dir_on_every_unit(juju: LabJuju):
    juju.deploy("filesystem-client")
    juju.integrate("beta:mount", "filesystem-client:mount")

    status = juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.1, timeout=60)

    subordinates = status.get_units("filesystem-client")
    assert sorted(subordinates) == ["filesystem-client/0", "filesystem-client/1"]
    assert status.apps["filesystem-client"].subordinate_to == ["beta"]
    # each beta unit wrote into the mount once told "mounted": both files are on both machines
    for unit in ("beta/0", "beta/1"):
        listing = juju.exec("ls", "/srv/shared", unit=unit).stdout.split()
        assert listing == ["beta-0", "beta-1"]

    juju.remove_relation("beta", "filesystem-client")

    assert not juju.status().get_units("filesystem-client")
    unmounted = juju.exec("mountpoint /srv/shared || true", unit="beta/0").stdout
    assert "is not a mountpoint" in unmounted
    juju.remove_application("filesystem-client")


def test_scale_up_joins_the_new_unit_everywhere(juju: LabJuju):
    juju.add_unit("alpha")

    seen = events(juju, "alpha/1")
    assert seen[:11] == [
        "install",
        "peers_relation_created",
        "provide_relation_created",
        "config_changed",
        "start",
        "peers_relation_joined:alpha/0",
        "peers_relation_changed:alpha/0",
        "provide_relation_joined:beta/0",
        "provide_relation_changed:beta/0",
        "provide_relation_joined:beta/1",
        "provide_relation_changed:beta/1",
    ]
    # then one relation-changed per beta unit that answered in its databag
    assert sorted(seen[11:]) == [
        "provide_relation_changed:beta/0",
        "provide_relation_changed:beta/1",
    ]
    assert events(juju, "beta/0")[-2:] == [
        "require_relation_joined:alpha/1",
        "require_relation_changed:alpha/1",
    ]
    assert state(juju, "alpha/1")["planned"] == "2"


def test_removing_the_leader_departs_it_and_elects_a_new_leader(juju: LabJuju):
    machine = juju.state.units["alpha/0"].machine

    juju.remove_unit("alpha/0")

    assert events(juju, "alpha/1")[-2:] == [
        "peers_relation_departed:alpha/0:departing=alpha/0",
        "leader_elected",
    ]
    assert events(juju, "beta/1")[-1] == "require_relation_departed:alpha/0:departing=alpha/0"
    status = juju.status()
    assert list(status.apps["alpha"].units) == ["alpha/1"]
    assert status.apps["alpha"].units["alpha/1"].leader
    assert machine not in {m.name for m in juju.lab.machines()}  # type: ignore[attr-defined]
    # The departing unit ran departed (as the departing unit), broken, stop and remove.
    log = juju.debug_log()
    removal = [
        line.split('ran "')[1].split('"')[0]
        for line in log.splitlines()
        if line.startswith("unit-alpha-0:") and 'ran "' in line
    ]
    assert removal[-7:] == [
        "peers-relation-departed",
        "peers-relation-broken",
        "provide-relation-departed",
        "provide-relation-departed",
        "provide-relation-broken",
        "stop",
        "remove",
    ]


def test_removing_an_application_breaks_its_relations(juju: LabJuju):
    juju.remove_application("alpha")

    assert events(juju, "beta/0")[-2:] == [
        "require_relation_departed:alpha/1:departing=alpha/1",
        "require_relation_broken",
    ]
    assert "alpha" not in juju.status().apps


def test_an_undeclared_dependency_fails_the_install_hook(juju: LabJuju):
    juju.deploy(CHARM.parent / "undeclared")

    unit = juju.status().apps["undeclared"].units["undeclared/0"]
    assert unit.workload_status.current == "error"
    assert unit.workload_status.message == 'hook failed: "install"'
    assert "No module named 'pydantic'" in juju.unit_log("undeclared/0")


def test_a_removed_units_machine_stays_until_its_background_work_ends(juju: LabJuju):
    juju.config("beta", {"linger-on-stop": 6})
    machine = juju.state.units["beta/1"].machine

    juju.remove_unit("beta/1")

    assert "beta/1" not in juju.status().apps["beta"].units
    assert machine in {m.name for m in juju.lab.machines()}  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while machine in {m.name for m in juju.lab.machines()}:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the machine outlived its background work"
        time.sleep(2)
        juju.reap_machines()
