"""A local lab of real Slurm machines and a jubilant-compatible Juju backend."""
