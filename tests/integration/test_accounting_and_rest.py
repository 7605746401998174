"""Accounting (issue 9), the REST API (issue 10) and directory users (issue 40) end to end.

One deployment for the module: slurmctld, a slurmd application `compute` (one unit), a sackd
login node, slurmdbd with MySQL (on the lab: the MariaDB stand-in), and slurmrestd. The
cluster first runs without accounting; then slurmdbd joins, so the first test sees how
slurmctld takes accounting on (reconfigure or restart). Each later test builds on the
cluster the previous ones left and proves one behaviour. The REST tests speak HTTP from the
login machine to slurmrestd with python3's standard library (any machine has it). Last, the
site's directory joins the running cluster (`ldap`, and the `sssd` subordinate on every Slurm
machine; directory_helpers.py): users who exist in no machine's files submit, run as
themselves, show in sacct and REST, and are admitted or refused by `AllowGroups`. Then an
`accounts` document on slurmctld gives them accounts, a QoS and fair shares (associations as
code): Slurm refuses a job over the QoS's MaxWall, fair shares order their pending jobs as
the document says, a user dropped from it keeps their running job and loses access after it,
and a change made by hand shows in `accounts-diff` until the next reconcile undoes it.

Run with `-s` to see the measurements (timings, p50/p99 of the load test).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jubilant
import pytest
from accounting_rest_helpers import (
    CONTROLLER,
    LOGIN,
    RECONFIGURE_LINE,
    SLURMCTLD_LOG,
    STARTED_LINE,
    api_version,
    count_log_lines,
    http,
    install_client,
    invocation,
    job_state,
    load_test,
    poll,
    sacct_job,
    sbatch,
    sh,
    slurm_config,
    try_sh,
    wait_sacct,
)
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm
from directory_helpers import (
    COMPUTE,
    GROUP_CHANGE_SETTLE,
    SLURM_APPS,
    USERS,
    add_directory,
    as_user,
    submit,
)

from conftest import NEWER_SUITE, on_real_juju

RELEASES = ("trixie", "forky")
"""Accounting and REST on 24.11 and 26.05; the directory users on 24.11 only (`directory`)."""
SETTLE = 10 * 60
ACCOUNTING_SETTLE = 4 * 60
"""slurmdbd joining a running cluster takes about 20 s; far longer means it is stuck."""
PARTITION = "compute"
DBD = "slurmdbd/0"
REST_PORT = 6820
WITHOUT_ACCOUNTING = ("slurmctld", "compute", "login", "mysql", "slurmrestd")
EVERY_APP = (*WITHOUT_ACCOUNTING, "slurmdbd")


def say(text: str) -> None:
    """A measurement for the report (visible with `-s`)."""
    print(f"\n[accounting-and-rest] {text}", flush=True)


def wait_active(
    juju: jubilant.Juju, *apps: str, timeout: float = SETTLE, blocked: tuple[str, ...] = ()
) -> jubilant.Status:
    """Wait until `apps` are active; fail at once on an error, or if one of `blocked` blocks."""
    return juju.wait(
        lambda status: jubilant.all_active(status, *apps),
        error=lambda status: (
            (jubilant.any_error(status, *apps) or jubilant.any_blocked(status, *blocked))
            if blocked
            else jubilant.any_error(status, *apps)
        ),
        timeout=timeout,
    )


def controller_status(juju: jubilant.Juju) -> str:
    return juju.status().apps["slurmctld"].units[CONTROLLER].workload_status.message


def controller_evidence(juju: jubilant.Juju) -> dict[str, Any]:
    """What tells a restart of slurmctld from a reconfigure."""
    return {
        "reconfigures": count_log_lines(juju, RECONFIGURE_LINE),
        "starts": count_log_lines(juju, STARTED_LINE),
        "invocation": invocation(juju, "slurmctld", CONTROLLER),
        "accounting": slurm_config(juju, "AccountingStorageType"),
    }


@pytest.fixture(scope="module")
def memo() -> dict[str, Any]:
    """What one test of the scenario leaves for a later one."""
    return {}


@pytest.fixture(scope="module")
def cluster(
    juju: jubilant.Juju, charm_path: Callable[[str], Path], memo: dict[str, Any]
) -> jubilant.Juju:
    """The cluster with the REST API, then slurmdbd integrated: every unit active."""
    began = time.monotonic()
    deploy_slurm(juju, charm_path)
    deploy_rest_api(juju, charm_path)
    deploy_accounting(juju, charm_path, with_slurmctld=False)
    wait_active(juju, *WITHOUT_ACCOUNTING)
    deployed = time.monotonic()
    memo["before"] = controller_evidence(juju)

    juju.integrate("slurmctld:slurmdbd", "slurmdbd:slurmctld")
    try:
        # A blocked controller is not retried before the next update-status: fail at once.
        wait_active(juju, *EVERY_APP, timeout=ACCOUNTING_SETTLE, blocked=("slurmctld",))
        poll(
            lambda: "accounting" in controller_status(juju),
            timeout=60,
            what="slurmctld to account to slurmdbd",
        )
    except (TimeoutError, AssertionError, jubilant.WaitError) as e:
        fatal = sh(juju, f"grep -A2 fatal {SLURMCTLD_LOG} | tail -4 || true")
        raise AssertionError(
            f"accounting did not start: slurmctld says {controller_status(juju)!r}; "
            f"its log: {fatal.strip() or 'no fatal line'}"
        ) from e
    memo["after"] = controller_evidence(juju)
    say(
        f"deployed without accounting in {deployed - began:.0f} s; "
        f"slurmdbd integrated and active in {time.monotonic() - deployed:.0f} s"
    )
    memo["cluster"] = slurm_config(juju, "ClusterName")
    return juju


# Issue 9: accounting.


def test_slurmctld_takes_accounting_on_with_a_reconfigure(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    """Accounting (AccountingStorage*) is applied by `scontrol reconfigure`, not a restart."""
    before, after = memo["before"], memo["after"]
    say(f"slurmctld before slurmdbd joined: {before}")
    say(f"slurmctld after slurmdbd joined: {after}")

    assert before["accounting"] in ("(null)", "accounting_storage/none")
    assert after["accounting"] == "accounting_storage/slurmdbd"
    assert after["invocation"] == before["invocation"], "slurmctld was restarted"
    assert after["reconfigures"] > before["reconfigures"]


def test_the_cluster_registers_itself_in_the_database(
    cluster: jubilant.Juju, memo: dict[str, Any]
):
    name = memo["cluster"]

    listed = poll(
        lambda: (
            name
            in (
                try_sh(cluster, "sacctmgr -n -P show cluster format=Cluster", unit=LOGIN) or ""
            ).split()
        ),
        timeout=60,
        what=f"cluster {name} in sacctmgr",
    )

    assert listed


def test_a_job_from_the_login_node_appears_in_sacct_with_its_exit_code(cluster: jubilant.Juju):
    started = time.monotonic()
    job_id = sbatch(cluster, "exit 3", partition=PARTITION)

    record = wait_sacct(cluster, job_id)

    say(f"job {job_id} (exit 3) in sacct {time.monotonic() - started:.1f} s after sbatch")
    assert record["state"] == "FAILED"
    assert record["exit_code"] == "3:0"
    assert record["user"] == "root"


def test_jobs_run_while_slurmdbd_is_down_and_are_recorded_once_it_is_back(
    cluster: jubilant.Juju,
):
    sh(cluster, "systemctl stop slurmdbd", unit=DBD)
    try:
        assert try_sh(cluster, "sacct -X -n -j 1", unit=LOGIN) is None, "sacct still answers"
        job_id = sbatch(cluster, "exit 0", partition=PARTITION)
        poll(
            lambda: job_state(cluster, job_id) == "COMPLETED",
            timeout=60,
            what=f"job {job_id} to complete without slurmdbd",
        )
        assert sacct_job(cluster, job_id) is None
    finally:
        sh(cluster, "systemctl start slurmdbd", unit=DBD)
    back = time.monotonic()

    record = wait_sacct(cluster, job_id, timeout=180)

    say(f"job {job_id}, run without slurmdbd, in sacct {time.monotonic() - back:.1f} s after")
    assert (record["state"], record["exit_code"]) == ("COMPLETED", "0:0")


def test_a_mysql_password_change_is_picked_up_without_operator_action(
    cluster: jubilant.Juju,
):
    rotate = getattr(cluster, "rotate_mysql_password", None)
    if on_real_juju() or rotate is None:
        pytest.skip("the password rotation is the lab stand-in's (the mysql charm has none)")
    conf = "sha256sum /etc/slurm/slurmdbd.conf"
    old_conf = sh(cluster, conf, unit=DBD)
    old_run = invocation(cluster, "slurmdbd", DBD)
    started = time.monotonic()

    assert rotate() == 1

    poll(
        lambda: (
            sh(cluster, conf, unit=DBD) != old_conf
            and invocation(cluster, "slurmdbd", DBD) != old_run
        ),
        timeout=120,
        what="slurmdbd restarted with the new password",
    )
    wait_active(cluster, *EVERY_APP, timeout=120)
    job_id = sbatch(cluster, "exit 0", partition=PARTITION)
    record = wait_sacct(cluster, job_id)
    say(f"password rotated: a new job in sacct {time.monotonic() - started:.1f} s after")
    assert record["state"] == "COMPLETED"
    logs = sh(cluster, "journalctl -u slurmdbd --no-pager -n 50", unit=DBD)
    assert "Access denied" not in logs.split("Started slurmdbd")[-1]


# Issue 10: the REST API, over HTTP from the login machine.


@pytest.fixture(scope="module")
def rest(cluster: jubilant.Juju) -> dict[str, Any]:
    """The REST API's base URL, a root token, and the data_parser version negotiated."""
    address = cluster.status().apps["slurmrestd"].units["slurmrestd/0"].public_address
    base = f"http://{address}:{REST_PORT}"
    install_client(cluster)
    token = cluster.run(CONTROLLER, "token", {"username": "root"}).results["token"]
    status, spec = http(cluster, f"{base}/openapi/v3", token)
    assert status == 200, spec
    version = api_version(spec)
    say(f"REST API at {base}, data_parser {version}")
    return {"base": base, "token": token, "version": version}


