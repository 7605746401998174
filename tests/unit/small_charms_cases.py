"""The sackd, slurmdbd and slurmrestd charms, as the scenarios see them.

So far these three charms do the same things: install their daemon and report which
integrations they still need. A `Charm` holds what differs between them.
"""

from dataclasses import dataclass

from charm_testing import already_installed
from ops import testing


@dataclass(frozen=True)
class Charm:
    """What a scenario needs to know about one of the charms."""

    name: str
    packages: list[str]
    integrations: tuple[str, ...]
    """The endpoints the charm needs, in the order its status asks for them."""
    waiting: str
    """Its status once integrated (the data it waits for arrives in later issues)."""

    @property
    def type_name(self) -> str:
        return f"{self.name.capitalize()}Charm"

    def installed(self) -> testing.StoredState:
        """Stored state saying the packages were installed in an earlier hook."""
        return already_installed(self.type_name)


CHARMS = [
    Charm("sackd", ["sackd", "slurm-client"], ("slurmctld",), "waiting for slurmctld"),
    Charm(
        "slurmdbd",
        ["slurmdbd", "slurm-wlm-jwt-plugin"],
        ("database", "slurmctld"),
        "waiting for database credentials",
    ),
    Charm(
        "slurmrestd",
        ["slurmrestd", "slurm-wlm-jwt-plugin", "sackd", "slurm-client"],
        ("slurmctld",),
        "waiting for slurmctld",
    ),
]


def named(name: str) -> Charm:
    """The `Charm` called `name`."""
    [charm] = [charm for charm in CHARMS if charm.name == name]
    return charm
