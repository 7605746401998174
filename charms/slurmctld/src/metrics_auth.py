"""The token the COS collector sends to slurmctld's own `/metrics` under `PrivateData`.

With any PrivateData, slurmctld (26.05) answers `/metrics` only to a JWT of SlurmUser, root or
a user in `MetricsAuthUsers`, checked with the key of `SlurmctldHttpAuthParameters=jwt_key=`
(`native_metrics` says what was measured). The charm gives the collector the least it needs:

* a key of its own, never the cluster's JWT key (`credentials`): the leader makes it once as
  an application secret (`KEY_SECRET`), and writes it to `/etc/slurm/<KEY_NAME>`, 0600 and
  slurm's (on the share with network state, like every file the controllers read). On the
  forky lab (26.05.5) a token signed with it was refused by slurmctld's RPCs and through
  slurmrestd (`Protocol authentication error`), so it opens `/metrics` and nothing else;
* a user of its own, `USER`, a system user without a login on every controller machine, the
  one name in `MetricsAuthUsers` (slurmctld looks the token's user up: one that does not
  exist gets 500), so the token is no SlurmUser's or root's;
* both keys in `INCLUDE`, a file slurm.conf includes by name (slurmutils knows neither key);
* a short-lived token (`LIFESPAN`), which every controller unit signs itself from the secret
  and writes for its own collector (`TOKEN_FILE`, 0600 root's, in a directory only root can
  change), renewed on any hook once less than `RENEW_WITHIN` is left (update-status comes
  every few minutes), or once it no longer verifies with the key. The scrape job names the
  file (`authorization: credentials_file`): the token never reaches a databag, a status or
  a log.

`TOKEN_FILE` is in the data directory of the opentelemetry-collector snap, `$SNAP_COMMON`:
the snap is strictly confined (it reads `/etc/otelcol/config.d` and its own directories
only), and its daemon runs as root. grafana-agent's snap reads its own `$SNAP_COMMON`
instead, which this charm does not write: with it the native jobs fail their scrapes (up 0)
and the exporter still covers the cluster.
"""

import base64
import logging
import time
from pathlib import Path

import jwt
import ops
from hpc_libs.errors import IntegrationError, SlurmOpsError
from hpc_libs.interfaces.base import get_or_create_app_secret
from hpc_libs.machine import files, host
from hpc_libs.slurm.base import KeyFile
from hpc_libs.slurm.slurmctld import SlurmctldManager

logger = logging.getLogger(__name__)

USER = "slurm-metrics"
"""The one user in `MetricsAuthUsers`: the collector's tokens are its."""
KEY_NAME = "metrics_jwt_hs256.key"
INCLUDE = "metrics-auth.conf"
"""The file slurm.conf includes by name for the token check (beside it, sent configless)."""
KEY_SECRET = "slurm-metrics-jwt-key"
KEY_FIELD = "key"
TOKEN_FILE = Path("/var/snap/opentelemetry-collector/common/slurmctld-metrics.token")
LIFESPAN = 12 * 3600
RENEW_WITHIN = 8 * 3600
"""A token with less than this left is replaced (a new one lives `LIFESPAN`)."""


def include_text(key_path: str) -> str:
    """Return `INCLUDE`'s content: the key slurmctld checks tokens with, and the one user."""
    return f"SlurmctldHttpAuthParameters=jwt_key={key_path}\nMetricsAuthUsers={USER}\n"


def sign(key: bytes, user: str, now: int, lifespan: int = LIFESPAN) -> str:
    """Return an HS256 JWT for `user` (Slurm's `sun` claim) from `now` for `lifespan` s."""
    return jwt.encode({"iat": now, "exp": now + lifespan, "sun": user}, key, algorithm="HS256")


def expiry(token: str, key: bytes) -> int | None:
    """Return when `token` expires if `key` signed it for `USER`; None otherwise (or expired)."""
    try:
        claims = jwt.decode(token, key, algorithms=["HS256"], options={"require": ["exp"]})
    except jwt.InvalidTokenError:
        return None
    exp = claims.get("exp")
    return exp if claims.get("sun") == USER and isinstance(exp, int) else None


class MetricsAuth:
    """The metrics key, its include file, the user and this unit's token (see the module)."""

    def __init__(self, charm: ops.CharmBase, manager: SlurmctldManager) -> None:
        self.charm = charm
        self.manager = manager
        self.key = KeyFile(manager.etc_dir / KEY_NAME, size=32, owner=manager.user)
        self.include = manager.etc_dir / INCLUDE
        self.token_file = manager.root / TOKEN_FILE.relative_to("/")
        self.problem: str | None = None

    def prepare(self) -> bool:
        """As the leader, before slurm.conf includes `INCLUDE`: the key, the file, the user.

        Returns whether slurmctld can check tokens now; a failure is logged and said
        (`statuses`), and slurm.conf then keeps the endpoint off.
        """
        try:
            secret = get_or_create_app_secret(
                self.charm, KEY_SECRET, KEY_FIELD, self.key.generate, "metrics JWT key"
            )
            self.key.set(secret.get_content(refresh=True)[KEY_FIELD])
            files.write_if_changed(self.include, include_text(str(self.key.path)), mode=0o644)
            ensure_user()
        except (SlurmOpsError, IntegrationError, KeyError, ops.ModelError) as e:
            self._failed("cannot set up the token check", e)
            return False
        return True

    def reconcile(self, needed: bool) -> None:
        """Write this unit's token while the jobs need one (`needed`), else remove it."""
        try:
            if not needed:
                self._remove_token()
                return
            key = self._key()
            if key is None:
                return  # The leader has not made it yet: its peer data wakes this unit.
            ensure_user()
            self._renew(key, int(time.time()))
        except (SlurmOpsError, OSError, ValueError, ops.ModelError) as e:
            self._failed("cannot write the scrape token", e)

    def statuses(self) -> list[ops.StatusBase]:
        """Say why native metrics lack their token (the next hook retries)."""
        return [ops.ActiveStatus(self.problem)] if self.problem else []

    def _key(self) -> bytes | None:
        try:
            secret = self.charm.model.get_secret(label=KEY_SECRET)
        except ops.SecretNotFoundError:
            return None
        text = secret.get_content(refresh=True).get(KEY_FIELD)
        return base64.b64decode(text) if text else None

    def _renew(self, key: bytes, now: int) -> None:
        current = files.read_bytes(self.token_file)
        expires = expiry(current.decode(errors="replace"), key) if current else None
        if expires is not None and expires - now > RENEW_WITHIN:
            return
        root = self.manager.root
        files.make_dir(self.token_file.parent, mode=0o755, owner="root", under=root)
        files.write_atomic(self.token_file, sign(key, USER, now), mode=0o600)
        logger.info("native metrics: a new scrape token in %s", TOKEN_FILE)

    def _remove_token(self) -> None:
        try:
            self.token_file.unlink()
        except FileNotFoundError:
            return
        logger.info("native metrics: scrape token removed")

    def _failed(self, what: str, error: Exception) -> None:
        logger.warning("native metrics: %s (the next event retries): %s", what, error)
        self.problem = f"native metrics: {what}: {error}"


def ensure_user() -> None:
    """Create `USER`, a system user without login or home, if missing.

    Raises:
        SlurmOpsError: The user cannot be looked up or created.

    """
    host.ensure_system_user(USER)
