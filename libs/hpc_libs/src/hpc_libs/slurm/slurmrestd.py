"""The REST API daemon, run configless next to a local sackd.

slurmrestd needs the cluster's slurm.conf and a way to authenticate to it, and holds neither
itself: a local sackd (run as `slurm`, owning slurm.key) fetches the configuration from the
controllers into `/run/slurm/conf` and keeps it current (slurmctld pushes reconfigures to
it), and lends `auth/slurm` credentials to local processes. slurmrestd runs as its own
unprivileged user and reads sackd's copy (`SLURM_CONF`).

It is started through a systemd drop-in, never by editing the packaged unit, which runs it as
root (refused by slurmrestd), only if /etc/slurm/slurm.conf exists, on fixed sockets. The
drop-in resets that condition and `ExecStart`, names the user, and loads `rest_auth/jwt`
only. `rest_auth/jwt` passes each client's token on with its requests; slurmctld verifies it
(slurmrestd loads no JWT key, whatever its configuration names: see
`hpc_libs.interfaces.slurmrestd`). `SLURM_JWT` in the environment makes `auth/jwt` the
process's first auth plugin, the one a request's token is handed to.

No `rest_auth/local` socket: one unprivileged process cannot serve it next to JWT clients (seen
on the lab with 24.11). With `SLURM_JWT` set, a local request's credential is that variable's
placeholder, which slurmctld refuses (HTTP 511, error 1007); without it, `auth/slurm` speaks
only as the process's own user, never as the root caller. Serving root would take a
slurmrestd running as root, which this charm never starts; root on the unit runs Slurm's
commands instead, or asks for a token like anyone else.
"""

import hashlib
import ipaddress
import re
from collections.abc import Sequence
from pathlib import Path

from hpc_libs.machine import files, host, systemd
from hpc_libs.slurm import grammar
from hpc_libs.slurm.base import SlurmManager
from hpc_libs.slurm.sackd import SackdManager

REST_USER = "slurmrestd"
"""The unprivileged system user slurmrestd runs as (neither root nor SlurmUser)."""
DROP_IN = "charm"
"""Name of the charm's drop-in: /etc/systemd/system/slurmrestd.service.d/charm.conf."""
CACHED_CONF = "run/slurm/conf/slurm.conf"
"""Where sackd caches the cluster's slurm.conf (its RuntimeDirectory is /run/slurm)."""
MIN_THREADS, MAX_THREADS = 1, 1024
MIN_CONNECTIONS, MAX_CONNECTIONS = 1, 8192
_SETTING = re.compile(r"^\s*([A-Za-z]+)\s*=\s*(\S*)", re.MULTILINE)


class SlurmrestdManager(SlurmManager):
    """slurmrestd with its sackd: packages, the REST user, the drop-in, the cached config.

    `sackd` manages the local sackd (slurm.key, `--conf-server`).
    """

    daemon = "slurmrestd"
    packages = ("slurmrestd", "slurm-wlm-jwt-plugin", "sackd", "slurm-client")

    def __init__(self, root: Path = Path("/")) -> None:
        super().__init__(root)
        self.sackd = SackdManager(root)
        self.drop_in_path = systemd.override_path(self.daemon, DROP_IN, root=root)
        self.cached_conf_path = root / CACHED_CONF

    def ensure_user(self) -> bool:
        """Create the `slurmrestd` system user and group if missing; return whether it did.

        Raises:
            SlurmOpsError: The user cannot be looked up or created.

        """
        return host.ensure_system_user(REST_USER)

    def cached_conf(self) -> str | None:
        """Return the slurm.conf sackd fetched, or None before it has one."""
        data = files.read_bytes(self.cached_conf_path)
        return None if data is None else data.decode(errors="replace")

    def write_drop_in(self, text: str) -> bool:
        """Write the drop-in and reload systemd if it changed; return whether it changed.

        Raises:
            SlurmOpsError: The file cannot be written or systemd cannot reload.

        """
        if not systemd.write_override(self.daemon, DROP_IN, text, root=self.root):
            return False
        systemd.daemon_reload()
        return True

    def fingerprint(self) -> str:
        """Return a digest of what slurmrestd starts with: drop-in, slurm.conf, sackd's files.

        The files: the drop-in, the slurm.conf sackd cached, slurm.key and sackd's options.
        A charm records it after a successful restart and restarts slurmrestd whenever it
        differs or slurmrestd is not running, so a failed restart is retried and a
        configuration sackd re-fetched reaches slurmrestd. It reveals nothing about the key.
        """
        digest = hashlib.sha256(self.sackd.fingerprint().encode())
        for path in (self.drop_in_path, self.cached_conf_path):
            data = files.read_bytes(path)
            digest.update(b"-" if data is None else b"+" + hashlib.sha256(data).digest())
        return digest.hexdigest()


