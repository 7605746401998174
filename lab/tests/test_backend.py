"""The lab's Juju backend, driven through the jubilant API with the `labtest` charm.

One lab model for the module (machines boot in seconds, but CI has two cores): `alpha` and
`beta` are two apps of the same test charm, related alpha:provide -> beta:require. The tests run
in order, each one a step of the scenario, and read what the charm recorded: the events its
hooks saw (stored state, and a file written inside its machine), the databags it received, the
secret content it read.
"""

from __future__ import annotations

import json
import shlex
import time
from pathlib import Path

import jubilant
import pytest
from slurm_lab.juju import LabJuju

pytestmark = pytest.mark.lab

CHARM = Path(__file__).parent / "charms" / "labtest"
SETUP = ["install", "peers_relation_created", "leader_elected", "config_changed", "start"]


@pytest.fixture(scope="module")
def juju(lab_juju: LabJuju) -> LabJuju:
    return lab_juju


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
        "leader_settings_changed",
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
    assert seen[0] == "provide_relation_created"
    # Each beta unit joins once, then changes: in the order they entered the relation's scope
    # (their relation-created ended), as on Juju, not by unit number. Later relation-changed
    # are for beta units that answered in their databags (units run their hooks concurrently:
    # a change that lands while one is still queued is coalesced, as Juju).
    for remote in ("beta/0", "beta/1"):
        joined = f"provide_relation_joined:{remote}"
        assert seen.count(joined) == 1
        assert seen.index(joined) < seen.index(f"provide_relation_changed:{remote}")
    kinds = {f"provide_relation_{k}:beta/{n}" for k in ("joined", "changed") for n in (0, 1)}
    assert set(seen[1:]) <= kinds
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


def test_port_ranges_go_through_the_hook_tools_and_stay_across_hooks(juju: LabJuju):
    def opened() -> set[str]:
        return set(juju.status().apps["alpha"].units["alpha/0"].open_ports)

    task = juju.run("alpha/0", "ports", {"open": "60001-63000/tcp 53/udp", "ops-port": 8080})
    # As Juju 3.6's opened-ports, the hook's own pending changes are listed (ops' API too).
    assert set(json.loads(task.results["opened"])) == {"60001-63000/tcp", "53/udp", "8080/tcp"}
    assert opened() == {"60001-63000/tcp", "53/udp", "8080/tcp"}

    with pytest.raises(jubilant.TaskError) as refused:
        juju.run("alpha/0", "ports", {"open": "62000-64000/tcp"})
    assert "conflicts with 60001-63000/tcp" in (refused.value.task.message or "")
    assert opened() == {"60001-63000/tcp", "53/udp", "8080/tcp"}

    task = juju.run("alpha/0", "ports", {"close": "60001-63000/tcp 8080/tcp 53/udp"})
    assert json.loads(task.results["opened"]) == []
    assert opened() == set()


def test_exec_returns_output_and_raises_on_failure(juju: LabJuju):
    task = juju.exec("echo out; echo err >&2", unit="beta/leader")
    assert (task.stdout, task.stderr, task.return_code) == ("out\n", "err\n", 0)
    # Several words are quoted as `juju exec` quotes them: one with a space stays one word.
    assert juju.exec("printf", "%s.", "a b", "c", unit="beta/0").stdout == "a b.c."
    with pytest.raises(jubilant.TaskError) as failed:
        juju.exec("exit 3", unit="beta/0")
    assert failed.value.task.return_code == 3


def ran(juju: LabJuju, unit: str, hook: str) -> int:
    """How many times the unit ran the hook, by the debug log."""
    tag = f"unit-{unit.replace('/', '-')}:"
    return sum(
        1
        for line in juju.debug_log().splitlines()
        if line.startswith(tag) and f'ran "{hook}"' in line
    )


def hooks_run(juju: LabJuju, unit: str) -> list[str]:
    """The hooks the unit ran, in order, by the debug log."""
    tag = f"unit-{unit.replace('/', '-')}:"
    return [
        line.split('ran "')[1].split('"')[0]
        for line in juju.debug_log().splitlines()
        if line.startswith(tag) and 'ran "' in line
    ]