def test_a_valid_token_lists_the_nodes(cluster: jubilant.Juju, rest: dict[str, Any]):
    status, body = http(cluster, f"{rest['base']}/slurm/{rest['version']}/nodes", rest["token"])

    assert status == 200, body
    assert [n["name"] for n in body["nodes"]] == ["compute-0"]
    assert not body.get("errors")


def rejected_by_slurmctld(status: int, body: Any) -> bool:
    """Whether slurmctld refused the token: HTTP 511 with error 1007, listing nothing.

    That, not 401, is what Slurm answers for a token that is present but bad or expired, with
    or without the JWT key on slurmrestd's machine (checked on the lab with the key at the
    `jwt_key=` path, 0600 slurmrestd): slurmrestd never verifies a token. Its `rest_auth/jwt`
    (src/slurmrestd/plugins/auth/jwt/jwt.c, `slurm_rest_auth_p_authenticate`) accepts any
    X-SLURM-USER-TOKEN and passes it on, and `auth/jwt` loads a key only inside slurmctld
    and slurmdbd (src/plugins/auth/jwt/auth_jwt.c, `init`). slurmctld's `_on_msg`
    (src/slurmctld/controller.c) answers SLURM_PROTOCOL_AUTHENTICATION_ERROR (1007), which
    slurmrestd's `_call_handler` (src/slurmrestd/operations.c) sends as 511.
    """
    errors = body.get("errors", []) if isinstance(body, dict) else []
    auth_error = any(e.get("error_number") == 1007 for e in errors)
    listed = isinstance(body, dict) and body.get("nodes")
    return status == 511 and auth_error and not listed


