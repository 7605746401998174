"""Run each scenario in this folder against each of the sackd, slurmdbd and slurmrestd charms."""

import ops
import pytest
from charm_testing import charm_context, load_charm
from ops import testing
from small_charms_cases import CHARMS, Charm

_TYPES = {c.name: getattr(load_charm(c.name)["charm"], c.type_name) for c in CHARMS}


@pytest.fixture(params=CHARMS, ids=[c.name for c in CHARMS])
def charm(request: pytest.FixtureRequest) -> Charm:
    return request.param


@pytest.fixture
def ctx(charm: Charm) -> testing.Context[ops.CharmBase]:
    return charm_context(charm.name, _TYPES[charm.name])
