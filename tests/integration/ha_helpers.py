"""Helpers for the controller high-availability scenarios (issue 8): controller order and
roles from `scontrol ping --json`, lab faults on a controller's machine, and failover timing.

Every Slurm query runs on the login node: a controller's own machine may be powered off or
cut from the network. The timed probes (ping, queue, job state) go over `juju ssh`, as a
user's commands do, not through the hooks' lock as `juju exec` does (`probe`). The faults
need the lab (`juju.lab`); on real Juju they are skipped.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from dataclasses import dataclass
from typing import Any, cast

import jubilant
import pytest
from dynamic_nodes_helpers import poll
from slurm_lab.machines import FaultKind

LOGIN = "login/0"
SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
TAKEOVER = "taking over"
"""What a backup's slurmctld logs when it takes control (`BackupController1 ... taking over`)."""
IN_CHARGE = "Running as primary controller"
"""What slurmctld logs once it serves as the controller in charge (a backup after takeover)."""
TAKEOVER_ASKED = "Performing background RPC: REQUEST_TAKEOVER"
"""What a standby slurmctld logs when `scontrol takeover` asks it to take control (backup.c):
a takeover it decided alone, its primary silent for `SlurmctldTimeout`, has no such line."""
PROBE_TIMEOUT = 15
"""Seconds one client command may take while a controller is unreachable."""
FAILOVER_BOUND = 30.0
"""Issue 8: the first backup serves within 30 s of the fault with the default timers (from the
fault to the backup's `Running as primary controller`, in its own log)."""
CLIENT_BOUND = FAILOVER_BOUND + 15
"""A login node's first successful probe after the fault: the takeover plus one probe, whose
commands each wait up to `PROBE_TIMEOUT` for the controllers (a cut primary first)."""
SLURM_DEFAULT_SLURMCTLD_TIMEOUT = 120

SLURMCTLD_HOST = re.compile(r"^\s*slurmctldhost\s*=\s*([^(\s]+)", re.IGNORECASE | re.MULTILINE)
"""A `SlurmctldHost` line of slurm.conf; group 1 is the hostname."""

FAULT_KINDS: tuple[FaultKind, ...] = ("kill", "power", "network")
"""The faults the suite injects, each as a test of its own (issue 8). A network cut also makes
the shared filesystem read-only on that machine: the charm's fence stops its slurmctld."""


def exec_on(juju: jubilant.Juju, command: str, *, unit: str = LOGIN, wait: float = 120) -> str:
    """Run a shell command on a unit; its stdout (raise `jubilant.TaskError` if it fails)."""
    return juju.exec(command, unit=unit, wait=wait).stdout


def try_exec(
    juju: jubilant.Juju, command: str, *, unit: str = LOGIN, wait: float = 60
) -> str | None:
    """Run a shell command on a unit; None if it fails or times out."""
    try:
        return exec_on(juju, command, unit=unit, wait=wait)
    except (jubilant.TaskError, TimeoutError):
        return None


def probe(juju: jubilant.Juju, command: str) -> str | None:
    """Run a Slurm client command on the login node as a user does, over `juju ssh`; its
    stdout, None if it fails or times out.

    Not `juju exec`: on Juju that waits for the machine's lock, held while any of its units
    runs a hook, and a failover keeps the login node's charm busy (slurmctld pushes the new
    controller order). A timed probe would measure those hooks, not Slurm.
    """
    try:
        return juju.ssh(LOGIN, f"timeout {PROBE_TIMEOUT} {command}")
    except (jubilant.CLIError, TimeoutError):
        return None


def pings(juju: jubilant.Juju) -> list[dict[str, Any]] | None:
    """`scontrol ping --json` from the login node, in `SlurmctldHost` order; None if it fails."""
    out = probe(juju, "scontrol ping --json")
    if out is None:
        return None
    try:
        return list(json.loads(out).get("pings", []))
    except json.JSONDecodeError:
        return None


