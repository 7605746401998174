"""The compute node daemon, run as a dynamic node (`slurmd -Z`) in configless mode.

How the start options reach slurmd
----------------------------------
The packaged unit runs `slurmd --systemd $SLURMD_OPTIONS`. systemd splits an unbraced
`$VAR` at whitespace without honoring quotes, so `--conf "CPUs=2 RealMemory=1000"` cannot
travel inside SLURMD_OPTIONS as one argument. systemd.service(5) expands `${VAR}` standing
as a word of its own to exactly one argument, whitespace included. So a static drop-in
(written once, see `START_OVERRIDE`) runs::

    /usr/sbin/slurmd --systemd -Z $SLURMD_OPTIONS --conf ${SLURMD_CONF}

and /etc/default/slurmd carries `SLURMD_OPTIONS="-N <node> --conf-server a:6817,b:6817"`
and `SLURMD_CONF="<node configuration>"`. Changing either needs only a restart, no
daemon-reload.

How slurmd stops
----------------
On SIGTERM slurmd logs "Caught SIGTERM. Shutting down." and then waits, with no bound of
its own (`PrologEpilogTimeout` unset), for every request it is serving: a health check
program still running (slurmd runs it at start and every `HealthCheckInterval`), a prolog,
a request it is still answering. Meanwhile it does not exit, and systemd's default stop
timeout (90 s) held every stop, restart and reboot of the machine. The drop-in bounds the
stop (`TimeoutStopSec`); systemd then kills slurmd alone (the packaged `KillMode=process`),
so running job steps go on and the next slurmd finds them.

On `scontrol reconfigure` slurmd re-executes: the new process is the old one's grandchild,
and the old one tells systemd the new main PID before it exits. Seen on the lab (Slurm
24.11.5): the old process stayed, waiting for its fork child, which hung on its way out;
systemd went on holding it as the main process, the real slurmd ran untracked, the next
stop killed the old process alone (`KillMode=process`) and every start after it failed
("Unable to bind listen port (6818): Address already in use"), a stop in the middle of a
reconfigure leaves the same. So the drop-in's `ExecStopPost` runs `programs/reap_leftovers.py`
(installed root-owned as `REAPER`): once the unit stopped, it kills the unit's processes
still running root's slurmd; job steps (slurmstepd) are never touched.
"""

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from slurmutils import Node

from hpc_libs.errors import SlurmOpsError
from hpc_libs.machine import apt, files, host, systemd
from hpc_libs.slurm import gpu, grammar, parameters
from hpc_libs.slurm.base import SlurmManager, conf_server_option
from hpc_libs.slurm.upgrade import DebSource

logger = logging.getLogger(__name__)

REAPER = "/usr/local/sbin/hpc-libs-reap-leftovers"
"""Where the manager installs `programs/reap_leftovers.py`, root-owned: the drop-in's
`ExecStopPost` runs it."""
REAPER_SOURCE = Path(__file__).parent / "programs/reap_leftovers.py"
START_OVERRIDE_NAME = "10-hpc-libs-dynamic-node"
START_OVERRIDE = """\
# Written by the Slurm charms: run slurmd as a dynamic node (-Z).
# ${SLURMD_CONF} stands alone, so systemd passes it as ONE argument with its spaces;
# $SLURMD_OPTIONS is split at whitespace.
[Service]
Type=notify
EnvironmentFile=-/etc/default/slurmd
ExecStart=
ExecStart=/usr/sbin/slurmd --systemd -Z $SLURMD_OPTIONS --conf ${SLURMD_CONF}
# slurmd acts on SIGTERM only once the work it is doing ends (a health check, a prolog):
# bound the stop. Past it systemd kills slurmd alone (the packaged KillMode=process): job
# steps run on, and the next slurmd finds them.
TimeoutStopSec=10
# A slurmd systemd lost track of (a reconfigure's new process, announced to systemd by an old
# one that hung or was stopped first) would hold slurmd's port and fail every next start:
# once the unit stopped, kill the unit's processes still running slurmd (never job steps).
ExecStopPost=/usr/bin/python3 /usr/local/sbin/hpc-libs-reap-leftovers /usr/sbin/slurmd
"""

