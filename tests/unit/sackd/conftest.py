"""The sackd charm's own scenarios (the ones it shares with slurmdbd and slurmrestd are in
tests/unit/small_charms)."""

import ops
import pytest
from charm_testing import charm_context, load_charm
from ops import testing

SackdCharm = load_charm("sackd")["charm"].SackdCharm


@pytest.fixture
def ctx() -> testing.Context[ops.CharmBase]:
    return charm_context("sackd", SackdCharm)
