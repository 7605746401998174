"""The slurmdbd charm's configuration options, validated."""

from typing import Annotated

from hpc_libs.charm.config import Parameters, SlurmCharmConfig, parsed_parameters
from hpc_libs.slurm.slurmdbd import parse_parameters


class SlurmdbdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning).

    `slurmdbd_conf_parameters` holds the operator's settings parsed by
    `hpc_libs.slurm.slurmdbd.parse_parameters`, or their refusal: a refused key blocks naming
    that key and keeps slurmdbd.conf as it was, while every other option still applies.
    """

    slurmdbd_conf_parameters: Annotated[Parameters, parsed_parameters(parse_parameters)] = (
        Parameters()
    )
