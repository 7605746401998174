"""Stand-ins for a directory: an LDAP server (`ldap`) and the `sssd` subordinate that reads it.

They speak upstream's `ldap` interface (charm-relation-interfaces `ldap/v0`, as the
`glauth-k8s` charm provides it and `canonical/sssd-operator` requires it); the contract is in
lab/README.md ("Directory users"). Both run Debian's own packages (`slurm_lab.directory_debs`).

`ldap` (principal; each unit a lab machine): slapd for the suffix of the `domain` option
(`hpc.lab` gives `dc=hpc,dc=lab`), seeded at install with the `ldif` option (an LDIF of
users and groups, full DNs; RFC 2307 `posixAccount` and `posixGroup` with `memberUid`). Over
`ldap` (provider) the leader answers each requirer: it reads the requirer's `user` and
`group` (checked against `NAME`), makes a bind entry `cn=<user>,ou=<group>,<suffix>` with a
random password kept in a Juju secret owned by the stand-in and granted to the relation, and
publishes `urls`, `ldaps_urls`, `base_dn`, `bind_dn`, `bind_password_secret`, `auth_method`
and `starttls` in its application databag.

`sssd` (subordinate on `juju-info`): its leader publishes `user` (its application's name) and
`group` (the model's name), as upstream's requirer does. Each unit reads the provider's
databag as untrusted input (`read_provider`), installs SSSD, writes `/etc/sssd/sssd.conf`
(one domain named after the provider application, `id_provider = ldap`, NSS and PAM), adds
`sss` to `passwd` and `group` in nsswitch.conf and (re)starts SSSD with its caches dropped.

Differences from upstream: no TLS (`starttls` is `False`, `ldaps_urls` empty, no
`receive-ca-cert`), one domain per sssd application, no `ssh` responder, RFC 2307 rather than
rfc2307bis, and the stand-ins run their hooks in the lab's process, not as charms.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from typing import Any, ClassVar

from slurm_lab import directory_debs, programs
from slurm_lab.juju.model import JsonDict, Relation, Secret, SecretRevision, StatusValue, Unit
from slurm_lab.juju.standins.base import Endpoints, StandIn, SubordinateStandIn

LDAP_PORT = 389
NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
"""A requirer's `user` or `group` (Juju application and model names): no DN syntax in it."""
_DOMAIN_RE = re.compile(r"[a-z][a-z0-9-]{0,62}(\.[a-z][a-z0-9-]{0,62}){0,7}")
_DN_RE = re.compile(r"[a-z]{1,10}=[a-z0-9][a-z0-9-]{0,62}(,[a-z]{1,10}=[a-z0-9][a-z0-9-]{0,62})*")
_URL_RE = re.compile(r"ldap://(\d{1,3}\.){3}\d{1,3}:\d{1,5}")
_PASSWORD_ALPHABET = string.ascii_letters + string.digits
DEFAULT_DOMAIN = "hpc.lab"
CACHE_SECONDS = 15
"""How long SSSD serves a user or group from its caches (SSSD's own: 5400 s, and 300 s for the
NSS memory cache): short, so that a directory change reaches the machines within a test."""


def _password() -> str:
    return "".join(secrets.choice(_PASSWORD_ALPHABET) for _ in range(32))


def suffix(domain: str) -> str:
    """Return the directory suffix of a DNS domain (`hpc.lab` -> `dc=hpc,dc=lab`)."""
    return ",".join(f"dc={label}" for label in domain.split("."))


