"""Re-registration keeps an operator's DRAIN or DOWN and its reason (issue 11).

The charm reads the node's state before it drains it for re-registration; the transient
unit's script, run here by a real `sh` against a fake `scontrol`, puts the state back once
the node has registered again. The reason is untrusted text: it stays one argument.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from charm_testing import systemd_expands
from hpc_libs.slurm.naming import REREGISTER_REASON, RETIRE_REASON
from ops import testing
from test_charm_slurmd import NODE, SHOW_NODE, again, stored

META_24_11 = {"plugin": {"data_parser": "data_parser/v0.0.42"}}
"""The `meta` of Slurm 24.11's `scontrol ... --json`: the data_parser version it answers in."""

REREGISTER_DRAIN = [
    "scontrol",
    "update",
    f"nodename={NODE}",
    "state=drain",
    f"reason={REREGISTER_REASON}",
]
HOSTILE_REASONS = [
    'a"; rm -rf / #',
    "a'; touch pwned; '",
    "$(touch pwned) `touch pwned` ${HOME}",
    "two\nlines; touch pwned",
    "--json reason=x nodename=ALL state=resume",
    "cost $$5, 100% \"quoted\" 'single' $HOME ${HOME} $",
]

# scontrol as the script sees it: `update` fails until the node has registered
# (UNKNOWN_UPDATES times); every call is logged as a JSON list of its arguments.
FAKE_SCONTROL = """#!/bin/sh
"$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' scontrol "$@" >> "$LOG"
case "$1" in
update)
  n=$(cat "$DIR/updates" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/updates"
  [ "$n" -gt "${UNKNOWN_UPDATES:-0}" ] || { echo "Invalid node name specified" >&2; exit 1; } ;;
esac
"""
LOGGED = """#!/bin/sh
"$PYTHON" -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$(basename "$0")" "$@" >> "$LOG"
"""


def shown(state: list[str], reason: str = "", by: str = "root") -> str:
    """`scontrol show node --json` for this unit's node, its reason set by user `by`."""
    node = {"name": NODE, "state": state, "reason": reason, "reason_set_by_user": by}
    return json.dumps({"meta": META_24_11, "nodes": [node]})


def node_config(ctx, state: testing.State, parameters: str = "RealMemory=900"):
    """Run the node-config action with a hardware field: the node must register again."""
    return ctx.run(ctx.on.action("node-config", params={"parameters": parameters}), state)


def transient_script(machine) -> list[str]:
    """The transient unit's command, as the program systemd starts receives it."""
    (transient,) = machine.ran("systemd-run")
    return [systemd_expands(word) for word in transient[transient.index("/bin/sh") :]]


