"""What the Slurm charms share in their charm code: config basics and package installation."""
