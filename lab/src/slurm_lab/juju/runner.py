"""Run one hook of a charm in its unit's machine the way Juju's unit agent does.

The charm is unpacked into `/var/lib/juju/agents/unit-<app>-<n>/charm` (once per charm
revision; `.unit-state.db`, ops' SQLite store, stays across hooks and upgrades as on Juju) and
`<charm dir>/dispatch` runs there with the environment Juju gives a hook: `JUJU_DISPATCH_PATH`,
`JUJU_HOOK_NAME`, `JUJU_UNIT_NAME`, `JUJU_MODEL_NAME`, `JUJU_MODEL_UUID`, `JUJU_CHARM_DIR`,
`JUJU_VERSION`, `JUJU_CONTEXT_ID`, `JUJU_AGENT_SOCKET_*`, the relation, remote unit and app,
departing unit, action and secret variables. `ops.main` then calls the hook tools on PATH
(`/var/lib/juju/tools/unit-<app>-<n>/`): links to a bash client that asks the hook's tool
server (`jujuc.py --serve`, started before dispatch), which answers from the hook context file
this module writes before the hook (the unit's view, built by the engine) and reads back after.

`charm_source` decides what a unit runs: the `.charm` charmcraft packed for the lab's suite
(`charms.packed_charm`), unpacked as is; nothing of the lab is added to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any, Protocol

from slurm_lab.errors import LabError
from slurm_lab.juju import charms, jujuc

JsonDict = dict[str, Any]

JUJU_VERSION = "3.6.12"
UNIT_AGENT_DIR = "/var/lib/juju/agents"
TOOLS_DIR = "/var/lib/juju/tools"
TOOLS_SHIPPED = "_tools"
TOOLS_STAMP = ".stamp"
"""In the shipped tools and each unit's copy: the digest of the tools (`install_tools`)."""
CONTEXT_DIR = "lab-context"
REVISION_SUFFIX = ".revision"
"""Beside the unpacked charm (host) and the unit's charm dir (machine): the pack it came from."""
TAR_SUFFIX = ".tar"
"""Beside the unpacked charm (host): the same files in one tar, which VMs unpack."""
LOCAL_CHARMS_DIR = "/var/lib/lab-charms"
"""On a VM: where each unit's charm dir lies on the VM's disk (bound over `charm_dir`)."""
SOCKET_DIR = "/run/lab-hook-tools"
"""The hook tool servers' sockets, root only: `<SOCKET_DIR>/<context file's stem>.sock`.

On the machine's own /run, not beside the hook context: a VM's context dir is on 9p
(`/var/lib/juju`), where a unix socket cannot be bound (ENXIO: qemu's 9p server refuses
special files), and every hook tool call of a VM unit failed ("cannot reach the hook's tool
server")."""
MACHINE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class MachineLike(Protocol):
    """What a hook needs from a lab machine."""

    name: str
    address: str

    def exec(
        self,
        argv: list[str],
        *,
        input: str | None = None,
        timeout: float | None = 120,
        env: dict[str, str] | None = None,
        check: bool = False,
    ) -> subprocess.CompletedProcess[str]:
        """Run argv inside the machine."""
        ...


def unit_dir(unit: str) -> str:
    """Return the unit agent's directory: /var/lib/juju/agents/unit-<app>-<n>."""
    app, number = unit.split("/")
    return f"{UNIT_AGENT_DIR}/unit-{app}-{number}"


def charm_dir(unit: str) -> str:
    """Where Juju unpacks the unit's charm."""
    return f"{unit_dir(unit)}/charm"


def tools_dir(unit: str) -> str:
    """Where Juju puts the unit's hook tools (first on a hook's PATH)."""
    app, number = unit.split("/")
    return f"{TOOLS_DIR}/unit-{app}-{number}"


# --- the packed charm ------------------------------------------------------------------------


def charm_source(charm_path: Path, app: str, charms_dir: Path, suite: str) -> Path:
    """Unpack the app's .charm, packed by charmcraft for the lab's suite, where units copy it.

    `charms.packed_charm` returns the cached pack, or packs the charm (a pack that fails
    raises LabError: a unit never runs anything but charmcraft's output). The charm's
    revision (the pack's name, which holds its content hash) is written beside it, outside
    the charm, so a unit copies a charm again only when it changed; and the unpacked charm
    as one tar file (`TAR_SUFFIX`), which a VM reads over 9p in one go (its 1200 files one by
    one took two minutes).
    """
    packed = charms.packed_charm(charm_path, suite)
    dest = charms_dir / app
    if dest.exists():
        shutil.rmtree(dest)
    charms.unpack_charm(packed, dest)
    with tarfile.open(charms_dir / f"{app}{TAR_SUFFIX}", "w") as archive:
        archive.add(dest, arcname=".")
    (charms_dir / f"{app}{REVISION_SUFFIX}").write_text(packed.name + "\n")
    return dest


