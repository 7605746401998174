"""`python -m slurm_exporter`: the exporter's service (`ExecStart` of the slurmctld charm's)."""

from slurm_exporter.exporter import main

main()
