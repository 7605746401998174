"""A background observer of the controller: nodes in `sinfo`, slurm.conf and reconfigures.

It polls the controller's lab machine directly (`Machine.exec`, never through `LabJuju`, whose
model session is not for threads), so it sees the cluster while a `LabJuju` call blocks the
main thread in hooks. Every poll is one command in the machine: its resolution is the poll
interval plus that command (about 0.1-0.3 s on the lab).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from slurm_lab.machines import Machine

SLURMCTLD_LOG = "/var/log/slurm/slurmctld.log"
SLURM_CONF = "/etc/slurm/slurm.conf"
RECONFIGURE_LINE = "Processing Reconfiguration Request"
SEPARATOR = "--bench-lab--"
POLL_SCRIPT = (
    "sinfo --Node --noheader --format='%N %T' 2>/dev/null; "
    f"echo {SEPARATOR}; stat -c %y {SLURM_CONF}; sha256sum {SLURM_CONF} | cut -c1-16; "
    f"grep -c '{RECONFIGURE_LINE}' {SLURMCTLD_LOG} || true"
)


@dataclass
class NodeSeen:
    """When the watcher saw a node: first listed, first idle, last listed, gone (monotonic)."""

    first_seen: float | None = None
    first_idle: float | None = None
    last_seen: float | None = None
    gone: float | None = None
    gone_wall: float | None = None
    """`gone` as epoch seconds, to compare with Slurm's job times."""


@dataclass
class Counters:
    """slurm.conf versions and reconfigure requests seen so far."""

    conf_writes: int = 0
    """Changes of slurm.conf's mtime or content."""
    reconfigures: int = 0
    """`Processing Reconfiguration Request` lines in slurmctld's log."""
    polls: int = 0
    poll_seconds: list[float] = field(default_factory=list[float])


class ControllerWatch:
    """Poll the controller in a thread; record node appearances and controller work."""

    def __init__(self, controller: Machine, interval: float = 0.4) -> None:
        self.controller = controller
        self.interval = interval
        self.nodes: dict[str, NodeSeen] = {}
        self.states: dict[str, str] = {}
        self.counters = Counters()
        self._fingerprint: str | None = None
        self._reconfigure_base: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-lab-watch", daemon=True)

    def start(self) -> None:
        """Start polling (the first poll sets the baselines)."""
        self._poll()
        self._thread.start()

    def stop(self) -> None:
        """Stop polling."""
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._poll()
            except Exception:  # a failed poll is retried on the next tick
                time.sleep(self.interval)

    def _poll(self) -> None:
        started = time.monotonic()
        out = self.controller.exec(["bash", "-c", POLL_SCRIPT], timeout=30).stdout
        now, wall = time.monotonic(), time.time()
        listing, _, tail = out.partition(SEPARATOR)
        states: dict[str, str] = {}
        for line in listing.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        facts = tail.split()
        with self._lock:
            self.counters.polls += 1
            self.counters.poll_seconds.append(now - started)
            self._note_nodes(states, now, wall)
            if len(facts) >= 4:
                self._note_controller(" ".join(facts[:-1]), int(facts[-1]))

    def _note_nodes(self, states: dict[str, str], now: float, wall: float) -> None:
        for name, state in states.items():
            seen = self.nodes.setdefault(name, NodeSeen())
            if seen.first_seen is None or seen.gone is not None:
                seen.first_seen, seen.first_idle, seen.gone, seen.gone_wall = now, None, None, None
            seen.last_seen = now
            if state == "idle" and seen.first_idle is None:
                seen.first_idle = now
        for name, seen in self.nodes.items():
            if name not in states and seen.gone is None:
                seen.gone, seen.gone_wall = now, wall
        self.states = states

    def _note_controller(self, fingerprint: str, reconfigures: int) -> None:
        if self._fingerprint is not None and fingerprint != self._fingerprint:
            self.counters.conf_writes += 1
        self._fingerprint = fingerprint
        if self._reconfigure_base is None:
            self._reconfigure_base = reconfigures
        self.counters.reconfigures = reconfigures - self._reconfigure_base

    def snapshot(self) -> tuple[int, int]:
        """(slurm.conf writes, reconfigures) seen so far: subtract two to count a step's."""
        self.poll_now()
        with self._lock:
            return self.counters.conf_writes, self.counters.reconfigures

    def poll_now(self) -> None:
        """Poll once from the calling thread (fresh counters before a snapshot)."""
        self._poll()

    def seen(self, name: str) -> NodeSeen:
        """What the watcher saw of a node so far (a copy)."""
        with self._lock:
            seen = self.nodes.get(name, NodeSeen())
            return NodeSeen(**vars(seen))

    def until(
        self,
        check: Callable[[ControllerWatch], bool],
        *,
        timeout: float,
        what: str,
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Wait until `check(self)` holds, calling `tick` (drives the backend) between checks."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                done = check(self)
            if done:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            if tick is not None:
                tick()
            else:
                time.sleep(self.interval / 2)

    @staticmethod
    def idle(name: str) -> Callable[[ControllerWatch], bool]:
        """A check: the node has been seen idle (since it last appeared)."""
        return lambda w: name in w.nodes and w.nodes[name].first_idle is not None

    @staticmethod
    def gone(name: str) -> Callable[[ControllerWatch], bool]:
        """A check: the node was listed and is gone from `sinfo`."""
        return lambda w: name in w.nodes and w.nodes[name].gone is not None
