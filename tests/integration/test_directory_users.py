"""Directory users end to end (issue 40, item 1): users and groups from LDAP through SSSD.

One deployment for the module: slurmctld, one compute node, a sackd login node, slurmdbd on
MySQL and slurmrestd, with an `ldap` application (on the lab: slapd, seeded from `LDIF`) and
the `sssd` subordinate on every Slurm machine. No user exists in any machine's files: alice
(group physics) and bob (group chemistry) live in the directory only. Each test builds on
the cluster the fixture leaves and proves one behaviour.

Run with `-s` to see the timings.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from pathlib import Path

import jubilant
import pytest
from accounting_rest_helpers import (
    CONTROLLER,
    LOGIN,
    api_version,
    http,
    install_client,
    poll,
    sh,
    try_sh,
    wait_sacct,
)
from conftest import on_real_juju
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm, wait_for_active

SETTLE = 10 * 60
GROUP_CHANGE_SETTLE = 90
"""The lab's SSSD caches 15 s and slurmctld re-reads group members each GroupUpdateTime (set
to 15 s below): a member added in the directory was admitted after 17 s."""
COMPUTE = "compute/0"
REST_PORT = 6820
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


def say(text: str) -> None:
    """A measurement for the report (visible with `-s`)."""
    print(f"\n[directory-users] {text}", flush=True)


def as_user(juju: jubilant.Juju, user: str, command: str, *, unit: str = LOGIN) -> str:
    """Run `command` as `user` (from the directory) in /tmp on `unit`; return its stdout."""
    inner = f"cd /tmp && {command}"
    return sh(juju, f"runuser -u {user} -- sh -c {shlex.quote(inner)}", unit=unit)


def submit(juju: jubilant.Juju, user: str, script: str, *, partition: str = "compute") -> str:
    """Submit `--wrap script` as `user` from the login node; return the job id."""
    options = f"--parsable -p {partition} -N1 --mem=1 -o /tmp/dir-%j.out"
    out = as_user(juju, user, f"sbatch {options} --wrap {shlex.quote(script)}")
    return out.strip().split(";")[0]


@pytest.fixture(scope="module")
def cluster(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> jubilant.Juju:
    """The cluster with accounting and REST, every Slurm machine resolving the directory."""
    if on_real_juju():
        pytest.skip("the ldap application here is the lab's stand-in (slapd seeded by LDIF)")
    began = time.monotonic()
    deploy_slurm(juju, charm_path)
    deploy_rest_api(juju, charm_path)
    deploy_accounting(juju, charm_path)
    juju.deploy("ldap", "ldap", config={"domain": "hpc.lab", "ldif": LDIF})
    juju.deploy("sssd", "sssd")
    for app in SLURM_APPS:
        juju.integrate(f"{app}:juju-info", "sssd:juju-info")
    juju.integrate("sssd:ldap", "ldap:ldap")
    wait_for_active(juju, timeout=SETTLE)
    say(f"deployed and active in {time.monotonic() - began:.0f} s")
    return juju


def test_every_slurm_machine_resolves_the_directory_users(cluster: jubilant.Juju):
    units = [f"{app}/0" for app in SLURM_APPS]
    for unit in units:
        for user, (uid, gid, group) in USERS.items():
            entry = poll(
                lambda unit=unit, user=user: try_sh(cluster, f"getent passwd {user}", unit=unit),
                timeout=60,
                what=f"{user} on {unit}",
            )
            assert entry.split(":")[2:4] == [str(uid), str(gid)], (unit, entry)
            members = sh(cluster, f"getent group {group}", unit=unit)
            assert members.strip().split(":")[3] == user, (unit, members)
        # No directory user is in the machine's own files.
        assert not try_sh(cluster, "grep -E '^(alice|bob):' /etc/passwd", unit=unit)


def test_a_directory_user_submits_from_the_login_node_and_runs_as_themselves(
    cluster: jubilant.Juju,
):
    job = submit(cluster, "alice", "id -u; id -g; id -un; id -gn")
    record = wait_sacct(cluster, job)

    assert record["state"] == "COMPLETED", record
    assert record["user"] == "alice"
    output = sh(cluster, f"cat /tmp/dir-{job}.out", unit=COMPUTE).split("\n")
    assert output[:4] == ["10001", "20001", "alice", "physics"]


def test_a_rest_token_for_a_directory_user_lists_their_jobs(cluster: jubilant.Juju):
    job = submit(cluster, "alice", "true")
    wait_sacct(cluster, job)
    address = cluster.status().apps["slurmrestd"].units["slurmrestd/0"].public_address
    base = f"http://{address}:{REST_PORT}"
    install_client(cluster)
    token = cluster.run(CONTROLLER, "token", {"username": "alice"}).results["token"]
    status, spec = http(cluster, f"{base}/openapi/v3", token, user="alice")
    assert status == 200, spec
    version = api_version(spec)

    status, body = http(cluster, f"{base}/slurmdb/{version}/jobs?users=alice", token, user="alice")

    assert status == 200, body
    jobs = {str(j["job_id"]): j for j in body["jobs"]}
    assert job in jobs, sorted(jobs)
    assert {j["user"] for j in jobs.values()} == {"alice"}


def test_allow_groups_admits_one_directory_group_and_refuses_another(cluster: jubilant.Juju):
    cluster.config("compute", {"partition-config": "AllowGroups=physics"})
    poll(
        lambda: "AllowGroups=physics" in sh(cluster, "scontrol show partition compute"),
        timeout=180,
        what="the partition to allow physics only",
    )

    admitted = submit(cluster, "alice", "true")
    refused = as_user(
        cluster, "bob", "sbatch -p compute -N1 --mem=1 -o /dev/null --wrap true 2>&1 || true"
    )

    assert wait_sacct(cluster, admitted)["state"] == "COMPLETED"
    assert "User's group not permitted to use this partition" in refused, refused


def test_a_member_added_to_a_directory_group_is_admitted_without_a_reconfigure(
    cluster: jubilant.Juju,
):
    # Nothing in the charms caches group members: slurmctld keeps AllowGroups members and
    # re-reads them each GroupUpdateTime (set to 15 s here, 600 s by default; the reconfigure
    # this option change makes happens before the directory changes). Measured on Slurm 24.11:
    # bob is admitted 17 s after the change with GroupUpdateForce at Slurm's default (0) as
    # with 1, though /etc/group never changes.
    cluster.config("slurmctld", {"slurm-conf-parameters": "GroupUpdateTime=15"})
    poll(
        lambda: re.search(r"GroupUpdateTime\s*=\s*15 sec", sh(cluster, "scontrol show config")),
        timeout=180,
        what="GroupUpdateTime=15",
    )
    change = (
        "dn: cn=physics,ou=groups,dc=hpc,dc=lab\nchangetype: modify\nadd: memberUid\n"
        "memberUid: bob\n"
    )
    sh(
        cluster,
        "ldapmodify -x -H ldapi:/// -D cn=admin,dc=hpc,dc=lab -y /root/.ldap-admin"
        f" <<'EOF'\n{change}EOF",
        unit="ldap/0",
    )
    added = time.monotonic()

    def admitted() -> str | None:
        out = as_user(
            cluster,
            "bob",
            "sbatch --parsable -p compute -N1 --mem=1 -o /dev/null --wrap true 2>&1 || true",
        )
        return out.strip() if out.strip().isdigit() else None

    job = poll(admitted, timeout=GROUP_CHANGE_SETTLE, interval=5, what="bob admitted")
    say(f"bob admitted {time.monotonic() - added:.0f} s after joining physics in the directory")
    assert wait_sacct(cluster, job)["user"] == "bob"
