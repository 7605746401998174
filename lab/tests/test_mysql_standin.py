"""The lab's mysql stand-in: a real MariaDB on its own machine, answering mysql_client v0.

A tiny requirer charm (tests/charms/dbclient) asks for a database; the stand-in creates it and
a user, publishes the v0 fields and a `secret-user` secret; the client's machine connects with
those credentials over the lab network; a password rotation reaches the client as
secret-changed, and only the new password works afterwards.
"""

from __future__ import annotations

import time
from pathlib import Path

import jubilant
import pytest
from slurm_lab.juju import LabJuju

pytestmark = pytest.mark.lab

CLIENT = Path(__file__).parent / "charms" / "dbclient"


@pytest.fixture(scope="module")
def juju(lab_juju: LabJuju) -> LabJuju:
    return lab_juju


def credentials(juju: LabJuju) -> dict[str, str]:
    """The content of the stand-in's `secret-user`, as the model holds it."""
    (relation,) = [r for r in juju.state.relations.values() if not r.is_peer]
    secret_id = relation.app_data["mysql"]["secret-user"]
    return juju.state.secrets[secret_id].latest.content


def query(juju: LabJuju, user: str, password: str, host: str) -> jubilant.Task:
    """Run a query on the client's machine with these credentials (never raises)."""
    sql = "CREATE TABLE IF NOT EXISTS t (x INT); INSERT INTO t VALUES (1); SELECT COUNT(*) FROM t"
    command = f"mariadb -h {host} -u {user} -p{password} -N -B labtest -e '{sql}'"
    try:
        return juju.exec(command, unit="dbclient/0")
    except jubilant.TaskError as e:
        return e.task


def test_mysql_stand_in_answers_v0_and_rotates_the_password(juju: LabJuju):
    started = time.monotonic()
    juju.deploy("mysql", channel="8.0/stable")
    juju.deploy(CLIENT)
    juju.integrate("dbclient:database", "mysql:database")

    status = juju.wait(jubilant.all_active, error=jubilant.any_error, delay=0.2, timeout=60)

    assert status.apps["mysql"].units["mysql/0"].workload_status.message == "Primary"
    (relation,) = [r for r in juju.state.relations.values() if not r.is_peer]
    answer = relation.app_data["mysql"]
    address = juju.state.units["mysql/0"].address
    assert answer["endpoints"] == answer["read-only-endpoints"] == f"{address}:3306"
    assert answer["database"] == "labtest"
    assert "MariaDB" in answer["version"]
    assert "password" not in answer and "username" not in answer
    first = credentials(juju)
    assert first["username"] == f"relation-{relation.id}"
    # another machine reaches the server with the published credentials
    assert query(juju, first["username"], first["password"], address).stdout.split() == ["1"]
    client_file = juju.exec("cat /root/dbclient.cnf", unit="dbclient/0").stdout
    assert f"password={first['password']}" in client_file

    assert juju.rotate_mysql_password() == 1

    second = credentials(juju)
    assert second["password"] != first["password"]
    refused = query(juju, first["username"], first["password"], address)
    assert refused.return_code != 0
    assert "Access denied" in refused.stderr
    assert query(juju, second["username"], second["password"], address).stdout.split() == ["2"]
    # the client saw secret-changed and wrote the new password
    client_file = juju.exec("cat /root/dbclient.cnf", unit="dbclient/0").stdout
    assert f"password={second['password']}" in client_file
    print(f"\n[lab timing] mysql stand-in scenario {time.monotonic() - started:.1f}s")
