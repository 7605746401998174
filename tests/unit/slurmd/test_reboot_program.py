"""The slurmd charm's RebootProgram, run as sh with stand-ins for the commands it calls."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

PROGRAM = Path(__file__).parents[3] / "charms/slurmd/src/programs/reboot-program.sh"
NODE = "compute-1"


OLD, NEW = "24.11.5-1", "24.11.6-1"
"""slurmd's installed version before the rollout, and the candidate the sources offer."""


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    """Stand-ins for the commands the program runs: each logs its argv.

    apt's stand-ins keep slurmd's version in files: `apt-cache policy` answers the
    candidate, `dpkg-query` the installed one, and `apt-get upgrade` installs the candidate
    (unless `$FAIL_DIR/upgrade-keeps` exists: apt left slurmd as it was).
    """
    folder = tmp_path / "bin"
    folder.mkdir()
    answers = {
        "squeue": 'case "$*" in *--states=PENDING*) cat "$PENDING_FILE" ;;'
        ' *) cat "$COMMENT_FILE" ;; esac',
        "apt-cache": 'echo "slurmd:"; echo "  Installed: $(cat "$INSTALLED")";'
        ' echo "  Candidate: $(cat "$CANDIDATE")"',
        "dpkg-query": 'cat "$INSTALLED"',
        "apt-get": 'case "$*" in *upgrade*) [ -e "$FAIL_DIR/upgrade-keeps" ] ||'
        ' cp "$CANDIDATE" "$INSTALLED" ;; esac',
    }
    for name in ("squeue", "apt-get", "apt-cache", "dpkg-query"):
        write_stub(folder / name, name, answers.get(name, ""))
    for name in ("scontrol", "systemctl", "systemd-run"):
        write_stub(folder / name, name, "")
    return folder


def write_stub(path: Path, name: str, answer: str) -> None:
    path.write_text(
        "#!/bin/sh\n"
        f'echo "{name} $*" >> "$LOG"\n'
        f'[ -e "$FAIL_DIR/{name}" ] && exit 1\n'
        f"{answer}\n"
        "exit 0\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def run_program(
    tmp_path: Path,
    bin_dir: Path,
    comment: str,
    fail: tuple[str, ...] = (),
    *,
    detached=True,
    pending: str = "",
    candidate: str = NEW,
) -> tuple[int, list[str]]:
    (tmp_path / "installed").write_text(OLD)
    (tmp_path / "candidate").write_text(candidate)
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
        "INSTALLED": str(tmp_path / "installed"),
        "CANDIDATE": str(tmp_path / "candidate"),
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
    assert calls[0].startswith(
        f"squeue --noheader --all --partition=rebuild --nodelist={NODE} --user=root"
    )
    assert calls[1:] == [
        "apt-get update --error-on=any",
        "apt-cache policy slurmd",
        "apt-get -y -o Dpkg::Options::=--force-confold upgrade --with-new-pkgs",
        "dpkg-query --show --showformat=${Version} slurmd",
        "systemctl reboot",
    ]


def test_an_upgrade_that_leaves_slurmd_behind_its_candidate_fails_before_the_reboot(
    tmp_path, bin_dir
):
    """apt kept slurmd back (held, a conflict): the node must not come back on the old
    release and count as rebuilt. It is DOWN with the versions, its rollout stopped."""
    comment = f"rebuild:compute:5000:upgrade:{NODE}"
    pending = "12 rebuild:compute:5000:upgrade:compute-2\n"

    code, calls = run_program(tmp_path, bin_dir, comment, fail=("upgrade-keeps",), pending=pending)

    assert code == 1
    assert "scontrol hold 12" in calls
    reason = f"rebuild: slurmd is {OLD} after the upgrade, not {NEW}"
    assert f"scontrol update nodename={NODE} state=down reason={reason}" in calls
    assert "systemctl reboot" not in calls


@pytest.mark.parametrize("candidate", [OLD, "(none)"])
def test_an_upgrade_with_nothing_newer_for_slurmd_still_reboots(tmp_path, bin_dir, candidate):
    """A patch cycle of the OS alone: slurmd's candidate is the installed one (or none)."""
    code, calls = run_program(
        tmp_path,
        bin_dir,
        f"rebuild:compute:5000:upgrade:{NODE}",
        fail=("upgrade-keeps",),
        candidate=candidate,
    )

    assert code == 0
    assert calls[-1] == "systemctl reboot"


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


def test_it_reads_root_jobs_only_so_no_user_text_picks_a_job(tmp_path, bin_dir):
    """A user's comment with a new line forges squeue lines: both queries filter by user id."""
    code, calls = run_program(tmp_path, bin_dir, f"rebuild:c:1:upgrade:{NODE}", fail=("apt-get",))

    queries = [call for call in calls if call.startswith("squeue ")]
    assert len(queries) == 2
    assert all(" --user=root " in f"{query} " for query in queries)
    assert code == 1


def test_a_forged_pending_line_without_a_job_id_is_never_held(tmp_path, bin_dir):
    pending = "x rebuild:compute:5000:upgrade:compute-2\n12 rebuild:compute:5000:reboot:c-3\n"

    code, calls = run_program(
        tmp_path, bin_dir, f"rebuild:compute:5000:upgrade:{NODE}", ("apt-get",), pending=pending
    )

    assert code == 1
    assert [call for call in calls if call.startswith("scontrol hold")] == ["scontrol hold 12"]


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
