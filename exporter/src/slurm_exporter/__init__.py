"""slurm-exporter: Prometheus metrics of Slurm, served on each slurmctld unit by its charm."""
