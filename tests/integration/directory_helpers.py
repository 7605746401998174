"""Directory users on the lab (issue 40): the directory's users, and how a test acts as one.

alice (group physics) and bob (group chemistry) live in the `ldap` stand-in's directory
only (slapd, seeded from `LDIF`); the `sssd` subordinate resolves them on every Slurm machine.
"""

from __future__ import annotations

import shlex

import jubilant
from accounting_rest_helpers import LOGIN, sh

GROUP_CHANGE_SETTLE = 90
"""The lab's SSSD caches 15 s and slurmctld re-reads group members each GroupUpdateTime (set
to 15 s below): a member added in the directory was admitted after 17 s."""
COMPUTE = "compute/0"
SLURM_APPS = ("slurmctld", "compute", "login", "slurmdbd", "slurmrestd")
USERS = {"alice": (10001, 20001, "physics"), "bob": (10002, 20002, "chemistry")}
"""user -> (uid, primary gid, primary group); each is also a member of that group."""


def _ldif() -> str:
    entries = [
        "dn: ou=people,dc=hpc,dc=lab\nobjectClass: organizationalUnit\nou: people\n",
        "dn: ou=groups,dc=hpc,dc=lab\nobjectClass: organizationalUnit\nou: groups\n",
    ]
    for user, (uid, gid, group) in USERS.items():
        entries.append(
            f"dn: uid={user},ou=people,dc=hpc,dc=lab\n"
            "objectClass: inetOrgPerson\nobjectClass: posixAccount\n"
            f"uid: {user}\ncn: {user}\nsn: {user}\nuidNumber: {uid}\ngidNumber: {gid}\n"
            f"homeDirectory: /tmp\nloginShell: /bin/bash\n"
        )
        entries.append(
            f"dn: cn={group},ou=groups,dc=hpc,dc=lab\nobjectClass: posixGroup\n"
            f"cn: {group}\ngidNumber: {gid}\nmemberUid: {user}\n"
        )
    return "\n".join(entries)


LDIF = _ldif()


def as_user(juju: jubilant.Juju, user: str, command: str, *, unit: str = LOGIN) -> str:
    """Run `command` as `user` (from the directory) in /tmp on `unit`; return its stdout."""
    inner = f"cd /tmp && {command}"
    return sh(juju, f"runuser -u {user} -- sh -c {shlex.quote(inner)}", unit=unit)


def submit(juju: jubilant.Juju, user: str, script: str, *, partition: str = "compute") -> str:
    """Submit `--wrap script` as `user` from the login node; return the job id."""
    options = f"--parsable -p {partition} -N1 --mem=1 -o /tmp/dir-%j.out"
    out = as_user(juju, user, f"sbatch {options} --wrap {shlex.quote(script)}")
    return out.strip().split(";")[0]


def add_directory(juju: jubilant.Juju) -> None:
    """Deploy `ldap` and `sssd`, and attach sssd to every Slurm application's machines."""
    juju.deploy("ldap", "ldap", config={"domain": "hpc.lab", "ldif": LDIF})
    juju.deploy("sssd", "sssd")
    for app in SLURM_APPS:
        juju.integrate(f"{app}:juju-info", "sssd:juju-info")
    juju.integrate("sssd:ldap", "ldap:ldap")
