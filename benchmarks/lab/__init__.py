"""Benchmarks of the charms on the lab (`just bench-lab`, `python -m benchmarks.lab`).

Deploys slurmctld, a slurmd application and a sackd login node on a fresh lab, then measures
each figure of issue 13 beside its comparator in the same run (see benchmarks/README.md), prints
a table and writes JSON. Needs root, like every lab run.
"""
