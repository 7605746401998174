"""The REST API's two integrations: with slurmctld, and with the portals that use it.

`slurmrestd` (slurmctld, requirer, endpoint `slurmrestd`) <-> slurmrestd (provider, endpoint
`slurmctld`). slurmrestd joins the cluster like a login node: it needs what every daemon of the
cluster needs, the auth key as a granted Juju secret and the controllers, primary first
(`ControllerData`, checked against Slurm's grammar on both sides). A local sackd authenticates
the machine with that key and fetches the cluster's configuration (configless); slurmrestd
reads sackd's copy. Each unit publishes to slurmctld what a login unit does
(`ConsumerUnitData`, `hpc_libs.interfaces.controller`): the digest of the key its sackd runs
with, and the Slurm release it runs (`version`), read by slurmctld before it writes a key
older releases refuse.

The JWT signing key is NOT part of this contract, because slurmrestd has no use for it. With
`rest_auth/jwt`, slurmrestd passes the client's token on to slurmctld (and slurmdbd), which
verify it with the key; slurmrestd never verifies a token and never loads a key. In Slurm 24.11
(and up to 26.05), `rest_auth/jwt` accepts any token header and passes it through, and the
`auth/jwt` plugin reads `jwt_key=` only inside slurmctld and slurmdbd (its `init`). A bad or
expired token is therefore refused by slurmctld, which slurmrestd answers as HTTP 511 with
error 1007, key or no key (checked on the lab with the key at the `jwt_key=` path, 0600
slurmrestd); 401 is slurmrestd's answer to a request carrying no token. A copy of the key
would change nothing but add one more place holding a credential. Whether slurmctld accepts
JWT is in the configuration slurmrestd fetches (`AuthAltTypes=auth/jwt`). The JWT key
secret's label and field are defined here, for slurmctld (which creates it) and slurmdbd
(which reads it).

`slurm_rest_api` (slurmrestd, provider, endpoint `rest-api`) <-> a portal or workflow tool
(requirer): each slurmrestd unit publishes in its unit databag the URL it serves
(`RestApiUnitData`). A requirer reads every unit's entry and logs and skips one whose URL
is not `http[s]://host:port[/]` (the unit tests' portal does, against raw databag vectors).
"""

import ipaddress
import logging
from typing import Annotated
from urllib.parse import urlsplit

import ops

from hpc_libs.interfaces.base import DatabagModel, Interface, checked
from hpc_libs.interfaces.controller import ControllerConsumer, ControllerPublisher
from hpc_libs.slurm import grammar
from hpc_libs.slurm.ports import SLURMRESTD_PORT

logger = logging.getLogger(__name__)

JWT_KEY_LABEL = "slurm-jwt-key"
"""Label of the slurmctld application's JWT key secret (granted to slurmdbd, never slurmrestd)."""
JWT_KEY_FIELD = "key"
"""Field of the JWT key secret's content: at least 32 random bytes, as base64 text."""

DEFAULT_REST_PORT = SLURMRESTD_PORT
_URL_SCHEMES = ("http", "https")


class SlurmrestdProvider(ControllerConsumer):
    """The slurmrestd charm's side, on its `slurmctld` endpoint."""


class SlurmrestdRequirer(ControllerPublisher):
    """The slurmctld charm's side, on its `slurmrestd` endpoint (one relation per REST app).

    slurmctld calls `publish_controller_data(relation, auth_key, controllers)`, exactly as for
    a login node. It grants the auth key only; never the JWT key.
    """

    def __init__(self, charm: ops.CharmBase, endpoint: str = "slurmrestd") -> None:
        super().__init__(charm, endpoint)


def rest_url(host: str, port: int, *, scheme: str = "http") -> str:
    """`scheme://host:port` for `host` (a name or IP; IPv6 in brackets), validated.

    Raises:
        ValueError: `host`, `port` or `scheme` is not acceptable.

    """
    if scheme not in _URL_SCHEMES:
        raise ValueError(f"{scheme!r} is not http or https")
    grammar.host(host)
    grammar.port(str(port))
    shown = f"[{ipaddress.ip_address(host)}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def check_url(value: str) -> None:
    """Accept `http[s]://host:port` with an optional trailing `/`, nothing else.

    No user, query, fragment or path: a portal builds its request paths itself.

    Raises:
        ValueError: Why the URL is refused.

    """
    grammar.token(value)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{value!r} is not a URL: {e}") from None
    host = parts.hostname
    if parts.scheme not in _URL_SCHEMES or host is None or port is None:
        raise ValueError(f"{value!r} is not http[s]://host:port")
    if parts.username is not None or parts.query or parts.fragment or parts.path not in ("", "/"):
        raise ValueError(f"{value!r} holds more than http[s]://host:port")
    # urlsplit gives the host in lower case; host names are case-insensitive, so compare so.
    if rest_url(host, port, scheme=parts.scheme) != value.removesuffix("/").lower():
        raise ValueError(f"{value!r} is not written as http[s]://host:port")


class RestApiUnitData(DatabagModel):
    """A slurmrestd unit's databag on `rest-api`: where it serves the REST API."""

    url: Annotated[str, checked(check_url)] | None = None


class RestApiProvider(Interface):
    """The slurmrestd charm's side of `slurm_rest_api`: each unit publishes its own URL."""

    def __init__(self, charm: ops.CharmBase, endpoint: str = "rest-api") -> None:
        super().__init__(charm, endpoint)

    def publish_url(self, url: str | None) -> None:
        """Write `url` (None: withdraw it) to this unit's databag in every relation, if changed.

        Raises:
            ValueError: `url` is not `http[s]://host:port`.

        """
        data = RestApiUnitData(url=url)
        for relation in self.relations:
            if url is None:
                relation.data[self.model.unit].pop("url", None)
            elif self.load(RestApiUnitData, relation, self.model.unit) != data:
                relation.save(data, self.model.unit)
