"""systemd services: `systemctl` and `journalctl` run through `host.run`, every call bounded.

`charmlibs.systemd` runs `systemctl` without a timeout, so this module runs it itself.
A start or restart of a `Type=notify` unit (slurmd, slurmctld, ...) is first bounded by
systemd's own `TimeoutStartSec` (90 s by default): systemd fails the job and the daemon's
reason is in its journal. `SERVICE_TIMEOUT` is longer, so systemd's verdict comes first and
ours only guards against a systemctl that hangs.

A daemon that fails to start or restart raises `ServiceError` whose message carries the
daemon's own reason, its last fatal line in the journal (see `journal_reason`).
"""

import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import ClassVar

from hpc_libs.errors import ServiceError, SlurmOpsError
from hpc_libs.machine import files, host

logger = logging.getLogger(__name__)

SERVICE_TIMEOUT = 180.0
"""Seconds for `systemctl start|restart|stop`: beyond systemd's default 90 s job timeout."""
QUICK_TIMEOUT = 30.0
"""Seconds for systemctl calls that do not wait for a daemon (enable, is-active, ...)."""
JOURNAL_TIMEOUT = 10.0
"""Seconds to read a unit's journal for the reason it failed."""
JOURNAL_LINES = 50
SKIP_SYSV = {"SYSTEMCTL_SKIP_SYSV": "1"}
UNIT_DIR = "/etc/systemd/system"
"""Where the charms write the unit files of their own services."""
STARTED_AT_BOOT = ("", "[Install]", "WantedBy=multi-user.target", "")
"""The last lines of a unit the machine starts at boot once it is enabled."""


def service_text(charm: str, unit: Sequence[str], service: Sequence[str]) -> str:
    """Return the text of a service unit charm `charm` writes, started at boot once enabled.

    `unit` are its `[Unit]` lines (its `Description=` first), `service` its `[Service]` lines.
    """
    head = [f"# Written by the {charm} charm.", "[Unit]", *unit, "", "[Service]"]
    return "\n".join([*head, *service, *STARTED_AT_BOOT])


"""For `enable` and `disable`: systemctl skips `systemd-sysv-install`. Debian's Slurm packages
also ship SysV init scripts, and syncing their `/etc/rc?.d` links (update-rc.d) took 0.2 s of
every enable on a lab machine; systemd, PID 1 on every base the charms support, never reads
them for a service that has its own unit file."""
_REASON_MARKERS = ("fatal:", "error:")
_INVOCATION_ID = re.compile(r"[0-9a-f]{32}")


