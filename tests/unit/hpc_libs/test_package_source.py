"""Where Slurm packages come from: `auto` takes the archive when its Slurm is supported.

Ubuntu 26.04 and Debian 13+ have Slurm 24.11 or newer in their archive (the Ubuntu HPC PPA
may have no build for a new series); Ubuntu 24.04's archive has 23.11, so `auto` adds the PPA.
"""

import pytest
from hpc_libs.errors import PackageError
from hpc_libs.machine import apt
from hpc_libs.slurm import version
from hpc_libs.slurm.base import SLURM_PPA
from hpc_libs.slurm.slurmctld import SlurmctldManager
from hpc_libs.slurm.slurmd import SlurmdManager
from hpc_libs_fakes import FakeRun

LOCK = "--option=DPkg::Lock::Timeout=120"
UPDATE = ["apt-get", "update", "--error-on=any", LOCK]
ADD_PPA = ["add-apt-repository", "--yes", "--no-update", SLURM_PPA]

# `apt-cache show --no-all-versions slurmd`, trimmed, as each series answers it.
NOBLE_ARCHIVE = """Package: slurmd
Architecture: amd64
Version: 23.11.4-1.2ubuntu5
Priority: optional
Section: universe/admin
Source: slurm-wlm
"""
RESOLUTE_ARCHIVE = """Package: slurmd
Architecture: amd64
Version: 25.11.2-1ubuntu2
Section: universe/admin
Source: slurm-wlm
"""
FORKY_ARCHIVE = """Package: slurmd
Source: slurm-wlm
Version: 26.05.5-1
Installed-Size: 1003
"""


def not_installed(fake_run: FakeRun) -> None:
    fake_run.on("dpkg-query", returncode=1)


@pytest.mark.parametrize(
    ("candidate", "source"),
    [
        ("23.11.4-1.2ubuntu5", "ppa"),  # Ubuntu 24.04
        ("24.11.5-1", "archive"),  # Debian 13
        ("25.11.2-1ubuntu2", "archive"),  # Ubuntu 26.04
        ("26.05.5-1", "archive"),  # Debian testing (forky)
        ("24.05.8-1", "ppa"),
        (None, "ppa"),  # no Slurm in the archive at all
        ("not-a-version", "ppa"),
    ],
)
def test_auto_takes_the_archive_only_when_its_slurm_is_supported(
    candidate: str | None, source: str
) -> None:
    assert version.auto_source(candidate) == source


def test_candidate_version_reads_apt_cache(fake_run: FakeRun) -> None:
    fake_run.on("apt-cache", "show", stdout=NOBLE_ARCHIVE)

    assert apt.candidate_version("slurmd") == "23.11.4-1.2ubuntu5"
    assert fake_run.calls == [["apt-cache", "show", "--no-all-versions", "slurmd"]]


def test_no_candidate_when_no_source_has_the_package(fake_run: FakeRun) -> None:
    fake_run.on("apt-cache", stderr="E: No packages found", returncode=100)
    assert apt.candidate_version("slurmd") is None
    fake_run.on("apt-cache", stdout="N: Unable to locate package slurmd\n")
    assert apt.candidate_version("slurmd") is None


@pytest.mark.parametrize(
    ("archive", "ppa"),
    [(RESOLUTE_ARCHIVE, []), (FORKY_ARCHIVE, []), (NOBLE_ARCHIVE, [ADD_PPA, UPDATE])],
    ids=["resolute", "forky", "noble"],
)
def test_auto_uses_the_archive_where_its_slurm_is_supported_else_adds_the_ppa_first(
    fake_run: FakeRun, archive: str, ppa: list[list[str]]
) -> None:
    """Noble's archive has a Slurm too old to support: the PPA is added, then refreshed."""
    not_installed(fake_run)
    fake_run.on("apt-cache", "show", stdout=archive)

    assert SlurmdManager().install("auto") is True

    apt_calls = [c for c in fake_run.calls if c[0] not in ("dpkg-query", "systemctl")]
    assert apt_calls == [
        UPDATE,
        ["apt-cache", "show", "--no-all-versions", "slurmd"],
        *ppa,
        ["apt-get", "install", "--yes", LOCK, "slurmd", "slurm-client", "dbus"],
    ]


def test_auto_upgrades_a_too_old_slurm_from_the_ppa(fake_run: FakeRun) -> None:
    fake_run.dpkg("23.11.4-1.2ubuntu5")
    fake_run.on("apt-cache", "show", stdout=NOBLE_ARCHIVE.replace("slurmd", "slurmctld"))

    assert SlurmctldManager().install("auto", upgrade=True) is True

    assert ["apt-cache", "show", "--no-all-versions", "slurmctld"] in fake_run.calls
    assert ADD_PPA in fake_run.calls
    assert fake_run.calls[-1][:3] == ["apt-get", "install", "--yes"]


def test_auto_with_everything_installed_touches_nothing(fake_run: FakeRun) -> None:
    fake_run.dpkg("26.05.5-1")

    assert SlurmdManager().install("auto") is False
    assert all(call[0] == "dpkg-query" for call in fake_run.calls)


def test_explicit_archive_never_adds_the_ppa_even_with_an_old_slurm(fake_run: FakeRun) -> None:
    not_installed(fake_run)
    fake_run.on("apt-cache", "show", stdout=NOBLE_ARCHIVE)

    assert SlurmdManager().install("archive") is True

    assert ADD_PPA not in fake_run.calls
    assert fake_run.calls[-3:-1] == [
        UPDATE,
        ["apt-get", "install", "--yes", LOCK, *["slurmd", "slurm-client", "dbus"]],
    ]


def test_slurmd_starts_the_system_bus_it_installed(fake_run: FakeRun) -> None:
    """dbus installed on a running machine is not started before the next boot (a lab VM
    whose image lacks it): slurmd, which asks systemd over it for slurmstepd's scope, would
    not start until then."""
    not_installed(fake_run)

    SlurmdManager().install("archive")

    assert fake_run.calls[-1] == ["systemctl", "start", "dbus"]


def test_slurmd_leaves_a_system_bus_that_was_there_alone(fake_run: FakeRun) -> None:
    fake_run.on("dpkg-query", stdout="dbus installed 1.16.2-2\n")  # slurmd is missing

    SlurmdManager().install("archive")

    assert not [call for call in fake_run.calls if call[0] == "systemctl"]


def test_auto_with_an_unreachable_archive_is_a_package_error(fake_run: FakeRun) -> None:
    not_installed(fake_run)
    fake_run.on("apt-get", "update", stderr="Temporary failure resolving", returncode=100)

    with pytest.raises(PackageError) as caught:
        SlurmdManager().install("auto")

    assert caught.value.stderr == "Temporary failure resolving"
    assert ADD_PPA not in fake_run.calls