def is_up(ping: dict[str, Any]) -> bool:
    """Whether a controller answered the ping.

    Slurm 24.11 gives `pinged` (`UP`/`DOWN`) beside `responding`; 26.05 dropped `pinged`
    (as the charm's `ControllerPing` reads it): `responding` must be true in both.
    """
    return ping.get("responding") is True and str(ping.get("pinged", "UP")).upper() == "UP"


def ping_hosts(juju: jubilant.Juju) -> list[str]:
    """The controllers' hostnames in `SlurmctldHost` order, as `scontrol ping` lists them."""
    found = poll(lambda: pings(juju), timeout=60, what="scontrol ping --json from the login node")
    return [str(p["hostname"]) for p in found]


def all_controllers_up(juju: jubilant.Juju, hosts: list[str]) -> bool:
    """Whether `scontrol ping` lists exactly `hosts`, in order, all UP."""
    found = pings(juju)
    return found is not None and [p["hostname"] for p in found] == hosts and all(map(is_up, found))


def slurmctld_hosts_in_conf(juju: jubilant.Juju, unit: str) -> list[str]:
    """The hostnames of the `SlurmctldHost` lines of slurm.conf on a controller unit."""
    out = exec_on(juju, "cat /etc/slurm/slurm.conf", unit=unit)
    return SLURMCTLD_HOST.findall(out)


def unit_hostname(status: jubilant.Status, unit: str) -> str:
    """The hostname of a unit's machine."""
    app = unit.split("/", 1)[0]
    return status.machines[status.apps[app].units[unit].machine].hostname


def unit_of_host(status: jubilant.Status, app: str, hostname: str) -> str:
    """The unit of `app` whose machine has this hostname."""
    for name, unit in status.apps[app].units.items():
        if status.machines[unit.machine].hostname == hostname:
            return name
    raise AssertionError(f"no unit of {app} on {hostname}")


def takeover_count(juju: jubilant.Juju, unit: str) -> int:
    """How many times a controller unit's slurmctld logged taking control."""
    out = exec_on(juju, f"grep -c '{TAKEOVER}' {SLURMCTLD_LOG} || true", unit=unit)
    return int(out.strip() or 0)


# --- jobs ---------------------------------------------------------------------------------------

JOB_OPTIONS = "-p compute -N1 --mem=1 -o /dev/null"


def submit_from_login(juju: jubilant.Juju, wrap: str, *options: str) -> str:
    """`sbatch` from the login node; the job id."""
    out = exec_on(juju, f"sbatch --parsable {JOB_OPTIONS} {' '.join(options)} --wrap '{wrap}'")
    return out.strip().split(";")[0]


def submit_held(juju: jubilant.Juju, count: int) -> list[str]:
    """Queue `count` held jobs from the login node (they stay pending); their ids."""
    out = exec_on(
        juju,
        f"for i in $(seq {count}); do sbatch --parsable --hold {JOB_OPTIONS} --wrap true; done",
        wait=300,
    )
    return [line.split(";")[0] for line in out.split()]


def submit_in_background(juju: jubilant.Juju, seconds: int, out: str) -> None:
    """Submit held jobs from the login node one after another for `seconds`, in the background.

    Each line of `out` (on the login node) is a job id, or sbatch's error and `failed`;
    `done` ends it (`background_submissions`).
    """
    loop = (
        f"end=$(($(date +%s) + {seconds})); while [ $(date +%s) -lt $end ]; do "
        f"sbatch --parsable --hold {JOB_OPTIONS} --wrap true 2>&1 || echo failed; done; echo done"
    )
    exec_on(juju, f"nohup sh -c '{loop}' > {out} 2>&1 < /dev/null &")


def background_submissions(juju: jubilant.Juju, out: str) -> list[str] | None:
    """The lines of a finished `submit_in_background` (None while it runs)."""
    lines = exec_on(juju, f"cat {out}").splitlines()
    return lines if lines and lines[-1] == "done" else None


def known_job_ids(juju: jubilant.Juju) -> list[str] | None:
    """Every job id the controller knows (any state, ended ones for MinJobAge), as listed."""
    out = probe(juju, "squeue --noheader --states=all --format=%i")
    return None if out is None else out.split()