def test_a_failing_hook_is_retried_on_its_own_with_back_off(juju: LabJuju):
    before = ran(juju, "beta/0", "config-changed")

    juju.config("beta", {"fail-first": "config-changed", "fail-times": 2})
    failed_at = time.monotonic()

    unit = juju.status().apps["beta"].units["beta/0"]
    assert unit.workload_status.message == 'hook failed: "config-changed"'
    # No other event: the lab retries after 5 s, then 10 s, while wait() polls.
    juju.wait(jubilant.all_active, delay=0.5, timeout=90)
    elapsed = time.monotonic() - failed_at
    assert 13 <= elapsed < 40, elapsed
    assert ran(juju, "beta/0", "config-changed") - before == 3
    assert juju.exec("cat /var/lib/labtest/failures", unit="beta/0").stdout == "2"
    juju.config("beta", {"fail-first": "", "fail-times": 0})


def test_a_hook_due_on_a_powered_off_machine_waits_for_its_boot_and_never_fails(juju: LabJuju):
    machine = juju.state.units["beta/1"].machine
    before = hooks_run(juju, "beta/1")
    juju.lab.power_off(machine)  # type: ignore[attr-defined]
    try:
        juju.config("beta", {"linger-on-stop": 1})  # a config-changed, nothing else
        juju.wait(lambda s: s.apps["beta"].units["beta/0"].juju_status.current == "idle")
        off = juju.status().apps["beta"].units["beta/1"]
        assert off.workload_status.current == "active"  # no hook tried, none failed
        assert hooks_run(juju, "beta/1") == before
    finally:
        juju.lab.power_on(machine)  # type: ignore[attr-defined]
    booted = time.monotonic()

    juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.2, timeout=60)

    assert time.monotonic() - booted < 30  # no retry back-off (5 s, 10 s...) piled up
    assert hooks_run(juju, "beta/1")[len(before) :] == ["start", "config-changed"]
    juju.config("beta", {"linger-on-stop": 0})


def test_a_long_hook_blocks_only_its_own_unit_and_shows_its_status(juju: LabJuju):
    slow_runs = ran(juju, "beta/1", "config-changed"), ran(juju, "beta/1", "update-status")
    started = time.monotonic()

    juju.config("beta", {"slow": "beta/1:config-changed:30"})

    returned = time.monotonic() - started
    assert 14 <= returned < 28, returned  # back after the grace period, the hook still runs
    status = juju.status()
    slow, other = status.apps["beta"].units["beta/1"], status.apps["beta"].units["beta/0"]
    assert slow.juju_status.current == "executing"
    # the status the charm set inside the running hook, as status-set on Juju
    assert (slow.workload_status.current, slow.workload_status.message) == (
        "maintenance",
        "slow config-changed",
    )
    assert other.juju_status.current == "idle"
    assert other.workload_status.message.endswith(", config_changed")

    juju.update_status()  # beta/0 runs it now; beta/1's waits for its slow hook

    assert hooks_run(juju, "beta/0")[-1] == "update-status"
    # beta/1 still runs its slow hook; its update-status waits
    assert (
        ran(juju, "beta/1", "config-changed"),
        ran(juju, "beta/1", "update-status"),
    ) == slow_runs
    juju.wait(
        lambda s: s.apps["beta"].units["beta/1"].juju_status.current == "idle",
        delay=0.5,
        timeout=60,
        successes=1,
    )
    assert hooks_run(juju, "beta/1")[-2:] == ["config-changed", "update-status"]
    juju.config("beta", {"slow": ""})
    juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.5, timeout=30)


def on_machine_in_background(juju: LabJuju, unit: str, script: str) -> tuple[int, str]:
    """Run script on the unit's machine as a transient service; its exit code and stderr."""
    name = f"lab-bg-{time.monotonic_ns()}"
    wrapped = f"({script}) 2>/tmp/{name}.err; echo $? > /tmp/{name}.rc"
    juju.exec(f"systemd-run --unit={name} --collect sh -c {shlex.quote(wrapped)}", unit=unit)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        juju.status()  # drives the backend, as wait() polls do
        code = juju.exec(f"cat /tmp/{name}.rc 2>/dev/null || true", unit=unit).stdout.strip()
        if code:
            return int(code), juju.exec(f"cat /tmp/{name}.err", unit=unit).stdout
        time.sleep(0.5)
    raise AssertionError(f"{script} did not end")


def dispatch(unit: str, event: str) -> str:
    """The juju-exec command line that runs a charm event of unit, as on Juju."""
    charm_dir = f"/var/lib/juju/agents/unit-{unit.replace('/', '-')}/charm"
    command = f"JUJU_DISPATCH_PATH=hooks/{event} {charm_dir}/dispatch"
    return f"juju-exec -u {unit} {shlex.quote(command)}"