class Service:
    """One systemd service, by unit name (`slurmd` and `slurmd.service` are the same)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Service({self.name!r})"

    def start(self) -> None:
        """Start the service (a no-op for systemd if it is already running).

        Raises:
            ServiceError: The service did not start; the message holds its journal reason.

        """
        self._change("start")

    def stop(self) -> None:
        """Stop the service."""
        _systemctl("stop", self.name, timeout=SERVICE_TIMEOUT)

    def restart(self) -> None:
        """Restart the service, starting it if it is stopped.

        Raises:
            ServiceError: The service did not come back; the message holds its journal reason.

        """
        self._change("restart")

    def reload(self) -> None:
        """Ask the running service to read its configuration again (its `ExecReload`).

        Raises:
            ServiceError: The reload failed; the message holds its journal reason.

        """
        self._change("reload")

    def enable(self) -> None:
        """Start the service at boot.

        `--no-reload`: enabling only links the unit into its target's wants, read at boot,
        and every caller reloads after writing a unit file, before enabling it. systemctl's
        own reload would re-read every unit file again (0.13-0.15 s of PID 1 on a lab
        machine, a third of slurmd's enable, run beside the new node's registration).
        Without the SysV sync (`SKIP_SYSV`).
        """
        _systemctl("enable", "--no-reload", self.name, timeout=QUICK_TIMEOUT, env=SKIP_SYSV)

    def disable(self) -> None:
        """Do not start the service at boot (without the SysV sync, `SKIP_SYSV`)."""
        _systemctl("disable", self.name, timeout=QUICK_TIMEOUT, env=SKIP_SYSV)

    def stop_for_good(self) -> None:
        """Stop the service and keep it from starting at boot, for a unit that leaves.

        Never raises: a failing step is logged and the other still runs (the machine goes
        with the unit anyway).
        """
        for step in (self.stop, self.disable):
            try:
                step()
            except SlurmOpsError as e:
                logger.warning("%s: leaving anyway: %s", self.name, e)

    def keep_running(self, changed: bool, *, new: bool = False) -> None:
        """Enable the service and restart it if what it runs `changed`; else start it if stopped.

        `new`: its unit file was just written for the first time, so a change starts it.

        Raises:
            ServiceError: The service did not (re)start; the message holds its journal reason.
            SlurmOpsError: systemctl failed.

        """
        if changed:
            self.enable()
            if new:
                self.start()
            else:
                self.restart()
        elif not self.is_active():
            self.enable()
            self.start()

    def is_active(self) -> bool:
        """Whether the service is running now (False also when systemctl cannot say)."""
        try:
            result = host.run(
                ["systemctl", "is-active", "--quiet", self.name],
                timeout=QUICK_TIMEOUT,
                check=False,
            )
        except SlurmOpsError as e:
            logger.warning("cannot tell whether %s is active: %s", self.name, e)
            return False
        return result.returncode == 0

    def _change(self, verb: str) -> None:
        try:
            self._run(verb)
        except ServiceError as e:
            reason = _refusal(e.stderr, verb, self.name) or journal_reason(self.name)
            if reason is None:
                raise
            logger.warning("%s failed: %s", " ".join(e.command or []), e.stderr.strip())
            raise ServiceError.restated(
                f"{self.name} cannot {verb}: {reason}", e, stderr=False
            ) from e

    def _run(self, verb: str) -> None:
        """`systemctl <verb>`; a failed (re)start is tried once more after `reset-failed`.

        systemd refuses a (re)start once the unit started StartLimitBurst times in
        StartLimitIntervalSec (5 in 10 s by default), each start a deliberate attempt of its
        own hook, and does not always say so (the refused start can keep the last failure's
        result). A fix may have come since: clear the count and try once more; a daemon that
        cannot start fails again, with its own reason. Not a reload, nor a timed-out call.
        """
        try:
            _systemctl(verb, self.name, timeout=SERVICE_TIMEOUT)
        except ServiceError as e:
            if verb == "reload" or e.timed_out:
                raise
            _systemctl("reset-failed", self.name, timeout=QUICK_TIMEOUT)
            _systemctl(verb, self.name, timeout=SERVICE_TIMEOUT)


class CharmService:
    """A service whose unit file the charm writes into `UNIT_DIR` and keeps running.

    Its files lie below `root` (a temporary directory in the unit tests). A subclass names
    its unit (`unit`).
    """

    unit: ClassVar[str]
    """The unit's file name, `<name>.service`."""

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.service = Service(self.unit)

    def at(self, path: str) -> Path:
        """Return absolute `path` below `root`."""
        return self.root / path.lstrip("/")

    def unit_exists(self) -> bool:
        """Whether the unit file is on the machine."""
        return self.at(f"{UNIT_DIR}/{self.unit}").exists()

    def write_unit(self, text: str) -> bool:
        """Write the unit file (0644) if its text changed, make systemd read it; return if so.

        Raises:
            SlurmOpsError: The file cannot be written or systemd cannot reload.

        """
        if not files.write_if_changed(self.at(f"{UNIT_DIR}/{self.unit}"), text, mode=0o644):
            return False
        daemon_reload()
        return True


