#!/usr/bin/env python3
"""Charm for slurmrestd: Slurm's REST API, configless through a local sackd."""

import logging
from collections.abc import Iterable

import ops
from conf_watch import conf_watch
from config import SlurmrestdConfig
from hpc_libs.charm.base import SlurmCharm, main
from hpc_libs.charm.member import ClusterMember
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import controllers_wait_reason
from hpc_libs.errors import ScontrolError, SlurmOpsError
from hpc_libs.interfaces.cos_agent import CosAgentProvider
from hpc_libs.interfaces.slurmrestd import RestApiProvider, SlurmrestdProvider, rest_url
from hpc_libs.machine.systemd import journal_reason
from hpc_libs.slurm.ports import SLURMD_PORT
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmrestd import (
    SlurmrestdManager,
    jwt_enabled,
    openapi_plugins,
    render_drop_in,
)

logger = logging.getLogger(__name__)

SLURMCTLD = "slurmctld"
REST_API = "rest-api"
CONF_EVENT = "slurmrestd-conf-changed"
"""Dispatched by the path unit watching sackd's copy of slurm.conf (`conf_watch`)."""
PING_TIMEOUT = 10.0
"""Seconds `scontrol ping` may take in collect-status before the controller counts as silent."""
_ANY_ADDRESS = ("", "0.0.0.0", "::")


class SlurmrestdConfChangedEvent(ops.EventBase):
    """sackd fetched a new slurm.conf (dispatched from the machine by `conf_watch`)."""


class SlurmrestdCharmEvents(ops.CharmEvents):
    """The charm's events, with the one its path unit dispatches."""

    slurmrestd_conf_changed = ops.EventSource(SlurmrestdConfChangedEvent)


