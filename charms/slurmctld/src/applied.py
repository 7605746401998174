"""Make slurmctld run the rendered configuration, tracking what it runs with.

What decides a restart or a reconfigure is what slurmctld last ACCEPTED, not what is on disk:
a failed `scontrol reconfigure` or restart is retried by the next event even though the
files on disk are already up to date. The fingerprints of the applied configuration are
recorded only after the start, restart or reconfigure succeeded. They describe this unit's
own daemon, so they live in this unit's StoredState (unlike the cluster's memory, which is
in the peer application databag).

Turning accounting on for a running cluster: slurmctld started without a database invented a
cluster id and keeps it in `<StateSaveLocation>/clustername`; slurmdbd assigns another one when
slurmctld registers, and slurmctld then dies with "CLUSTER ID MISMATCH" (at a reconfigure or a
restart alike). So until slurmctld accepted a configuration with accounting, the leader deletes
that file right before each start, restart or reconfigure (a failed attempt writes it again).
A standby slurmctld keeps the id it read at its start through a SIGHUP, and would write the
invented one back when it takes over: the change that turns accounting on restarts it instead.
"""

import hashlib
import json
import logging
import os
from collections.abc import Iterator

import ops
from controllers import SlurmctldComponent
from facts import Facts
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from render import SLURMCTLD_LOG_FILE, render_gres_conf
from slurmutils import CGroupConfig, SlurmConfig

logger = logging.getLogger(__name__)

ACCOUNTING_BY_SLURMDBD = "accounting_storage/slurmdbd"
CLUSTER_ID_FILE = "clustername"
"""Where slurmctld keeps its cluster id, in its `StateSaveLocation`."""
SERVED_DIGEST_LENGTH = 16
"""Hex digits of the digest published as `config_digest`."""