def live_job_ids(juju: jubilant.Juju) -> list[str] | None:
    """The ids of the jobs that have not ended (squeue's default states), as listed.

    An ended job leaves the controller's list MinJobAge (300 s) after it ended, so a failover
    that takes long on a loaded host may legitimately forget an earlier test's job.
    """
    out = probe(juju, "squeue --noheader --format=%i")
    return None if out is None else out.split()


def job_state(juju: jubilant.Juju, job_id: str) -> str | None:
    """A job's state from the login node; None if it cannot be read."""
    out = probe(juju, f"squeue --noheader --states=all -j {job_id} -o %T")
    return None if not out else out.strip()


def wait_state(juju: jubilant.Juju, job_id: str, state: str, timeout: float) -> None:
    """Wait until a job is in `state` (RUNNING, COMPLETED, ...)."""
    poll(
        lambda: job_state(juju, job_id) == state,
        timeout=timeout,
        interval=1,
        what=f"job {job_id} {state}",
    )


# --- faults -------------------------------------------------------------------------------------


UPGRADE_IN_PLACE = r"""set -eu
package=$1
old=$(dpkg-query -W -f='${Version}' "$package")
work=$(mktemp -d)
mkdir -p "$work/root/DEBIAN"
dpkg-query -L "$package" | while IFS= read -r path; do
    if [ -L "$path" ] || [ -f "$path" ]; then
        cp -a --parents "$path" "$work/root"
    elif [ -d "$path" ]; then  # dpkg removes an empty directory the new package lacks
        mkdir -p "$work/root$path"
        chown --reference="$path" "$work/root$path"
        chmod --reference="$path" "$work/root$path"
    fi
done
for part in preinst postinst prerm postrm; do
    if [ -e "/var/lib/dpkg/info/$package.$part" ]; then
        cp "/var/lib/dpkg/info/$package.$part" "$work/root/DEBIAN/$part"
    fi
done
# A configuration file the charm removed (the package's logrotate rule) stays removed.
if [ -e "/var/lib/dpkg/info/$package.conffiles" ]; then
    while IFS= read -r path; do
        if [ -e "$work/root$path" ]; then echo "$path"; fi
    done < "/var/lib/dpkg/info/$package.conffiles" > "$work/root/DEBIAN/conffiles"
fi
{
    dpkg-query -W -f='Package: ${Package}\nArchitecture: ${Architecture}\n' "$package"
    echo "Version: $old+lab$(date +%s)"
    dpkg-query -W -f='Maintainer: ${Maintainer}\nDepends: ${Depends}\n' "$package"
    dpkg-query -W -f='Description: ${binary:Summary}\n' "$package"
} > "$work/root/DEBIAN/control"
dpkg-deb -b "$work/root" "$work/$package.deb" > /dev/null
DEBIAN_FRONTEND=noninteractive dpkg -i --force-confold "$work/$package.deb"
rm -rf "$work"
dpkg-query -W -f='${Version}' "$package"
"""
"""A new Debian revision of an installed package, installed with dpkg: what a point release
(apt upgrade, unattended-upgrades) runs. The machine reaches no archive, so the package is
built there from dpkg's own record of the installed one (its files and maintainer scripts) with
a higher version: the old prerm, the unpack and the new postinst run as for a real one. A
configuration file the admin removed is left out, as dpkg would keep it removed."""


def upgrade_in_place(juju: jubilant.Juju, unit: str, package: str) -> str:
    """Install a new revision of `package` on a unit (`UPGRADE_IN_PLACE`); its new version."""
    return exec_on(
        juju, f"sh -s {package} <<'EOF'\n{UPGRADE_IN_PLACE}EOF", unit=unit, wait=300
    ).split()[-1]


def lab_of(juju: jubilant.Juju) -> Any:
    """The lab behind the backend (slurm_lab.machines.Lab); skip the test on real Juju."""
    lab = getattr(juju, "lab", None)
    if lab is None or not hasattr(lab, "power_off"):
        pytest.skip("controller faults need the lab")
    return cast(Any, lab)