HARDWARE_KEYS = (
    "CPUs",
    "Boards",
    "SocketsPerBoard",
    "CoresPerSocket",
    "ThreadsPerCore",
    "RealMemory",
)
"""The `slurmd -C` fields that describe a node's hardware."""
DETECT_TIMEOUT = 60.0
"""Seconds `slurmd -C` may take (hwloc topology and the GPU plugins)."""
NODE_LINE = parameters.Policy(Node)
"""A node line the charms render or read from Slurm (detected hardware): node keys, no owner."""
_MAX_DIGITS = 20
"""Longest hardware field read (uint64's 20 digits); a longer one is refused unread."""


class SlurmdManager(SlurmManager):
    """slurmd: packages, service, slurm.key, start options and hardware detection."""

    daemon = "slurmd"
    packages = ("slurmd", "slurm-client", "dbus")
    """dbus: under cgroup v2 slurmd asks systemd, over the system bus, for slurmstepd's scope;
    without a bus it stops at start ("systemd scope for slurmstepd could not be created").
    Debian's images have dbus, Ubuntu's minimal and some cloud images do not."""
    system_bus = systemd.Service("dbus")

    def install(self, source: str | DebSource = "auto", *, upgrade: bool = False) -> bool:
        """Install the packages (`SlurmManager.install`); start the system bus if it was new.

        dbus installed on a running machine is not started before the next boot (its socket
        is wanted by sockets.target, nothing starts it at install: seen on a lab VM whose
        image lacks it), and slurmd would not start until then.

        Raises:
            PackageError: The repository or the packages could not be installed.
            ServiceError: The system bus did not start.

        """
        new_bus = bool(apt.missing(("dbus",)))
        ran = super().install(source, upgrade=upgrade)
        if new_bus:
            self.system_bus.start()
        return ran

    def set_start_options(
        self, nodename: str, conf_servers: Sequence[str], node_conf: str
    ) -> bool:
        """Configure how slurmd starts; return whether anything changed (restart if so).

        Args:
            nodename: The dynamic node's name (`-N`).
            conf_servers: Controllers (`host` or `host:port`), primary first.
            node_conf: The node's configuration for `--conf` (see `merge_node`).

        Raises:
            ValueError: An argument is empty.
            ConfigError: `node_conf` holds a character that cannot be carried (quote, ...).

        """
        if not nodename or not conf_servers or not node_conf.strip():
            raise ValueError("slurmd needs a node name, a controller and a node configuration")
        files.write_if_changed(  # the stop runs it: a new copy needs no restart
            self.root / REAPER.lstrip("/"), REAPER_SOURCE.read_bytes(), mode=0o755
        )
        override_changed = systemd.write_override(
            self.daemon, START_OVERRIDE_NAME, START_OVERRIDE, root=self.root
        )
        if override_changed:
            systemd.reload_for(self.daemon)
        options_changed = self.options.write(
            {
                self.options_variable: (
                    f"-N {nodename} --conf-server {conf_server_option(conf_servers)}"
                ),
                "SLURMD_CONF": node_conf,
            }
        )
        return override_changed or options_changed

    def detect_hardware(self) -> dict[str, int | str]:
        """Return the node's hardware from `slurmd -C`, with `Gres` when Slurm finds GPUs.

        Slurm's own GPU detection (see `hpc_libs.slurm.gpu`). The charm calls it at install,
        start and upgrade, and when the operator asks, not on every event.

        Raises:
            SlurmOpsError: `slurmd -C` failed, timed out or printed none of the expected
                fields.
            GpuDriverError: The NVIDIA driver is loaded but Slurm found no GPU.

        """
        output = host.run(["slurmd", "-C"], timeout=DETECT_TIMEOUT).stdout
        try:
            hardware = parse_slurmd_c(output)
        except ValueError as e:
            raise SlurmOpsError(f"`slurmd -C` printed {e}") from None
        if not hardware:
            raise SlurmOpsError(f"cannot parse `slurmd -C` output: {output!r}")
        if gres := gpu.check_detected(gpu.gres_from_slurmd_c(output), self.root):
            hardware["Gres"] = gres
        return hardware

    def running_jobs(self) -> list[int] | None:
        """Return the ids of the jobs a job step runs for on this machine, sorted.

        None when a step runs whose job id cannot be read yet (a slurmstepd that has not set
        its title). What runs, not what `scontrol listjobs` says: listjobs lists the step
        sockets in slurmd's spool directory, and a step killed with its machine (a power
        cut, a reboot) leaves its socket there. slurmd removes such a socket only when it
        connects to it and finds it 10 minutes old (Slurm's `_handle_stray_socket`), so a
        departing node waited minutes for jobs that were gone.

        A step is a process of root's whose name is `slurmstepd` (a user can give a process
        of their own that name, not root's uid) and whose title is the one slurmstepd sets
        itself, `slurmstepd: [<job>.<step>]`: a step id, no user text.

        Raises:
            SlurmOpsError: /proc cannot be listed.

        """
        proc = self.root / "proc"
        try:
            pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
        except OSError as e:
            raise SlurmOpsError(f"cannot list the processes in {proc}: {e}") from e
        titles = [title for pid in pids if (title := _stepd_title(proc / pid)) is not None]
        steps = [STEPD_TITLE.fullmatch(title.rstrip()) for title in titles]
        if not all(steps):
            return None
        return sorted({int(step.group(1)) for step in steps if step})