def test_a_bad_token_is_rejected_by_slurmctld(cluster: jubilant.Juju, rest: dict[str, Any]):
    token = rest["token"]
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")

    status, body = http(cluster, f"{rest['base']}/slurm/{rest['version']}/nodes", forged)

    say(f"a forged token: HTTP {status}")
    assert rejected_by_slurmctld(status, body), (status, body)


def test_an_expired_token_is_rejected_by_slurmctld(cluster: jubilant.Juju, rest: dict[str, Any]):
    token = cluster.run(CONTROLLER, "token", {"username": "root", "lifespan": 1}).results["token"]
    time.sleep(3)

    status, body = http(cluster, f"{rest['base']}/slurm/{rest['version']}/nodes", token)

    say(f"an expired token: HTTP {status}")
    assert rejected_by_slurmctld(status, body), (status, body)


@pytest.mark.parametrize("user", ["root", ""], ids=["user-name-only", "no-header"])
def test_a_request_without_a_token_is_refused_with_401(
    cluster: jubilant.Juju, rest: dict[str, Any], user: str
):
    """slurmrestd itself refuses a request that carries no token (`operations_router`)."""
    url = f"{rest['base']}/slurm/{rest['version']}/nodes"

    status, body = http(cluster, url, "", user=user)

    say(f"no token ({user or 'no header at all'}): HTTP {status}")
    assert status == 401, (status, body)
    assert not (isinstance(body, dict) and body.get("nodes"))