def inject(juju: jubilant.Juju, kind: FaultKind, machine: str) -> None:
    """Take a controller's machine down one way (`Lab.fault`)."""
    lab_of(juju).fault(kind, machine)


def repair(juju: jubilant.Juju, kind: FaultKind, machine: str) -> None:
    """Undo `inject`."""
    lab_of(juju).repair(kind, machine)


def logged_at(
    juju: jubilant.Juju, unit: str, line: str, since: float, *, first: bool = False
) -> float | None:
    """When a controller unit's slurmctld last (or `first`) logged `line` after `since`.

    The epoch time of that journal line (lab machines share the host's clock), None if there
    is none.
    """
    which = "head" if first else "tail"
    out = exec_on(
        juju,
        f"journalctl -u slurmctld --no-pager -o short-unix --since=@{int(since)} "
        f"| grep '{line}' | {which} -n 1",
        unit=unit,
    )
    stamp = out.split(" ", 1)[0]
    return float(stamp) if stamp else None


def took_control_at(
    juju: jubilant.Juju, unit: str, since: float, *, first: bool = False
) -> float | None:
    """When a controller unit's slurmctld last (or `first`) began serving as the one in charge:
    its `Running as primary controller` line."""
    return logged_at(juju, unit, IN_CHARGE, since, first=first)


def asked_to_take_over_at(juju: jubilant.Juju, unit: str, since: float) -> float | None:
    """When a standby controller unit was first asked to take over (`scontrol takeover`) after
    `since`: Slurm's `REQUEST_TAKEOVER` line in its journal, None if there is none."""
    return logged_at(juju, unit, TAKEOVER_ASKED, since, first=True)


def backup_serves(juju: jubilant.Juju, primary: str, backup: str) -> bool:
    """Whether the login node's clients are served while the primary is down, by the backup.

    `scontrol ping` must show the primary DOWN and the backup UP, and `squeue` must answer.
    """
    found = pings(juju)
    if found is None:
        return False
    state = {p["hostname"]: is_up(p) for p in found}
    if state.get(primary, True) or not state.get(backup, False):
        return False
    return known_job_ids(juju) is not None


def failover_seconds(
    juju: jubilant.Juju, kind: FaultKind, primary_host: str, backup_host: str, timeout: float = 120
) -> float:
    """Inject `kind` on the primary's machine; seconds until the first backup serves.

    Timed from just before the fault to the first successful probe from the login node (the
    probe's own time included, so the value is an upper bound). The fault is left in place.
    """
    started = time.monotonic()
    inject(juju, kind, primary_host)
    poll(
        lambda: backup_serves(juju, primary_host, backup_host),
        timeout=timeout,
        interval=0.5,
        what=f"{backup_host} serving after the primary's fault ({kind})",
    )
    return time.monotonic() - started


def recover(juju: jubilant.Juju, kind: FaultKind, primary_host: str, hosts: list[str]) -> None:
    """Undo the fault and wait until every controller is UP again, in the same order."""
    repair(juju, kind, primary_host)
    poll(
        lambda: all_controllers_up(juju, hosts),
        timeout=180,
        interval=2,
        what=f"every controller UP again in order {hosts} after {kind}",
    )


@dataclass
class Timings:
    """Failover times by fault kind."""

    seconds: dict[str, list[float]]

    def add(self, kind: str, value: float) -> None:
        self.seconds.setdefault(kind, []).append(value)

    def report(self) -> str:
        default = SLURM_DEFAULT_SLURMCTLD_TIMEOUT
        lines = [
            "failover: fault to the first backup in charge "
            f"(Slurm's default SlurmctldTimeout: {default} s)"
        ]
        for kind, values in self.seconds.items():
            lines.append(
                f"  {kind:8} runs={len(values)} median={statistics.median(values):.1f}s "
                f"max={max(values):.1f}s all={[round(v, 1) for v in values]}"
            )
        return "\n".join(lines)
