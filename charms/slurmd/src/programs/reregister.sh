#!/bin/sh
# Re-registration of this unit's dynamic node (node.reregister_command), run by the slurmd
# charm in a transient unit once it has drained the node for a hardware change: wait until
# no job runs on the node, delete it from slurmctld, restart slurmd so that it registers anew
# with its new configuration, then give back the operator's DRAIN or DOWN state, if any.
#
# Arguments: <no-jobs text> <node> [<state> <reason>]
# <no-jobs text> is what `scontrol listjobs <node>` prints when no job runs on the node; the
# reason is untrusted text, and stays one word.
# slurmd restarts only if the delete succeeded; otherwise the node stays drained with the
# charm's reason, for an administrator to look at.
set -u
no_jobs_text=$1 node=$2
shift 2
POLL=5              # seconds between two looks
DELETE_ATTEMPTS=12  # a delete refused while slurmctld still counts a job ending
RESTORE_ATTEMPTS=60 # a second apart: the node is unknown until slurmd has registered

# Whether no job runs here. The node name is required: without it scontrol looks up the
# hostname, which is not the node's name, and reports no job while jobs run. Only if
# `scontrol listjobs` itself fails (a crashed slurmd takes the configless configuration with
# it) does the absence of any slurmstepd process count as "no job": otherwise such a node
# would be polled forever.
no_jobs() {
    out=$(scontrol listjobs "$node" 2>&1)
    status=$?
    case "$out" in *"$no_jobs_text"*) return 0 ;; esac
    [ "$status" -ne 0 ] && ! pgrep -x slurmstepd >/dev/null
}

# retried <attempts> <pause s> <command>...: run the command until it succeeds, at most
# <attempts> times; fail if it never does.
retried() {
    attempts=$1 pause=$2
    shift 2
    n=0
    until "$@"; do
        n=$((n + 1))
        [ "$n" -ge "$attempts" ] && return 1
        sleep "$pause"
    done
}

until no_jobs; do sleep "$POLL"; done
retried "$DELETE_ATTEMPTS" "$POLL" scontrol delete nodename="$node" || exit 1
systemctl restart slurmd || exit 1
if [ $# -eq 2 ]; then
    retried "$RESTORE_ATTEMPTS" 1 scontrol update nodename="$node" state="$1" reason="$2" || exit 1
fi
