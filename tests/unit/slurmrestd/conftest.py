"""The slurmrestd charm's scenarios (install and package-source cases it shares with sackd and
slurmdbd are in test_small_charm_scenarios.py)."""

from charm_testing import charm_fixtures, use_charm
from hpc_libs.slurm.slurmrestd import SlurmrestdManager

use_charm("slurmrestd")
from charm import SlurmrestdCharm  # noqa: E402 (the charm's src first on sys.path)

ctx, root = charm_fixtures("slurmrestd", SlurmrestdCharm, SlurmrestdManager, "root")
"""The charm's Context; its SlurmrestdManager (and its sackd) under a temporary root."""
