"""Slurm service managers (one per daemon on a shared base) and the `scontrol` wrapper."""
