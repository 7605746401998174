"""`SlurmCharm`: the wiring every Slurm charm shares.

One reconcile path per charm, holistic: whatever the event, the charm makes the machine
match the model (config, relations, secrets), and a separate collect-status handler reports
facts. This is the "holistic" style of ops' machine-tinyproxy example.

What the skeleton does:

- Runs the guarded reconcile (`converge`) on install, start, config-changed,
  upgrade-charm, update-status, leader-elected and secret-changed, plus the charm's own
  events given to `reconcile_on`.
- Before `reconcile`: loads the config (an invalid option: nothing is done), installs the
  packages once (`SlurmInstaller`; upgrade-charm installs again, which refreshes the
  workload version; from a repository the operator names, only the Slurm major whose turn
  has come, else it waits: `MajorUpgrade.install_first`) and checks the Slurm version (older than
  24.11: nothing is done; the installed packages are upgraded from the configured source
  at the next event).
- Captures workload failures: a `SlurmOpsError` (a daemon that cannot start, restart or
  reconfigure, a timed-out `scontrol`, failed detection, a failed apt run) raised by
  `reconcile` or by installing is logged and kept as a fact for collect-status, and the hook
  succeeds. The next event tries again. Other errors are bugs and fail the hook.
- Runs the major upgrade's step (`hpc_libs.charm.upgrade.MajorUpgrade`, which owns the step
  and its status; the charm answers its hooks: `upgrade_waits_for`, `before_upgrade`,
  `upgrade_note`, `upgrades_in_charm`) before `reconcile`.
- collect-unit-status: an invalid option (blocked, naming it); installing (maintenance);
  Slurm too old (blocked, saying which source to use); the failure captured during this
  dispatch (blocked with the daemon's own reason, or waiting when a command timed out);
  then the upgrade's status; then the charm's `statuses(config)`; then active.

Package installation failures are statuses, not hook errors: a hook in error holds every
later event, so an operator could not fix `slurm-package-source` with `juju config` while
Juju retries the failed install. Blocked "cannot install ..." is retried by every event
(update-status at the latest), including the config-changed that fixes the source.

Adopting it in a charm::

    class SackdCharm(SlurmCharm[SackdConfig]):
        def __init__(self, framework: ops.Framework) -> None:
            self.sackd = SackdManager()
            super().__init__(framework, config_type=SackdConfig, manager=self.sackd)
            self.slurmctld = SackdProvider(self, "slurmctld")
            self.reconcile_on(self.on["slurmctld"].relation_changed)
            framework.observe(self.slurmctld.on.slurmctld_disconnected, self._on_gone)

        def reconcile(self, config: SackdConfig) -> None:
            data = self.slurmctld.controller_data
            if data is None or not data.controllers:
                return
            changed = self.sackd.key.set(self.slurmctld.auth_key())
            if self.sackd.set_conf_servers(data.conf_servers()) or changed:
                self.sackd.service.restart()  # ServiceError -> blocked status, retried

        def statuses(self, config: SackdConfig) -> Iterable[ops.StatusBase]:
            if not self.model.relations["slurmctld"]:
                yield ops.BlockedStatus("needs a slurmctld integration")

Remove the charm's own install/upgrade-charm/collect-status handlers and its
`SlurmInstaller`; an action that must apply now calls `converge()` and reports the failure it
returns. Unit tests seed an installed unit with `charm_testing.already_installed(<Class>)`.
"""

import gc
import logging
from collections.abc import Iterable
from typing import ClassVar, Generic

import ops
import pydantic

from hpc_libs.charm import ports
from hpc_libs.charm.config import C, describe_validation_error
from hpc_libs.charm.install import SlurmInstaller
from hpc_libs.charm.ports import PortRange
from hpc_libs.charm.upgrade import MajorUpgrade, Plan
from hpc_libs.errors import SlurmOpsError
from hpc_libs.slurm import schema_cache
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.version import parse as parse_version
from hpc_libs.slurm.version import unsupported_reason

logger = logging.getLogger(__name__)


def main(charm_class: type[ops.CharmBase]) -> None:
    """Dispatch the hook (`ops.main`), then spare the interpreter's exit a full collection.

    Once `ops.main` returns, ops has committed and closed the unit's state and the hook is
    done: `gc.freeze()` moves every object out of the collector's reach, so the exit does not
    walk the heap that ops, pydantic and slurmutils left (50-80 ms of every hook on a lab
    machine: the last step of each hook before the next one can start). Objects are still
    released as modules are torn down, and logging still flushes at exit; a hook that raises
    never gets here.
    """
    ops.main(charm_class)
    gc.freeze()


