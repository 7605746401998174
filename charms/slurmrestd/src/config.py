"""The slurmrestd charm's configuration options, validated."""

from typing import Annotated

import pydantic
from hpc_libs.charm.config import SlurmCharmConfig
from hpc_libs.interfaces.slurmrestd import DEFAULT_REST_PORT
from hpc_libs.slurm import grammar
from hpc_libs.slurm.slurmrestd import (
    MAX_CONNECTIONS,
    MAX_THREADS,
    MIN_CONNECTIONS,
    MIN_THREADS,
    listen_argument,
)


def _listen_address(value: str) -> str:
    """Empty (every interface), or one host name or IP address."""
    if value:
        grammar.host(value)
    return value


class SlurmrestdConfig(SlurmCharmConfig):
    """Schema of the charm's config options (see charmcraft.yaml for their meaning)."""

    listen_address: Annotated[str, pydantic.AfterValidator(_listen_address)] = ""
    port: int = pydantic.Field(default=DEFAULT_REST_PORT, ge=1, le=65535)
    threads: int = pydantic.Field(default=20, ge=MIN_THREADS, le=MAX_THREADS)
    max_connections: int = pydantic.Field(default=124, ge=MIN_CONNECTIONS, le=MAX_CONNECTIONS)

    @property
    def listen(self) -> str:
        """Return slurmrestd's `[host]:port` argument (`:6820` by default)."""
        return listen_argument(self.listen_address, self.port)
