#!/bin/sh
# Re-registration of this unit's dynamic node (node.reregister_command), run by the slurmd
# charm in a transient unit once it has drained the node for a hardware change: wait until
# no job runs on the node, delete it from slurmctld, restart slurmd so that it registers anew
# with its new configuration, then give back the operator's DRAIN or DOWN state, if any.
#
# Arguments: <node> [<state> <reason>]
# The reason is untrusted text, and stays one word.
# slurmd restarts only if the delete succeeded; otherwise the node stays drained with the
# charm's reason, for an administrator to look at.
set -u
node=$1
shift
POLL=5              # seconds between two looks
DELETE_ATTEMPTS=12  # a delete refused while slurmctld still counts a job ending
RESTORE_ATTEMPTS=60 # a second apart: the node is unknown until slurmd has registered

# Whether no job runs here: no job step process (root's slurmstepd; a user may name a
# process of their own so). Not `scontrol listjobs`: it lists the step sockets in slurmd's
# spool directory, and a step killed with its machine (a reboot, a power cut) leaves its
# socket there for ten minutes or more. pgrep fails (not 1) when it cannot look: jobs may run.
no_jobs() {
    pgrep -x -u root slurmstepd >/dev/null
    [ $? -eq 1 ]
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
