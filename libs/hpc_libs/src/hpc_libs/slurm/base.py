"""What every Slurm daemon manager shares: packages, service, key, start options, config files.

All paths are built from `root` (default `/`), so unit tests point a manager at `tmp_path`.
"""

import base64
import binascii
import dataclasses
import json
import logging
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, ClassVar, Generic, Literal, TypeVar, cast

from slurmutils import BaseEditor, Model, ModelError

from hpc_libs.errors import ConfigError, PackageError, SlurmOpsError
from hpc_libs.machine import apt, files
from hpc_libs.machine.systemd import Service
from hpc_libs.slurm import check, grammar, version
from hpc_libs.slurm.ports import SLURMCTLD_PORT
from hpc_libs.slurm.text import literals_as_yes_no, yes_no_as_literals
from hpc_libs.slurm.upgrade import DebSource, offered_majors, pin_text

logger = logging.getLogger(__name__)

PackageSource = Literal["auto", "ppa", "archive"]
"""Where Slurm packages come from: the Ubuntu HPC team's PPA, the machine's own archive, or
`auto`: the archive when it has a Slurm the charms support (Ubuntu 26.04, Debian 13), else
the PPA (Ubuntu 24.04, whose archive has Slurm 23.11). `slurm-package-source` may also name
a repository of its own (`hpc_libs.slurm.upgrade.parse_source`): a PPA, or a `deb` line."""
SOURCES_FILE = Path("etc/apt/sources.list.d/slurm-charms.list")
"""The `deb` source `slurm-package-source` names, relative to the manager's root."""
PIN_FILE = Path("etc/apt/preferences.d/slurm-charms")
"""The apt preferences holding Slurm at one major (`hpc_libs.slurm.upgrade.pin_text`)."""

LOGROTATE_DIR = "etc/logrotate.d"
LOGROTATE_RULE = """\
# Written by the charm: root creates the new log in its root-owned directory.
{path} {{
  compress
  delaycompress
  missingok
  notifempty
  rotate 12
  size=5M
  create 0640 {owner} {owner}
  sharedscripts
  postrotate
      /usr/sbin/start-stop-daemon -s USR2 --stop -x /usr/sbin/{daemon} -q || true
  endscript
}}
"""
"""The package's rotation (12 compressed logs of 5 MB), but logrotate creates the new log."""

DPKG_HOOK_DIR = Path("etc/dpkg/dpkg.cfg.d")
DPKG_HOOK = """\
# Written by the Slurm charms. Slurm's Debian packages give {path} to slurm
# (`chown slurm:slurm` in their postinst) at every install and upgrade. The charms keep it
# root's, since root reads and writes by name in it: dpkg gives it back to root after each run,
# a point release from apt or unattended-upgrades included.
post-invoke=chown -h root:root {path} 2>/dev/null || true
"""
"""dpkg's configuration (`post-invoke`, run by `sh -c` after every dpkg run) for one directory."""

SLURM_PPA = "ppa:ubuntu-hpc/slurm-wlm-24.11"
JWT_KEY_NAME = "jwt_hs256.key"
"""The JWT key file in /etc/slurm (`AuthAltParameters=jwt_key=`), slurmctld's and slurmdbd's."""
REBOOT_PROGRAM = "/usr/local/sbin/slurmd-charm-reboot"
"""slurm.conf's `RebootProgram` (slurmctld's charm) is this file, which slurmd's charm installs."""
HEALTH_CHECK_PROGRAM = "/usr/local/sbin/slurmd-charm-health"
"""slurm.conf's `HealthCheckProgram` (slurmctld's charm) is this file, which slurmd's charm
installs."""
REBUILD_PARTITION = "rebuild"
"""The hidden partition of rebuild jobs; the RebootProgram asks Slurm about its jobs."""
SLURM_USER = "slurm"
SLURM_GROUP = "slurm"
KEY_SET_NAME = "slurm.jwks"
"""auth/slurm's key set file, read instead of slurm.key when it exists (Slurm 24.05+)."""

M = TypeVar("M", bound=Model)

# Characters that cannot be carried inside a double-quoted EnvironmentFile value unescaped.
_UNSAFE_OPTION_CHARS = re.compile(r'["\\$`\n]')


