"""The install and status scenarios slurmrestd shares with sackd and slurmdbd.

They are written once, in tests/unit/small_charms_scenarios.py, and collected here.
"""

import pytest
from small_charms_cases import Charm, named
from small_charms_scenarios import *  # noqa: F403 (collected here, in slurmrestd's own process)


@pytest.fixture
def charm() -> Charm:
    return named("slurmrestd")