def journal_reason(unit: str, *, lines: int = JOURNAL_LINES) -> str | None:
    """Return the last `fatal:` line of `unit`'s last run in the journal, else its last `error:`.

    Only the last run counts (systemd's InvocationID, kept after the unit failed): a daemon
    killed without a word (a fence's SIGKILL, `systemctl kill`) would otherwise be shown dying
    of an earlier run's reason. Without an invocation id, the unit's recent journal is read.
    None when neither is found or the journal cannot be read (within `JOURNAL_TIMEOUT`).
    """
    invocation = _last_invocation(unit)
    selector = [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", unit]
    try:
        result = host.run(
            ["journalctl", *selector, "-n", str(lines), "-o", "cat", "--no-pager"],
            timeout=JOURNAL_TIMEOUT,
            check=False,
        )
    except SlurmOpsError as e:
        logger.warning("cannot read the journal of %s: %s", unit, e)
        return None
    recent = [line.strip() for line in result.stdout.splitlines()]
    for marker in _REASON_MARKERS:
        found = [line for line in recent if marker in line]
        if found:
            return found[-1][found[-1].index(marker) :]
    return None


def _last_invocation(unit: str) -> str | None:
    """Return the id of `unit`'s last run (`InvocationID`), or None if systemd gives none."""
    try:
        result = host.run(
            ["systemctl", "show", "--property=InvocationID", "--value", unit],
            timeout=JOURNAL_TIMEOUT,
            check=False,
        )
    except SlurmOpsError:
        return None
    invocation = result.stdout.strip()
    return invocation if _INVOCATION_ID.fullmatch(invocation) else None


def _refusal(stderr: str, verb: str, unit: str) -> str | None:
    """Return systemd's refusal to run the job at all, from systemctl's `stderr`.

    "Failed to start slurmd.service: Unit slurmd.service is masked." means the daemon never
    ran: its journal holds only an earlier run's reason, which would name the wrong cause.
    None when systemd ran the job and the daemon failed ("Job for slurmd.service failed").
    """
    prefix = f"Failed to {verb} {unit}"
    for line in stderr.split("\n"):
        if line.startswith(prefix) and ": " in line:
            return line.split(": ", 1)[1].strip()
    return None


def daemon_reload() -> None:
    """Make systemd read changed unit files and drop-ins."""
    _systemctl("daemon-reload", timeout=QUICK_TIMEOUT)


def reload_for(unit: str) -> None:
    """Make systemd see `unit`'s changed files: reload only if it holds them loaded, stale.

    systemd loads a unit nothing holds (inactive, not wanted by a running target) afresh
    from its files whenever it is asked about or started, and says of a unit it holds
    whether its files changed since (`NeedDaemonReload`, which counts new drop-ins). A
    daemon-reload re-reads every unit file of the machine: 0.13-0.23 s of PID 1 on a lab
    machine, on the way to slurmd's first start. When systemctl cannot say, it reloads.
    """
    try:
        result = host.run(
            ["systemctl", "show", "--property=NeedDaemonReload", "--value", unit],
            timeout=QUICK_TIMEOUT,
        )
    except SlurmOpsError as e:
        logger.warning("cannot tell whether %s needs a daemon-reload: %s", unit, e)
        daemon_reload()
        return
    if result.stdout.strip() != "no":
        daemon_reload()


def override_path(service: str, name: str, *, root: Path = Path("/")) -> Path:
    """Path of drop-in `name` for `service`: /etc/systemd/system/<svc>.service.d/<name>.conf."""
    unit = service if "." in service else f"{service}.service"
    return root / "etc/systemd/system" / f"{unit}.d" / f"{name}.conf"


def write_override(service: str, name: str, content: str, *, root: Path = Path("/")) -> bool:
    """Write a drop-in for `service` if its content changed; return whether it changed.

    The caller runs `reload_for(service)` (or `daemon_reload()`) when this returns True.
    """
    return files.write_if_changed(override_path(service, name, root=root), content, mode=0o644)


def exec_escape(word: str) -> str:
    """Escape one word of a unit file's `ExecStart=` line: `%` -> `%%`, `$` -> `$$`.

    systemd reads `%x` in a unit file as a specifier and `$X`/`${X}` as a variable, so
    `fe80::1%eth0` or a `$` in an argument would reach the program rewritten.
    """
    return word.replace("%", "%%").replace("$", "$$")


def transient_escape(word: str) -> str:
    """Escape one argument of `systemd-run`: `$` -> `$$`.

    The service manager expands `${X}` and reads `$$` as `$` in a transient unit's command
    too (it does not expand `%` specifiers there), so a `$` would reach the program changed.
    """
    return word.replace("$", "$$")


def run_transient(unit_name: str, argv: Sequence[str], description: str) -> None:
    """Run `argv` in the background as transient unit `unit_name`, collected when it ends.

    Use it for work that outlives a Juju hook (for example waiting for jobs to end).
    `systemd-run` without `--wait` returns once the unit is started, so it is quick.
    Each argument reaches the program unchanged (`transient_escape`).
    """
    try:
        host.run(
            [
                "systemd-run",
                f"--unit={unit_name}",
                "--collect",
                f"--description={description}",
                "--",
                *(transient_escape(word) for word in argv),
            ],
            timeout=QUICK_TIMEOUT,
        )
    except SlurmOpsError as e:
        raise _service_error(f"cannot start transient unit {unit_name}", e) from e


def _systemctl(
    verb: str, *args: str, timeout: float, env: Mapping[str, str] | None = None
) -> None:
    """Run `systemctl <verb> <args>`, mapping its failure to `ServiceError`."""
    command = ["systemctl", verb, *args]
    try:
        host.run(command, timeout=timeout, env=env)
    except SlurmOpsError as e:
        raise _service_error(f"{' '.join(command)} failed", e) from e


def _service_error(message: str, error: SlurmOpsError) -> ServiceError:
    return ServiceError(
        f"{message}: {error.message}" if error.timed_out else message,
        command=error.command,
        stderr=error.stderr,
        returncode=error.returncode,
        timed_out=error.timed_out,
    )
