#!/bin/sh
# Disable each unit named in the arguments, in the base being built (slurm_lab.rootfs); a unit
# the base does not have is skipped.
for unit in "$@"; do
    systemctl disable "$unit" || true
done