class LdapStandIn(StandIn):
    """Hooks of the ldap stand-in: slapd, seeded from the `ldif` option."""

    KIND = "ldap"
    ENDPOINTS: ClassVar[Endpoints] = {"ldap": ("provider", {"interface": "ldap"})}

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        if event["kind"] == "install":
            self._install(unit)
            return
        related = self.event_relation(unit, event)
        if related is None or related[1] != "ldap" or not self.is_leader(unit):
            return
        if event["kind"] in ("relation_joined", "relation_changed"):
            self._provide(unit, related[0])

    def _domain(self, unit: Unit) -> str | None:
        domain = str(self.config(unit).get("domain", DEFAULT_DOMAIN))
        return domain if _DOMAIN_RE.fullmatch(domain) else None

    def _admin(self, unit: Unit) -> str:
        return f"cn=admin,{suffix(self._domain(unit) or DEFAULT_DOMAIN)}"

    def _install(self, unit: Unit) -> None:
        domain = self._domain(unit)
        if domain is None:
            self.block(unit, "domain is not a DNS domain of lowercase labels (such as hpc.lab)")
            return
        debs = directory_debs.publish(self.ctl.lab.shared_dir)
        machine = self.ctl.machine(unit)
        result = machine.exec(_sh("ldap-setup.sh", debs, domain), input=_password(), timeout=300)
        if result.returncode != 0:
            self.block(unit, f"slapd failed: {_last_line(result.stderr)}", log=result.stderr)
            return
        ldif = str(self.config(unit).get("ldif", ""))
        if ldif.strip():
            seeded = machine.exec(_sh("ldap-add.sh", self._admin(unit)), input=ldif, timeout=60)
            if seeded.returncode != 0:
                self.block(unit, f"seed LDIF refused: {_last_line(seeded.stderr)}", seeded.stderr)
                return
        unit.workload = StatusValue("active", f"serving {suffix(domain)}")
        self.ctl.log(unit, "INFO", f"slapd serving {suffix(domain)} on port {LDAP_PORT}")

    def _provide(self, unit: Unit, rel: Relation) -> None:
        request = rel.app_data.get(rel.other_app(unit.app), {})
        user, group = request.get("user", ""), request.get("group", "")
        if not user and not group:
            return
        if not (NAME.fullmatch(user) and NAME.fullmatch(group)):
            self.ctl.log(
                unit, "WARNING", f"ignoring invalid user/group {user[:80]!r}/{group[:80]!r}"
            )
            return
        domain = self._domain(unit)
        if domain is None or unit.workload.name != "active":
            return
        base = suffix(domain)
        bind_dn = f"cn={user},ou={group},{base}"
        secret = self._bind_secret(unit, rel)
        password = secret.latest.content["password"] if secret else _password()
        entries = (
            f"dn: ou={group},{base}\nobjectClass: organizationalUnit\nou: {group}\n\n"
            f"dn: {bind_dn}\nobjectClass: organizationalRole\n"
            f"objectClass: simpleSecurityObject\ncn: {user}\nuserPassword: {{CRYPT}}x\n"
        )
        machine = self.ctl.machine(unit)
        admin = self._admin(unit)
        added = machine.exec(_sh("ldap-add.sh", admin, "existing-ok"), input=entries)
        changed = added.returncode == 0 and (
            machine.exec(_sh("ldap-password.sh", admin, bind_dn), input=password).returncode == 0
        )
        if not changed:
            self.block(unit, f"cannot make the bind entry {bind_dn}", log=added.stderr)
            return
        if secret is None:
            secret = self._new_secret(unit, rel, password)
        self.publish_app(
            unit,
            rel,
            {
                "urls": json.dumps([f"ldap://{unit.address}:{LDAP_PORT}"]),
                "ldaps_urls": json.dumps([]),
                "base_dn": base,
                "bind_dn": bind_dn,
                "bind_password_secret": secret.id,
                "auth_method": "simple",
                "starttls": "False",
            },
        )

    def _bind_secret(self, unit: Unit, rel: Relation) -> Secret | None:
        label = f"ldap.{rel.id}.bind"
        return next(
            (
                s
                for s in self.ctl.model.secrets.values()
                if s.owner == unit.app and s.label == label
            ),
            None,
        )

    def _new_secret(self, unit: Unit, rel: Relation, password: str) -> Secret:
        secret = Secret(
            id=f"secret:{secrets.token_hex(10)}",
            owner=unit.app,
            owner_kind="app",
            revisions=[SecretRevision(1, {"password": password})],
            label=f"ldap.{rel.id}.bind",
            grants={str(rel.id): [rel.other_app(unit.app)]},
        )
        self.ctl.model.secrets[secret.id] = secret
        return secret


class SssdStandIn(SubordinateStandIn):
    """Hooks of the sssd subordinate stand-in: SSSD on its principal's machine."""

    KIND = "sssd"
    WAITING = "waiting for ldap data"
    ENDPOINTS: ClassVar[Endpoints] = {
        "juju-info": ("requirer", {"interface": "juju-info", "scope": "container"}),
        "ldap": ("requirer", {"interface": "ldap", "limit": 1}),
    }

    def handle(self, unit: Unit, event: JsonDict) -> None:
        """Run one 'hook' of the stand-in."""
        related = self.event_relation(unit, event)
        if related is not None and related[1] == "juju-info":
            if event["kind"] == "relation_created":
                self._start_install(unit)
            return
        if related is None or related[1] != "ldap":
            return
        rel = related[0]
        kind = event["kind"]
        if kind in ("relation_created", "relation_joined") and self.is_leader(unit):
            bag = {"user": unit.app, "group": self.ctl.model.name}
            self.publish_app(unit, rel, bag)
        if kind in ("relation_joined", "relation_changed"):
            self._configure(unit, rel)
        elif kind == "relation_broken":
            self.ctl.machine(unit).exec(_sh("sssd-stop.sh"))
            unit.workload = StatusValue("waiting", self.WAITING)

    def _start_install(self, unit: Unit) -> None:
        """Install SSSD in the background now (`sssd-install` unit): machines install at once.

        The stand-ins' hooks run one at a time in the lab's process; installing in
        `_configure` made five machines install one after the other (about 30 s each here).
        `sssd-setup.sh` waits for this install, and installs itself if it did not happen.
        """
        debs = directory_debs.publish(self.ctl.lab.shared_dir)
        install = programs.text("sssd-install.sh")
        argv = ["systemd-run", "--unit=sssd-install", "--collect", "--quiet", "--"]
        result = self.ctl.machine(unit).exec([*argv, "sh", "-c", install, "sssd-install.sh", debs])
        if result.returncode != 0:
            self.ctl.log(unit, "WARNING", f"no background install: {_last_line(result.stderr)}")

    def _configure(self, unit: Unit, rel: Relation) -> None:
        provider = rel.other_app(unit.app)
        data = read_provider(rel.app_data.get(provider, {}))
        if data is None:
            return
        if isinstance(data, str):
            self.block(unit, f"ldap data from {provider}: {data}")
            return
        secret = self.ctl.model.secrets.get(data["bind_password_secret"])
        if secret is None or unit.app not in secret.grants.get(str(rel.id), []):
            self.block(unit, f"the bind password secret of {provider} is not granted")
            return
        conf = sssd_conf(provider, data, secret.latest.content.get("password", ""))
        debs = directory_debs.publish(self.ctl.lab.shared_dir)
        install = programs.text("sssd-install.sh")
        setup = _sh("sssd-setup.sh", debs, install)
        result = self.ctl.machine(unit).exec(setup, input=conf, timeout=600)
        if result.returncode != 0:
            self.block(unit, f"sssd failed: {_last_line(result.stderr)}", log=result.stderr)
            return
        unit.workload = StatusValue("active", f"domain {provider} at {data['urls'][0]}")
        self.ctl.log(unit, "INFO", f"sssd configured for {provider} ({data['base_dn']})")


