#!/bin/sh
# RebootProgram of the slurmd charm (slurm.conf's, written by the slurmctld charm).
#
# slurmd runs it on this node, as root, before a rebuild job (`sbatch --reboot` in the hidden
# `rebuild` partition) starts here. It asks Slurm whether that job's comment requests an
# upgrade (rebuild:<partition>:<start>:upgrade:<node>), applies it, then reboots. The work
# runs in its own transient unit: an upgrade that restarts slurmd must not kill it.
# On failure the rollout's waiting jobs are held and the node is set DOWN with the reason.
#
# It reads root's jobs only (`--user=root`: the slurmctld charm submits the rebuild jobs as
# root). A user's comment is the user's text, and a new line in it would forge a line of
# squeue's answer: filtered by user id, no line of the answer is a user's.
set -eu

settings=${SLURMD_CHARM_REBOOT_SETTINGS:-/etc/default/slurmd-charm-reboot}  # NODE_NAME=..., by the charm
node=$(sed -n 's/^NODE_NAME=//p' "$settings")

if [ "${SLURMD_CHARM_REBOOT:-}" != detached ]; then
    exec systemd-run --quiet --collect --unit=slurmd-charm-reboot \
        --setenv=SLURMD_CHARM_REBOOT=detached "$0"
fi

# Stop the rollout first: hold its jobs not started yet (same partition and start), so that
# this job's end does not let the next one (`--dependency=singleton`) reboot another node
# before the slurmctld charm sees the failure. The operator releases them or rebuild-cancels.
hold_rollout() {
    case "$comment" in rebuild:*:*:*:*) ;; *) return 0 ;; esac
    rollout=${comment%:*:*}:
    squeue --noheader --all --partition=rebuild --user=root --states=PENDING --format='%i %k' |
        while read -r job job_comment; do
            case "$job" in "" | *[!0-9]*) continue ;; esac
            case "$job_comment" in "$rollout"*) scontrol hold "$job" || true ;; esac
        done
}

fail() {
    hold_rollout || true
    scontrol update nodename="$node" state=down reason="rebuild: $1" || true
    exit 1
}

comment=""
comment=$(squeue --noheader --all --partition=rebuild --nodelist="$node" --user=root \
    --states=CONFIGURING --format=%k) || fail "cannot ask Slurm for the rebuild job"
# The slurmd release apt would install (the charm's pin decides the major), and the one
# installed: after the upgrade they must be the same, or the node would come back on the
# old release and the rollout count it done.
slurmd_candidate() { apt-cache policy slurmd | sed -n 's/^ *Candidate: *//p'; }
slurmd_installed() { dpkg-query --show --showformat='${Version}' slurmd 2>/dev/null || true; }

case "$comment" in
    rebuild:*:*:upgrade:"$node")
        export DEBIAN_FRONTEND=noninteractive
        # --error-on=any: an unreachable source fails the update (by default it is only a
        # warning, and the upgrade then installs nothing new and succeeds).
        apt-get update --error-on=any || fail "apt-get update failed"
        wanted=$(slurmd_candidate)
        # --with-new-pkgs: a new Slurm major brings a new libslurm package; the charm's apt
        # pin decides which Slurm major is taken (hpc_libs.slurm.upgrade.pin_text).
        apt-get -y -o Dpkg::Options::=--force-confold upgrade --with-new-pkgs || fail "apt-get upgrade failed"
        installed=$(slurmd_installed)
        case "$wanted" in
            "" | "(none)") ;;
            "$installed") ;;
            *) fail "slurmd is ${installed:-not installed} after the upgrade, not $wanted" ;;
        esac
        ;;
esac
systemctl reboot
