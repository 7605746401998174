"""Shared library for the Slurm charms: integration interfaces and Slurm service managers."""
