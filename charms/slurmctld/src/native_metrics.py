"""Slurm's own OpenMetrics endpoint (`MetricsType=metrics/openmetrics`, Slurm 25.11 and newer).

slurmctld then serves `/metrics/{jobs,nodes,partitions,scheduler,jobs-users-accts}` over HTTP
on SlurmctldPort. The charm enables it where it works and offers it to COS beside the
charm's exporter (`exporter_service`), which stays the source of the alerts and dashboards:
the native series lack the controller role, node and pending reasons, RPC statistics and
slurmdbd's queue, and carry memory in MB and times in microseconds.

* Any `PrivateData` makes slurmctld answer 401 to every path unless the request carries a JWT
  (`Authorization: Bearer`, or `X-SLURM-USER-TOKEN`) of SlurmUser or root (or of a user in
  `MetricsAuthUsers`; any other user's gets 403), and 26.05 checks such a token only with
  `SlurmctldHttpAuthParameters=jwt_key=<file>`: without it every token gets 401 too
  (measured on the forky lab, 26.05.5). So under PrivateData the endpoint needs every daemon
  on 26.05 (`first_release`: the release measured; 25.11's handling is unknown here), and
  `metrics_auth` gives slurmctld a key of the endpoint's own and one user, `slurm-metrics`,
  and each controller unit's collector a short-lived token of that user in a root-only file
  the jobs name (`authorization: credentials_file`). On the lab that token got 200 at
  `/metrics` and was refused by slurmctld's RPCs and through slurmrestd: it opens the
  metrics and nothing else.
* Only the controller in control answers: a standby slurmctld redirects every path (303, before
  any authentication, token or not) to SlurmctldHost[0]'s address. The jobs do not follow
  redirects, so a standby's scrape fails and delivers nothing, and HA never duplicates a
  native series (a collector on the backup would otherwise store the primary's series under
  the backup's unit).
  A backup that took control answers 200 itself, with the series, if it loaded the metrics
  plugin: a standby loads plugins only at its start, so the follower restarts it when
  slurm.conf names MetricsType (`applied`; reloaded instead, it answered with an empty body
  once in control on the forky lab).
* Native names overlap the exporter's (`slurm_partition_jobs`, for one) with other
  labels and meanings, so every native series is stored as `slurm_native_<name without
  slurm_>`.
* `/metrics/jobs-users-accts` holds some 30 series per user and per account with jobs; it is
  offered only with `metrics-per-user`, like the exporter's per-user series.

When (`native-metrics`: `auto`, `on`, `off`): a daemon or client older than 25.11 refuses a
slurm.conf naming MetricsType (`Parsing error at unrecognized key: metricstype`), and in a
major upgrade the controllers move first while the nodes keep the old release until their
rollout. So the leader writes MetricsType only once every reader of slurm.conf is known to
run 25.11 or newer (`decide`): this slurmctld and every peer controller (their peer host
data), every login and REST unit (the release each publishes, `ConsumerUnitData.version`),
and every registered slurmd node (the release it registered with, in Slurm's own node
records: `NODES_QUERY`, one line per node and partition with separator-free fields, not every
node's whole record as JSON on every leader hook; placeholders in FUTURE state run nothing and
sinfo leaves them out). A node in no partition is not listed by sinfo: the charms put every
slurmd node in its application's partition. A daemon of unknown release counts as
old under `auto`; `on` lets the operator vouch for those (a login unit of an older charm
revision), but still refuses while one is known to be older. Off because of a daemon, the
leader's status says which (`Decision.held_by`). Node records that cannot be read keep what
the leader decided last (the peer databag's `native_metrics`): a busy controller's timeout
never toggles the endpoint. So does a node listed without a release: Slurm does not save a
node's release in its state, so a slurmctld that just started or took over lists every node
with none (`N/A`) until it registers again, some seconds later. Counted as old, that window
turned the endpoint off and on again across every failover (seen on the forky lab: the
primary back in control answered with an empty body, having been re-executed without
MetricsType). A node that never registered with a release that knows MetricsType cannot be
listed at all: dynamic nodes exist once registered, and an older slurmd refuses the file.
The leader records its decision in the peer databag, so every
controller unit offers the same scrape jobs, and learns of a change (peer relation-changed).
"""

import dataclasses
import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import metrics_auth
import ops
from config import SlurmctldConfig
from facts import Facts
from hpc_libs.errors import SlurmOpsError
from hpc_libs.interfaces.controller import ControllerPublisher
from hpc_libs.interfaces.cos_agent import scrape_job
from hpc_libs.interfaces.slurmctld_peer import SlurmctldPeer
from hpc_libs.machine import host
from hpc_libs.slurm import version
from hpc_libs.slurm.naming import NODE_NAME
from hpc_libs.slurm.ports import SLURMCTLD_PORT
from hpc_libs.slurm.scontrol import Scontrol

