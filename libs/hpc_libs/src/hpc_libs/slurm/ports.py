"""The TCP ports Slurm's daemons listen on, as the charms configure them (one definition each).

The slurm.conf and slurmdbd.conf the charms write, the `--conf-server` entries, the ports
each charm opens and the defaults its integration data falls back to all use these.
"""

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
"""slurmd's port, and sackd's: slurmctld pushes each new configuration to login nodes there."""
SLURMDBD_PORT = 6819
SLURMRESTD_PORT = 6820
DAEMON_PORTS = (SLURMCTLD_PORT, SLURMRESTD_PORT)
"""First and last of the daemons' own ports (slurmctld, slurmd and sackd, slurmdbd, slurmrestd)."""
