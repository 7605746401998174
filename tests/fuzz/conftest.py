"""The fuzz suite's profiles and its one shared fixture: Slurm's own verdict on rendered files.

Profiles (`HYPOTHESIS_PROFILE`): `default` is CI's (bounded: the suite runs in a few minutes
on 2 cores), `deep` runs many more examples per surface for local hunts. Examples are not
stored between runs (no database): every run starts from the seed corpus and fresh draws.

The real-Slurm check (`slurm_lab.slurmcheck`) needs root and the lab's cached base; without
them its half of each test is skipped (with the reason), unless `FUZZ_REQUIRE_SLURM=1`, which
makes a missing check a failure (CI sets it through `just fuzz`).
"""

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parents[1] / "unit"))  # charm_testing

from real_slurm import RealSlurm

for profile, examples in (("default", 20), ("deep", 1500)):
    settings.register_profile(
        profile,
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def real_slurm() -> RealSlurm:
    """Batches rendered files and has the lab base's Slurm judge them (see real_slurm)."""
    return RealSlurm.from_environment()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print how many seeds and examples each surface ran (docs/development.md's counts)."""
    from surface import SEED_COUNTS, SURFACE_COUNTS

    if not SEED_COUNTS:
        return
    terminalreporter.section("fuzz surfaces: seeds / examples checked")
    for name in sorted(SEED_COUNTS):
        terminalreporter.write_line(f"{name}: {SEED_COUNTS[name]} / {SURFACE_COUNTS[name]}")