def test_the_rest_api_serves_accounting_once_slurmdbd_joined(
    cluster: jubilant.Juju, rest: dict[str, Any]
):
    """slurmrestd loads openapi/slurmdbd once slurm.conf sends accounting to slurmdbd."""
    url = f"{rest['base']}/slurmdb/{rest['version']}/jobs"

    status, body = http(cluster, url, rest["token"])

    assert status == 200, body
    assert body.get("jobs"), "no job in accounting"


def test_a_job_submitted_over_rest_runs_and_appears_in_sacct(
    cluster: jubilant.Juju, rest: dict[str, Any]
):
    job = {
        "job": {
            "name": "rest-job",
            "partition": PARTITION,
            "script": "#!/bin/sh\nexit 5\n",
            "current_working_directory": "/tmp",
            "environment": ["PATH=/usr/bin:/bin"],
            "standard_output": "/dev/null",
            "memory_per_node": {"set": True, "number": 1},
        }
    }
    url = f"{rest['base']}/slurm/{rest['version']}/job/submit"

    status, body = http(cluster, url, rest["token"], body=job)

    assert status == 200, body
    job_id = str(body["job_id"])
    record = wait_sacct(cluster, job_id)
    assert (record["state"], record["exit_code"], record["user"]) == ("FAILED", "5:0", "root")


def test_a_thousand_gets_at_concurrency_16_all_succeed(
    cluster: jubilant.Juju, rest: dict[str, Any]
):
    url = f"{rest['base']}/slurm/{rest['version']}/nodes"

    result = load_test(cluster, url, rest["token"], total=1000, workers=16, seconds=180)

    say(
        f"1000 GET {url} at concurrency 16: {result['statuses']} in {result['seconds']:.1f} s, "
        f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms, "
        f"max {result['max_ms']:.1f} ms"
    )
    assert result["requests"] == 1000
    assert result["statuses"] == {"200": 1000}


# Issue 40: directory users. The same cluster takes an `ldap` application and the `sssd`
# subordinate on every Slurm machine, as a site adds its directory to a running cluster.


@pytest.fixture(scope="module")
def directory(cluster: jubilant.Juju, lab_release: str | None) -> jubilant.Juju:
    """The cluster with every Slurm machine resolving the directory's users."""
    if on_real_juju():
        pytest.skip("the ldap application here is the lab's stand-in (slapd seeded by LDIF)")
    if lab_release == NEWER_SUITE:
        pytest.skip("Debian forky has no SSSD (sssd-ldap, libnss-sss: no installation candidate)")
    began = time.monotonic()
    add_directory(cluster)
    wait_active(cluster, *EVERY_APP, "ldap", "sssd")
    say(f"directory added and every unit active in {time.monotonic() - began:.0f} s")
    return cluster


def test_every_slurm_machine_resolves_the_directory_users(directory: jubilant.Juju):
    units = [f"{app}/0" for app in SLURM_APPS]
    for unit in units:
        for user, (uid, gid, group) in USERS.items():
            entry = poll(
                lambda unit=unit, user=user: try_sh(directory, f"getent passwd {user}", unit=unit),
                timeout=60,
                what=f"{user} on {unit}",
            )
            assert entry.split(":")[2:4] == [str(uid), str(gid)], (unit, entry)
            members = sh(directory, f"getent group {group}", unit=unit)
            assert members.strip().split(":")[3] == user, (unit, members)
        # No directory user is in the machine's own files.
        assert not try_sh(directory, "grep -E '^(alice|bob):' /etc/passwd", unit=unit)


def test_a_directory_user_submits_from_the_login_node_and_runs_as_themselves(
    directory: jubilant.Juju,
):
    job = submit(directory, "alice", "id -u; id -g; id -un; id -gn")
    record = wait_sacct(directory, job)

    assert record["state"] == "COMPLETED", record
    assert record["user"] == "alice"
    output = sh(directory, f"cat /tmp/dir-{job}.out", unit=COMPUTE).split("\n")
    assert output[:4] == ["10001", "20001", "alice", "physics"]