@pytest.fixture
def run_script(tmp_path: Path):
    """Run a transient unit's argv with fake Slurm commands; return the commands it ran."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    for name in ("systemctl", "sleep", "rm", "touch"):
        (bin_dir / name).write_text(LOGGED)
    (bin_dir / "pgrep").write_text(LOGGED + "exit 1\n")  # No job step runs.
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    log = tmp_path / "log"
    work = tmp_path / "cwd"
    work.mkdir()

    def run(argv: list[str], **env: str) -> list[list[str]]:
        environ = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "LOG": str(log),
            "DIR": str(tmp_path),
            "PYTHON": sys.executable,
            **env,
        }
        subprocess.run(argv, env=environ, cwd=work, timeout=30, check=False)
        assert list(work.iterdir()) == []
        return [json.loads(line) for line in log.read_text().splitlines()]

    return run


def updates(commands: list[list[str]]) -> list[list[str]]:
    return [c for c in commands if c[:2] == ["scontrol", "update"]]


# What the charm reads and starts.


def test_an_operator_drain_is_kept_across_a_node_config_change(ctx, machine, enlisted, run_script):
    machine.responses[SHOW_NODE] = shown(["IDLE", "DRAIN"], "disk swap, ticket 42")

    node_config(ctx, enlisted)

    assert machine.ran("scontrol") == [list(SHOW_NODE), REREGISTER_DRAIN]
    commands = run_script(transient_script(machine))
    restart = commands.index(["systemctl", "restart", "slurmd"])
    assert commands[restart + 1 :] == [
        ["scontrol", "update", f"nodename={NODE}", "state=drain", "reason=disk swap, ticket 42"]
    ]


def test_an_operator_down_is_kept_across_a_node_config_change(ctx, machine, enlisted, run_script):
    machine.responses[SHOW_NODE] = shown(["DOWN", "DRAIN"], "bad DIMM")

    node_config(ctx, enlisted)

    assert updates(run_script(transient_script(machine)))[-1] == [
        "scontrol",
        "update",
        f"nodename={NODE}",
        "state=down",
        "reason=bad DIMM",
    ]


@pytest.mark.parametrize(
    "node_shown",
    [
        shown(["IDLE", "DRAIN"], REREGISTER_REASON),  # a re-registration that did not finish
        shown(["IDLE", "DRAIN"], RETIRE_REASON),
        shown(["IDLE"]),
        shown(["MIXED"], "a reason left from an earlier state"),
        shown(["DOWN"]),  # Slurm would refuse to set it again without a reason
        # slurmctld's own DOWN for a silent node: registering ends it (ReturnToService=1).
        shown(["DOWN", "DYNAMIC_NORM"], "Not responding", by="slurm"),
    ],
)
def test_the_charms_own_drain_or_no_operator_state_is_not_reapplied(
    ctx, machine, enlisted, run_script, node_shown
):
    machine.responses[SHOW_NODE] = node_shown

    node_config(ctx, enlisted)

    commands = run_script(transient_script(machine))
    assert commands[-1] == ["systemctl", "restart", "slurmd"]
    assert updates(commands) == []


def test_the_state_is_restored_once_the_new_registration_is_known(
    ctx, machine, enlisted, run_script
):
    machine.responses[SHOW_NODE] = shown(["IDLE", "DRAIN"], "maintenance")
    node_config(ctx, enlisted)

    commands = run_script(transient_script(machine), UNKNOWN_UPDATES="3")

    assert len(updates(commands)) == 4
    assert commands.count(["sleep", "1"]) == 3


def test_a_node_that_never_registers_again_is_given_up_on(ctx, machine, enlisted, run_script):
    machine.responses[SHOW_NODE] = shown(["IDLE", "DRAIN"], "maintenance")
    node_config(ctx, enlisted)

    commands = run_script(transient_script(machine), UNKNOWN_UPDATES="1000")

    assert len(updates(commands)) == 60


@pytest.mark.parametrize("reason", HOSTILE_REASONS)
def test_a_hostile_reason_stays_one_argument(ctx, machine, enlisted, run_script, reason):
    machine.responses[SHOW_NODE] = shown(["IDLE", "DRAIN"], reason)

    node_config(ctx, enlisted)

    commands = run_script(transient_script(machine))
    assert updates(commands) == [
        ["scontrol", "update", f"nodename={NODE}", "state=drain", f"reason={reason}"]
    ]
    assert not any(c[0] in ("rm", "touch") for c in commands)


def test_a_controller_that_cannot_say_starts_nothing_and_is_retried(ctx, machine, enlisted):
    machine.responses[("slurmd", "-C")] = "CPUs=2 RealMemory=2000\n"
    machine.time_out(*SHOW_NODE)

    out = ctx.run(ctx.on.start(), enlisted)

    assert machine.ran("scontrol", "update") == []
    assert machine.ran("systemd-run") == []
    assert out.unit_status == testing.WaitingStatus(
        f"command {list(SHOW_NODE)} timed out after 60 seconds; retrying"
    )
    assert json.loads(stored(out)["registered"])["realmemory"] == 1000

    machine.heal()
    machine.responses[SHOW_NODE] = shown(["IDLE", "DRAIN"], "maintenance")
    out = ctx.run(ctx.on.update_status(), again(out))

    assert machine.ran("scontrol", "update") == [REREGISTER_DRAIN]
    assert transient_script(machine)[-2:] == ["drain", "maintenance"]
    assert json.loads(stored(out)["registered"])["realmemory"] == 2000


@pytest.mark.parametrize(
    "case",
    [
        # An operator who wrote Slurm's words still set the state: it stays.
        (shown(["DOWN"], "Not responding", by="root"), "state=down"),
        # slurmctld set DOWN for another cause (an unexpected reboot): Slurm keeps it too.
        (shown(["DOWN"], "Node unexpectedly rebooted", by="slurm"), "state=down"),
        # A drain flag survives a registration in Slurm, whoever set it.
        (shown(["DOWN", "DRAIN"], "Not responding", by="slurm"), "state=drain"),
        (shown(["IDLE", "DRAIN"], "Kill task failed", by="slurm"), "state=drain"),
    ],
)
def test_what_slurm_keeps_across_a_registration_is_kept(
    ctx, machine, enlisted, run_script, case: tuple[str, str]
):
    node_shown, restored = case
    machine.responses[SHOW_NODE] = node_shown

    node_config(ctx, enlisted)

    assert updates(run_script(transient_script(machine)))[-1][3] == restored
