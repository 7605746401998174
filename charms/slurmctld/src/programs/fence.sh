#!/bin/sh
# Written by the slurmctld charm: fence this controller while it cannot write
# the shared state (see the charm's fence module). Runs as root.
# Usage: fence <checkpoint> <state dir> <grace s> <user>
set -u
checkpoint=$1 state=$2 grace=$3 user=$4
run=/run/slurmctld-fence
ok=$run/probe-ok flag=$run/fenced probe="$state/fence-probe-$(hostname)"
touch "$ok"
probe_pid=
# Keep the share busy while this controller may serve: a process whose working directory
# is on it makes a plain unmount (autofs's expiry, systemd stopping the mount, a leaving
# filesystem-client's) fail as busy, so the state cannot go from under a running slurmctld
# before the charm stops it. A child: a hung share blocks the child, never the watchdog.
( cd "$checkpoint" && exec sleep infinity ) 2>/dev/null &
pin_pid=$!
trap 'kill "$pin_pid" ${probe_pid:+"$probe_pid"} 2>/dev/null; exit 0' TERM INT
wake_charm() { systemctl start --no-block slurmctld-charm-primary.service || true; }
while :; do
    if [ -z "$probe_pid" ] || ! kill -0 "$probe_pid" 2>/dev/null; then
        # shellcheck disable=SC2016 # "$1" is the inner shell's: the probe file.
        ( mountpoint -q "$checkpoint" &&
          setpriv --reuid="$user" --regid="$user" --clear-groups \
              sh -c 'date -u +%s > "$1"' sh "$probe" &&
          touch "$ok" ) 2>/dev/null &
        probe_pid=$!
    fi
    sleep 1
    # In milliseconds: in whole seconds a probe that succeeded 1.1 s ago could read as 2 s old,
    # and a grace of 2 s (SlurmctldTimeout 4) fenced a backup whose probes were only slow.
    age_ms=$(( $(date +%s%3N) - $(stat -c %.3Y "$ok" | tr -d .) ))
    age=$(( age_ms / 1000 ))
    if [ "$age_ms" -lt $(( grace * 1000 )) ]; then
        [ -e "$flag" ] || continue
        rm -f "$flag"
        echo "the shared state is writable again: starting slurmctld"
        systemctl start --no-block slurmctld.service
        wake_charm
    elif [ ! -e "$flag" ]; then
        reason="cannot write $state for ${age} s"
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) $reason" > "$flag"
        pid=$(systemctl show -P MainPID slurmctld.service)
        if [ "${pid:-0}" -gt 0 ]; then
            kill -KILL "$pid"
            echo "fenced: $reason: killed slurmctld (pid $pid)"
        else
            echo "fenced: $reason (slurmctld was not running)"
        fi
        wake_charm
    fi
done