def test_a_rest_token_for_a_directory_user_lists_their_jobs(directory: jubilant.Juju):
    job = submit(directory, "alice", "true")
    wait_sacct(directory, job)
    address = directory.status().apps["slurmrestd"].units["slurmrestd/0"].public_address
    base = f"http://{address}:{REST_PORT}"
    install_client(directory)
    token = directory.run(CONTROLLER, "token", {"username": "alice"}).results["token"]
    status, spec = http(directory, f"{base}/openapi/v3", token, user="alice")
    assert status == 200, spec
    version = api_version(spec)

    status, body = http(
        directory, f"{base}/slurmdb/{version}/jobs?users=alice", token, user="alice"
    )

    assert status == 200, body
    jobs = {str(j["job_id"]): j for j in body["jobs"]}
    assert job in jobs, sorted(jobs)
    assert {j["user"] for j in jobs.values()} == {"alice"}


def test_allow_groups_admits_one_directory_group_and_refuses_another(directory: jubilant.Juju):
    directory.config("compute", {"partition-config": "AllowGroups=physics"})
    poll(
        lambda: "AllowGroups=physics" in sh(directory, "scontrol show partition compute"),
        timeout=180,
        what="the partition to allow physics only",
    )

    admitted = submit(directory, "alice", "true")
    refused = as_user(
        directory, "bob", "sbatch -p compute -N1 --mem=1 -o /dev/null --wrap true 2>&1 || true"
    )

    assert wait_sacct(directory, admitted)["state"] == "COMPLETED"
    assert "User's group not permitted to use this partition" in refused, refused


def test_a_member_added_to_a_directory_group_is_admitted_without_a_reconfigure(
    directory: jubilant.Juju,
):
    # Nothing in the charms caches group members: slurmctld keeps AllowGroups members and
    # re-reads them each GroupUpdateTime (set to 15 s here, 600 s by default; the reconfigure
    # this option change makes happens before the directory changes). Measured on Slurm 24.11:
    # bob is admitted 17 s after the change with GroupUpdateForce at Slurm's default (0) as
    # with 1, though /etc/group never changes.
    directory.config("slurmctld", {"slurm-conf-parameters": "GroupUpdateTime=15"})
    poll(
        lambda: re.search(r"GroupUpdateTime\s*=\s*15 sec", sh(directory, "scontrol show config")),
        timeout=180,
        what="GroupUpdateTime=15",
    )
    change = (
        "dn: cn=physics,ou=groups,dc=hpc,dc=lab\nchangetype: modify\nadd: memberUid\n"
        "memberUid: bob\n"
    )
    sh(
        directory,
        "ldapmodify -x -H ldapi:/// -D cn=admin,dc=hpc,dc=lab -y /root/.ldap-admin"
        f" <<'EOF'\n{change}EOF",
        unit="ldap/0",
    )
    added = time.monotonic()

    def admitted() -> str | None:
        out = as_user(
            directory,
            "bob",
            "sbatch --parsable -p compute -N1 --mem=1 -o /dev/null --wrap true 2>&1 || true",
        )
        return out.strip() if out.strip().isdigit() else None

    job = poll(admitted, timeout=GROUP_CHANGE_SETTLE, interval=5, what="bob admitted")
    say(f"bob admitted {time.monotonic() - added:.0f} s after joining physics in the directory")
    assert wait_sacct(directory, job)["user"] == "bob"


# Issue 40: associations as code. The same cluster takes an `accounts` document on slurmctld:
# the directory's users get accounts, a QoS limit and fair shares, and slurm.conf enforces them.

QOS_MAX_WALL_MINUTES = 5
FAIRSHARE_SETTLE = 150
"""Fair shares and pending jobs' priorities are recomputed each PriorityCalcPeriod (1 min here)."""
PRIORITY = "\n".join(
    (
        "GroupUpdateTime=15",  # The directory tests' setting, kept.
        "PriorityType=priority/multifactor",
        "PriorityWeightFairshare=100000",
        "PriorityCalcPeriod=1",
    )
)


def accounts_document(*, physics: int, chemistry: int, bob: bool = True) -> str:
    """alice in physics (its jobs in QoS `short`), bob in chemistry; fair shares as given."""
    users = "  alice: {accounts: [physics]}\n"
    if bob:
        users += "  bob: {accounts: [chemistry]}\n"
    return (
        "qos:\n"
        f'  short: {{max-wall: "00:{QOS_MAX_WALL_MINUTES:02d}:00"}}\n'
        "accounts:\n"
        f"  physics: {{fairshare: {physics}, qos: [normal, short], default-qos: short}}\n"
        f"  chemistry: {{fairshare: {chemistry}}}\n"
        f"users:\n{users}"
    )


