"""Wake a charm within seconds of a fact on its machine, not at the next update-status.

Juju runs update-status every 5 minutes by default, too late for a charm that waits for
something (a partition's last job to end, a node to become idle). Instead the charm starts a
watcher: a transient systemd unit that polls a command every few seconds and, once the
command succeeds and prints nothing, dispatches a custom charm event through Juju's own
mechanism for running a hook from the machine::

    juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"

ops emits the event whose name matches (`hooks/slurmctld-wake` -> `slurmctld_wake`) when the
charm defines it on its `CharmEvents`. A failing poll (Slurm unreachable) counts as "not
yet"; the watcher gives up silently after an overall bound, and the charm's next event starts
another. Each poll, the dispatch and the whole watcher are bounded by timeouts.

Starting is idempotent: while a watcher of that name runs, none is started. A watcher's name
comes from untrusted names (application and node names), so it is checked against Slurm's
name grammar before it reaches systemd.

When the fact is a file that changes (sackd's fetched slurm.conf, a signal file), `PathWake`
installs a systemd path unit instead of polling. A charm that must look again every few
seconds for a while (`wake_every`) starts one watcher that dispatches on a timer until a
deadline: a hook dispatched by a watcher cannot start that watcher again (it still runs,
waiting for the hook), so a chain of one-shot watchers would stop after its first link.
"""

import logging
import re
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm import grammar

logger = logging.getLogger(__name__)

POLL_SECONDS = 3
"""Seconds between two polls of the watched fact."""
POLL_TIMEOUT = 30
"""Seconds one poll may run (an `squeue` against a busy controller)."""
DISPATCH_TIMEOUT = 600
"""Seconds `juju-exec` may wait for the unit's hook lock and run the hook."""
WATCH_BOUND = 6 * 3600
"""Seconds a watcher polls before it gives up (the charm's next event starts another)."""
TAKE_FLAG = ("/bin/rm", "-rf", "--one-file-system", "--")
"""How a flag's service takes it, whatever it is: a directory made in its place (with
entries) is removed as well, never following a link (`rm -r` does not), so it cannot fail the
service at every retry; it counts as one more wake, as the file would."""
PROGRAMS_DIR = Path(__file__).parent / "programs"
"""The watchers' shell programs, package data (`just lint` runs shellcheck over them)."""

_EVENT_RE = re.compile(r"[a-z][a-z0-9-]{0,63}")
_UNIT_RE = re.compile(r"[a-z][a-z0-9-]*/[0-9]+")
_PREFIX_RE = re.compile(r"[a-z][a-z0-9-]*")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9/_.,:=@+%$-]+( [A-Za-z0-9/_.,:=@+%$-]+)*")


def watcher_name(prefix: str, subject: str) -> str:
    """Name the watcher of `subject` (an application or node name): `<prefix>-<subject>.service`.

    Raises:
        ValueError: `prefix` is not lower-case letters, digits and `-`, or `subject` is not a
            Slurm name (letters, digits, `_`, `.`, `-`): it never reaches systemd.

    """
    if not _PREFIX_RE.fullmatch(prefix):
        raise ValueError(f"{prefix!r} is not a watcher prefix")
    grammar.NAME(subject)
    return f"{prefix}-{subject}.service"


def dispatch_command(unit: str, charm_dir: Path | str, event: str) -> list[str]:
    """`juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"`.

    Raises:
        ValueError: `unit` is not a Juju unit name or `event` not a hook name.

    """
    if not _UNIT_RE.fullmatch(unit):
        raise ValueError(f"{unit!r} is not a unit name")
    if not _EVENT_RE.fullmatch(event):
        raise ValueError(f"{event!r} is not a hook name")
    dispatch = shlex.quote(f"{charm_dir}/dispatch")
    return ["juju-exec", "-u", unit, f"JUJU_DISPATCH_PATH=hooks/{event} {dispatch}"]