def test_a_process_on_the_machine_dispatches_a_charm_event_with_juju_exec(juju: LabJuju):
    before = ran(juju, "beta/0", "ping")
    started = time.monotonic()
    script = f"sleep 1; {dispatch('beta/0', 'ping')}"
    juju.exec(f"systemd-run --unit=lab-ping --collect sh -c {shlex.quote(script)}", unit="beta/0")

    juju.wait(
        lambda s: s.apps["beta"].units["beta/0"].workload_status.message.endswith(", ping"),
        delay=0.5,
        timeout=30,
        successes=1,
    )

    assert time.monotonic() - started < 10
    assert ran(juju, "beta/0", "ping") - before == 1
    assert events(juju, "beta/0")[-1] == "ping"
    # juju-exec's exit status tells whether the hook ran; an unknown event is a no-op
    assert on_machine_in_background(juju, "beta/0", dispatch("beta/0", "ping"))[0] == 0
    assert on_machine_in_background(juju, "beta/0", dispatch("beta/0", "no-such-event"))[0] == 0
    # a machine cannot dispatch for another machine's unit
    code, err = on_machine_in_background(juju, "beta/0", dispatch("beta/1", "ping"))
    assert code != 0
    assert 'unit "beta/1" is not on this machine' in err
    assert ran(juju, "beta/1", "ping") == 0


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
    assert seen[:12] == [
        "install",
        "peers_relation_created",
        "provide_relation_created",
        "leader_settings_changed",
        "config_changed",
        "start",
        "peers_relation_joined:alpha/0",
        "peers_relation_changed:alpha/0",
        "provide_relation_joined:beta/0",
        "provide_relation_changed:beta/0",
        "provide_relation_joined:beta/1",
        "provide_relation_changed:beta/1",
    ]
    # then relation-changed for beta units that answered (coalesced if still queued)
    assert set(seen[11:]) <= {"provide_relation_changed:beta/0", "provide_relation_changed:beta/1"}
    on_beta = events(juju, "beta/0")
    joined = on_beta.index("require_relation_joined:alpha/1")
    # then relation-changed, again if alpha/1 wrote its databag after that one ran
    assert set(on_beta[joined + 1 :]) == {"require_relation_changed:alpha/1"}
    assert state(juju, "alpha/1")["planned"] == "2"


def test_removing_the_leader_departs_it_and_elects_a_new_leader(juju: LabJuju):
    machine = juju.state.units["alpha/0"].machine

    juju.remove_unit("alpha/0")

    assert events(juju, "alpha/1")[-2:] == [
        "peers_relation_departed:alpha/0:departing=alpha/0",
        "leader_elected",
    ]
    assert events(juju, "beta/1")[-1] == "require_relation_departed:alpha/0:departing=alpha/0"
    # The old leader kept leadership through its departure; then alpha/1 was elected.
    log = juju.debug_log().splitlines()
    removed = max(
        i for i, ln in enumerate(log) if ln.startswith("unit-alpha-0:") and 'ran "remove"' in ln
    )
    elected = max(
        i
        for i, ln in enumerate(log)
        if ln.startswith("unit-alpha-1:") and 'ran "leader-elected"' in ln
    )
    assert removed < elected
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
    juju.remove_application("undeclared")  # else its install is retried for the rest


def test_a_removed_units_machine_goes_right_after_its_last_hook(juju: LabJuju):
    # beta/1's stop hook takes 30 s (as slurmd's waits for jobs) and leaves a transient
    # systemd unit behind: neither keeps its machine after the remove hook.
    juju.config("beta", {"linger-on-stop": 600, "slow": "beta/1:stop:30"})
    machine = juju.state.units["beta/1"].machine
    started = time.monotonic()

    juju.remove_unit("beta/1")

    assert time.monotonic() - started < 28  # returned during the stop hook
    assert events(juju, "beta/0")[-1] == "peers_relation_departed:beta/1:departing=beta/1"
    assert machine in {m.name for m in juju.lab.machines()}  # type: ignore[attr-defined]
    dying = juju.status().apps["beta"].units["beta/1"]  # listed, as Juju lists a dying unit
    assert dying.juju_status.current == "executing"
    juju.wait(
        lambda _: machine not in {m.name for m in juju.lab.machines()},  # type: ignore[attr-defined]
        delay=0.5,
        timeout=60,
        successes=1,
    )
    assert hooks_run(juju, "beta/1")[-2:] == ["stop", "remove"]
    assert "beta/1" not in juju.status().apps["beta"].units