def associations(juju: jubilant.Juju) -> set[tuple[str, str]]:
    """The (account, user) associations slurmdbd holds with a user (sacctmgr, on the login)."""
    out = sh(juju, "sacctmgr -n -P show assoc format=Account,User", unit=LOGIN)
    pairs = (line.split("|") for line in out.split("\n") if line.count("|") == 1)
    return {(account, user) for account, user in pairs if user}


def fairshare_of(juju: jubilant.Juju, account: str) -> str | None:
    """The fair share of `account`'s own association (the line without a user)."""
    out = sh(juju, f"sacctmgr -n -P show assoc account={account} format=User,Fairshare")
    shares = [line[1:] for line in out.split("\n") if line.startswith("|")]
    return shares[0] if len(shares) == 1 else None


def fire_update_status(juju: jubilant.Juju) -> None:
    """Fire update-status on the controller now (lab only: on Juju it comes within 5 min)."""
    if hasattr(juju, "update_status"):
        juju.update_status(CONTROLLER)  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def accounts(directory: jubilant.Juju) -> jubilant.Juju:
    """The directory's users with accounts, a QoS and fair shares: the document applied."""
    began = time.monotonic()
    directory.config("compute", {"partition-config": ""})  # Every group may use it again.
    directory.config(
        "slurmctld",
        {
            "slurm-conf-parameters": PRIORITY,
            "accounts": accounts_document(physics=1, chemistry=9),
        },
    )
    poll(
        lambda: {("physics", "alice"), ("chemistry", "bob")} <= associations(directory),
        timeout=180,
        what="the document's associations in slurmdbd",
    )
    enforce = poll(
        lambda: slurm_config(directory, "AccountingStorageEnforce"),
        timeout=120,
        what="AccountingStorageEnforce",
    )
    assert {"associations", "limits", "qos"} <= set(enforce.lower().split(",")), enforce
    poll(
        lambda: "AllowGroups=ALL" in sh(directory, "scontrol show partition compute"),
        timeout=180,
        what="the partition open to every group",
    )
    wait_active(directory, *EVERY_APP, "ldap", "sssd", timeout=300)
    say(f"accounts document applied and enforced in {time.monotonic() - began:.0f} s")
    return directory


def test_a_job_over_the_qos_max_wall_is_refused_by_slurm(accounts: jubilant.Juju):
    """alice's jobs run in QoS `short` (her account's default): a longer one is refused."""
    minutes = QOS_MAX_WALL_MINUTES * 2
    out = as_user(
        accounts,
        "alice",
        f"sbatch --parsable -p compute -N1 --mem=1 -t {minutes} -o /dev/null --wrap true"
        " 2>&1 || true",
    ).strip()
    within = submit(accounts, "alice", "true")

    if out.isdigit():  # Accepted, then held by Slurm: the QoS limit is its pending reason.
        reason = poll(
            lambda: sh(accounts, f"squeue -h -j {out} -o %r", unit=LOGIN).strip() or None,
            timeout=60,
            what=f"job {out}'s pending reason",
        )
        sh(accounts, f"scancel {out}", unit=LOGIN)
        say(f"a {minutes}-minute job in QoS short pends: {reason}")
        assert reason == "QOSMaxWallDurationPerJobLimit", reason
    else:
        say(f"a {minutes}-minute job in QoS short: {out}")
        assert "Job violates accounting/QOS policy" in out, out
    assert wait_sacct(accounts, within)["state"] == "COMPLETED"


def priorities(juju: jubilant.Juju, jobs: dict[str, str]) -> dict[str, int]:
    """Each user's pending job's priority (`jobs`: user -> job id)."""
    found: dict[str, int] = {}
    for user, job in jobs.items():
        value = sh(juju, f"squeue -h -j {job} -o %Q", unit=LOGIN).strip()
        found[user] = int(value) if value.isdigit() else -1
    return found


