"""The `juju` fixture works end to end: deploy, wait, action, exec, relate, scale down.

Uses the lab backend's small test charm (on real Juju only when a packed one is given with
CHARM_LABTEST_PATH).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jubilant


def test_deploy_relate_and_talk_to_units(juju: jubilant.Juju, charm_path: Callable[[str], Path]):
    charm = charm_path("labtest")
    juju.deploy(charm, "server")
    juju.deploy(charm, "client")
    juju.integrate("server:provide", "client:require")

    juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=10 * 60)

    task = juju.run("client/0", "get-state")
    events = json.loads(task.results["events"])
    assert events[:2] == ["install", "peers_relation_created"]
    assert "require_relation_changed:server/0" in events
    status = juju.status()
    machine = status.apps["client"].units["client/0"].machine
    hostname = juju.exec("hostname", unit="client/0").stdout.strip()
    assert hostname == status.machines[machine].hostname

    juju.remove_relation("server", "client")
    juju.wait(lambda status: not status.apps["client"].relations.get("require"), timeout=300)
