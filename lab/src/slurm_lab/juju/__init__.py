"""A local, jubilant-compatible Juju backend: charms run with ops.testing inside lab machines."""

from slurm_lab.juju.backend import LabJuju

__all__ = ["LabJuju"]
