"""The slurmd charm's RebootProgram, run as sh with stand-ins for the commands it calls."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

PROGRAM = Path(__file__).parents[3] / "charms/slurmd/src/programs/reboot-program.sh"
NODE = "compute-1"


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Stand-ins for squeue, apt-get, scontrol, systemctl, systemd-run: each logs its argv."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for name in ("squeue", "apt-get", "scontrol", "systemctl", "systemd-run"):
        stub = folder / name
        stub.write_text(
            "#!/bin/sh\n"
            f'echo "{name} $*" >> "$LOG"\n'
            f'[ -e "$FAIL_DIR/{name}" ] && exit 1\n'
            f'[ "{name}" = squeue ] && case "$*" in *--states=PENDING*) cat "$PENDING_FILE" ;;'
            ' *) cat "$COMMENT_FILE" ;; esac\n'
            "exit 0\n"
        )
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return folder


def run_program(
    tmp_path: Path,
    bin_dir: Path,
    comment: str,
    fail: tuple[str, ...] = (),
    *,
    detached=True,
    pending: str = "",
) -> tuple[int, list[str]]:
    settings = tmp_path / "settings"
    settings.write_text(f"NODE_NAME={NODE}\n")
    (tmp_path / "comment").write_text(comment + "\n")
    (tmp_path / "pending").write_text(pending)
    fail_dir = tmp_path / "fail"
    fail_dir.mkdir(exist_ok=True)
    for name in fail:
        (fail_dir / name).touch()
    log = tmp_path / "log"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "LOG": str(log),
        "FAIL_DIR": str(fail_dir),
        "COMMENT_FILE": str(tmp_path / "comment"),
        "PENDING_FILE": str(tmp_path / "pending"),
        "SLURMD_CHARM_REBOOT_SETTINGS": str(settings),
    }
    if detached:
        env["SLURMD_CHARM_REBOOT"] = "detached"
    result = subprocess.run(
        ["sh", str(PROGRAM)], env=env, capture_output=True, timeout=30, check=False
    )
    return result.returncode, log.read_text().splitlines() if log.exists() else []


def test_an_upgrade_request_upgrades_then_reboots(tmp_path, bin_dir):
    code, calls = run_program(tmp_path, bin_dir, f"rebuild:compute:5000:upgrade:{NODE}")

    assert code == 0
    assert calls[0].startswith(f"squeue --noheader --all --partition=rebuild --nodelist={NODE}")
    assert calls[1:] == [
        "apt-get update",
        "apt-get -y -o Dpkg::Options::=--force-confold upgrade --with-new-pkgs",
        "systemctl reboot",
    ]


@pytest.mark.parametrize(
    "comment",
    [
        f"rebuild:compute:5000:reboot:{NODE}",
        "rebuild:compute:5000:upgrade:compute-10",  # another node's job
        "",  # no rebuild job: a plain `scontrol reboot`
    ],
)
def test_without_an_upgrade_request_for_this_node_it_only_reboots(tmp_path, bin_dir, comment):
    code, calls = run_program(tmp_path, bin_dir, comment)

    assert code == 0
    assert calls[1:] == ["systemctl reboot"]


@pytest.mark.parametrize(
    ("fail", "reason"),
    [
        (("apt-get",), "rebuild: apt-get update failed"),
        (("squeue",), "rebuild: cannot ask Slurm for the rebuild job"),
    ],
)
def test_a_failure_sets_the_node_down_with_its_reason_and_does_not_reboot(
    tmp_path, bin_dir, fail, reason
):
    code, calls = run_program(tmp_path, bin_dir, f"rebuild:c:1:upgrade:{NODE}", fail=fail)

    assert code == 1
    assert f"scontrol update nodename={NODE} state=down reason={reason}" in calls
    assert "systemctl reboot" not in calls


def test_a_failure_holds_the_rest_of_its_rollout_before_the_node_goes_down(tmp_path, bin_dir):
    pending = (
        "12 rebuild:compute:5000:upgrade:compute-2\n"  # the same rollout: held
        "13 rebuild:other:5000:upgrade:other-0\n"  # another partition's rollout
        "14 rebuild:compute:4000:upgrade:compute-3\n"  # an earlier rollout of compute
        "15 rebuild:compute:50000:upgrade:compute-4\n"  # a start that only begins the same
    )
    comment = f"rebuild:compute:5000:upgrade:{NODE}"

    code, calls = run_program(tmp_path, bin_dir, comment, fail=("apt-get",), pending=pending)

    assert code == 1
    holds = [call for call in calls if call.startswith("scontrol hold")]
    assert holds == ["scontrol hold 12"]
    down = calls.index(
        f"scontrol update nodename={NODE} state=down reason=rebuild: apt-get update failed"
    )
    assert calls.index("scontrol hold 12") < down  # held before the job can end


def test_slurmd_runs_it_and_it_moves_to_its_own_transient_unit(tmp_path, bin_dir):
    code, calls = run_program(tmp_path, bin_dir, "", detached=False)

    assert code == 0
    assert calls == [
        "systemd-run --quiet --collect --unit=slurmd-charm-reboot "
        f"--setenv=SLURMD_CHARM_REBOOT=detached {PROGRAM}"
    ]


def test_the_charm_installs_the_program_root_only_with_the_node_name(tmp_path, enlisted):
    del enlisted
    program = tmp_path / "usr/local/sbin/slurmd-charm-reboot"
    assert program.read_bytes() == PROGRAM.read_bytes()
    assert stat.S_IMODE(program.stat().st_mode) == 0o755
    assert program.stat().st_uid == os.getuid()
    settings = tmp_path / "etc/default/slurmd-charm-reboot"
    assert settings.read_text() == "NODE_NAME=slurmd-0\n"


def test_the_charm_puts_back_a_changed_program(ctx, tmp_path, enlisted):
    program = tmp_path / "usr/local/sbin/slurmd-charm-reboot"
    program.write_text("#!/bin/sh\nexit 0\n")

    ctx.run(ctx.on.update_status(), enlisted)

    assert program.read_bytes() == PROGRAM.read_bytes()
