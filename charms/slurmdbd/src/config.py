"""The slurmdbd charm's configuration options, validated."""

from hpc_libs.charm.config import SlurmCharmConfig


class SlurmdbdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning).

    `slurmdbd_conf_parameters` is checked by `hpc_libs.slurm.slurmdbd.parse_parameters` when
    the charm uses it, so a refused key blocks naming that key and keeps slurmdbd.conf as it
    was, while every other option still applies.
    """

    slurmdbd_conf_parameters: str = ""
