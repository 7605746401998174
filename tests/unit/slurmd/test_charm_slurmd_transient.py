"""The transient units' shell scripts, run by a real `sh` against fake Slurm commands."""

import os
import subprocess
from pathlib import Path

import pytest

FAKE_SCONTROL = """#!/bin/sh
echo "scontrol $*" >> "$LOG"
case "$1" in
listjobs)
  # Like Slurm: without the node name, scontrol looks for the hostname's steps and finds none.
  if [ -z "$2" ]; then echo "No slurmstepd's found on this node" >&2; exit 1; fi
  n=$(cat "$DIR/polls" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$DIR/polls"
  if [ "$n" -le "$BUSY_POLLS" ]; then echo "JOBID PID"; echo "42 1234"; echo "busy" >> "$LOG"
  elif [ -n "$BROKEN" ]; then echo "fatal: Could not establish a configuration source" >&2; exit 1
  else echo "No slurmstepd's found on this node" >&2; exit 1; fi ;;
delete) [ -z "$DELETE_FAILS" ] || exit 1 ;;
esac
"""


@pytest.fixture
def run_script(tmp_path: Path, node_module):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    commands = {
        "scontrol": FAKE_SCONTROL,
        "sleep": '#!/bin/sh\necho "sleep $*" >> "$LOG"\n',
        "systemctl": '#!/bin/sh\necho "systemctl $*" >> "$LOG"\n',
        "pgrep": '#!/bin/sh\necho "pgrep $*" >> "$LOG"\nexit "${STEPD:-1}"\n',
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


def test_broken_listjobs_with_a_running_step_keeps_waiting(run_script, node_module):
    # listjobs cannot run (slurmd crashed) but a slurmstepd is alive: never delete.
    # The script is made to give up after three polls, instead of waiting forever.
    argv = node_module.reregister_command("compute-0")
    argv[2] = argv[2].replace(
        'sleep "$POLL"; done', 'sleep "$POLL"; [ "$(grep -c pgrep "$LOG")" -lt 3 ] || exit 2; done'
    )

    log = run_script(argv, BROKEN="1", STEPD="0")

    assert log.count("pgrep -x slurmstepd") == 3
    assert not any("delete" in line for line in log)


def test_broken_listjobs_without_any_slurmstepd_proceeds(run_script, node_module):
    log = run_script(node_module.reregister_command("compute-0"), BROKEN="1", STEPD="1")

    assert "scontrol delete nodename=compute-0" in log
