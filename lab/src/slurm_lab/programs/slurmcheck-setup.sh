#!/bin/sh
# slurm_lab.slurmcheck, in its own mount, network and PID namespaces: the base ($BASE) bound
# read-only, the cases ($CASES) read-only at /mnt, tmpfs where Slurm writes; then the checker
# judges each case with the commands in $COMMANDS.
set -e
mount --make-rprivate /
M=$(mktemp -d)
mount --bind "$BASE" "$M"
mount -o remount,bind,ro "$M"
mount --bind "$CASES" "$M/mnt"
mount -o remount,bind,ro "$M/mnt"
mount -t proc proc "$M/proc"
mount --bind /dev "$M/dev"
for d in run tmp var/tmp var/log var/spool var/lib/slurm etc/slurm; do
    mount -t tmpfs tmpfs "$M/$d"
done
mkdir -p "$M/var/log/slurm" "$M/var/spool/slurmd" "$M/run/slurm"
exec chroot "$M" python3 /mnt/check.py /mnt/cases "$COMMANDS"