def watch_command(
    check: Sequence[str],
    dispatch: Sequence[str],
    *,
    poll_seconds: int = POLL_SECONDS,
    bound: int = WATCH_BOUND,
) -> list[str]:
    """Build the watcher: poll `check` until it succeeds printing nothing, then run `dispatch`.

    The loop is `programs/wake-watch.sh`; every word of both commands is an argument of its
    own, so no name in `check` can add shell syntax.
    """
    numbers = (bound, poll_seconds, POLL_TIMEOUT, DISPATCH_TIMEOUT, len(dispatch))
    return _program("wake-watch", *map(str, numbers), *dispatch, *check)


def repeat_command(dispatch: Sequence[str], *, period: int, until: int) -> list[str]:
    """Build a watcher: every `period` s until epoch `until`, run `dispatch` (bounded).

    The loop is `programs/wake-repeat.sh`.
    """
    return _program("wake-repeat", str(period), str(until), str(DISPATCH_TIMEOUT), *dispatch)


def _program(name: str, *args: str) -> list[str]:
    """`/bin/sh -c <programs/<name>.sh> <name> <args>`: the text is read once, at the start.

    The program's text goes on the command line, not its path: a charm upgrade that replaces
    the file cannot change a watcher that runs.
    """
    text = (PROGRAMS_DIR / f"{name}.sh").read_text()
    return ["/bin/sh", "-c", text, name, *args]


def wake_every(
    name: str, dispatch: Sequence[str], description: str, *, period: int, until: int
) -> bool:
    """Start watcher `name` dispatching every `period` s until `until`, unless it runs.

    Returns whether one was started. The hooks it dispatches find it running and leave it
    be; any hook after it ended (or was lost with its machine's systemd) starts it again.
    Like every watcher it gives up after `WATCH_BOUND` s, whatever `until` says (a date a
    less trusted user wrote may be years away).

    Raises:
        ServiceError: systemd-run failed.

    """
    if systemd.Service(name).is_active():
        return False
    until = min(until, int(time.time()) + WATCH_BOUND)
    systemd.run_transient(name, repeat_command(dispatch, period=period, until=until), description)
    return True


def wake_when_silent(
    name: str, check: Sequence[str], dispatch: Sequence[str], description: str
) -> bool:
    """Start watcher `name` unless it runs; return whether one was started.

    Raises:
        ServiceError: systemd-run failed.

    """
    if systemd.Service(name).is_active():
        return False
    systemd.run_transient(name, watch_command(check, dispatch), description)
    return True


def exec_line(argv: Sequence[str]) -> str:
    """Render `argv` as a systemd `ExecStart=` value, a word with spaces in double quotes.

    Used by the charms that write a service unit running the dispatch command. `%` and `$`
    are escaped (`systemd.exec_escape`), so systemd passes each word on as it is.

    Raises:
        ValueError: A word is empty or holds a character other than letters, digits, single
            spaces and `/_.,:=@+-%$`.

    """
    words: list[str] = []
    for word in argv:
        if not _PLAIN_WORD.fullmatch(word):
            raise ValueError(f"{word!r} cannot be written into a unit file as it is")
        escaped = systemd.exec_escape(word)
        words.append(f'"{escaped}"' if " " in escaped else escaped)
    return " ".join(words)


