#!/bin/sh
# A lab machine's power supply (slurm_lab.machines): boot systemd-nspawn with the arguments
# after $1 and $2, and boot it again each time it exits $1 (the machine rebooted), after $2
# seconds off. Each boot runs in a new time namespace whose CLOCK_BOOTTIME starts near 0.
# SIGTERM (the lab's stop) stops the machine and ends the loop.
rebooted=$1 off=$2
shift 2
trap 'kill -TERM "$nspawn" 2>/dev/null; wait "$nspawn"; exit 0' TERM
while :; do
    uptime=$(cut -d. -f1 /proc/uptime)
    unshare --time --boottime "-$uptime" systemd-nspawn "$@" &
    nspawn=$!
    wait "$nspawn"
    status=$?
    [ "$status" -eq "$rebooted" ] || exit "$status"
    sleep "$off"
done
