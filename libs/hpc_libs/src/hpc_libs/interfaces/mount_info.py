r"""The `mount_info` integration: a principal asks the `filesystem-client` subordinate for a mount.

The wire contract is the published filesystem-client charm's (charmed-hpc/filesystem-charms,
`charms.filesystem_client.v0.mount_info`). The subordinate *requires* `mount` (container
scope); the principal (here slurmctld) *provides* it:

* The principal's leader writes its **application** databag, each value JSON-encoded as
  `ops.Relation.save` does: `mountpoint` is a JSON string, quotes included
  (`"\"/var/lib/slurm/checkpoint\""`); `noexec`, `nosuid`, `nodev` and `read_only` are
  `"true"` or `"false"`. All five keys are always written, like the published library does.
* The subordinate unit on the same machine answers in its **unit** databag
  `mounted: "true"` once it set the mount up (an autofs map: the filesystem is mounted on
  first access) or `"false"` while it is blocked.

`mounted: "true"` is the subordinate's word, not a fact about this machine: a charm checks the
mount itself with `hpc_libs.machine.mounts.check_mount` before it trusts the path.
"""

import logging
import posixpath
import re

import ops
from pydantic import StrictBool, field_validator

from hpc_libs.interfaces.base import DatabagModel, Interface

logger = logging.getLogger(__name__)

MOUNT_ENDPOINT = "mount"
"""The principal's endpoint name, as the filesystem-client charm names its side."""

# Characters that would break the subordinate's autofs map line or a mount command.
_BAD_PATH_CHARS = re.compile(r"[\s\x00-\x1f\x7f\\#'\"]")
_MAX_PATH = 4096


class MountInfo(DatabagModel):
    """The principal's application databag: where and how to mount the shared filesystem."""

    mountpoint: str | None = None
    noexec: StrictBool = False
    nosuid: StrictBool = False
    nodev: StrictBool = False
    read_only: StrictBool = False

    @field_validator("mountpoint")
    @classmethod
    def _valid_mountpoint(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.startswith("/") or value == "/":
            raise ValueError(f"{value!r} is not an absolute path below /")
        if len(value) > _MAX_PATH or _BAD_PATH_CHARS.search(value):
            raise ValueError(f"{value!r} holds whitespace, a quote, '#' or a control character")
        if posixpath.normpath(value) != value:
            raise ValueError(f"{value!r} is not a normalized path")
        return value


class MountState(DatabagModel):
    """The subordinate's unit databag: `mounted` is `"true"` or `"false"`.

    Juju's own keys in the unit databag (`ingress-address`, ...) are not fields, so they are
    never decoded.
    """

    mounted: StrictBool | None = None


class MountDisconnectedEvent(ops.RelationEvent):
    """The integration with the filesystem-client is gone (relation-broken)."""


class MountInfoProviderEvents(ops.ObjectEvents):
    """Events of `MountInfoProvider`."""

    mount_disconnected = ops.EventSource(MountDisconnectedEvent)


class MountInfoProvider(Interface):
    """The principal's side of `mount_info`, on its `mount` endpoint (container scope).

    Emits `mount_disconnected` when the integration is gone; the charm reconciles on the
    relation's own events otherwise (created: publish; changed: the subordinate's answer).
    """

    on = MountInfoProviderEvents()  # pyright: ignore[reportIncompatibleMethodOverride, reportAssignmentType]

    def __init__(self, charm: ops.CharmBase, endpoint: str = MOUNT_ENDPOINT) -> None:
        super().__init__(charm, endpoint)
        events = charm.on[endpoint]
        self.framework.observe(events.relation_broken, self._on_relation_broken)

    def _on_relation_broken(self, event: ops.RelationBrokenEvent) -> None:
        self.on.mount_disconnected.emit(event.relation, app=event.app, unit=event.unit)

    def publish(self, info: MountInfo) -> bool:
        """Write `info` into every `mount` relation (leader only); return whether one changed.

        Idempotent: a databag already holding `info` is not rewritten.

        Raises:
            ValueError: `info` has no mountpoint (the subordinate would ignore the request).

        """
        if info.mountpoint is None:
            raise ValueError("a mount request needs a mountpoint")
        changed = False
        for relation in self.relations:
            changed = self.save(info, relation, self.model.app) or changed
        return changed

    def requested(self, relation: ops.Relation) -> MountInfo | None:
        """Return what this application asked for in `relation`; None if nothing valid is there."""
        info = self.load(MountInfo, relation, self.model.app)
        return info if info is not None and info.mountpoint else None

    def answers(self) -> list[bool]:
        """Return the valid `mounted` answers of the filesystem-client units (on this machine).

        Invalid answers are logged and skipped; a unit that has not answered is not listed.
        """
        found: list[bool] = []
        for relation in self.relations:
            for unit in relation.units:
                state = self.load(MountState, relation, unit)
                if state is not None and state.mounted is not None:
                    found.append(state.mounted)
        return found
