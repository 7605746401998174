"""The slurmrestd charm's configuration options, validated."""

from hpc_libs.charm.config import SlurmCharmConfig


class SlurmrestdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""