def track_newest_revision(secret: ops.Secret) -> None:
    """Make this unit track `secret`'s newest revision (one `secret-get --refresh`).

    Juju fires secret-changed on a unit that tracks an older revision than the newest. The
    readers of granted secrets (the keys, the database credentials) read the tracked
    revision, once per hook: tracking the newest here, before the reconcile, is what brings a
    rotated key or password to the unit. A failure is logged; the reconcile's own read then
    fails the same way and says so in the status.
    """
    try:
        secret.get_content(refresh=True)
    except (ops.SecretNotFoundError, ops.ModelError) as e:
        logger.warning("cannot track the newest revision of secret %s: %s", secret.id, e)


class SlurmCharm(ops.CharmBase, Generic[C]):
    """Base of the Slurm charms: one guarded reconcile path and the status preamble.

    Subclasses implement `reconcile` and may override `statuses`.
    """

    def __init__(
        self, framework: ops.Framework, *, config_type: type[C], manager: SlurmManager
    ) -> None:
        super().__init__(framework)
        # slurmutils re-checks its own schemas on every model it builds: check each once.
        schema_cache.install()
        self.config_type = config_type
        self._config: C | pydantic.ValidationError | None = None
        self.manager = manager
        self.installer = SlurmInstaller(self, manager)
        self.major_upgrade = MajorUpgrade(self, manager, self.installer, turn=self)
        self.failure: SlurmOpsError | None = None
        """The workload failure captured during this dispatch, if any (a fact for status)."""
        framework.observe(self.on.upgrade_charm, self._on_upgrade_charm)
        framework.observe(self.on.collect_unit_status, self._on_collect_unit_status)
        self.reconcile_on(
            self.on.install,
            self.on.start,
            self.on.config_changed,
            self.on.update_status,
            self.on.leader_elected,
            self.on.secret_changed,
        )

    # What the charm implements.

    def reconcile(self, config: C) -> None:
        """Make the workload match the model; called with valid config and Slurm installed.

        Raise `SlurmOpsError` (or let it through) when the workload fails: it becomes this
        dispatch's status and the next event tries again. Make each step idempotent and
        track what was applied, not what was written, so a failed step is retried.
        """
        raise NotImplementedError

    def statuses(self, config: C) -> Iterable[ops.StatusBase]:
        """Return the charm's own statuses, from facts (config is valid, Slurm installed)."""
        del config
        return ()

    upgrades_in_charm: ClassVar[bool] = True
    """Whether the charm upgrades Slurm itself on its turn; slurmd's RebootProgram does it
    in the rebuild rollout instead (the charm only moves the pin)."""

    def upgrade_waits_for(self, target: str) -> str | None:
        """Say what must run major `target` before this unit upgrades; None: its turn.

        From the versions the other daemons publish (`hpc_libs.slurm.upgrade.wait_reason`).
        """
        del target
        return None

    def before_upgrade(self, plan: Plan) -> None:
        """Take what must be saved before the upgrade (slurmctld's state, the database).

        Raise `SlurmOpsError` to keep the old Slurm: the failure is the unit's status, and
        the next event tries again. Once it succeeded it is not called again for the same
        upgrade: a retry after a failed install or start keeps the backup taken first.
        """
        del plan

    def upgrade_note(self) -> str | None:
        """Return what the upgrade status adds (slurmctld: its raised SlurmctldTimeout)."""
        return None

    # What the charm calls.

    def reconcile_on(self, *events: ops.BoundEvent) -> None:
        """Run the guarded reconcile on `events` too (the charm's relation events, ...)."""
        for event in events:
            self.framework.observe(event, self._on_reconcile_event)

    def running_slurm(self) -> str | None:
        """Return the Slurm release installed (`24.11.5`), which the charm publishes, or None.

        The charm upgrades and restarts its daemon in one step (slurmd: upgrade and reboot),
        so the installed release is the one the daemon runs.
        """
        try:
            return str(parse_version(self.installer.version))
        except ValueError:
            return None

    def open_ports(self, *wanted: PortRange | None) -> None:
        """Make `wanted` the unit's only opened ports (None stands for a range not configured).

        Through Juju's hook tools, ranges included (`hpc_libs.charm.ports`). A tool that
        fails is this dispatch's failure, for its status, and the reconcile goes on: a port
        Juju would not open must not keep the daemon from running. The next event retries.
        """
        try:
            ports.set_opened_ports(p for p in wanted if p is not None)
        except SlurmOpsError as e:
            logger.warning("%s (the next event tries again)", e)
            self.failure = self.failure or e

    def converge(self) -> SlurmOpsError | None:
        """Run the guarded reconcile now; return the workload failure it captured, if any."""
        return self._converge(refresh=False)

    # Internals.

    def _on_reconcile_event(self, event: ops.EventBase) -> None:
        if isinstance(event, ops.StartEvent):  # After a reboot, slurmd may run a new Slurm.
            self.installer.refresh_version()
        elif isinstance(event, ops.SecretChangedEvent):
            track_newest_revision(event.secret)
        self._converge(refresh=False)

    def _on_upgrade_charm(self, _: ops.UpgradeCharmEvent) -> None:
        self._converge(refresh=True)

    def valid_config(self) -> C | None:
        """Return the config, or None (logged) when an option is invalid.

        Loaded once per dispatch (the config cannot change within one): options of Slurm
        parameters are parsed then, once (see `hpc_libs.charm.config`).
        """
        config = self._loaded_config()
        if isinstance(config, pydantic.ValidationError):
            logger.warning("not acting on invalid config: %s", describe_validation_error(config))
            return None
        return config

    def _loaded_config(self) -> C | pydantic.ValidationError:
        if self._config is None:
            try:
                self._config = self.load_config(self.config_type)
            except pydantic.ValidationError as e:
                self._config = e
        return self._config

    def _converge(self, *, refresh: bool) -> SlurmOpsError | None:
        config = self.valid_config()
        if config is None:
            return None
        try:
            self._install(config, refresh=refresh)
            if not self.installer.installed:  # Its Slurm major may not run yet.
                return None
            if (reason := self._unsupported_slurm()) is not None:
                logger.warning("not configuring Slurm: %s", reason)
                return None
            self.major_upgrade.step(config)
            self.reconcile(config)
        except SlurmOpsError as e:
            logger.warning("%s (the next event tries again)", e)
            self.failure = e
            return e
        return None

    def _install(self, config: C, *, refresh: bool) -> None:
        """Install once; on upgrade-charm, or while Slurm is too old, install again."""
        source = config.package_source
        if not self.installer.installed:
            self.major_upgrade.install_first(config)
        elif self._unsupported_slurm() is not None:
            self.installer.install(source, upgrade=True)
        elif refresh:
            self.installer.install(source)

    def _unsupported_slurm(self) -> str | None:
        version = self.installer.version
        return unsupported_reason(version) if version else None

    def _on_collect_unit_status(self, event: ops.CollectStatusEvent) -> None:
        for status in self._preamble():
            event.add_status(status)
        if (config := self.valid_config()) is not None and not (self._blocked_before_reconcile()):
            if (upgrade := self.major_upgrade.status(config)) is not None:
                event.add_status(upgrade)
            for status in self.statuses(config):
                event.add_status(status)
        event.add_status(ops.ActiveStatus())

    def _blocked_before_reconcile(self) -> bool:
        return not self.installer.installed or self._unsupported_slurm() is not None

    def _preamble(self) -> list[ops.StatusBase]:
        """Statuses every Slurm charm shares, before its own."""
        statuses: list[ops.StatusBase] = []
        if isinstance(error := self._loaded_config(), pydantic.ValidationError):
            statuses.append(ops.BlockedStatus(describe_validation_error(error)))
        if self.failure is not None:
            statuses.append(_failure_status(self.failure))
        if not self.installer.installed:
            config = self.valid_config()
            waits = self.major_upgrade.install_wait(config) if config is not None else None
            if waits is not None:
                statuses.append(ops.WaitingStatus(f"{self.manager.daemon} not installed: {waits}"))
            else:
                statuses.append(ops.MaintenanceStatus(f"installing {self.manager.daemon}"))
        elif reason := self._unsupported_slurm():
            statuses.append(ops.BlockedStatus(reason))
        return statuses


def _failure_status(error: SlurmOpsError) -> ops.StatusBase:
    """Blocked with the failure's own words; waiting when a command merely timed out."""
    message = error.status_message()
    if error.timed_out:
        return ops.WaitingStatus(f"{message}; retrying")
    return ops.BlockedStatus(message)
