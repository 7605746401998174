"""Rotate the cluster's auth key (`rotate-auth-key`) while every daemon keeps talking.

auth/slurm (Slurm 24.05+) signs each message with a key and reads `slurm.jwks`, a key set,
instead of `slurm.key` when it exists (`src/plugins/auth/slurm/internal.c`): every key has an
id (`kid`), the one marked `"use": "default"` signs, and a message is checked with the key its
`kid` names (one without a `kid`, from a daemon still on slurm.key, with the default key).
Daemons read the keys only when they start (slurmctld, slurmd and sackd also when they
re-execute on a reconfigure). So a new key takes three revisions of the auth key secret, each
one loaded by every daemon before the next is published:

1. `introduce`: the old key (signing) and the new one: everyone accepts both;
2. `switch`: both, the new one signing: messages signed with either are accepted;
3. the new key alone: the old one is refused everywhere.

Any two neighbouring revisions understand each other, so no daemon loses its controller
while the others catch up. slurmstepd does not read the keys: it signs and checks through
its slurmd's kiosk (SACK) socket, so running jobs follow their slurmd.

The secret's `key` field holds the base64 of the key set document (of the raw key before the
first rotation), which `hpc_libs.slurm.base.KeyFile` writes to slurm.key and slurm.jwks. The
secret is the application's, so the rotation's progress survives a leader change: which
revision comes next follows from the key set itself (the key ids count up). Each daemon
confirms the key it runs with: consumer units in their relation databag
(`ControllerConsumer.confirm_auth_key`), backup controllers in their peer unit databag
(`auth_key_digest`). The leader publishes the next revision once every one of them
confirmed the current one.
"""

import base64
import binascii
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import ops
from facts import Facts
from hpc_libs.charm.base import SlurmCharm
from hpc_libs.interfaces.controller import (
    AUTH_KEY_FIELD,
    AUTH_KEY_LABEL,
    ControllerPublisher,
    auth_key_digest,
)

logger = logging.getLogger(__name__)

KID_PREFIX = "slurm-"
"""Key ids are `slurm-<generation>`; the key in use before the first rotation is `slurm-0`."""
ALGORITHM = "HS256"
KEY_TYPE = "oct"
DIGEST_FIELD = "auth_key_digest"
"""Peer unit databag field: the digest of the key a backup controller runs with."""


class RotationError(Exception):
    """The rotation cannot start now (the message says why)."""


@dataclass(frozen=True)
class SigningKey:
    """One key of the set: its id, the raw key as base64, and whether it signs."""

    kid: str
    key: str
    default: bool = False

    @property
    def generation(self) -> int:
        """The number in the key id (rotations count up from 0)."""
        return int(self.kid.removeprefix(KID_PREFIX))


def key_set(secret_key: str) -> list[SigningKey] | None:
    """Return the keys of the secret's `key` value; None for a plain key (never rotated).

    Raises:
        ValueError: The value is a key set this charm did not write.

    """
    try:
        document = json.loads(base64.b64decode(secret_key, validate=True))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(document, dict) or "keys" not in document:
        return None
    keys: list[SigningKey] = []
    for entry in cast(dict[str, Any], document)["keys"]:
        kid, key, use = entry.get("kid"), entry.get("k"), entry.get("use")
        if not isinstance(kid, str) or not kid.startswith(KID_PREFIX) or not isinstance(key, str):
            raise ValueError(f"unexpected key set entry with kid {kid!r}")
        if not kid.removeprefix(KID_PREFIX).isdigit():
            raise ValueError(f"unexpected key id {kid!r}")
        keys.append(SigningKey(kid, key, use == "default"))
    if sum(k.default for k in keys) != 1:
        raise ValueError("the key set must have exactly one signing key")
    return keys


def render(keys: list[SigningKey]) -> str:
    """Return the secret's `key` value for `keys`: base64 of the slurm.jwks document."""
    entries: list[dict[str, str]] = []
    for k in keys:
        entry = {"alg": ALGORITHM, "kty": KEY_TYPE, "kid": k.kid, "k": k.key}
        if k.default:
            entry["use"] = "default"
        entries.append(entry)
    document = json.dumps({"keys": entries}, indent=1) + "\n"
    return base64.b64encode(document.encode()).decode()


def start(secret_key: str, new_key: str) -> str:
    """Return the first revision of a rotation to `new_key` (base64): both keys, old signing.

    Raises:
        RotationError: A rotation is under way already.

    """
    keys = key_set(secret_key) or [SigningKey(f"{KID_PREFIX}0", secret_key, default=True)]
    if len(keys) != 1:
        raise RotationError(f"a rotation is under way already ({phase(secret_key)})")
    old = keys[0]
    return render([old, SigningKey(f"{KID_PREFIX}{old.generation + 1}", new_key)])


def next_step(secret_key: str) -> str | None:
    """Return the revision after `secret_key`; None when no rotation is under way."""
    keys = key_set(secret_key)
    if keys is None or len(keys) < 2:
        return None
    newest = max(keys, key=lambda k: k.generation)
    if not newest.default:
        return render([SigningKey(k.kid, k.key, k is newest) for k in keys])
    return render([newest])


def phase(secret_key: str) -> str | None:
    """Describe the rotation's current step; None when no rotation is under way."""
    keys = key_set(secret_key)
    if keys is None or len(keys) < 2:
        return None
    newest = max(keys, key=lambda k: k.generation)
    if newest.default:
        return f"signing with {newest.kid}, retiring the old key"
    return f"introducing {newest.kid}"