class PathWake:
    """Dispatch a charm event whenever a file on the machine changes (or a flag is raised).

    A root systemd path unit `<name>.path` watches `watched` and starts the oneshot
    `<name>.service`, which runs the charm's dispatch through `juju-exec`
    (`dispatch_command`), bounded by `DISPATCH_TIMEOUT`. The units are written only when
    their text changes. Paths are under `root`, so unit tests write below a temporary
    directory.

    By default the path unit reacts to a change (`PathChanged=`: a write closed, or the file
    replaced). That is an edge: systemd stops watching while the service runs, so a change
    made while a dispatch runs (or waits for the unit's hook lock) is lost. With
    `flag=True`, `watched` is a flag file that whoever wants a wake creates and the service
    deletes before it dispatches (`ExecStartPre=`): the path unit waits for it to exist
    (`PathExists=`), and checks again when the service ends, so a flag raised during a
    dispatch starts one more; a dispatch that failed (its hook, `juju-exec`, or systemd
    spawning it) is tried again after `RETRY_SECONDS`. Only one dispatch runs at a time.
    The directory holding the flag must be root's, so that root's `rm` of the name (which
    never follows a link) cannot be redirected. Whatever was made there counts as a raised
    flag and is taken (`TAKE_FLAG`): `rm -f` of a directory fails, and failed the service at
    every retry, so no wake went through until the next boot.
    """

    RETRY_SECONDS = 10

    def __init__(
        self,
        name: str,
        watched: str,
        *,
        charm: str,
        change: str,
        root: Path = Path("/"),
        flag: bool = False,
    ) -> None:
        """Watch `watched` (an absolute path); `change` says what a change means, for people."""
        self.path_name = f"{name}.path"
        self.service_name = f"{name}.service"
        self.watched = watched
        self.charm = charm
        self.change = change
        self.flag = flag
        self.unit_dir = root / "etc/systemd/system"
        self.path_unit = systemd.Service(self.path_name)

    def path_unit_text(self) -> str:
        """Return the path unit watching the file."""
        return "\n".join(
            [
                f"# Written by the {self.charm} charm.",
                "[Unit]",
                f"Description=Wake the {self.charm} charm: {self.change}",
                "",
                "[Path]",
                f"{'PathExists' if self.flag else 'PathChanged'}={self.watched}",
                f"Unit={self.service_name}",
                *systemd.STARTED_AT_BOOT,
            ]
        )

    def service_unit_text(self, dispatch: Sequence[str], unit: str) -> str:
        """Return the oneshot service that dispatches the charm's event.

        Raises:
            ValueError: An argument holds a character systemd would interpret.

        """
        level = [
            f"ExecStartPre={exec_line([*TAKE_FLAG, self.watched])}",
            "Restart=on-failure",
            f"RestartSec={self.RETRY_SECONDS}",
        ]
        return "\n".join(
            [
                f"# Written by the {self.charm} charm.",
                "[Unit]",
                f"Description=Wake {unit}: {self.change}",
                "",
                "[Service]",
                "Type=oneshot",
                f"TimeoutStartSec={DISPATCH_TIMEOUT}",
                *(level if self.flag else []),
                f"ExecStart={exec_line(dispatch)}",
                "",
            ]
        )

    def install(self, unit: str, charm_dir: Path | str, event: str) -> bool:
        """Write both units if they changed and keep the path unit running; return if changed.

        Raises:
            ValueError: `unit`, `charm_dir` or `event` cannot be put in the dispatch command.
            SlurmOpsError: A file or `systemctl` failed.

        """
        dispatch = dispatch_command(unit, charm_dir, event)
        texts = (
            (self.path_name, self.path_unit_text()),
            (self.service_name, self.service_unit_text(dispatch, unit)),
        )
        written = [files.write_if_changed(self.unit_dir / n, t, mode=0o644) for n, t in texts]
        changed = any(written)  # Both written: no short-circuit.
        if changed:
            systemd.daemon_reload()  # A waiting path unit watches its new path from here on.
        if changed or not self.path_unit.is_active():
            self.path_unit.enable()
            self.path_unit.start()
            logger.info("%s wakes %s: %s", self.path_name, unit, self.change)
        return changed

    def exists(self) -> bool:
        """Whether either unit file is on the machine."""
        return any((self.unit_dir / n).exists() for n in (self.path_name, self.service_name))

    def remove(self) -> None:
        """Stop watching and delete both units (nothing to do if they are gone).

        Raises:
            SlurmOpsError: `systemctl` failed or a file cannot be deleted.

        """
        if not self.exists():
            return
        self.path_unit.stop()
        self.path_unit.disable()
        for name in (self.path_name, self.service_name):
            path = self.unit_dir / name
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                raise SlurmOpsError(f"cannot delete {path}: {e}") from e
        systemd.daemon_reload()