def install_tools(charms_dir: Path) -> Path:
    """Ship the hook tools to charms_dir as a unit's tool directory holds them.

    The client, jujuc.py and the port rules it imports, a link to the client under every
    tool name (`jujuc.TOOLS`), and `TOOLS_STAMP`, a digest of them all: a unit copies the
    directory in one `cp` (`prelude`) when its stamp differs.
    """
    dest_dir = charms_dir / TOOLS_SHIPPED
    shipped = {  # name in the tool dir: (source beside this module, mode)
        jujuc.CLIENT: ("jujuc.sh", 0o755),
        "jujuc.py": ("jujuc.py", 0o755),
        "hooktools.py": ("hooktools.py", 0o644),
    }
    digest = hashlib.sha256(" ".join(jujuc.TOOLS).encode())
    for name, (source, _) in sorted(shipped.items()):
        digest.update(f"\0{name}\0".encode() + Path(__file__).with_name(source).read_bytes())
    stamp = dest_dir / TOOLS_STAMP
    if stamp.is_file() and stamp.read_text().strip() == digest.hexdigest():
        return dest_dir
    dest_dir.mkdir(parents=True, exist_ok=True)
    for name, (source, mode) in shipped.items():
        shutil.copyfile(Path(__file__).with_name(source), dest_dir / name)
        (dest_dir / name).chmod(mode)
    for name in jujuc.TOOLS:
        link = dest_dir / name
        if not link.is_symlink():
            link.symlink_to(jujuc.CLIENT)
    stamp.write_text(digest.hexdigest() + "\n")
    return dest_dir


def prelude(unit: str, app: str, charms_mount: str) -> str:
    """Shell that unpacks the app's charm and installs the hook tools when they changed.

    The tools are installed as a whole (a copy renamed over the old directory), so a hook
    never sees half of them. The charm's revision stamp goes before its old copy and comes
    back after the new one, so an interrupted copy is made again; a missing source (its mount
    gone while the machine shuts down) fails the command and leaves the charm alone (CI23:
    a `juju exec` during a reboot emptied half the charm dir, and every hook after the boot
    failed). On a VM, whose /var/lib/juju is the host's 9p share, the charm
    dir is a directory of the VM's own disk (`LOCAL_CHARMS_DIR`) bound over its place, as
    Juju unpacks a charm onto the machine's disk: Python importing the charm's venv over 9p
    made every hook 23-37 s.
    """
    source = f"{charms_mount}/{app}"
    shipped = f"{charms_mount}/{TOOLS_SHIPPED}"
    charm, tools = charm_dir(unit), tools_dir(unit)
    on_disk = f"{LOCAL_CHARMS_DIR}/{unit_dir(unit).rsplit('/', 1)[1]}"
    return f"""set -e
charm={shlex.quote(charm)} source={shlex.quote(source)} tools={shlex.quote(tools)}
shipped={shlex.quote(shipped)} on_disk={shlex.quote(on_disk)}
vm=
if grep -q "^[^ ]* /var/lib/juju 9p " /proc/mounts; then
  vm=1
  if ! mountpoint -q "$charm"; then
    mkdir -p "$on_disk" "$charm"
    mount --bind "$on_disk" "$charm"
    [ -e "$charm/dispatch" ] || rm -f "$charm{REVISION_SUFFIX}"
  fi
fi
if [ ! -e "$source{REVISION_SUFFIX}" ]; then
  echo "no charm at $source: the charms' mount is gone (the machine is going down?)" >&2
  exit 1
fi
if ! cmp -s "$source{REVISION_SUFFIX}" "$charm{REVISION_SUFFIX}"; then
  rm -f "$charm{REVISION_SUFFIX}"
  mkdir -p "$charm"
  find "$charm" -mindepth 1 -maxdepth 1 ! -name .unit-state.db -exec rm -rf {{}} +
  if [ -n "$vm" ]; then
    tar -xf "$source{TAR_SUFFIX}" -C "$charm"
  else
    cp -R --preserve=mode,timestamps "$source/." "$charm/"
  fi
  cp "$source{REVISION_SUFFIX}" "$charm{REVISION_SUFFIX}"
fi
if ! cmp -s "$shipped/{TOOLS_STAMP}" "$tools/{TOOLS_STAMP}"; then
  rm -rf "$tools.new" "$tools.old"
  mkdir -p "${{tools%/*}}"
  cp -R --preserve=mode "$shipped" "$tools.new"
  if [ -e "$tools" ]; then mv "$tools" "$tools.old"; fi
  mv "$tools.new" "$tools"
  rm -rf "$tools.old"
fi
"""


#: Starts the hook's tool server (`jujuc.serve`) beside the hook; the token is the kernel's
#: random UUID (read by the shell itself), handed to the server and the tools in the environment.
#: The server's unix socket is named by the context file (unit and random part of the context
#: id) in SOCKET_DIR (root only), short enough for a socket's path (at most 107 bytes).
SERVE_TOOLS = f"""read -r {jujuc.TOKEN_ENV} < /proc/sys/kernel/random/uuid
mkdir -p -m 700 {SOCKET_DIR}
lab_context=${{{jujuc.CONTEXT_ENV}##*/}}
{jujuc.SOCKET_ENV}="{SOCKET_DIR}/${{lab_context%.json}}.sock"
export {jujuc.TOKEN_ENV} {jujuc.SOCKET_ENV}
/usr/bin/python3 -SE "$tools/jujuc.py" {jujuc.SERVE_FLAG} $$ </dev/null >/dev/null 2>&1 &
"""