def test_fairshare_orders_two_users_pending_jobs_as_the_document_says(accounts: jubilant.Juju):
    # Fair shares weigh shares against usage: both users first use the cluster alike.
    used = [submit(accounts, user, "sleep 70") for user in ("alice", "bob")]
    for job in used:
        wait_sacct(accounts, job, timeout=300)

    def raw_usage() -> dict[str, int] | None:
        out = sh(accounts, "sshare -a -h -P -o User,RawUsage", unit=LOGIN)
        usage = {
            user: int(raw)
            for user, raw in (line.split("|") for line in out.split("\n") if line.count("|") == 1)
            if user in ("alice", "bob") and raw.isdigit()
        }
        return usage if len(usage) == 2 and all(usage.values()) else None

    usage = poll(raw_usage, timeout=FAIRSHARE_SETTLE, interval=5, what="both users' usage")
    blocker = sh(
        accounts,
        f"sbatch --parsable -p {PARTITION} -N1 --exclusive -o /dev/null --wrap 'sleep 600'",
        unit=LOGIN,
    ).strip()
    poll(
        lambda: job_state(accounts, blocker) == "RUNNING",
        timeout=60,
        what="the blocking job running",
    )
    try:
        pending = {user: submit(accounts, user, "true") for user in ("alice", "bob")}

        chemistry_first = poll(
            lambda: (p := priorities(accounts, pending))["bob"] > p["alice"] >= 0 and p,
            timeout=FAIRSHARE_SETTLE,
            interval=5,
            what="bob (chemistry, 9 shares) before alice (physics, 1 share)",
        )
        accounts.config("slurmctld", {"accounts": accounts_document(physics=9, chemistry=1)})
        physics_first = poll(
            lambda: (p := priorities(accounts, pending))["alice"] > p["bob"] >= 0 and p,
            timeout=FAIRSHARE_SETTLE,
            interval=5,
            what="alice before bob once physics has 9 shares and chemistry 1",
        )
    finally:
        sh(accounts, f"scancel {blocker}", unit=LOGIN)
    say(
        f"raw usage {usage}; priorities with chemistry 9:1 {chemistry_first}, "
        f"with physics 9:1 {physics_first}"
    )
    assert fairshare_of(accounts, "physics") == "9"


def test_a_user_removed_from_the_document_keeps_their_running_job_then_loses_access(
    accounts: jubilant.Juju,
):
    running = submit(accounts, "bob", "sleep 45")
    poll(lambda: job_state(accounts, running) == "RUNNING", timeout=120, what="bob's job running")

    accounts.config(
        "slurmctld", {"accounts": accounts_document(physics=9, chemistry=1, bob=False)}
    )
    held = poll(
        lambda: "removal held" in (status := controller_status(accounts)) and status,
        timeout=120,
        what="the removal of bob held while his job runs",
    )
    assert ("chemistry", "bob") in associations(accounts)
    assert job_state(accounts, running) == "RUNNING"

    record = wait_sacct(accounts, running, timeout=180)
    ended = time.monotonic()
    gone = poll(
        lambda: (
            ("chemistry", "bob") not in associations(accounts)
            or fire_update_status(accounts)  # None: poll again after the next hook
        ),
        timeout=180,
        interval=10,
        what="bob's association removed once his job ended",
    )
    refused = as_user(
        accounts, "bob", "sbatch -p compute -N1 --mem=1 -o /dev/null --wrap true 2>&1 || true"
    )

    say(f"held: {held!r}; removed {time.monotonic() - ended:.0f} s after the job ended")
    assert gone
    assert record["state"] == "COMPLETED", record
    assert "Invalid account" in refused, refused


def test_a_hand_made_change_shows_in_accounts_diff_and_the_next_reconcile_undoes_it(
    accounts: jubilant.Juju,
):
    sh(accounts, "sacctmgr -i modify account physics set fairshare=42", unit=LOGIN)
    assert fairshare_of(accounts, "physics") == "42"

    result = accounts.run(CONTROLLER, "accounts-diff")

    differences = str(result.results["differences"])
    say(f"accounts-diff after a hand-made change: {differences!r}")
    assert int(result.results["count"]) >= 1
    assert "physics" in differences and "fairshare" in differences.lower(), differences

    restored = poll(
        lambda: fairshare_of(accounts, "physics") == "9" or fire_update_status(accounts),
        timeout=180,
        interval=10,
        what="the document's fairshare put back",
    )
    assert restored
    clean = accounts.run(CONTROLLER, "accounts-diff").results
    assert int(clean["count"]) == 0, clean
