"""Make slurmctld run the rendered configuration, tracking what it runs with.

What decides a restart or a reconfigure is what slurmctld last ACCEPTED, not what is on disk:
a failed `scontrol reconfigure` or restart is retried by the next event even though the
files on disk are already up to date. The fingerprints of the applied configuration are
recorded only after the start, restart or reconfigure succeeded, and cleared (`UNCONFIRMED`)
before each attempt: a failed one may still have been applied. A reconfigure that timed out
on the forky lab had re-executed slurmctld with the new file; the next event rendered the
file slurmctld ran before, found it equal to the record, and left slurmctld on the failed
attempt's. They describe this unit's own daemon, so they live in this unit's StoredState
(unlike the cluster's memory, which is in the peer application databag).

Turning accounting on for a running cluster: slurmctld started without a database invented a
cluster id and keeps it in `<StateSaveLocation>/clustername`; slurmdbd assigns another one when
slurmctld registers, and slurmctld then dies with "CLUSTER ID MISMATCH" (at a reconfigure or a
restart alike). So until slurmctld accepted a configuration with accounting, the leader deletes
that file before it writes slurm.conf, and again right before each start, restart or
reconfigure (a failed attempt writes it again).
A standby slurmctld keeps the plugins and the cluster id of its start through a SIGHUP: one
that started before any id was written invents one at its takeover, with no database to ask,
and writes it to the share (controller.c, `ctld_assoc_mgr_init`). The change that turns
accounting on restarts it instead, once it can tell it stands by (`_in_control`).

A standby loads its plugins once too: SIGHUP makes it re-read slurm.conf, never load a plugin
(backup.c). The metrics plugin is chosen once per process (`metrics_g_init`), so a backup
that stood by through the change that named MetricsType answered `/metrics/*` with an empty
body once in control (seen on the forky lab, 26.05.5). And a SIGHUP resets a standby's
cluster id, which it then needs slurmdbd to learn when it takes over. So a standby is
restarted for every change, never while it is in control: there a SIGHUP re-executes it,
which loads them (`_refresh_standby`). `loaded_plugins` (every key that chooses a plugin)
records what a standby last started with, or that a refresh could not tell its role.
"""

import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator

import ops
from controllers import SlurmctldComponent, controller_hosts
from facts import Facts
from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import files, systemd
from hpc_libs.slurm.scontrol import Scontrol
from hpc_libs.slurm.slurmctld import SlurmctldManager
from render import SLURMCTLD_LOG_FILE, render_gres_conf
from slurmutils import CGroupConfig, SlurmConfig
from takeover import fresh_heartbeat

logger = logging.getLogger(__name__)

ACCOUNTING_BY_SLURMDBD = "accounting_storage/slurmdbd"
CLUSTER_ID_FILE = "clustername"
"""Where slurmctld keeps its cluster id, in its `StateSaveLocation`."""
SERVED_DIGEST_LENGTH = 16
"""Hex digits of the digest published as `config_digest`."""
PLUGIN_KEY = re.compile(r"[a-z]+(?:type|types|plugin|plugins)")
"""slurm.conf's keys (lower case, as slurmutils gives them) that choose plugins."""
SLURM_DEFAULT_SLURMCTLD_TIMEOUT = 120
"""Slurm's `SlurmctldTimeout` when slurm.conf names none."""
UNCONFIRMED = "unconfirmed"
"""Recorded while a start, restart or reconfigure runs: what slurmctld runs is not known."""


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


