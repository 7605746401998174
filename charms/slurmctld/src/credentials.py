"""The JWT key the controller signs and checks tokens with, and checks on a token request.

The slurmctld leader creates the key once, as an application secret (`slurm-jwt-key`): every
controller unit reads it from there and writes `/etc/slurm/jwt_hs256.key`. The key is granted
to the slurmdbd integration only (slurmdbd verifies tokens too), never to slurmrestd, which
passes tokens on without reading the key (`hpc_libs.interfaces.slurmrestd`).
"""

import re
from collections.abc import Callable

import ops
from hpc_libs.errors import IntegrationError
from hpc_libs.interfaces.base import get_or_create_app_secret
from hpc_libs.interfaces.slurmrestd import JWT_KEY_FIELD, JWT_KEY_LABEL

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