def fingerprint(*parts: str) -> str:
    """Digest `parts` (never stored themselves: some are keys)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def identity(conf: SlurmConfig, auth_key: str, jwt_key: str) -> str:
    """Fingerprint what slurmctld reads only when it starts: a change to it takes a restart.

    That is the controllers (`SlurmctldHost`), the auth key, and the alternative auth
    plugin with its key (`AuthAltTypes`, `AuthAltParameters`, the JWT key): auth plugins
    load at start. Anything else slurm.conf holds is applied by `scontrol reconfigure`,
    accounting (`AccountingStorage*`) included: since Slurm 23.11 a reconfigure re-executes
    slurmctld, which re-reads it (seen on the lab with 24.11, once the cluster id slurmctld
    invented is gone: see `_forget_invented_cluster_id`).
    """
    return fingerprint(
        *(conf.slurmctld_host or []),
        ",".join(conf.auth_alt_types or []),
        json.dumps(conf.auth_alt_parameters or {}, sort_keys=True),
        auth_key,
        jwt_key,
    )


def has_accounting(conf: SlurmConfig) -> bool:
    """Whether `conf` accounts to slurmdbd."""
    return conf.accounting_storage_type == ACCOUNTING_BY_SLURMDBD


class AppliedConfig(SlurmctldComponent):
    """Write the keys, slurm.conf and cgroup.conf and apply them as gently as Slurm allows.

    A change `scontrol reconfigure` applies is applied that way; slurmctld restarts only when
    its identity changed (`identity`: what only a restart applies).
    """

    _stored = ops.StoredState()

    def __init__(
        self, charm: ops.CharmBase, manager: SlurmctldManager, scontrol: Scontrol
    ) -> None:
        super().__init__(charm, "applied", manager, scontrol)
        # `accounting`: whether the applied slurm.conf accounts to slurmdbd.
        self._stored.set_default(config="", identity="", accounting=False)

    def apply(
        self,
        conf: SlurmConfig,
        cgroup: CGroupConfig,
        auth_key: str,
        jwt_key: str,
        *,
        standby: bool = False,
    ) -> str:
        """Write the files (the keys are base64 text), then make slurmctld use them.

        `standby`: this unit's slurmctld is listed after another controller. The leader's
        `scontrol reconfigure` reaches only the controller in charge, and a backup reads
        slurm.conf only when it starts or on SIGHUP, so it is reloaded too (its
        SlurmctldTimeout decides when it takes over).

        Returns the digest of the configuration slurmctld now runs with and serves configless
        (`served_digest`), for the daemons to hear that it changed.

        Raises:
            SlurmOpsError: Slurm refuses the new slurm.conf (nothing is written), or
                slurmctld did not start, restart or reconfigure (retried next time).

        """
        manager = self.manager
        gres = render_gres_conf()
        config = fingerprint(
            manager.config.render(conf),
            manager.cgroup_config.render(cgroup),
            manager.gres_config.render(gres),
        )
        wanted_identity = identity(conf, auth_key, jwt_key)
        if not self._stored.identity:
            self._assume_files_on_disk_applied(auth_key, jwt_key)
        # Slurm's own parser judges a new slurm.conf before anything is written: a refusal
        # (SlurmRefusedError) keeps every file as it was and the unit blocks quoting Slurm.
        manager.config.check(conf)
        manager.key.set(auth_key)
        manager.jwt_key.set(jwt_key)
        manager.cgroup_config.write(cgroup)
        manager.gres_config.write(gres)
        manager.config.write(conf)
        # The log directory is root's, the log file slurm's: root reads it (COS) by its name.
        manager.own_log_file(SLURMCTLD_LOG_FILE)
        service = manager.service
        if not service.is_active():
            manager.create_state_save_location()
            self._forget_invented_cluster_id(conf)
            service.enable()
            service.start()
        elif wanted_identity != self._stored.identity:
            self._forget_invented_cluster_id(conf)
            service.restart()
        elif config != self._stored.config:
            self._forget_invented_cluster_id(conf)
            self.scontrol.reconfigure()
            if standby:
                self._refresh_standby(conf)
        else:
            return self.served_digest()
        logger.info("slurmctld runs with the current configuration")
        self._stored.config = config
        self._stored.identity = wanted_identity
        self._stored.accounting = has_accounting(conf)
        return self.served_digest()

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Block while slurmctld does not run, with its journal's reason (the list stops)."""
        if not self.manager.service.is_active():
            reason = systemd.journal_reason(self.manager.daemon) or "see its journal"
            yield ops.BlockedStatus(f"slurmctld is not running: {reason}")

    def served_digest(self) -> str:
        """Digest the configuration files slurmctld serves configless, as they are on disk.

        slurm.conf and cgroup.conf, and gres.conf when there is one. Call it only once they
        are the applied ones.
        """
        manager = self.manager
        paths = (manager.config.path, manager.cgroup_config.path, manager.gres_config.path)
        texts = [(files.read_bytes(path) or b"").decode(errors="replace") for path in paths]
        return fingerprint(*texts)[:SERVED_DIGEST_LENGTH]

    def _forget_invented_cluster_id(self, conf: SlurmConfig) -> None:
        """Delete the cluster id slurmctld invented without a database, as accounting comes.

        Only while the applied configuration has no accounting and `conf` has it. slurmctld
        then takes the id slurmdbd holds for the cluster instead of dying of the mismatch.
        """
        if self._stored.accounting or not has_accounting(conf) or not conf.state_save_location:
            return
        root = self.manager.root
        state_dir = root / conf.state_save_location.lstrip("/")
        path = state_dir / CLUSTER_ID_FILE
        if not state_dir.is_dir():
            return
        try:
            # slurm owns the state directory: delete through it, never through a link there.
            with files.open_dir(state_dir, under=root) as state_fd:
                os.unlink(CLUSTER_ID_FILE, dir_fd=state_fd)
        except FileNotFoundError:
            return
        except (OSError, ValueError, SlurmOpsError) as e:
            raise SlurmOpsError(f"cannot delete {path} to turn accounting on: {e}") from e
        logger.info("deleted %s: slurmctld takes the cluster id from slurmdbd", path)

    def follow(self) -> int | None:
        """Run slurmctld as a backup with the files the leader wrote on the share; write none.

        slurmctld starts if it is stopped and restarts only when its identity changed (the
        controllers or a key: a standby controller with an old `SlurmctldHost` list would
        misjudge its place). Any other change is reloaded (SIGHUP; restarted when it turns
        accounting on, `_refresh_standby`): the leader's `scontrol reconfigure` reaches only
        the controller in charge, and a backup decides when to take over with the
        `SlurmctldTimeout` it read last (raised during a major upgrade).
        Never `scontrol reconfigure` from here: that is the leader's.

        Returns the SlurmctldTimeout slurmctld now runs with (None: the file does not say).

        Raises:
            SlurmOpsError: The shared files cannot be read, or slurmctld did not start or
                restart (retried next time).

        """
        manager = self.manager
        on_disk = manager.config.load()
        texts = [
            files.read_bytes(f.path)
            for f in (manager.config, manager.cgroup_config, manager.gres_config)
        ]
        wanted_identity = identity(on_disk, manager.key.get() or "", manager.jwt_key.get() or "")
        config = fingerprint(*((text or b"").decode() for text in texts))
        manager.own_log_file(SLURMCTLD_LOG_FILE)
        service = manager.service
        if not service.is_active():
            service.enable()
            service.start()
        elif wanted_identity != self._stored.identity:
            service.restart()
        elif config != self._stored.config:
            self._refresh_standby(on_disk)
        else:
            return on_disk.slurmctld_timeout
        logger.info("slurmctld stands by with the leader's configuration")
        self._stored.identity = wanted_identity
        self._stored.accounting = has_accounting(on_disk)
        self._stored.config = config
        return on_disk.slurmctld_timeout

    def _refresh_standby(self, conf: SlurmConfig) -> None:
        """Make a standby slurmctld read changed files: SIGHUP, or a restart as accounting comes.

        Through a SIGHUP slurmctld keeps the cluster id it read from `clustername` at its start.
        One it invented without a database would be written back when it takes over, and the
        next controller to start dies of CLUSTER ID MISMATCH (seen on the lab). A restart reads
        the file anew, after the leader deleted the invented id (`_forget_invented_cluster_id`).
        """
        if has_accounting(conf) and not self._stored.accounting:
            self.manager.service.restart()
        else:
            self.manager.service.reload()

    def _assume_files_on_disk_applied(self, auth_key: str, jwt_key: str) -> None:
        """Take a running slurmctld to run with the files on disk, when nothing is recorded.

        Nothing is recorded on a new unit, or after an upgrade from a charm version that did
        not record it.
        So an upgrade-charm restarts nothing whose files are already right. A file that
        cannot be read or parsed counts as not applied.
        """
        manager = self.manager
        if not manager.service.is_active() or not manager.key.exists():
            return
        try:
            on_disk = manager.config.load()
            key_on_disk = manager.key.get() or ""
            jwt_key_on_disk = manager.jwt_key.get() or ""
            texts = [files.read_bytes(f.path) for f in (manager.config, manager.cgroup_config)]
        except (SlurmOpsError, OSError) as e:
            logger.info("cannot tell what slurmctld runs with: %s", e)
            return
        if (key_on_disk, jwt_key_on_disk) != (auth_key, jwt_key) or None in texts:
            return
        self._stored.identity = identity(on_disk, key_on_disk, jwt_key_on_disk)
        self._stored.accounting = has_accounting(on_disk)
        self._stored.config = fingerprint(*((text or b"").decode() for text in texts))