def read_provider(bag: dict[str, str]) -> dict[str, Any] | str | None:
    """Read an `ldap` provider's application databag; None if incomplete, a string if wrong.

    Every value reaches sssd.conf, so each is checked against a grammar that cannot hold a
    newline, a `#` or a `=` where a value would end: plain `ldap://` URLs with an IPv4
    address, DNs of lowercase `attr=value` pairs, a secret URI, `simple` and `False`.
    """
    keys = ("urls", "base_dn", "bind_dn", "bind_password_secret", "auth_method")
    if not all(bag.get(key) for key in keys):
        return None
    try:
        urls: Any = json.loads(bag["urls"])
    except ValueError:
        return "urls is not JSON"
    problem = _provider_problem(bag, urls)
    if problem:
        return problem
    return {
        "urls": urls,
        "base_dn": bag["base_dn"],
        "bind_dn": bag["bind_dn"],
        "bind_password_secret": bag["bind_password_secret"],
    }


def _provider_problem(bag: dict[str, str], urls: Any) -> str:
    """Return what is wrong with a complete provider databag, or ''."""
    checks = (
        (
            isinstance(urls, list)
            and bool(urls)
            and all(isinstance(url, str) and _URL_RE.fullmatch(url) for url in urls),  # pyright: ignore[reportUnknownVariableType]
            "urls is not a list of ldap://<IPv4>:<port> URLs",
        ),
        (bool(_DN_RE.fullmatch(bag["base_dn"])), "base_dn is not a DN of lowercase pairs"),
        (bool(_DN_RE.fullmatch(bag["bind_dn"])), "bind_dn is not a DN of lowercase pairs"),
        (
            bool(re.fullmatch(r"secret:[a-z0-9]{1,40}", bag["bind_password_secret"])),
            "bind_password_secret is not a secret URI",
        ),
        (bag["auth_method"] == "simple", "auth_method is not simple"),
        (
            bag.get("starttls", "False").casefold() != "true",
            "starttls is not supported by the lab's sssd (no receive-ca-cert)",
        ),
    )
    return next((message for ok, message in checks if not ok), "")


def sssd_conf(domain: str, data: dict[str, Any], password: str) -> str:
    """Return sssd.conf for one LDAP domain (values already checked by `read_provider`)."""
    if not NAME.fullmatch(domain) or not re.fullmatch(r"[A-Za-z0-9]{1,128}", password):
        raise ValueError("domain or password outside their grammar")
    return (
        "[sssd]\nconfig_file_version = 2\nservices = nss, pam\n"
        f"domains = {domain}\n\n[nss]\nmemcache_timeout = {CACHE_SECONDS}\n\n[pam]\n\n"
        f"[domain/{domain}]\n"
        "id_provider = ldap\nauth_provider = ldap\naccess_provider = permit\n"
        "ldap_schema = rfc2307\n"
        f"ldap_uri = {', '.join(data['urls'])}\n"
        f"ldap_search_base = {data['base_dn']}\n"
        f"ldap_default_bind_dn = {data['bind_dn']}\n"
        "ldap_default_authtok_type = password\n"
        f"ldap_default_authtok = {password}\n"
        "ldap_id_use_start_tls = false\n"
        "ldap_auth_disable_tls_never_use_in_production = true\n"
        "cache_credentials = false\nenumerate = false\n"
        f"entry_cache_timeout = {CACHE_SECONDS}\n"
    )


def _sh(program: str, *args: str) -> list[str]:
    return programs.sh(program, *args)


def _last_line(text: str) -> str:
    lines = [line for line in text.split("\n") if line.strip()]
    return lines[-1][:200] if lines else "no output"


__all__ = ["LdapStandIn", "SssdStandIn", "read_provider", "sssd_conf", "suffix"]
