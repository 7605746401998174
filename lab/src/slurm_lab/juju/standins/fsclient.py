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
import posixpath
from typing import ClassVar

from slurm_lab.juju.model import JsonDict, Relation, StatusValue, Unit
from slurm_lab.juju.standins.base import Endpoints, SubordinateStandIn

SHARED_MOUNT = "/lab/shared"


class FilesystemClient(SubordinateStandIn):
    """Hooks of the filesystem-client stand-in."""

    KIND = "filesystem-client"
    WAITING = "waiting for mount info"
    ENDPOINTS: ClassVar[Endpoints] = {
        "mount": ("requirer", {"interface": "mount_info", "scope": "container"}),
        "filesystem": ("requirer", {"interface": "filesystem_info", "limit": 1}),
        "juju-info": ("requirer", {"interface": "juju-info", "scope": "container"}),
    }

    # --- hooks -----------------------------------------------------------------------------------

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        related = self.event_relation(unit, event)
        if related is None or related[1] != "mount":
            return
        rel = related[0]
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
            self._block(unit, rel, requested)
            return
        mountpoint, options = requested
        source = f"{SHARED_MOUNT}/{unit.app}"
        (self.ctl.lab.shared_dir / unit.app).mkdir(parents=True, exist_ok=True)
        flags = ["bind"] + [name for name in ("noexec", "nosuid", "nodev") if options[name]]
        if options["read_only"]:
            flags.append("ro")
        result = self.run(unit, "fs-mount.sh", source, mountpoint, ",".join(flags))
        if result.returncode != 0:
            message = f"mount failed: {result.stderr.strip()}"
            self._block(unit, rel, message, log=f"mount {source} at {mountpoint}: {result.stderr}")
            return
        self.ctl.log(unit, "INFO", f"mounted {source} at {mountpoint}")
        unit.workload = StatusValue("active", f"Mounted filesystem at `{mountpoint}`")
        self._set_mounted(unit, rel, "true")

    def _block(self, unit: Unit, rel: Relation, message: str, log: str | None = None) -> None:
        self.block(unit, message, log)
        self._set_mounted(unit, rel, "false")

    def _unmount(self, unit: Unit, rel: Relation) -> None:
        requested = self._requested(unit, rel)
        if isinstance(requested, tuple):
            mountpoint = requested[0]
            result = self.run(unit, "fs-unmount.sh", mountpoint)
            if result.returncode == 0:
                self.ctl.log(unit, "INFO", f"unmounted {mountpoint}")
            else:
                reason = result.stderr.strip() or "still mounted"
                self.ctl.log(unit, "WARNING", f"could not unmount {mountpoint}: {reason}")
        unit.workload = StatusValue("waiting", self.WAITING)

    def _set_mounted(self, unit: Unit, rel: Relation, value: str) -> None:
        self.publish_unit(unit, rel, {**rel.unit_data.get(unit.name, {}), "mounted": value})


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
