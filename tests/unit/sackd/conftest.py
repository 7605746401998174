"""The sackd charm's own scenarios (the ones it shares with slurmdbd and slurmrestd are in
test_small_charm_scenarios.py)."""

from charm_testing import charm_fixtures, use_charm
from hpc_libs.slurm.sackd import SackdManager

use_charm("sackd")
from charm import SackdCharm  # noqa: E402 (the charm's src first on sys.path)

ctx, sackd_root = charm_fixtures("sackd", SackdCharm, SackdManager, "sackd_root")
"""The charm's Context; its SackdManager under a temporary root."""