STEPD_TITLE = re.compile(r"slurmstepd: \[(\d+)(?:\.\w+(?:\+\d+)?)?(?: stepmgr)?\]")
"""The title a slurmstepd gives itself once it knows its step: `slurmstepd: [1234.batch]`
(Slurm's `log_build_step_id_str`: `<job>`, `<job>.<step>` or `<job>.<step>+<component>`)."""


def _stepd_title(process: Path) -> str | None:
    """Return the title of process `process` (a /proc entry) if it is root's slurmstepd.

    None for any other process, and for one that ended while it was read.
    """
    try:
        if (process / "comm").read_text().strip() != "slurmstepd":
            return None
        if _real_uid(process / "status") != 0:
            return None
        return (process / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def _real_uid(status: Path) -> int | None:
    """Return the real uid on the `Uid:` line of a /proc status file."""
    for line in status.read_text().splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return None


def parse_slurmd_c(output: str) -> dict[str, int | str]:
    """Return the hardware fields of the first line of `slurmd -C` output, as integers.

    Each field is checked with the rule the node's `--conf` line gets (`grammar.NODE`), so
    garbled output (`CPUs=²`, a 5,000-digit value, `CPUs=70000`) is a detection error.

    Raises:
        ValueError: A hardware field breaks Slurm's grammar (the message names it).

    """
    first_line = output.strip().splitlines()[0] if output.strip() else ""
    fields = dict(token.split("=", 1) for token in first_line.split() if "=" in token)
    hardware: dict[str, int | str] = {}
    for key in HARDWARE_KEYS:
        if (value := fields.get(key)) is not None:
            if len(value) > _MAX_DIGITS:
                raise ValueError(f"invalid {key}: a value of {len(value)} characters")
            grammar.check_value(Node, key, value)
            hardware[key] = int(value)
    return hardware


def merge_node(hardware: Mapping[str, int | str], feature: str, admin: Node) -> Node:
    """Merge detected hardware, the partition feature and the admin's parsed node fields.

    The admin's keys override detected ones; `Features` is the union of `feature` and the
    admin's features, so the node always joins its partition's NodeSet.

    Raises:
        ConfigError: A detected value breaks Slurm's grammar.

    """
    detected = parameters.parse(NODE_LINE, " ".join(f"{k}={v}" for k, v in hardware.items()))
    features = [feature, *(f for f in admin.features or [] if f != feature)]
    merged = detected | admin.dict() | {"features": features}
    return Node.from_dict(merged)