# --- one hook ----------------------------------------------------------------------------------


def hook_env(
    unit: str, model: JsonDict, hook: JsonDict, context_id: str, context_path: str
) -> dict[str, str]:
    """Return the environment Juju 3.6 gives a hook (or action, or juju-exec command)."""
    env = {
        "PATH": f"{tools_dir(unit)}:{MACHINE_PATH}",
        "JUJU_UNIT_NAME": unit,
        "JUJU_MODEL_NAME": model["name"],
        "JUJU_MODEL_UUID": model["uuid"],
        "JUJU_VERSION": JUJU_VERSION,
        "JUJU_CHARM_DIR": charm_dir(unit),
        "CHARM_DIR": charm_dir(unit),
        "JUJU_CONTEXT_ID": context_id,
        "JUJU_AGENT_SOCKET_ADDRESS": f"@{unit_dir(unit)}/agent.socket",
        "JUJU_AGENT_SOCKET_NETWORK": "unix",
        "JUJU_MACHINE_ID": str(model["machine_id"]),
        "JUJU_AVAILABILITY_ZONE": "",
        jujuc.CONTEXT_ENV: context_path,
    }
    if model.get("principal"):
        env["JUJU_PRINCIPAL_UNIT"] = model["principal"]
    env.update({k: str(v) for k, v in hook.items() if v is not None})
    return {k: v for k, v in env.items() if v != ""}


class HookRun:
    """One hook (or action, or juju-exec command) in a unit's machine, its context and result."""

    def __init__(
        self,
        unit: str,
        app: str,
        view: JsonDict,
        hook_vars: dict[str, str | None],
        *,
        name: str,
        command: str | None = None,
    ) -> None:
        self.name = name
        self.unit = unit
        self.app = app
        self.view = view
        self.context_id = f"{unit}-{secrets.token_hex(6)}"
        self.view["context_id"] = self.context_id
        self.context_path = (
            f"{unit_dir(unit)}/{CONTEXT_DIR}/{self.context_id.replace('/', '-')}.json"
        )
        self.hook_vars = hook_vars
        self.command = command

    def write_context(self, host_path: Path) -> None:
        """Write the context where the machine's tools read it (root only: it holds secrets)."""
        host_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(host_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(self.view, handle)

    def argv(self, charms_mount: str, serve_tools: bool = True) -> list[str]:
        """Return what the machine runs: unpack if needed, then dispatch (or the command).

        With `serve_tools` one server answers the hook's tool calls (`jujuc.serve`), started
        beside the charm (the first call waits for it if it has to); without,
        each call starts Python (the runtime before the server, kept for bench-lab's
        comparison). Either way the hook (or command) is this shell's process: the server
        goes when it does.
        """
        body = self.command if self.command is not None else "exec ./dispatch"
        serve = SERVE_TOOLS if serve_tools else ""
        script = (
            prelude(self.unit, self.app, charms_mount)
            + serve
            + f'cd "$JUJU_CHARM_DIR"\nset +e\n{body}\n'
        )
        return ["/bin/sh", "-c", script]

    def env(self) -> dict[str, str]:
        """Return the hook's environment."""
        model = {
            **self.view["model"],
            "machine_id": self.view["machine_id"],
            "principal": self.view.get("principal"),
        }
        return hook_env(self.unit, model, dict(self.hook_vars), self.context_id, self.context_path)


def read_context(host_path: Path) -> JsonDict | None:
    """Read a context back (None if it is gone or unreadable), and remove it."""
    try:
        data: JsonDict = json.loads(host_path.read_text())
    except (OSError, ValueError):
        return None
    for path in (
        host_path,
        Path(f"{host_path.parent}/.{host_path.name}.lock"),
    ):
        with contextlib.suppress(OSError):
            path.unlink()
    return data


def execute(
    run: HookRun,
    machine: MachineLike,
    host_path: Path,
    charms_mount: str,
    timeout: float,
    *,
    serve_tools: bool = True,
) -> JsonDict:
    """Run the hook; return the response the engine applies.

    ok is whether the process exited 0; context is the hook context as the tools left it
    (None if unreadable); stdout/stderr are the process's output.
    """
    run.write_context(host_path)
    started = time.monotonic()
    try:
        result = machine.exec(run.argv(charms_mount, serve_tools), env=run.env(), timeout=timeout)
    except LabError as e:
        read_context(host_path)
        return {
            "ok": False,
            "code": 1,
            "error": str(e),
            "stdout": "",
            "stderr": str(e),
            "context": None,
            "elapsed": time.monotonic() - started,
            "lab_error": True,
        }
    context = read_context(host_path)
    ok = result.returncode == 0
    error = None if ok else (result.stderr.strip() or f"exit status {result.returncode}")
    return {
        "ok": ok,
        "code": result.returncode,
        "error": error,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "context": context,
        "elapsed": time.monotonic() - started,
    }
