"""A local, jubilant-compatible Juju backend: charms run through dispatch inside lab machines."""

from slurm_lab.juju.backend import LabJuju

__all__ = ["LabJuju"]
