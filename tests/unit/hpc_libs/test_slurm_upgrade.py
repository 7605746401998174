"""Slurm major upgrades: the source option as untrusted input, the offer, the order's words.

Pure rules of `hpc_libs.slurm.upgrade`; the charms' gates are tested in each charm's suite.
"""

import pytest
from hpc_libs.slurm import upgrade
from hpc_libs.slurm.upgrade import DebSource

FORKY = (
    "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
    "http://deb.debian.org/debian forky main"
)
MADISON = """\
   slurmctld | 26.05.5-1 | http://deb.debian.org/debian forky/main amd64 Packages
   slurmctld | 24.11.5-1 | http://deb.debian.org/debian trixie/main amd64 Packages
   slurmctld | 24.11.5-1 | /var/lib/dpkg/status
"""


@pytest.mark.parametrize("text", ["auto", "ppa", "archive", "ppa:ubuntu-hpc/slurm-wlm-25.11"])
def test_base_sources_and_ppas_are_kept_as_given(text: str) -> None:
    assert upgrade.parse_source(text) == text


def test_a_deb_line_is_rebuilt_from_its_checked_parts() -> None:
    source = upgrade.parse_source(FORKY)

    assert source == DebSource(
        "http://deb.debian.org/debian",
        "forky",
        ("main",),
        signed_by="/usr/share/keyrings/debian-archive-keyring.gpg",
    )
    assert isinstance(source, DebSource)
    assert source.line() == FORKY


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("snap", "expected auto, ppa, archive"),
        ("ppa:../../etc/passwd", "not a PPA"),
        ("ppa:owner/name --yes", "not a PPA"),
        ("deb http://h/debian forky main\ndeb http://evil/ x y", "new line"),
        ("deb http://h/debian forky main # comment", "new line, #"),
        ("deb [trusted=no] http://h/debian forky main", "trusted takes yes only"),
        ("deb [allow-insecure=yes] http://h/debian forky main", "is not allowed"),
        ("deb [signed-by=/tmp/key.gpg] http://h/debian forky main", "signed-by must name"),
        ("deb [signed-by=/etc/apt/keyrings/../../k] http://h/d forky main", "signed-by must"),
        ("deb [arch=amd64 http://h/debian forky main", "closing ']'"),
        ("deb file:/srv/repo forky main", "not an http:// or https:// URI"),
        ("deb http://user:pw@h/debian forky main", "credentials"),
        ("deb http://h/debian/../x forky main", "not a plain http(s) URI"),
        ("deb http://h/debian forky", "needs a URI, a suite and at least one component"),
        ("deb http://h/debian ../forky main", "not a suite name"),
        ("deb http://h/debian forky ma$in", "$"),
        ("deb http://h/" + "a" * 600 + " forky main", "longer than 512"),
    ],
)
def test_a_bad_source_is_refused_saying_why(text: str, says: str) -> None:
    with pytest.raises(ValueError) as error:
        upgrade.parse_source(text)

    assert says in str(error.value)


@pytest.mark.parametrize("text", ["", "26.05", "24.11"])
def test_a_major_is_empty_or_yy_mm(text: str) -> None:
    assert upgrade.parse_major(text) == text


@pytest.mark.parametrize("text", ["26", "26.5", "26.05.1", "latest", "26.05\n"])
def test_anything_else_is_not_a_major(text: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm major"):
        upgrade.parse_major(text)


def test_the_offer_is_read_from_madison_oldest_first() -> None:
    assert upgrade.offered_majors(MADISON + "  junk | not-a-version | x\n") == ["24.11", "26.05"]


def test_the_target_is_the_newest_offered_or_the_named_major() -> None:
    assert upgrade.choose_target("24.11", ["24.11", "25.11", "26.05"], "") == "26.05"
    assert upgrade.choose_target("24.11", ["24.11", "25.11", "26.05"], "25.11") == "25.11"
    assert upgrade.choose_target("26.05", ["24.11", "26.05"], "") is None
    assert upgrade.choose_target("24.11", [], "") is None


def test_slurm_upgrades_three_majors_at_once_never_four() -> None:
    assert upgrade.steps("24.11", "26.05") == 3
    assert upgrade.refusal("24.11", ["26.05"], "") is None
    assert upgrade.refusal("24.11", ["26.11"], "") == (
        "Slurm 26.11 cannot upgrade 24.11 directly (at most 3 majors at once): upgrade "
        "24.11 -> 26.05 -> 26.11, setting slurm-major=26.05 first (from a source that "
        "offers 26.05)"
    )


def test_a_downgrade_or_a_major_not_offered_is_refused() -> None:
    assert upgrade.refusal("26.05", ["24.11", "26.05"], "24.11") == (
        "slurm-major 24.11 is older than the running 26.05: Slurm does not downgrade "
        "(restore the backups to roll back)"
    )
    assert upgrade.refusal("24.11", ["24.11", "26.05"], "25.05") == (
        "slurm-major 25.05 is not offered by slurm-package-source (it offers 24.11, 26.05)"
    )


def test_the_wait_names_each_daemon_behind_and_what_it_runs() -> None:
    reason = upgrade.wait_reason(
        "26.05", "slurmctld", [("ctl-0", "26.05.5"), ("ctl-1", "24.11.5"), ("ctl-2", None)]
    )

    assert reason == (
        "slurmctld must run 26.05 first (ctl-1 runs 24.11, ctl-2 has not said which Slurm it runs)"
    )


def test_no_wait_once_every_daemon_runs_the_target_or_newer() -> None:
    assert upgrade.wait_reason("26.05", "slurmdbd", [("a", "26.05.1"), ("b", "26.11.0")]) is None
    assert upgrade.wait_reason("26.05", "slurmdbd", []) is None


def test_trusted_yes_is_kept_as_the_operators_choice() -> None:
    source = upgrade.parse_source("deb [trusted=yes] http://10.151.0.1/debian forky main")

    assert isinstance(source, DebSource) and source.trusted
    assert source.line() == "deb [trusted=yes] http://10.151.0.1/debian forky main"


def test_the_pin_holds_slurms_packages_at_one_major() -> None:
    assert upgrade.pin_text("24.11") == (
        "Explanation: Written by the Slurm charms: Slurm stays at 24.11 until its turn\n"
        "Package: slurm* libslurm* libpmi* libpam-slurm* sackd\n"
        "Pin: version 24.11.*\n"
        "Pin-Priority: 1001\n"
    )
