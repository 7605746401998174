"""Slurm's own parser judges a rendered file before it replaces the live one (slurm.check).

`scontrol` and `slurmdbd` are faked (FakeRun): each answer reads the candidate file the
command would read, as Slurm 24.11 and 26.05 do (tests/slurm and lab/tests run the real ones).
"""

import stat
import subprocess
from pathlib import Path

import pytest
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import check
from hpc_libs.slurm.check import SlurmRefusedError, check_with_slurm
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.slurmdbd import SlurmdbdManager
from hpc_libs_fakes import FakeRun
from slurmutils import SlurmConfig

REFUSED_24_11 = (
    "scontrol: error: MaxStepCount=0, No steps permitted\n"
    "scontrol: fatal: Unable to process configuration file\n"
)
REFUSED_26_05 = (
    "[2026-11-25T15:00:14.740] error: Invalid purge unit 'x', valid options are hours, days,"
    ' or months\n[2026-11-25T15:00:14.740] fatal: Bad value "12x" for PurgeJobAfter\n'
)


@pytest.fixture
def real_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Undo conftest's `slurm_judged`: the real check runs, against FakeRun."""
    monkeypatch.setattr(check, "check_with_slurm", check_with_slurm)


class Slurm:
    """A fake Slurm check command: records what it read, answers with `stderr`/`returncode`."""

    def __init__(self, fake_run: FakeRun, command: str, *, returncode=0, stderr="") -> None:
        self.fake_run = fake_run
        self.returncode = returncode
        self.stderr = stderr
        self.read: list[tuple[Path, str, int]] = []
        fake_run.on_call(command, answer=self.answer)

    def answer(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        conf = Path(self.fake_run.envs[-1]["SLURM_CONF"])
        name = "slurm.conf" if argv[0] == "scontrol" else "slurmdbd.conf"
        candidate = conf.with_name(name)
        self.read.append((candidate, candidate.read_text(), candidate.stat().st_mode))
        return subprocess.CompletedProcess(argv, self.returncode, "", self.stderr)


def test_scontrol_reads_the_candidate_beside_the_live_file_and_it_is_removed(
    tmp_path: Path, fake_run: FakeRun, owners
):
    slurm = Slurm(fake_run, "scontrol")

    check_with_slurm("ClusterName=c\n", directory=tmp_path / "etc", owner="slurm")

    assert fake_run.calls == [["scontrol", "--version"]]
    ((candidate, text, mode),) = slurm.read
    assert text == "ClusterName=c\n"
    assert candidate.parent.parent == tmp_path / "etc"
    assert stat.S_IMODE(mode) == 0o600
    assert owners["slurm.conf"] == ("slurm", None)
    assert not candidate.parent.exists()
    assert list((tmp_path / "etc").iterdir()) == []


def test_a_file_included_by_name_is_read_beside_the_candidate_as_slurm_reads_it(
    tmp_path: Path, fake_run: FakeRun, owners
):
    """Slurm reads `Include name` in the including file's directory (configless sends it so):
    without a copy beside the candidate, scontrol would wait a minute for it, then refuse."""
    live = tmp_path / "etc"
    live.mkdir()
    (live / "metrics-auth.conf").write_text("MetricsAuthUsers=slurm-metrics\n")
    seen: list[str] = []

    def answer(argv: list[str]) -> subprocess.CompletedProcess[str]:
        included = Path(fake_run.envs[-1]["SLURM_CONF"]).with_name("metrics-auth.conf")
        seen.append(included.read_text())
        return subprocess.CompletedProcess(argv, 0, "", "")

    fake_run.on_call("scontrol", answer=answer)

    check_with_slurm("ClusterName=c\nInclude metrics-auth.conf\n", directory=live, owner="slurm")

    assert seen == ["MetricsAuthUsers=slurm-metrics\n"]
    assert sorted(p.name for p in live.iterdir()) == ["metrics-auth.conf"]


def test_a_refusal_quotes_slurm_without_its_closing_line_and_names_the_live_file(
    tmp_path: Path, fake_run: FakeRun, owners
):
    Slurm(fake_run, "scontrol", returncode=1, stderr=REFUSED_24_11)

    with pytest.raises(SlurmRefusedError) as caught:
        check_with_slurm("MaxStepCount=0\n", directory=tmp_path, owner="slurm")

    error = caught.value
    assert error.reasons == [
        "MaxStepCount=0, No steps permitted",
        "Unable to process configuration file",
    ]
    assert error.status_message() == (
        "Slurm refuses the new slurm.conf (the old one is kept): "
        "MaxStepCount=0, No steps permitted"
    )
    assert not error.timed_out


def test_slurm_messages_of_26_05_have_time_stamps_and_the_candidate_path_is_the_live_one(
    tmp_path: Path, fake_run: FakeRun, owners
):
    slurm = Slurm(fake_run, "slurmdbd", returncode=1)

    def answer(argv: list[str]) -> subprocess.CompletedProcess[str]:
        slurm.answer(argv)
        path = slurm.read[-1][0]
        stderr = REFUSED_26_05 + f"fatal: Could not open/read/parse slurmdbd.conf file {path}\n"
        return subprocess.CompletedProcess(argv, 1, "", stderr)

    fake_run.on_call("slurmdbd", answer=answer)

    with pytest.raises(SlurmRefusedError) as caught:
        check_with_slurm("PurgeJobAfter=12x\n", "slurmdbd.conf", directory=tmp_path, owner="u")

    assert fake_run.calls == [["slurmdbd", "-V"]]
    assert caught.value.reasons[:2] == [
        "Invalid purge unit 'x', valid options are hours, days, or months",
        'Bad value "12x" for PurgeJobAfter',
    ]
    assert caught.value.reasons[2] == (
        f"Could not open/read/parse slurmdbd.conf file {tmp_path / 'slurmdbd.conf'}"
    )
    assert "Could not open" not in caught.value.status_message()


def test_a_check_that_cannot_run_is_an_ops_error_and_leaves_nothing(
    tmp_path: Path, fake_run: FakeRun, owners
):
    fake_run.missing("scontrol")
    with pytest.raises(SlurmOpsError, match="not found"):
        check_with_slurm("a=b\n", directory=tmp_path, owner="slurm")
    assert list(tmp_path.iterdir()) == []


def test_no_exit_message_still_says_why(tmp_path: Path, fake_run: FakeRun, owners):
    Slurm(fake_run, "scontrol", returncode=139)

    with pytest.raises(SlurmRefusedError, match="exit status 139"):
        check_with_slurm("a=b\n", directory=tmp_path, owner="slurm")


# The writers: the live file is replaced only by a rendering Slurm accepts.


def conf(**fields: object) -> SlurmConfig:
    return SlurmConfig.from_dict({"clustername": "c", **fields})


@pytest.mark.usefixtures("real_check")
def test_a_refused_slurm_conf_is_not_written_and_the_old_one_stays(
    tmp_path: Path, fake_run: FakeRun, owners
):
    config = SlurmctldManager(tmp_path).config
    slurm = Slurm(fake_run, "scontrol")
    assert config.write(conf(maxstepcount=5)) is True
    old = config.path.read_text()
    slurm.returncode, slurm.stderr = 1, REFUSED_24_11

    with pytest.raises(SlurmRefusedError):
        config.write(conf(maxstepcount=0))

    assert config.path.read_text() == old
    assert [text for _, text, _ in slurm.read] == [old, config.render(conf(maxstepcount=0))]
    # The next event tries again, and writes once Slurm accepts.
    slurm.returncode, slurm.stderr = 0, ""
    assert config.write(conf(maxstepcount=0)) is True


@pytest.mark.usefixtures("real_check")
def test_slurm_is_asked_once_per_new_rendering_and_never_for_the_file_on_disk(
    tmp_path: Path, fake_run: FakeRun, owners
):
    config = SlurmctldManager(tmp_path).config
    Slurm(fake_run, "scontrol")

    config.check(conf())
    assert config.write(conf()) is True
    assert config.write(conf()) is False

    assert fake_run.calls == [["scontrol", "--version"]]


@pytest.mark.usefixtures("real_check")
def test_slurmdbd_conf_is_judged_by_slurmdbd_as_slurm_owns_it(
    tmp_path: Path, fake_run: FakeRun, owners
):
    manager = SlurmdbdManager(tmp_path)
    slurm = Slurm(fake_run, "slurmdbd", returncode=1, stderr=REFUSED_26_05)

    with pytest.raises(SlurmRefusedError):
        manager.config.write(manager.config.load())

    assert not manager.config.path.exists()
    assert stat.S_IMODE(slurm.read[0][2]) == 0o600
    assert owners["slurmdbd.conf"] == ("slurm", None)


def test_the_lab_asks_slurm_the_same_way():
    """The fuzz suite judges with the lab's bases (slurm_lab.slurmcheck): the same commands."""
    from slurm_lab import slurmcheck

    assert dict(check.COMMANDS) == slurmcheck.COMMANDS
    for stderr in (REFUSED_24_11, REFUSED_26_05):
        assert slurmcheck.slurm_messages(stderr) == check.slurm_messages(stderr)
