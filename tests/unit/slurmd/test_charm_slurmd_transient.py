"""The transient units' shell scripts, run by a real `sh` against fake Slurm commands."""

import os
import subprocess
from pathlib import Path

import pytest

FAKE_SCONTROL = """#!/bin/sh
echo "scontrol $*" >> "$LOG"
case "$1" in
delete) [ -z "$DELETE_FAILS" ] || exit 1 ;;
esac
"""
# pgrep as the script sees it: a root slurmstepd runs for the first BUSY_POLLS looks (exit 0),
# then none (exit 1); PGREP_FAILS makes it fail as pgrep does when it cannot look (exit 3).
FAKE_PGREP = """#!/bin/sh
echo "pgrep $*" >> "$LOG"
[ -z "$PGREP_FAILS" ] || exit 3
n=$(cat "$DIR/polls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/polls"
[ "$n" -le "$BUSY_POLLS" ] && exit 0
exit 1
"""


@pytest.fixture
def run_script(tmp_path: Path, node_module):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    commands = {
        "scontrol": FAKE_SCONTROL,
        "sleep": '#!/bin/sh\necho "sleep $*" >> "$LOG"\n',
        "systemctl": '#!/bin/sh\necho "systemctl $*" >> "$LOG"\n',
        "pgrep": FAKE_PGREP,
    }
    for name, text in commands.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"

    def run(argv: list[str], **env: str) -> list[str]:
        environ = {
            "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "LOG": str(log),
            "DIR": str(tmp_path),
            "BUSY_POLLS": "0",
            **env,
        }
        subprocess.run(argv, env=environ, timeout=30, check=False)
        return log.read_text().splitlines()

    return run


def test_reregister_restarts_slurmd_only_after_a_successful_delete(run_script, node_module):
    log = run_script(node_module.reregister_command("compute-0"), BUSY_POLLS="1")

    assert log[-2:] == ["scontrol delete nodename=compute-0", "systemctl restart slurmd"]


def test_reregister_leaves_the_node_drained_when_the_delete_fails(run_script, node_module):
    log = run_script(node_module.reregister_command("compute-0"), DELETE_FAILS="1")

    assert not any(line.startswith("systemctl") for line in log)


def test_reregister_waits_while_a_step_of_roots_runs(run_script, node_module):
    log = run_script(node_module.reregister_command("compute-0"), BUSY_POLLS="3")

    assert log[:6] == ["pgrep -x -u root slurmstepd", "sleep 5"] * 3
    assert log[6:] == [
        "pgrep -x -u root slurmstepd",
        "scontrol delete nodename=compute-0",
        "systemctl restart slurmd",
    ]


def test_reregister_never_deletes_while_pgrep_cannot_look(run_script, node_module):
    # The script is made to give up after three looks, instead of waiting forever.
    argv = node_module.reregister_command("compute-0")
    argv[2] = argv[2].replace(
        'sleep "$POLL"; done', 'sleep "$POLL"; [ "$(grep -c pgrep "$LOG")" -lt 3 ] || exit 2; done'
    )

    log = run_script(argv, PGREP_FAILS="1")

    assert log.count("pgrep -x -u root slurmstepd") == 3
    assert not any("delete" in line for line in log)
