"""A stand-in for the `filesystem-client` subordinate charm, implemented by the backend itself.

The real charm (charmed-hpc/filesystem-charms) mounts a shared filesystem it learns about over
`filesystem` (interface filesystem_info) at the mountpoint its principal asks for over the
container-scoped `mount` endpoint (interface mount_info). The stand-in speaks the same wire
contract (`hpc_libs.interfaces.mount_info` is the principal's side):

* it reads the principal's app databag as the real charm's library does, `json.loads` per key:
  `mountpoint` must be a JSON string (an unquoted path is refused, as the real charm's
  `json.loads` would), `noexec`, `nosuid`, `nodev`, `read_only` JSON booleans;
* each stand-in unit answers in its unit databag `mounted: "true"` once mounted, and
  `"false"` for any blocking condition (bad request, several principals, a failed mount).

The "shared filesystem" is one host directory per stand-in application,
`lab.shared_dir/<app>`, which every machine sees at `/lab/shared/<app>`: every machine related
to the same stand-in application gets the same directory. Mounting is a bind mount made by a
systemd mount unit inside the principal's machine, enabled at boot, so the mount is back
before any daemon starts after a power cycle (the real charm's autofs map survives reboots).
"""

from __future__ import annotations

import json
import logging
import posixpath
from typing import Any

from slurm_lab.juju import lifecycle
from slurm_lab.juju.engine import Controller
from slurm_lab.juju.model import App, JsonDict, Relation, StatusValue, Unit

logger = logging.getLogger(__name__)

SHARED_MOUNT = "/lab/shared"


class FilesystemClient:
    """Hooks of the filesystem-client stand-in."""

    KIND = "filesystem-client"
    ENDPOINTS: dict[str, tuple[str, dict[str, Any]]] = {  # noqa: RUF012
        "mount": ("requirer", {"interface": "mount_info", "scope": "container"}),
        "filesystem": ("requirer", {"interface": "filesystem_info", "limit": 1}),
        "juju-info": ("requirer", {"interface": "juju-info", "scope": "container"}),
    }

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    @classmethod
    def new_app(cls, name: str, config: Any) -> App:
        """Build the stand-in application record."""
        return App(
            name=name,
            charm_dir="",
            charm_name=cls.KIND,
            kind=cls.KIND,
            subordinate=True,
            config=dict(config or {}),
        )

    def add_subordinate_units(self, rel: Relation, principals: list[Unit] | None = None) -> None:
        """Give each principal unit of a container relation with the stand-in its own unit."""
        model = self.ctl.model
        if not any(e.scope == "container" for e in rel.endpoints):
            return
        sub_app = next(
            (model.apps[e.app] for e in rel.endpoints if model.apps[e.app].kind == self.KIND),
            None,
        )
        if sub_app is None:
            return
        principal_app = rel.other_app(sub_app.name)
        for principal in principals or model.app_units(principal_app):
            if any(model.units[u].principal == principal.name for u in sub_app.units):
                continue
            unit = Unit(
                name=f"{sub_app.name}/{sub_app.next_unit}",
                app=sub_app.name,
                machine=principal.machine,
                machine_id=principal.machine_id,
                address=principal.address,
                principal=principal.name,
                workload=StatusValue("waiting", "waiting for mount info"),
                agent="idle",
            )
            sub_app.next_unit += 1
            sub_app.units.append(unit.name)
            model.units[unit.name] = unit
            sub_app.leader = sub_app.leader or unit.name
            if principals is not None:
                self.ctl.enqueue_all(lifecycle.created(unit.name, rel))

    # --- hooks -----------------------------------------------------------------------------------

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        rel = self.ctl.model.relations.get(str(event.get("relation_id")))
        if rel is None or rel.endpoint_of(unit.app).endpoint != "mount":
            return
        if event["kind"] == "relation_changed":
            self._mount(unit, rel)
        elif event["kind"] == "relation_broken":
            self._unmount(unit, rel)

    def _requested(self, unit: Unit, rel: Relation) -> tuple[str, dict[str, bool]] | str | None:
        """Return the mountpoint and options asked for; None if none; a string: what is wrong."""
        data = rel.app_data.get(rel.other_app(unit.app), {})
        if not data.get("mountpoint"):
            return None
        return parse_mount_request(data)

    def _mount(self, unit: Unit, rel: Relation) -> None:
        mount_relations = [
            r
            for r in self.ctl.model.relations.values()
            if any(e.app == unit.app and e.endpoint == "mount" for e in r.endpoints)
        ]
        if len(mount_relations) > 1:
            self._block(unit, rel, "Cannot mount using more than one relation at the same time")
            return
        requested = self._requested(unit, rel)
        if requested is None:
            unit.workload = StatusValue(
                "waiting", "Waiting for mountpoint from `mount` integration"
            )
            return
        if isinstance(requested, str):
            self.ctl.log(unit, "ERROR", requested)
            self._block(unit, rel, requested)
            return
        mountpoint, options = requested
        source = f"{SHARED_MOUNT}/{unit.app}"
        (self.ctl.lab.shared_dir / unit.app).mkdir(parents=True, exist_ok=True)
        flags = ["bind"] + [name for name in ("noexec", "nosuid", "nodev") if options[name]]
        if options["read_only"]:
            flags.append("ro")
        machine = self.ctl.machine(unit)
        argv = ["sh", "-c", MOUNT_SCRIPT, "sh", source, mountpoint, ",".join(flags)]
        result = machine.exec(argv)
        if result.returncode != 0:
            self.ctl.log(unit, "ERROR", f"mount {source} at {mountpoint}: {result.stderr}")
            self._block(unit, rel, f"mount failed: {result.stderr.strip()}")
            return
        self.ctl.log(unit, "INFO", f"mounted {source} at {mountpoint}")
        unit.workload = StatusValue("active", f"Mounted filesystem at `{mountpoint}`")
        self._set_mounted(unit, rel, "true")

    def _block(self, unit: Unit, rel: Relation, message: str) -> None:
        unit.workload = StatusValue("blocked", message)
        self._set_mounted(unit, rel, "false")

    def _unmount(self, unit: Unit, rel: Relation) -> None:
        requested = self._requested(unit, rel)
        if isinstance(requested, tuple):
            mountpoint = requested[0]
            self.ctl.machine(unit).exec(["sh", "-c", UNMOUNT_SCRIPT, "sh", mountpoint])
            self.ctl.log(unit, "INFO", f"unmounted {mountpoint}")
        unit.workload = StatusValue("waiting", "waiting for mount info")

    def _set_mounted(self, unit: Unit, rel: Relation, value: str) -> None:
        bag = dict(rel.unit_data.get(unit.name, {}))
        if bag.get("mounted") == value:
            return
        bag["mounted"] = value
        rel.unit_data[unit.name] = bag
        for other in rel.members:
            if unit.name in rel.seen.get(other, []):
                self.ctl.enqueue(
                    other, "relation_changed", relation_id=rel.id, remote_unit=unit.name
                )


