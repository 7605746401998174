"""Accounting (issue 9) and the REST API (issue 10) end to end, against real Slurm.

One deployment for the module: slurmctld, a slurmd application `compute` (one unit), a sackd
login node, slurmdbd with MySQL (on the lab: the MariaDB stand-in), and slurmrestd. The
cluster first runs without accounting; then slurmdbd joins, so the first test sees how
slurmctld takes accounting on (reconfigure or restart). Each later test builds on the
cluster the previous ones left and proves one behaviour. The REST tests speak HTTP from the
login machine to slurmrestd with python3's standard library (any machine has it).

Run with `-s` to see the measurements (timings, p50/p99 of the load test).
"""

from __future__ import annotations

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
from conftest import on_real_juju
from deploy_helpers import deploy_accounting, deploy_rest_api, deploy_slurm

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