logger = logging.getLogger(__name__)

FIRST_RELEASE = (25, 11)
"""The first Slurm release with `metrics/openmetrics`."""
AUTH_RELEASE = (26, 5)
"""The release whose token check under PrivateData was measured (`SlurmctldHttpAuthParameters`)."""
PATHS = ("jobs", "nodes", "partitions", "scheduler")
PER_USER_PATH = "jobs-users-accts"
NATIVE_PREFIX = "slurm_native_"
"""Where native series are stored: `slurm_jobs_pending` becomes `slurm_native_jobs_pending`."""
NODES_QUERY = [
    "sinfo",
    "--all",
    "--noheader",
    "--Node",
    "--Format=NodeList:|,StateComplete:|,Version:0",
]
"""Every node in a partition (FUTURE ones left out): its name, state and release (`N/A`: none)."""
_NODE_STATE = re.compile(r"[A-Za-z_+*~#%!@^$-]{1,200}")
_RELEASE = re.compile(r"[0-9]{1,4}\.[0-9]{1,4}(?:\.[0-9A-Za-z_.-]{1,32})?")


@dataclasses.dataclass(frozen=True)
class Daemon:
    """A reader of slurm.conf: how the status names it, the release it runs (None: unknown)."""

    name: str
    release: str | None
    node: bool = False
    """A slurmd node, whose release the slurmctld in control may not have heard yet."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """Whether slurm.conf turns the endpoint on; if asked for but off, the daemon that holds it."""

    on: bool
    held_by: str | None = None


def knows_metrics(release: str | None, first: tuple[int, int] = FIRST_RELEASE) -> bool:
    """Whether `release` (`26.05.5`, a package version, None) is known and `first` or newer."""
    if not release:
        return False
    try:
        parsed = version.parse(release)
    except ValueError:
        return False
    return (parsed.major, parsed.minor) >= first


def asked(config: SlurmctldConfig) -> bool:
    """Whether the options allow the endpoint: not `off`."""
    return config.native_metrics != "off"


def private(config: SlurmctldConfig) -> bool:
    """Whether the operator's PrivateData makes the endpoint demand a token (`metrics_auth`)."""
    return bool(config.slurm_conf_parameters.get("privatedata"))


def first_release(config: SlurmctldConfig) -> tuple[int, int]:
    """Return the release every daemon must run: 26.05 under PrivateData, else 25.11."""
    return AUTH_RELEASE if private(config) else FIRST_RELEASE


def decide(
    config: SlurmctldConfig, own_release: str, daemons: Iterable[Daemon], *, previous: bool
) -> Decision:
    """Decide whether slurm.conf names MetricsType (see the module's docstring).

    `own_release` is this slurmctld's package version; `daemons` the other readers of
    slurm.conf, iterated only as far as needed (the node records come last and cost an
    RPC). `previous` is the last decision, kept if the node records cannot be read.
    """
    if not asked(config):
        return Decision(False)
    vouch_for_unknown = config.native_metrics == "on"
    first = first_release(config)
    if not knows_metrics(own_release, first):
        # On an older controller `auto` has nothing to offer: no word about it.
        held = f"this slurmctld runs {own_release or 'an unknown release'}"
        return Decision(False, _held(held, first) if vouch_for_unknown else None)
    try:
        holdout, unheard = _first_older(daemons, first, vouch_for_unknown=vouch_for_unknown)
    except SlurmOpsError as e:
        logger.warning("cannot read the nodes' Slurm releases (%s): keeping MetricsType as is", e)
        return Decision(previous)
    daemon = holdout or unheard
    if daemon is None:
        return Decision(True)
    if holdout is None and previous:
        logger.info("%s has not registered again yet: MetricsType stays", daemon.name)
        return Decision(True)
    said = f"runs {daemon.release}" if daemon.release else "has not said its Slurm release"
    return Decision(False, _held(f"{daemon.name} {said}", first))


def _held(why: str, first: tuple[int, int]) -> str:
    release = f"{first[0]}.{first[1]:02d}"
    return f"native metrics off until every daemon runs {release} or newer: {why}"


def _first_older(
    daemons: Iterable[Daemon], first: tuple[int, int], *, vouch_for_unknown: bool
) -> tuple[Daemon | None, Daemon | None]:
    """Return the first daemon known older than `first`, and the first node of no release.

    A daemon of unknown release counts as older, but for a node listed without one (the
    module doc: it keeps the last decision).
    """
    unheard = None
    for daemon in daemons:
        if daemon.release is None and vouch_for_unknown:
            continue
        if daemon.release is None and daemon.node:
            unheard = unheard or daemon
        elif not knows_metrics(daemon.release, first):
            return daemon, unheard
    return None, unheard


