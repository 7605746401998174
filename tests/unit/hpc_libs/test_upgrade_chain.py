"""Slurm's upgrade chain: which major may follow which, from SchedMD's table, and the path.

SchedMD's upgrade guide: from 24.11 on, a release upgrades directly from the 3 majors before
it (releases are YY.05 and YY.11), so 26.11 can be reached only from 25.05, 25.11 or 26.05.
The charms refuse anything else before a package moves (`refusal`, a blocked status) and
name the path (`upgrade_path`).
"""

import itertools

import pytest
from hpc_libs.slurm import upgrade
from hypothesis import given
from hypothesis import strategies as st

TABLE = {
    "25.05": ["24.11"],
    "25.11": ["24.11", "25.05"],
    "26.05": ["24.11", "25.05", "25.11"],
    "26.11": ["25.05", "25.11", "26.05"],
    "27.05": ["25.11", "26.05", "26.11"],
}
"""SchedMD's table for the releases the charms run (24.11 and newer): target -> its origins."""

RELEASES = [f"{year}.{month}" for year in range(24, 32) for month in ("05", "11")][1:]
"""24.11, 25.05, ... 31.11: the 6-month cycle from the oldest release the charms run."""

majors = st.sampled_from(RELEASES)


@pytest.mark.parametrize(("target", "origins"), TABLE.items())
def test_schedmds_table(target: str, origins: list[str]) -> None:
    for running in RELEASES[: RELEASES.index(target)]:
        allowed = upgrade.refusal(running, [running, target], "") is None
        assert allowed == (running in origins), f"{running} -> {target}"
        assert (upgrade.refusal(running, [running, target], target) is None) == allowed


def test_26_05_to_26_11_is_allowed_and_24_11_to_26_11_names_the_step_between() -> None:
    offered = ["24.11", "26.05", "26.11"]

    assert upgrade.refusal("26.05", offered, "26.11") is None
    assert upgrade.refusal("24.11", offered, "26.11") == (
        "Slurm 26.11 cannot upgrade 24.11 directly (at most 3 majors at once): upgrade "
        "24.11 -> 26.05 -> 26.11, setting slurm-major=26.05 first"
    )


def test_the_path_prefers_a_major_the_source_offers() -> None:
    assert upgrade.upgrade_path("24.11", "26.11", ["24.11", "25.11", "26.11"]) == [
        "24.11",
        "25.11",
        "26.11",
    ]


@given(majors, majors)
def test_a_jump_is_refused_exactly_when_slurm_forbids_it(running: str, target: str) -> None:
    reason = upgrade.refusal(running, [running, target], "")
    distance = RELEASES.index(target) - RELEASES.index(running)

    assert (reason is None) == (distance <= 3)
    if reason is not None:
        assert f"upgrade {running} -> " in reason and f" -> {target}, setting" in reason


@given(majors, majors, st.lists(majors, max_size=6))
def test_every_hop_of_the_path_is_one_slurm_allows(
    running: str, target: str, offered: list[str]
) -> None:
    if RELEASES.index(target) <= RELEASES.index(running):
        return
    path = upgrade.upgrade_path(running, target, sorted(set(offered), key=RELEASES.index))

    assert path[0] == running and path[-1] == target
    hops = list(itertools.pairwise(path))
    assert all(0 < RELEASES.index(b) - RELEASES.index(a) <= 3 for a, b in hops), path
    if not offered:
        assert len(hops) == -(-(RELEASES.index(target) - RELEASES.index(running)) // 3)
