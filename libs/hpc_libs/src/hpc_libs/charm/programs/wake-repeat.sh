#!/bin/sh
# A repeating wake watcher (hpc_libs.charm.wake.repeat_command): every <period> s until the
# epoch second <until>, run the dispatch command that wakes the charm, each run bounded.
#
# Arguments: <period s> <until epoch s> <dispatch timeout s> <dispatch word>...
# A failed dispatch (its hook failed, or juju-exec timed out) is logged and the loop goes on.
set -u
period=$1 until=$2 dispatch_timeout=$3
shift 3

while [ "$(date +%s)" -lt "$until" ]; do
    sleep "$period"
    timeout "$dispatch_timeout" "$@" || echo "dispatch failed: $?"
done