def cluster_daemons(
    peer: SlurmctldPeer,
    joined: Sequence[tuple[str, ControllerPublisher]],
    scontrol: Scontrol,
) -> Iterator[Daemon]:
    """Yield every reader of slurm.conf but this slurmctld: peers, joined units, then nodes.

    `joined` names each integration whose units publish their release (`login unit`,
    `REST unit`). The node records are read last, lazily (`NODES_QUERY`, bounded by
    `scontrol`'s timeout): a `SlurmOpsError` reaches the caller, also for a line that is not a
    node's (no node is guessed).
    """
    for controller in peer.hosts().values():
        yield Daemon(f"controller {controller.hostname}", controller.version)
    for label, publisher in joined:
        for relation in publisher.relations:
            for unit, release in publisher.unit_versions(relation).items():
                yield Daemon(f"{label} {unit}", release)
    output = host.run(NODES_QUERY, timeout=scontrol.timeout).stdout
    for name, release in node_releases(output).items():
        yield Daemon(f"slurmd node {name}", release, node=True)


def node_releases(output: str) -> dict[str, str | None]:
    """Return each node of `NODES_QUERY`'s output with its release (None: never registered).

    Lines are split on newlines only (not CR nor U+2028), and each must be a whole record
    (SlurmOpsError otherwise); a FUTURE placeholder (no slurmd runs for it) is left out.
    """
    releases: dict[str, str | None] = {}
    for line in output.split("\n"):
        if not line:
            continue
        fields = line.split("|")
        valid = (
            len(fields) == 3
            and NODE_NAME.fullmatch(fields[0])
            and _NODE_STATE.fullmatch(fields[1])
            and (fields[2] == "N/A" or _RELEASE.fullmatch(fields[2]))
        )
        if not valid:
            raise SlurmOpsError(f"sinfo printed a line that is no node's: {line[:80]!r}")
        name, state, release = fields
        if "future" not in state.lower().split("+"):
            releases[name] = None if release == "N/A" else release
    return releases


class NativeMetrics:
    """The leader's decision for this dispatch, taken once (reconcile and status share it)."""

    def __init__(
        self,
        peer: SlurmctldPeer,
        joined: Sequence[tuple[str, ControllerPublisher]],
        scontrol: Scontrol,
        own_release: Callable[[], str],
    ) -> None:
        self._peer = peer
        self._joined = joined
        self._scontrol = scontrol
        self._own_release = own_release
        self._decision: Decision | None = None

    def reconcile(self, facts: Facts) -> Decision:
        """Return whether the leader's slurm.conf turns the endpoint on (decided once)."""
        if self._decision is None:
            self._decision = decide(
                facts.config,
                self._own_release(),
                cluster_daemons(self._peer, self._joined, self._scontrol),
                previous=bool(facts.memory.native_metrics),
            )
        return self._decision

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say what holds the endpoint off while it is asked for (the leader)."""
        if facts.leader and (held := self.reconcile(facts).held_by) is not None:
            yield ops.ActiveStatus(held)


def conf_settings(on: bool, config: SlurmctldConfig) -> dict[str, Any]:
    """slurm.conf's keys for the endpoint: MetricsType when `on`, nothing otherwise.

    Under PrivateData the token check comes too, from a file slurm.conf includes by name
    (`metrics_auth.INCLUDE`): slurmutils knows neither of its keys, and configless sends a
    file included by a plain name to every node with slurm.conf.
    """
    if not on:
        return {}
    settings: dict[str, Any] = {"metricstype": "metrics/openmetrics"}
    if private(config):
        settings["include"] = [metrics_auth.INCLUDE]
    return settings


def scrape_jobs(leader_on: bool, config: SlurmctldConfig) -> list[dict[str, Any]]:
    """Return the collector's jobs for the endpoint on this machine (none where it is off).

    `leader_on` is the leader's decision (peer databag); this unit's options are checked too,
    so `off` withdraws the jobs at once, before the leader's word arrives. Under PrivateData
    each job sends the token `metrics_auth` writes: the databag holds the file's path only.
    """
    if not (leader_on and asked(config)):
        return []
    paths = [*PATHS, *([PER_USER_PATH] if config.metrics_per_user else [])]
    token = str(metrics_auth.TOKEN_FILE) if private(config) else None
    return [
        scrape_job(
            f"{NATIVE_PREFIX}{path.replace('-', '_')}",
            SLURMCTLD_PORT,
            f"/metrics/{path}",
            rename=("slurm_", NATIVE_PREFIX),
            follow_redirects=False,
            credentials_file=token,
        )
        for path in paths
    ]
