"""The controller's keys: the JWT key it signs and checks tokens with, the auth key's secret.

The slurmctld leader creates the key once, as an application secret (`slurm-jwt-key`): every
controller unit reads it from there and writes `/etc/slurm/jwt_hs256.key`. The key is granted
to the slurmdbd integration only (slurmdbd verifies tokens too), never to slurmrestd, which
passes tokens on without reading the key (`hpc_libs.interfaces.slurmrestd`). The auth key's
secret is made the same way (`hpc_libs.interfaces.slurmd`); `rotation` rotates it.
"""

import re
from collections.abc import Callable

import ops
from facts import Keys
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import get_or_create_app_secret
from hpc_libs.interfaces.slurmd import get_or_create_auth_key_secret
from hpc_libs.interfaces.slurmrestd import JWT_KEY_FIELD, JWT_KEY_LABEL
from hpc_libs.slurm.slurmctld import SlurmctldManager

# POSIX user names: characters of the portable filename set, not starting with '-' (the
# first character could otherwise read as an option); at most 32 like useradd.
USERNAME = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,31}")
MAX_LIFESPAN = 2**31 - 1
"""The longest token lifespan, in seconds: Slurm keeps it in a signed 32-bit field."""


def token_request(username: object, lifespan: object) -> tuple[str, int]:
    """Return the `token` action's user name and lifespan (seconds), checked.

    Raises:
        ValueError: Which parameter is refused, and why.

    """
    if not isinstance(username, str) or not USERNAME.fullmatch(username):
        raise ValueError(
            f"username {username!r} is not a POSIX user name (letters, digits, '.', '_', '-', "
            "not starting with '-', at most 32)"
        )
    if username.strip(".") == "":
        raise ValueError(f"username {username!r} is not a POSIX user name")
    if isinstance(lifespan, bool) or not isinstance(lifespan, int):
        raise ValueError(f"lifespan {lifespan!r} is not an integer number of seconds")
    if not 1 <= lifespan <= MAX_LIFESPAN:
        raise ValueError(f"lifespan {lifespan} is not between 1 and {MAX_LIFESPAN} seconds")
    return username, lifespan


def get_or_create_jwt_key_secret(charm: ops.CharmBase, generate: Callable[[], str]) -> ops.Secret:
    """Return the application's JWT key secret, created once with `generate()` (leader only).

    Raises:
        IntegrationError: The secret does not exist and this unit is not the leader.

    """
    return get_or_create_app_secret(charm, JWT_KEY_LABEL, JWT_KEY_FIELD, generate, "JWT key")


def keys(charm: ops.CharmBase, manager: SlurmctldManager) -> Keys:
    """Return the leader's keys: the auth key's secret and content, the JWT key's secret.

    Each secret is created once, with a key `manager` generates (leader only).
    """
    auth_secret = get_or_create_auth_key_secret(charm, manager.key.generate)
    auth_key = auth_secret.get_content(refresh=True)["key"]
    jwt_secret = get_or_create_jwt_key_secret(charm, manager.jwt_key.generate)
    return Keys(auth_secret=auth_secret, auth_key=auth_key, jwt_secret=jwt_secret)


def jwt_key(secret: ops.Secret) -> str:
    """Return the JWT key (base64 text) the secret holds.

    Raises:
        IntegrationError: The secret has no key.

    """
    key = secret.get_content(refresh=True).get(JWT_KEY_FIELD)
    if not key:
        raise IntegrationError(f"the JWT key secret has no {JWT_KEY_FIELD!r} field")
    return key


def jwt_key_or_none(charm: ops.CharmBase) -> str | None:
    """Return the JWT key the leader made, or None while there is none (any unit)."""
    try:
        return jwt_key(charm.model.get_secret(label=JWT_KEY_LABEL))
    except (ops.SecretNotFoundError, IntegrationError):
        return None
