"""What every test tier shares: the `lab` mark's skip.

A test marked `lab` (a module's `pytestmark = pytest.mark.lab`, in lab/tests and tests/slurm)
is skipped where the lab cannot run: without root, debootstrap or systemd-nspawn.
"""

import os
import shutil

import pytest

LAB_MISSING = (
    os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("systemd-nspawn")
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the tests marked `lab` where the lab cannot run."""
    if not LAB_MISSING:
        return
    skip = pytest.mark.skip(reason="the lab needs root, debootstrap and systemd-nspawn")
    for item in items:
        if item.get_closest_marker("lab"):
            item.add_marker(skip)