def current_kid(secret_key: str) -> str:
    """Return the id of the signing key (`slurm-0` for a plain key)."""
    keys = key_set(secret_key)
    if keys is None:
        return f"{KID_PREFIX}0"
    return next(k.kid for k in keys if k.default)


class AuthKeyRotation(ops.Object):
    """Drive a rotation from the leader's reconcile; wake it when a unit confirms a key.

    `publishers` are the controller's integrations whose units hold the key; `peer` is the
    peer endpoint, where backup controllers confirm theirs.
    """

    def __init__(
        self,
        charm: SlurmCharm[Any],
        publishers: list[ControllerPublisher],
        peer: str,
        wake: list[ops.BoundEvent],
    ) -> None:
        super().__init__(charm, "auth-key-rotation")
        self._charm = charm
        self._publishers = publishers
        self._peer = peer
        for event in wake:
            self.framework.observe(event, self._on_confirmation)

    def _on_confirmation(self, event: ops.RelationChangedEvent) -> None:
        """Go on with the rotation if a unit's new data confirms the current keys."""
        if event.unit is None or not self._charm.unit.is_leader():
            return
        if self._in_progress():
            self._charm.converge()

    def _in_progress(self) -> bool:
        try:
            secret = self.model.get_secret(label=AUTH_KEY_LABEL)
            return phase(secret.get_content(refresh=True)[AUTH_KEY_FIELD]) is not None
        except (ops.SecretNotFoundError, KeyError, ValueError):
            return False

    def begin(self, secret: ops.Secret, new_key: str) -> str:
        """Publish the first revision of a rotation to `new_key`; return the new key's id.

        Raises:
            RotationError: A rotation is under way already, or the key set is not this
                charm's.

        """
        current = secret.get_content(refresh=True)[AUTH_KEY_FIELD]
        try:
            first = start(current, new_key)
        except ValueError as e:
            raise RotationError(str(e)) from e
        secret.set_content({AUTH_KEY_FIELD: first})
        new_kid = max(key_set(first) or [], key=lambda k: k.generation).kid
        logger.info("auth key rotation to %s started", new_kid)
        return new_kid

    def advance(self, secret: ops.Secret, applied_key: str, backups: bool) -> str | None:
        """Publish the next revision once every daemon runs with `applied_key`; leader only.

        Call it after this controller applied `applied_key`. `backups`: whether backup
        controllers run (network state) and must confirm too. The leader's own digest in its
        peer unit databag wakes them (peer relation-changed): they get no `secret-changed`
        for their own application's secret. Returns the step published, or None.
        """
        self.confirm_standby(applied_key)
        try:
            following = next_step(applied_key)
        except ValueError as e:
            logger.warning("not rotating the auth key: %s", e)
            return None
        if following is None or self.waiting_for(applied_key, backups):
            return None
        secret.set_content({AUTH_KEY_FIELD: following})
        step = phase(following) or f"{current_kid(following)} alone: the old key is refused"
        logger.info("auth key rotation: every daemon runs with the current keys; now %s", step)
        return step

    def waiting_for(self, applied_key: str, backups: bool) -> list[str]:
        """Return the units that have not confirmed running with `applied_key`."""
        waiting: list[str] = []
        for publisher in self._publishers:
            for relation in publisher.relations:
                if relation.data[self.model.app].get("auth_key_id"):
                    waiting += publisher.units_without_key(relation, applied_key)
        peer = self.model.get_relation(self._peer)
        if backups and peer is not None:
            wanted = auth_key_digest(applied_key)
            waiting += sorted(
                unit.name
                for unit in peer.units
                if peer.data[unit].get("address") and peer.data[unit].get(DIGEST_FIELD) != wanted
            )
        return waiting

    def status(self, applied_key: str, backups: bool) -> ops.StatusBase | None:
        """Say which step the rotation is at and whom it waits for; None without one."""
        try:
            step = phase(applied_key)
        except ValueError as e:
            return ops.BlockedStatus(f"cannot read the auth key set: {e}")
        if step is None:
            return None
        waiting = self.waiting_for(applied_key, backups)
        shown = ", ".join(waiting[:5]) + (", ..." if len(waiting) > 5 else "")
        return ops.MaintenanceStatus(
            f"rotating the auth key: {step}" + (f"; waiting for {shown}" if waiting else "")
        )

    def reconcile(self, facts: Facts) -> None:
        """Go on with a rotation once every daemon confirmed the current keys (the leader)."""
        if facts.keys is not None:
            backups = facts.config.use_network_state
            self.advance(facts.keys.auth_secret, facts.keys.auth_key, backups=backups)

    def statuses(self, facts: Facts) -> Iterator[ops.StatusBase]:
        """Say which step a rotation is at and whom it waits for (the leader)."""
        backups = facts.config.use_network_state
        if facts.leader and (step := self.status(facts.applied_key, backups)) is not None:
            yield step

    def confirm_standby(self, key_on_disk: str | None) -> None:
        """Tell the other controllers this one runs with `key_on_disk` (after `follow`)."""
        peer = self.model.get_relation(self._peer)
        if peer is None or not key_on_disk:
            return
        digest = auth_key_digest(key_on_disk)
        if peer.data[self.model.unit].get(DIGEST_FIELD) != digest:
            peer.data[self.model.unit][DIGEST_FIELD] = digest