@dataclasses.dataclass(eq=False)
class KeyFile:
    """A secret key file of random bytes, exchanged between units as base64 text.

    Juju secret content is text, so `get`, `set` and `generate` speak base64 while the file
    holds the raw bytes Slurm expects. The file is written 0600, owned by the service user.

    With `key_set_path` (slurm.key beside slurm.jwks) the key may also be an auth/slurm key
    set, a JSON document `{"keys": [...]}` (`is_key_set`): `set` then writes the same bytes
    to `key_set_path` as well, which Slurm (24.05+) reads instead of slurm.key, and a plain
    key removes `key_set_path`. slurm.key always holds the bytes of the shared secret, so a
    daemon's fingerprint of slurm.key changes whenever the key set does.
    """

    path: Path
    _: dataclasses.KW_ONLY
    size: int
    owner: str = SLURM_USER
    key_set_path: Path | None = None

    def generate(self) -> str:
        """Return a new random key as base64 text (not written; pass it to `set`)."""
        return base64.b64encode(secrets.token_bytes(self.size)).decode()

    def exists(self) -> bool:
        """Whether the key file exists."""
        return self.path.exists()

    def get(self) -> str | None:
        """Return the key as base64 text, or None if the file does not exist."""
        data = files.read_bytes(self.path)
        return None if data is None else base64.b64encode(data).decode()

    def set(self, key: str) -> bool:
        """Write the base64 `key` (and the key set file, see the class); return if one changed.

        Raises:
            ConfigError: `key` is not base64 text.
            SlurmOpsError: The key set file cannot be removed.

        """
        try:
            data = base64.b64decode(key, validate=True)
        except binascii.Error as e:
            raise ConfigError(f"{self.path.name} content is not base64", key=self.path.name) from e
        changed = files.write_if_changed(self.path, data, mode=0o600, owner=self.owner)
        if self.key_set_path is None:
            return changed
        if is_key_set(data):
            return (
                files.write_if_changed(self.key_set_path, data, mode=0o600, owner=self.owner)
                or changed
            )
        return self.remove_key_set() or changed

    def remove_key_set(self) -> bool:
        """Delete the key set file; return whether it existed.

        Raises:
            SlurmOpsError: It exists and cannot be deleted.

        """
        if self.key_set_path is None:
            return False
        try:
            self.key_set_path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            raise SlurmOpsError(f"cannot delete {self.key_set_path}: {e}") from e
        return True


def is_key_set(data: bytes) -> bool:
    """Whether `data` is an auth/slurm key set (slurm.jwks): a JSON object with a `keys` list.

    A random key of 1024 bytes never parses as one.
    """
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return False
    return isinstance(document, dict) and isinstance(
        cast(dict[str, Any], document).get("keys"), list
    )


