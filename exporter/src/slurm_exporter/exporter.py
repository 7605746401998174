"""The Slurm exporter: a program serving Prometheus metrics of the cluster and this controller.

Run as `python -m slurm_exporter --port 9341 --interval 30`; the slurmctld charm
installs it as a systemd service on every controller unit. A background loop collects every
`--interval` seconds (`slurm_exporter.metrics` parses the commands' output) and each scrape
is answered from the last snapshot, so scrapes cost nothing to Slurm and the same at any
cluster size.

HA never duplicates a series: every unit exports its own role (`slurm_controller_primary`,
`slurm_fenced`, the exporter's own metrics, all labelled with its host or nothing
cluster-wide), and only the unit whose controller is in control runs the cluster-wide
commands and exports their series. Two exporters never serve cluster-wide series at once,
even while control moves:

* the one in control pings again after its commands and keeps the cluster-wide series only
  if it is still in control, so a pass whose commands outlived the controller (they wait
  for the backup's takeover) is not served as the primary's;
* an exporter whose controller has just taken control (its previous pass saw another, or
  none, in control) waits one interval plus `HANDOVER_GRACE` before it exports them: by then
  the previous controller's exporter has run a pass of its own, seen it is no longer in
  control, and dropped them.

After a failover the cluster-wide series are therefore absent for the takeover plus about
two intervals, never doubled. An exporter that starts (its first pass) exports at once.

Any local user can scrape the exporter, so it serves no more than any local user may read
from Slurm: it runs unprivileged (the charm's service has no root and no Slurm key; its
commands authenticate through slurmctld's local socket as an ordinary user), and it is told
slurm.conf's `PrivateData` (`--private-data`). What that hides from users it does not read
or serve: no job series with `jobs` (an ordinary user's squeue would list only its own), no
sdiag with `usage` (refused to ordinary users), and no per-user series (users, accounts,
RPCs by user) with any of `jobs`, `users`, `accounts` or `usage`, whatever `--per-user` says.
"""

import argparse
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import host
from hpc_libs.slurm.scontrol import parse_pings
from prometheus_client import start_http_server
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from slurm_exporter import metrics
from slurm_exporter.metrics import Family, Snapshot

logger = logging.getLogger(__name__)

DEFAULT_PORT = 9341
DEFAULT_INTERVAL = 30
COMMAND_TIMEOUT = 120
"""Seconds one Slurm command may take before the pass reports its source failed."""
PING_TIMEOUT = 30
HANDOVER_GRACE = 10.0
"""Seconds beyond one interval a new primary's exporter waits for the old one's next pass."""
FENCE_FLAG = "/run/slurmctld-fence/fenced"
"""The fence watchdog's flag (the slurmctld charm's `fence.FENCE_FLAG`): exists while fenced."""
SACK_SOCKET = "/run/slurmctld/sack.socket"
"""Where this machine's slurmctld signs its users' requests (auth/slurm): the exporter's only
way to Slurm, since it cannot read the key. Absent while slurmctld does not run here."""

Run = Callable[[Sequence[str], Mapping[str, str], float], str]
"""Run a command with extra environment and a timeout; return its stdout or raise SlurmOpsError."""