MOUNT_SCRIPT = """\
set -e
source=$1 mountpoint=$2 options=$3
mkdir -p "$mountpoint"
unit=$(systemd-escape --path --suffix=mount "$mountpoint")
printf '%s\\n' "# Written by the lab's filesystem-client stand-in." "[Unit]" \\
    "Description=Lab shared filesystem at $mountpoint" "[Mount]" "What=$source" \\
    "Where=$mountpoint" "Type=none" "Options=$options" "[Install]" \\
    "WantedBy=local-fs.target" > "/etc/systemd/system/$unit"
systemctl daemon-reload
systemctl enable --quiet "$unit"
mountpoint -q "$mountpoint" || systemctl start "$unit"
"""
"""Mount $1 at $2 with options $3 through a mount unit enabled at boot (idempotent)."""

UNMOUNT_SCRIPT = """\
unit=$(systemd-escape --path --suffix=mount "$1")
systemctl disable --now --quiet "$unit" 2>/dev/null
rm -f "/etc/systemd/system/$unit"
systemctl daemon-reload
if mountpoint -q "$1"; then umount "$1"; fi
true
"""
"""Undo `MOUNT_SCRIPT` for mountpoint $1."""

_OPTIONS = ("noexec", "nosuid", "nodev", "read_only")


def parse_mount_request(data: dict[str, str]) -> tuple[str, dict[str, bool]] | str:
    """Read a principal's request as the real charm does: `json.loads` of each key.

    Returns the mountpoint and the four options, or what is wrong (an unquoted mountpoint, a
    relative path, an option that is not a JSON boolean).
    """
    try:
        mountpoint = json.loads(data["mountpoint"])
        options = {name: json.loads(data.get(name) or "false") for name in _OPTIONS}
    except ValueError as e:
        return f"invalid mount info (not JSON): {e}"
    if not isinstance(mountpoint, str) or not mountpoint.startswith("/"):
        return f"invalid mount info: mountpoint {mountpoint!r} is not an absolute path"
    if mountpoint != posixpath.normpath(mountpoint) or any(c.isspace() for c in mountpoint):
        return f"invalid mount info: mountpoint {mountpoint!r} is not a plain path"
    if not all(isinstance(value, bool) for value in options.values()):
        return "invalid mount info: noexec/nosuid/nodev/read_only must be true or false"
    return mountpoint, options