def loaded_plugins(conf: SlurmConfig) -> str:
    """Fingerprint the plugins a standby slurmctld loads only when it starts (module doc).

    Every key that chooses plugins (`PLUGIN_KEY`): accounting and metrics, and those an
    operator may set (PreemptType, JobSubmitPlugins, JobCompType, ...); most load once per
    process, before the loop that switches a slurmctld between standby and control.
    """
    chosen = {key: value for key, value in conf.dict().items() if PLUGIN_KEY.fullmatch(key)}
    return fingerprint(json.dumps(chosen, sort_keys=True))


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
        # `accounting`: whether the applied slurm.conf accounts to slurmdbd. `plugins`: what
        # `loaded_plugins` says of the slurm.conf slurmctld last started or re-executed with.
        self._stored.set_default(config="", identity="", accounting=False, plugins="")

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
        slurm.conf only when it starts or on SIGHUP, so it is restarted too, or reloaded if it
        took over (`_refresh_standby`; its SlurmctldTimeout decides when it takes over).

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
        # Before slurm.conf names accounting: a standby restarts for it as soon as it reads
        # the file, and must not read the id slurmctld invented (module doc).
        self._forget_invented_cluster_id(conf)
        manager.key.set(auth_key)
        manager.jwt_key.set(jwt_key)
        manager.cgroup_config.write(cgroup)
        manager.gres_config.write(gres)
        manager.config.write(conf)
        # The log directory is root's, the log file slurm's: root reads it (COS) by its name.
        manager.own_log_file(SLURMCTLD_LOG_FILE)
        service = manager.service
        plugins = loaded_plugins(conf)
        if not service.is_active():
            manager.create_state_save_location()
            self._forget_invented_cluster_id(conf)
            service.enable()
            service.start()
            self._stored.plugins = plugins
        elif wanted_identity != self._stored.identity:
            self._forget_invented_cluster_id(conf)
            self._stored.identity = UNCONFIRMED
            service.restart()
            self._stored.plugins = plugins
        elif config != self._stored.config:
            self._forget_invented_cluster_id(conf)
            self._stored.config = UNCONFIRMED
            self.scontrol.reconfigure()
            if standby:
                self._refresh_standby(conf, plugins)
            else:
                self._stored.plugins = plugins  # Re-executed (Slurm 23.11+).
        elif standby and plugins != self._stored.plugins:
            self._refresh_standby(conf, plugins)  # A refresh that could not tell its role.
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

        slurmctld starts if it is stopped and restarts when its identity changed (the
        controllers or a key: a standby controller with an old `SlurmctldHost` list would
        misjudge its place). Any other change restarts it while it stands by, and reloads it
        (SIGHUP) once it took over (`_refresh_standby`): the leader's `scontrol reconfigure`
        reaches only the controller in charge, and a backup decides when to take over with
        the `SlurmctldTimeout` it read last (raised during a major upgrade).
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
        plugins = loaded_plugins(on_disk)
        if not service.is_active():
            service.enable()
            service.start()
            self._stored.plugins = plugins
        elif wanted_identity != self._stored.identity:
            self._stored.identity = UNCONFIRMED
            service.restart()
            self._stored.plugins = plugins
        elif config != self._stored.config or plugins != self._stored.plugins:
            self._stored.config = UNCONFIRMED
            self._refresh_standby(on_disk, plugins)
        else:
            return on_disk.slurmctld_timeout
        logger.info("slurmctld stands by with the leader's configuration")
        self._stored.identity = wanted_identity
        self._stored.accounting = has_accounting(on_disk)
        self._stored.config = config
        return on_disk.slurmctld_timeout

    def _refresh_standby(self, conf: SlurmConfig, plugins: str) -> None:
        """Make a standby slurmctld run changed files: a restart; a SIGHUP once in control.

        Through a SIGHUP a standby re-reads slurm.conf (`_backup_reconfig`, backup.c) but keeps
        the plugins of its start and forgets its cluster id (`slurm_conf_reinit`). Without its
        plugins a backup in control served an empty metrics body (forky lab); without its id
        it must ask slurmdbd when it takes over, and waits while slurmdbd does not answer:
        with slurmdbd frozen and the primary killed, a reloaded backup left the cluster with
        no controller for the 173 s measured, a restarted one read its id from `clustername`
        and took over from its state files. So a standby is restarted for every change.

        A slurmctld in control (a backup that took over) is re-executed by the SIGHUP, which
        loads everything and reads the id, and is never restarted: that would stop the
        cluster's controller. When it cannot be told, it gets the SIGHUP and its `plugins`
        stay unconfirmed, so the next event tries again. `plugins`: `loaded_plugins(conf)`.
        """
        in_control = self._in_control(conf)
        if in_control is False:
            self.manager.service.restart()
        else:
            self.manager.service.reload()
        self._stored.plugins = UNCONFIRMED if in_control is None else plugins

    def _in_control(self, conf: SlurmConfig) -> bool | None:
        """Whether this slurmctld is the one in control; None while that cannot be told.

        The heartbeat in the shared StateSaveLocation tells first: the controller in control
        writes it every SlurmctldTimeout/4 s, and a backup takes over only once it went stale
        (backup.c), so a heartbeat fresher than SlurmctldTimeout/2 names the one in control.
        It is a file: it answers when `scontrol ping` times out on a busy machine, or misses
        a primary that is re-executing. Without a fresh heartbeat, a controller listed before
        this one that answers the ping is in control; otherwise (none answers, or a takeover
        is under way) it cannot be told.

        Why it matters (soak seed 74, CI): a standby that started before any cluster id was
        written, and was only reloaded as accounting came, still ran the plugins of its
        start; at its takeover it found no id and no database, invented one and wrote it to
        the share, and the primary died of CLUSTER ID MISMATCH when it started again.
        """
        hostname = socket.gethostname()
        hosts = controller_hosts(conf)
        timeout = conf.slurmctld_timeout or SLURM_DEFAULT_SLURMCTLD_TIMEOUT
        beat = fresh_heartbeat(self.manager.network_state_save_location, timeout, time.time())
        if beat is not None and beat.index < len(hosts):
            return hosts[beat.index] == hostname
        try:
            pings = self.scontrol.ping()
        except SlurmOpsError as e:
            logger.info("cannot tell whether slurmctld is in control: %s", e.stderr or e.message)
            return None
        first_up = next((p.hostname for p in pings if p.is_up), None)
        if first_up is None or first_up == hostname:
            logger.info("cannot tell whether slurmctld is in control: no fresh heartbeat")
            return None
        return False

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
        self._stored.plugins = loaded_plugins(on_disk)
        self._stored.config = fingerprint(*((text or b"").decode() for text in texts))
