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
"""

import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from hpc_libs.machine import systemd
from hpc_libs.slurm import grammar

POLL_SECONDS = 3
"""Seconds between two polls of the watched fact."""
POLL_TIMEOUT = 30
"""Seconds one poll may run (an `squeue` against a busy controller)."""
DISPATCH_TIMEOUT = 600
"""Seconds `juju-exec` may wait for the unit's hook lock and run the hook."""
WATCH_BOUND = 6 * 3600
"""Seconds a watcher polls before it gives up (the charm's next event starts another)."""

_EVENT_RE = re.compile(r"[a-z][a-z0-9-]{0,63}")
_UNIT_RE = re.compile(r"[a-z][a-z0-9-]*/[0-9]+")
_PREFIX_RE = re.compile(r"[a-z][a-z0-9-]*")
_PLAIN_WORD = re.compile(r"[A-Za-z0-9/_.,:=@+-]+( [A-Za-z0-9/_.,:=@+-]+)*")


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
    """Build a shell loop: poll `check` until it succeeds printing nothing, then run `dispatch`.

    Every argument is quoted with `shlex`, so no name in `check` can add shell syntax.
    """
    script = "\n".join(
        [
            f"end=$(( $(date +%s) + {int(bound)} ))",
            'while [ "$(date +%s)" -lt "$end" ]; do',
            f'  if out=$(timeout {POLL_TIMEOUT} {shlex.join(check)}) && [ -z "$out" ]; then',
            '    echo "fact reached; dispatching"',
            f"    exec timeout {DISPATCH_TIMEOUT} {shlex.join(dispatch)}",
            "  fi",
            f"  sleep {int(poll_seconds)}",
            "done",
            f'echo "gave up after {int(bound)} s"',
        ]
    )
    return ["/bin/sh", "-c", script]


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

    Used by the charms that write a service unit running the dispatch command.

    Raises:
        ValueError: A word is empty or holds a character other than letters, digits, single
            spaces and `/_.,:=@+-`.

    """
    words: list[str] = []
    for word in argv:
        if not _PLAIN_WORD.fullmatch(word):
            raise ValueError(f"{word!r} cannot be written into a unit file as it is")
        words.append(f'"{word}"' if " " in word else word)
    return " ".join(words)
