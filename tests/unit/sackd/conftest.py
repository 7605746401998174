"""The sackd charm's own scenarios (the ones it shares with slurmdbd and slurmrestd are in
test_small_charm_scenarios.py)."""

import ops
import pytest
from charm_testing import charm_context, use_charm
from ops import testing

use_charm("sackd")
from charm import SackdCharm  # noqa: E402 (the charm's src first on sys.path)


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("sackd", SackdCharm)
