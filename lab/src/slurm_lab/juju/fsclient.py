"""A stand-in for the `filesystem-client` subordinate charm, implemented by the backend itself.

The real charm (charmed-hpc/filesystem-charms) mounts a shared filesystem it learns about over
`filesystem` (interface filesystem_info) at the mountpoint its principal asks for over the
container-scoped `mount` endpoint (interface mount_info): the principal's leader writes
`mountpoint` (and noexec/nosuid/nodev/read_only) JSON-encoded into its app databag, and each
client unit answers `mounted: "true"` in its unit databag once the filesystem is mounted.

Here the "shared filesystem" is a host directory, lab.shared_dir/<app>, which every machine sees
at /lab/shared/<app>; mounting means a bind mount of that path at the requested mountpoint
inside the principal unit's machine.
"""

from __future__ import annotations

import json
import logging
from typing import Any

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
                self.ctl.enqueue(unit.name, "relation_created", relation_id=rel.id)

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

    def _requested(self, unit: Unit, rel: Relation) -> tuple[str, dict[str, Any]] | None:
        data = rel.app_data.get(rel.other_app(unit.app), {})
        if not data.get("mountpoint"):
            return None
        decoded = {k: _json_or_str(v) for k, v in data.items()}
        return str(decoded["mountpoint"]), decoded

    def _mount(self, unit: Unit, rel: Relation) -> None:
        requested = self._requested(unit, rel)
        if requested is None:
            return
        mountpoint, options = requested
        source = f"{SHARED_MOUNT}/{unit.app}"
        (self.ctl.lab.shared_dir / unit.app).mkdir(parents=True, exist_ok=True)
        machine = self.ctl.machine(unit)
        script = (
            'set -e; mkdir -p "$2"; mountpoint -q "$2" || mount --bind "$1" "$2"; '
            'if [ "$3" = true ]; then mount -o remount,bind,ro "$2"; fi'
        )
        read_only = "true" if options.get("read_only") is True else "false"
        result = machine.exec(["sh", "-c", script, "sh", source, mountpoint, read_only])
        if result.returncode != 0:
            unit.workload = StatusValue("blocked", f"mount failed: {result.stderr.strip()}")
            self.ctl.log(unit, "ERROR", f"mount {source} at {mountpoint}: {result.stderr}")
            return
        self.ctl.log(unit, "INFO", f"mounted {source} at {mountpoint}")
        unit.workload = StatusValue("active", f"Mounted filesystem at `{mountpoint}`.")
        self._set_mounted(unit, rel, "true")

    def _unmount(self, unit: Unit, rel: Relation) -> None:
        requested = self._requested(unit, rel)
        if requested is not None:
            mountpoint = requested[0]
            machine = self.ctl.machine(unit)
            machine.exec(
                ["sh", "-c", 'mountpoint -q "$1" && umount "$1" || true', "sh", mountpoint]
            )
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


def _json_or_str(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value