def conf_setting(conf: str, key: str) -> str | None:
    """Return the last value of `key` (any case) in slurm.conf text; None if it is unset."""
    values = [v for k, v in _SETTING.findall(conf) if k.lower() == key.lower()]
    return values[-1] if values else None


def jwt_enabled(conf: str) -> bool:
    """Whether the cluster accepts tokens: `AuthAltTypes` lists `auth/jwt`."""
    alt = conf_setting(conf, "AuthAltTypes") or ""
    return "auth/jwt" in alt.lower().split(",")


def openapi_plugins(conf: str) -> list[str]:
    """Return the OpenAPI plugins slurmrestd can load with this configuration.

    `openapi/slurmdbd` makes slurmrestd exit at start unless accounting goes to slurmdbd
    (seen with Slurm 24.11.5: "Failure loading plugin path bindings").
    """
    storage = (conf_setting(conf, "AccountingStorageType") or "").lower()
    if storage == "accounting_storage/slurmdbd":
        return ["openapi/slurmctld", "openapi/slurmdbd"]
    return ["openapi/slurmctld"]


def listen_argument(address: str, port: int) -> str:
    """`[host]:port` for slurmrestd: `:port` (every interface) when `address` is empty.

    Raises:
        ValueError: `address` is not a host name or IP, or `port` not 1-65535.

    """
    grammar.port(str(port))
    if not address:
        return f":{port}"
    grammar.host(address)
    shown = f"[{ipaddress.ip_address(address)}]" if ":" in address else address
    return f"{shown}:{port}"


def render_drop_in(
    *, listen: str, threads: int, max_connections: int, openapi: Sequence[str]
) -> str:
    """Return the drop-in's text: user, configless config, auth plugin, listen address, limits.

    Raises:
        ValueError: A value is out of range or breaks Slurm's grammar.

    """
    grammar.token(listen)
    if not MIN_THREADS <= threads <= MAX_THREADS:
        raise ValueError(f"threads {threads} is not between {MIN_THREADS} and {MAX_THREADS}")
    if not MIN_CONNECTIONS <= max_connections <= MAX_CONNECTIONS:
        raise ValueError(
            f"max-connections {max_connections} is not between "
            f"{MIN_CONNECTIONS} and {MAX_CONNECTIONS}"
        )
    for plugin in openapi:
        grammar.NAMES(plugin.replace("/", "_"))
    argv = [
        "/usr/sbin/slurmrestd",
        "-a",
        "rest_auth/jwt",
        "-s",
        ",".join(openapi),
        "-t",
        str(threads),
        "--max-connections",
        str(max_connections),
        listen,
    ]
    return (
        "# Written by the slurmrestd charm; changes are overwritten.\n"
        "[Unit]\n"
        "After=sackd.service\n"
        "Requires=sackd.service\n"
        "ConditionPathExists=\n"
        "\n"
        "[Service]\n"
        f"User={REST_USER}\n"
        f"Group={REST_USER}\n"
        f"Environment=SLURM_CONF=/{CACHED_CONF}\n"
        "Environment=SLURM_JWT=daemon\n"
        "ExecStart=\n"
        f"ExecStart={' '.join(systemd.exec_escape(word) for word in argv)}\n"
    )