class OptionsFile:
    """A daemon's systemd EnvironmentFile, `/etc/default/<daemon>`, with `NAME="value"` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, variables: Mapping[str, str]) -> bool:
        """Replace the file with `variables`; return whether it changed.

        Raises:
            ConfigError: A value holds a character that cannot be quoted in the file.

        """
        lines = ["# Written by the Slurm charms; changes are overwritten.\n"]
        for name, value in variables.items():
            if _UNSAFE_OPTION_CHARS.search(value):
                raise ConfigError(f"{name} holds a quote, backslash, $ or newline", key=name)
            lines.append(f'{name}="{value}"\n')
        return files.write_if_changed(self.path, "".join(lines), mode=0o644)

    def read(self) -> dict[str, str]:
        """Return the variables in the file (empty if it does not exist)."""
        data = files.read_bytes(self.path)
        result: dict[str, str] = {}
        for line in (data or b"").decode().splitlines():
            name, sep, value = line.partition("=")
            if sep and not name.startswith("#"):
                result[name.strip()] = value.strip().removeprefix('"').removesuffix('"')
        return result


class ConfigFile(Generic[M]):
    """One Slurm configuration file read and written through a `slurmutils` editor.

    Writes are atomic and happen only when the rendered text changes; `write` returns and
    `changed` records whether it did, so callers reconfigure only when needed.

    With `yes_no_booleans` (slurm.conf-format files) boolean parameters such as a
    partition's `Default` are read from and written as `YES`/`NO` (see `hpc_libs.slurm.text`).

    With `slurm_check` (the file's name: `slurm.conf`, `slurmdbd.conf`) Slurm's own parser
    reads every new rendering before it replaces the file (`hpc_libs.slurm.check`): a
    rendering Slurm refuses is never written, and `write` raises quoting Slurm.
    """

    def __init__(
        self,
        path: Path,
        editor: BaseEditor[M],
        model: type[M],
        *,
        mode: int = 0o644,
        owner: str = SLURM_USER,
        group: str | None = SLURM_GROUP,
        yes_no_booleans: bool = False,
        slurm_check: str | None = None,
    ) -> None:
        self.path = path
        self.mode = mode
        self.owner = owner
        self.group = group
        self.yes_no_booleans = yes_no_booleans
        self.slurm_check = slurm_check
        self.changed = False
        self._accepted: str | None = None
        self._editor = editor
        self._model = model

    def exists(self) -> bool:
        """Whether the file exists."""
        return self.path.exists()

    def load(self) -> M:
        """Return the parsed file; an empty model if the file does not exist.

        Raises:
            SlurmOpsError: The file exists but slurmutils cannot parse it.

        """
        data = files.read_bytes(self.path)
        if data is None:
            return self._model()
        text = data.decode()
        try:
            return self._editor.loads(yes_no_as_literals(text) if self.yes_no_booleans else text)
        except (ModelError, ValueError) as e:
            raise SlurmOpsError(f"cannot parse {self.path}: {e}") from e

    def render(self, config: M) -> str:
        """Return the file's text for `config`, as `write` would write it."""
        text = self._editor.dumps(config) + "\n"
        return literals_as_yes_no(text) if self.yes_no_booleans else text

    def check(self, config: M) -> None:
        """Let Slurm judge `config`'s rendering, if it differs from the file (see the class).

        Call it before changing anything that goes with the file; `write` then does not ask
        Slurm again about the same text.

        Raises:
            SlurmRefusedError: Slurm refuses the rendering (it quotes Slurm).
            SlurmOpsError: Slurm could not be asked (the next event tries again).

        """
        text = self.render(config)
        if self.slurm_check is None or text == self._accepted:
            return
        if files.read_bytes(self.path) == text.encode():
            return
        check.check_with_slurm(
            text, self.slurm_check, directory=self.path.parent, owner=self.owner
        )
        self._accepted = text

    def write(self, config: M) -> bool:
        """Write `config` if its rendering differs from the file; return whether it did.

        Raises:
            SlurmRefusedError: Slurm refuses the rendering: the file is left as it was.
            SlurmOpsError: Slurm could not be asked, or the file could not be written.

        """
        self.check(config)
        text = self.render(config)
        self.changed = files.write_if_changed(
            self.path, text, mode=self.mode, owner=self.owner, group=self.group
        )
        return self.changed


class SlurmManager:
    """Base for the per-daemon managers.

    Subclasses set `daemon` (also the systemd unit and package name) and `packages`.
    """

    daemon: ClassVar[str]
    packages: ClassVar[tuple[str, ...]]
    user: ClassVar[str] = SLURM_USER
    group: ClassVar[str] = SLURM_GROUP

    def __init__(self, root: Path = Path("/")) -> None:
        self.root = root
        self.service = Service(self.daemon)
        self.key = KeyFile(
            self.etc_dir / "slurm.key",
            size=1024,
            owner=self.user,
            key_set_path=self.etc_dir / KEY_SET_NAME,
        )
        self.options = OptionsFile(root / "etc/default" / self.daemon)

    @property
    def etc_dir(self) -> Path:
        """Slurm's configuration directory, /etc/slurm."""
        return self.root / "etc/slurm"

    def own_log_file(self, path: str) -> None:
        """Prepare the daemon's log file `path` (on the machine) for the COS collector.

        The collector reads it as root, so it lies in a directory only root can change,
        created for the daemon to append to (`files.log_file`). The daemon can no longer
        create it there, so logrotate does, with the charm's rule (`LOGROTATE_RULE`), and
        the package's rule for the same file, which leaves it to the daemon, is removed
        (dpkg does not bring back a configuration file the admin removed). dpkg gives the
        directory back to root after each run (`keep_root_after_dpkg`).

        Raises:
            SlurmOpsError: A component of `path` is a link, or a file operation failed.

        """
        files.log_file(
            self.root / path.lstrip("/"), owner=self.user, group=self.group, under=self.root
        )
        self.keep_root_after_dpkg(str(PurePosixPath(path).parent))
        rules = self.root / LOGROTATE_DIR
        rule = LOGROTATE_RULE.format(path=path, daemon=self.daemon, owner=self.user)
        files.write_if_changed(rules / f"{self.daemon}-charm", rule, mode=0o644)
        try:
            (rules / self.daemon).unlink(missing_ok=True)
        except OSError as e:
            raise SlurmOpsError(f"cannot remove {rules / self.daemon}: {e}") from e

    def keep_root_after_dpkg(self, path: str) -> None:
        """Have dpkg give the directory `path` (on the machine) back to root after every run.

        The charm makes it root's at each reconcile, but Slurm's package scripts make it
        slurm's again at every upgrade, and a point release comes from apt or
        unattended-upgrades, outside the charm: until the next hook, slurm could plant a
        link where root reads or writes by name. One `DPKG_HOOK` file per directory, the
        same for every charm, so charms sharing a machine write the same file.

        Raises:
            SlurmOpsError: The file could not be written.

        """
        name = "slurm-charms" + path.rstrip("/").replace("/", "-")
        hook = DPKG_HOOK.format(path=path)
        files.write_if_changed(self.root / DPKG_HOOK_DIR / name, hook, mode=0o644)

    @property
    def options_variable(self) -> str:
        """The EnvironmentFile variable the packaged unit passes to the daemon."""
        return f"{self.daemon.upper()}_OPTIONS"

    def install(self, source: str | DebSource = "auto", *, upgrade: bool = False) -> bool:
        """Install the daemon's packages; return whether apt ran.

        With `ppa` the Ubuntu HPC team's Slurm PPA is added first (Ubuntu only); with
        `archive` the machine's configured archive is used as is; with `auto` the archive
        if its candidate Slurm is supported (`version.MINIMUM`), else the PPA; a PPA of the
        operator's (`ppa:owner/name`) or a `deb` source is added first (`name_source`).
        Already installed packages are left alone (no cache refresh) unless `upgrade`: then
        they are upgraded from `source`, for a Slurm too old for the charms.

        Raises:
            PackageError: The repository or the packages could not be installed.

        """
        if not upgrade and not apt.missing(self.packages):
            return False
        if source == "auto":
            apt.update(self.packages)
            candidate = apt.candidate_version(self.daemon)
            source = version.auto_source(candidate)
            logger.info("%s candidate %s in the archive: using %s", self.daemon, candidate, source)
            if source == "archive":  # the cache was just refreshed
                return apt.install(self.packages, upgrade=upgrade, refresh=False)
        self.name_source(source)
        return apt.install(self.packages, upgrade=upgrade)

    def name_source(self, source: str | DebSource) -> bool:
        """Make apt see `source`'s repository (none for `auto`/`archive`); return if one changed.

        A `deb` source is written to `SOURCES_FILE` (rebuilt from its checked parts); any
        other source removes that file, so naming another source withdraws the former.

        Raises:
            PackageError: The PPA could not be added.
            SlurmOpsError: The sources file could not be written or removed.

        """
        sources_file = self.root / SOURCES_FILE
        if isinstance(source, DebSource):
            return files.write_if_changed(sources_file, source.line() + "\n", mode=0o644)
        changed = False
        if sources_file.exists():
            try:
                sources_file.unlink()
            except OSError as e:
                raise SlurmOpsError(f"cannot remove {sources_file}: {e}") from e
            changed = True
        if source == "ppa":
            apt.add_repository(SLURM_PPA)
        elif source.startswith("ppa:"):
            apt.add_repository(source)
        return changed

    def hold(self, major: str) -> bool:
        """Pin Slurm's packages to `major` (`upgrade.pin_text`); return whether the pin changed.

        Raises:
            SlurmOpsError: The preferences file could not be written.

        """
        return files.write_if_changed(self.root / PIN_FILE, pin_text(major), mode=0o644)

    def offered_majors(self) -> list[str]:
        """Refresh the apt cache; return the Slurm majors its sources offer for the daemon.

        Raises:
            PackageError: The cache could not be refreshed.

        """
        apt.update(self.packages)
        return offered_majors(apt.madison(self.daemon))

    def upgrade_packages(self) -> None:
        """Upgrade the daemon's packages to the pinned major, with the daemon down briefly.

        The packages are downloaded first, while the daemon runs; it is then stopped, the
        packages installed from the cache and the daemon started again (if it ran), so it is
        down only while dpkg unpacks: a backup controller does not take over
        (`SlurmctldTimeout`) and nodes are not marked down (`SlurmdTimeout`).

        An installation that fails still starts the daemon again (the release dpkg left), so
        a failed upgrade does not also leave the daemon down; the install error is raised.

        Raises:
            PackageError: The download or the installation failed.
            ServiceError: The daemon could not be stopped or started.

        """
        apt.download(self.packages)
        was_running = self.service.is_active()
        if was_running:
            self.service.stop()
        try:
            apt.install(self.packages, upgrade=True, refresh=False)
        except PackageError:
            if was_running:
                self._start_after_failed_install()
            raise
        if was_running:
            self.service.start()

    def _start_after_failed_install(self) -> None:
        """Start the daemon again after a failed install; a failure is logged (not raised)."""
        try:
            self.service.start()
        except SlurmOpsError as e:
            logger.error("%s did not start again after the failed upgrade: %s", self.daemon, e)

    def version(self) -> str:
        """Return the installed version of the daemon's package.

        Raises:
            PackageError: The package is not installed.

        """
        version = apt.installed_version(self.daemon)
        if version is None:
            raise PackageError(f"{self.daemon} is not installed")
        return version


def conf_server_option(controllers: Sequence[str]) -> str:
    """`host[:port]` list for `--conf-server`, in the given order (primary first).

    Each entry is checked against Slurm's grammar (`grammar.controller_entry`) here, where it
    joins a daemon's command line, whatever checked it before.

    Raises:
        ValueError: An entry is not `host[:port]`, `[IPv6]:port` or a bare IPv6 address.

    """
    servers = [c if ":" in c else f"{c}:{SLURMCTLD_PORT}" for c in controllers]
    for server in servers:
        grammar.controller_entry(server)
    return ",".join(servers)
