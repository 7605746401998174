#!/bin/sh
# A wake watcher (hpc_libs.charm.wake.watch_command): poll a check command until it succeeds
# printing nothing, then run the dispatch command that wakes the charm.
#
# Arguments: <bound s> <poll s> <poll timeout s> <dispatch timeout s> <dispatch word count>
#            <dispatch word>... <check word>...
# Every word of both commands is an argument of its own: no name reaches the shell's syntax.
# A failing check (Slurm unreachable) counts as "not yet"; after <bound> s the watcher gives
# up, and the charm's next event starts another.
set -u
bound=$1 poll=$2 poll_timeout=$3 dispatch_timeout=$4 dispatch_words=$5
shift 5

end=$(( $(date +%s) + bound ))
while [ "$(date +%s)" -lt "$end" ]; do
    if out=$(shift "$dispatch_words" && timeout "$poll_timeout" "$@") && [ -z "$out" ]; then
        echo "fact reached; dispatching"
        # Keep the dispatch words only (the first ones), then run them.
        i=0
        for word do
            [ "$i" -eq 0 ] && set --
            [ "$i" -lt "$dispatch_words" ] && set -- "$@" "$word"
            i=$((i + 1))
        done
        exec timeout "$dispatch_timeout" "$@"
    fi
    sleep "$poll"
done
echo "gave up after $bound s"
