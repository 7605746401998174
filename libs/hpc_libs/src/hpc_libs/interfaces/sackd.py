"""The `sackd` integration: slurmctld (requirer, endpoint `login-node`) <-> sackd (provider).

A login node runs no Slurm daemon of its own but sackd, which authenticates the machine with
`auth/slurm` and fetches the cluster's configuration from the controllers (configless). All it
needs from slurmctld is what every daemon of the cluster needs: the auth key, as a granted
Juju secret, and the controllers, primary first (`ControllerData`). Each login unit
publishes in its unit databag what every consumer of `ControllerData` may
(`ConsumerUnitData`, defined once in `hpc_libs.interfaces.controller`): the digest of the
key sackd runs with, and the Slurm release sackd runs (`version`) once it runs it. sackd
fetches slurm.conf, so slurmctld writes a key older releases refuse only once every login
unit said it runs a newer one.
"""

import ops

from hpc_libs.interfaces.controller import ControllerConsumer, ControllerPublisher


class SackdProvider(ControllerConsumer):
    """The sackd charm's side, on its `slurmctld` endpoint."""


class SackdRequirer(ControllerPublisher):
    """The slurmctld charm's side, on its `login-node` endpoint (one relation per login app)."""

    def __init__(self, charm: ops.CharmBase, endpoint: str = "login-node") -> None:
        super().__init__(charm, endpoint)