class SlurmrestdCharm(SlurmCharm[SlurmrestdConfig]):
    """Run sackd and slurmrestd against the cluster's controllers while integrated with slurmctld.

    `member` tracks the relation, restarts sackd when its key or controllers changed,
    confirms the key and leaves on departure. Unit-local fact (`_stored.applied_slurmrestd`):
    the fingerprint slurmrestd was last restarted with (restarted whenever it differs or
    slurmrestd is not running, so a failed restart is retried, and a slurm.conf sackd
    re-fetched reaches slurmrestd at the next event).
    """

    on = SlurmrestdCharmEvents()  # pyright: ignore[reportAssignmentType, reportIncompatibleVariableOverride]
    _stored = ops.StoredState()

    def __init__(self, framework: ops.Framework) -> None:
        self.slurmrestd = SlurmrestdManager()
        self.conf_watch = conf_watch(self.slurmrestd.cached_conf_path, self.slurmrestd.root)
        super().__init__(framework, config_type=SlurmrestdConfig, manager=self.slurmrestd)
        self.cos_agent = CosAgentProvider(self)
        self._stored.set_default(applied_slurmrestd="")
        self.slurmctld = SlurmrestdProvider(self, SLURMCTLD)
        self.member = ClusterMember(self, self.slurmctld, self._stored, self._leave)
        self.rest_api = RestApiProvider(self, REST_API)
        self.reconcile_on(
            self.on[REST_API].relation_joined,
            self.on.slurmrestd_conf_changed,
        )

    def upgrade_waits_for(self, target: str) -> str | None:
        """Wait until every controller runs `target` (Slurm's order: controllers first)."""
        return controllers_wait_reason(target, self.slurmctld.controller_data)

    def reconcile(self, config: SlurmrestdConfig) -> None:
        """Run sackd with slurmctld's key and controllers, then slurmrestd on its copy.

        Without a slurmctld integration, make sure the unit holds no key and runs neither.
        """
        if self.member.relation is None:
            self._leave()
            return
        self.open_ports(PortRange.single(config.port), PortRange.single(SLURMD_PORT))
        if not self.member.run_sackd(self.slurmrestd.sackd, self.slurmctld.controller_data):
            return  # `statuses` says what is missing or invalid
        # sackd runs this release (slurmrestd the same packages): slurmctld writes slurm.conf
        # keys an older one refuses only once every unit says it runs a release knowing them.
        self.slurmctld.publish_version(self.running_slurm())
        self._watch_conf()
        self.slurmrestd.ensure_user()
        conf = self.slurmrestd.cached_conf()
        if conf is None or not jwt_enabled(conf):
            return  # `statuses` says what slurmrestd waits for
        drop_in = render_drop_in(
            listen=config.listen,
            threads=config.threads,
            max_connections=config.max_connections,
            openapi=openapi_plugins(conf),
        )
        self.slurmrestd.write_drop_in(drop_in)
        wanted = self.slurmrestd.fingerprint()
        if wanted != self._stored.applied_slurmrestd or not self.slurmrestd.service.is_active():
            self.slurmrestd.service.enable()
            self.slurmrestd.service.restart()
            self._stored.applied_slurmrestd = wanted
        self.rest_api.publish_url(self._url(config))

    def statuses(self, config: SlurmrestdConfig) -> Iterable[ops.StatusBase]:
        """Say what the REST API lacks, else the URL it serves and whether a controller answers."""
        status = self._integration_status() or self._workload_status(config)
        return [status] if status is not None else []

    def _integration_status(self) -> ops.StatusBase | None:
        """Return what the slurmctld integration lacks (itself, valid data, the key), or None."""
        return self.member.status()

    def _workload_status(self, config: SlurmrestdConfig) -> ops.StatusBase | None:
        """Return the state of sackd, the fetched config, slurmrestd, then the controller.

        None after a failure captured in this dispatch: the skeleton already shows it.
        """
        if self.failure is not None:
            return None
        if not self.slurmrestd.sackd.service.is_active():
            return _not_running("sackd")
        conf = self.slurmrestd.cached_conf()
        if conf is None:
            return ops.WaitingStatus("waiting for sackd to fetch the cluster's configuration")
        if not jwt_enabled(conf):
            return ops.WaitingStatus("waiting for slurmctld to enable auth/jwt")
        if not self.slurmrestd.service.is_active():
            return _not_running(self.slurmrestd.daemon)
        return _controller_status(self._url(config) or config.listen)

    def _watch_conf(self) -> None:
        """Have a new slurm.conf from sackd wake the charm (`conf_watch`) within seconds.

        A watch that cannot start is logged: update-status still reconciles, only later.
        """
        try:
            self.conf_watch.install(self.unit.name, self.charm_dir, CONF_EVENT)
        except (ValueError, SlurmOpsError) as e:
            logger.warning("cannot watch slurm.conf (the next event tries again): %s", e)

    def _url(self, config: SlurmrestdConfig) -> str | None:
        """Return the URL clients reach: the listen address, else the unit's ingress address.

        None while Juju gives the unit no address.
        """
        host = config.listen_address
        if host in _ANY_ADDRESS:
            binding = self.model.get_binding(REST_API)
            address = binding.network.ingress_address if binding else None
            if address is None:
                return None
            host = str(address)
        return rest_url(host, config.port)

    def _leave(self) -> None:
        """Stop slurmrestd and sackd, delete slurm.key, close the port, withdraw the URL.

        Every step is tried even if one fails; a failure is a status and the next event's
        reconcile tries again.
        """
        self._stored.applied_slurmrestd = ""
        sackd = self.slurmrestd.sackd
        if not (
            sackd.key.exists()
            or sackd.service.is_active()
            or self.slurmrestd.service.is_active()
            or self.conf_watch.exists()
        ):
            self.open_ports()
            self.rest_api.publish_url(None)
            return
        for step in (
            self.conf_watch.remove,
            self.slurmrestd.service.stop,
            self.slurmrestd.service.disable,
            sackd.service.stop,
            sackd.service.disable,
            sackd.remove_key,
        ):
            try:
                step()
            except SlurmOpsError as e:
                logger.warning("leaving the cluster: %s (the next event tries again)", e)
                self.failure = self.failure or e
        self.open_ports()
        self.rest_api.publish_url(None)


def _not_running(daemon: str) -> ops.StatusBase:
    """Blocked, with the daemon's last fatal or error line from its journal."""
    reason = journal_reason(daemon)
    return ops.BlockedStatus(
        f"{daemon} is not running: {reason}" if reason else f"{daemon} is not running"
    )


def _controller_status(url: str) -> ops.StatusBase:
    """Active `serving <url>` if a controller answers `scontrol ping`, else waiting, saying why.

    The ping reads the configuration sackd fetched (clients fall back to /run/slurm/conf).
    """
    try:
        pings = Scontrol(timeout=PING_TIMEOUT).ping()
    except ScontrolError as e:
        return ops.WaitingStatus(f"serving {url}; no controller answers: {e.status_message()}")
    if any(ping.is_up for ping in pings):
        return ops.ActiveStatus(f"serving {url}; controller answers")
    return ops.WaitingStatus(f"serving {url}; no controller answers")


if __name__ == "__main__":  # pragma: nocover
    main(SlurmrestdCharm)
