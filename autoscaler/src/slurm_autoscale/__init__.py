"""slurm-autoscale: scale slurmd applications from Slurm's queue through Juju."""