def run_command(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> str:
    """Run a Slurm command on this machine (the `Run` used outside tests)."""
    return host.run(argv, env=env, timeout=timeout).stdout


PING = ["scontrol", "ping", "--json"]
SDIAG = ["sdiag", "--json"]
PER_USER_PRIVATE = frozenset({"jobs", "users", "accounts", "usage"})
"""`PrivateData` words any one of which turns the per-user series off."""

SINFO = ["sinfo", "--noheader", "--Node", f"--Format={metrics.SINFO_FORMAT}"]
SINFO_REASONS = ["sinfo", "--noheader", "--Node", f"--Format={metrics.SINFO_REASON_FORMAT}"]
SQUEUE = ["squeue", "--noheader", "--all", "--array", f"--format={metrics.SQUEUE_FORMAT}"]
SQUEUE_ACCOUNTS = [
    "squeue",
    "--noheader",
    "--all",
    "--array",
    f"--format={metrics.SQUEUE_ACCOUNT_FORMAT}",
]


class SlurmCollector(Collector):
    """Collect in passes (`collect_once`); serve the last pass to every scrape (`collect`)."""

    def __init__(
        self,
        hostname: str,
        *,
        per_user: bool = False,
        private: frozenset[str] = frozenset(),
        fence_flag: Path = Path(FENCE_FLAG),
        sack_socket: Path = Path(SACK_SOCKET),
        run: Run = run_command,
        clock: Callable[[], float] = time.time,
        handover: float = DEFAULT_INTERVAL + HANDOVER_GRACE,
    ) -> None:
        self.hostname = metrics.name_label(hostname)
        self.private = private
        """slurm.conf's `PrivateData` words: what Slurm hides from users, never served."""
        self.per_user = per_user and not private & PER_USER_PRIVATE
        self.fence_flag = fence_flag
        self.sack_socket = sack_socket
        self.run = run
        self.clock = clock
        self.handover = handover
        self._passes = 0
        self._exports_from: float | None = None
        """When this unit may export cluster-wide series (None: not in control)."""
        self._lock = threading.Lock()
        self._families: list[Family] = []
        self._last_success: float | None = None
        self._errors: dict[str, int] = {}

    def collect_once(self) -> bool:
        """Run one pass and replace the snapshot; return whether every command answered."""
        snapshot = Snapshot()
        durations = Family(
            "slurm_exporter_collect_duration_seconds",
            "How long the exporter's last pass took per source.",
            "gauge",
            ("source",),
        )
        failed: list[str] = []
        pings = self._pings(durations, failed)
        cluster: list[Family] = []
        if self._may_export_cluster(metrics.in_control(pings) == self.hostname):
            cluster = self._cluster_families(snapshot, durations, failed)
            pings = self._pings(durations, failed)  # Still in control after the commands?
            if not self._may_export_cluster(metrics.in_control(pings) == self.hostname):
                cluster = []
        families = metrics.controller_families(pings, self.hostname, bool(cluster))
        families += cluster
        fenced = Family(
            "slurm_fenced",
            "Whether the fence watchdog stopped this controller.",
            "gauge",
            ("host",),
        )
        fenced.set(self.hostname, value=1 if self.fence_flag.exists() else 0)
        skipped = Family(
            "slurm_exporter_skipped_lines", "Lines of Slurm output the last pass could not use."
        )
        skipped.set(value=snapshot.skipped)
        now = self.clock()
        with self._lock:
            for source in failed:
                self._errors[source] = self._errors.get(source, 0) + 1
            if not failed:
                self._last_success = now
            self._families = [*families, fenced, durations, skipped]
        return not failed

    def _pings(self, durations: Family, failed: list[str]) -> list[metrics.Ping]:
        """Ping the controllers; none answers while this machine's slurmctld does not run.

        A unit whose slurmctld is stopped (a standby unit, a fenced one) has no socket to
        sign the exporter's requests: it is not in control, and that is no failure.
        """
        if not self.sack_socket.exists():
            return []
        text = self._timed("ping", PING, PING_TIMEOUT, durations, failed)
        try:
            return metrics.controller_pings(parse_pings(text)) if text is not None else []
        except ValueError as e:
            logger.warning("cannot parse scontrol ping: %s", e)
            failed.append("ping")
            return []

    def _may_export_cluster(self, in_control: bool) -> bool:
        """Whether this unit exports cluster-wide series now (see the module doc: handover)."""
        first_pass = self._passes == 0
        self._passes += 1
        now = self.clock()
        if not in_control:
            self._exports_from = None
        elif self._exports_from is None:
            self._exports_from = now if first_pass else now + self.handover
        return self._exports_from is not None and now >= self._exports_from

    def _cluster_families(
        self, snapshot: Snapshot, durations: Family, failed: list[str]
    ) -> list[Family]:
        """Read what only the controller in control exports: sdiag, nodes and jobs.

        What `PrivateData` hides from users is not read: sdiag with `usage` (Slurm refuses
        it to users), the jobs with `jobs` (a user's squeue lists only its own).
        """
        families: list[Family] = []
        if "usage" not in self.private:
            families += self._sdiag_families(snapshot, durations, failed)
        nodes = self._timed("sinfo", SINFO, COMMAND_TIMEOUT, durations, failed)
        reasons = self._timed("sinfo_reasons", SINFO_REASONS, COMMAND_TIMEOUT, durations, failed)
        if nodes is not None:
            families += metrics.node_families(nodes, reasons or "", snapshot)
        if "jobs" not in self.private:
            families += self._job_families(snapshot, durations, failed)
        return families

    def _sdiag_families(
        self, snapshot: Snapshot, durations: Family, failed: list[str]
    ) -> list[Family]:
        text = self._timed("sdiag", SDIAG, COMMAND_TIMEOUT, durations, failed)
        if text is None:
            return []
        try:
            return metrics.sdiag_families(text, self.per_user, snapshot)
        except (ValueError, KeyError) as e:
            logger.warning("cannot parse sdiag: %s", e)
            failed.append("sdiag")
            return []

    def _job_families(
        self, snapshot: Snapshot, durations: Family, failed: list[str]
    ) -> list[Family]:
        jobs = self._timed("squeue", SQUEUE, COMMAND_TIMEOUT, durations, failed)
        accounts = None
        if self.per_user:
            accounts = self._timed(
                "squeue_accounts", SQUEUE_ACCOUNTS, COMMAND_TIMEOUT, durations, failed
            )
        if jobs is None:
            return []
        return metrics.job_families(jobs, accounts, self.clock(), self.per_user, snapshot)

    def _timed(
        self,
        source: str,
        argv: Sequence[str],
        timeout: float,
        durations: Family,
        failed: list[str],
    ) -> str | None:
        started = time.monotonic()
        try:
            return self.run(argv, metrics.TIME_FORMAT_ENV, timeout)
        except SlurmOpsError as e:
            logger.warning("%s failed: %s", " ".join(argv), (e.stderr or e.message).strip())
            failed.append(source)
            return None
        finally:
            durations.set(source, value=time.monotonic() - started)

    def collect(self) -> Iterator[Metric]:
        """Serve the last snapshot (prometheus-client calls this on each scrape)."""
        with self._lock:
            families = list(self._families)
            last_success, errors = self._last_success, dict(self._errors)
        for family in families:
            yield _metric(family)
        if last_success is not None:
            yield GaugeMetricFamily(
                "slurm_exporter_last_success_timestamp_seconds",
                "When a pass last read every source (Unix time).",
                value=last_success,
            )
        failures = CounterMetricFamily(
            "slurm_exporter_collect_errors", "Passes in which a source failed.", labels=["source"]
        )
        for source, count in sorted(errors.items()):
            failures.add_metric([source], count)
        yield failures


def _metric(family: Family) -> Metric:
    if family.kind == "counter":
        metric: GaugeMetricFamily | CounterMetricFamily = CounterMetricFamily(
            family.name, family.documentation, labels=list(family.label_names)
        )
    else:
        metric = GaugeMetricFamily(
            family.name, family.documentation, labels=list(family.label_names)
        )
    for labels, value in sorted(family.samples.items()):
        metric.add_metric(list(labels), value)
    return metric


def serve(collector: SlurmCollector, address: str, port: int, interval: float) -> None:
    """Serve `collector` on `address:port` and collect every `interval` s, forever."""
    registry = CollectorRegistry()
    registry.register(collector)
    start_http_server(port, addr=address, registry=registry)
    logger.info("serving Slurm metrics on %s:%d, collecting every %s s", address, port, interval)
    while True:
        started = time.monotonic()
        collector.collect_once()
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and serve (the service's `ExecStart`)."""
    parser = argparse.ArgumentParser(
        prog="python -m slurm_exporter", description="Serve Prometheus metrics of Slurm."
    )
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--interval", type=float, default=DEFAULT_INTERVAL)
    parser.add_argument("--per-user", action="store_true")
    parser.add_argument(
        "--private-data", default="", help="slurm.conf's PrivateData, comma-separated"
    )
    parser.add_argument("--fence-flag", type=Path, default=Path(FENCE_FLAG))
    parser.add_argument("--sack-socket", type=Path, default=Path(SACK_SOCKET))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    collector = SlurmCollector(
        socket.gethostname(),
        per_user=args.per_user,
        private=frozenset(w.strip().lower() for w in args.private_data.split(",") if w.strip()),
        fence_flag=args.fence_flag,
        sack_socket=args.sack_socket,
        handover=args.interval + HANDOVER_GRACE,
    )
    serve(collector, args.address, args.port, args.interval)


if __name__ == "__main__":  # pragma: nocover
    main()
