"""What the integration modules deploy (the charms' options on the lab, the usual clusters), and
the wait for them to settle.

On real Juju the same calls deploy the same applications (MySQL is the charm there, the lab's
stand-in here); `slurm-package-source=archive` and `process-isolation=none` are lab settings
only (Debian machines with Slurm in their archive, a cgroup v1 host), never product defaults.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import jubilant

from conftest import on_real_juju

LAB_OPTIONS = {"slurm-package-source": "archive"}
CONTROLLER_OPTIONS = {**LAB_OPTIONS, "process-isolation": "none"}


def deploy_slurm(
    juju: jubilant.Juju,
    charm_path: Callable[[str], Path],
    *,
    controllers: int = 1,
    network_state: bool = False,
    computes: Sequence[tuple[str, int]] = (("compute", 1),),
    login: bool = True,
) -> None:
    """Deploy and integrate slurmctld, slurmd applications (name, units) and a sackd `login`.

    With `network_state` the controllers keep their state on a filesystem-client `fs` (the
    lab's NFS stand-in). slurmd applications are integrated in the order given: the first is
    the oldest, whose partition is the implicit default.
    """
    options = {**CONTROLLER_OPTIONS, "use-network-state": True} if network_state else None
    juju.deploy(
        charm_path("slurmctld"),
        "slurmctld",
        num_units=controllers,
        config=options or CONTROLLER_OPTIONS,
    )
    if network_state:
        juju.deploy("filesystem-client", "fs")
        juju.integrate("slurmctld:mount", "fs:mount")
    for app, units in computes:
        juju.deploy(charm_path("slurmd"), app, num_units=units, config=LAB_OPTIONS)
        juju.integrate("slurmctld:slurmd", f"{app}:slurmctld")
    if login:
        juju.deploy(charm_path("sackd"), "login", config=LAB_OPTIONS)
        juju.integrate("slurmctld:login-node", "login:slurmctld")


def deploy_rest_api(juju: jubilant.Juju, charm_path: Callable[[str], Path]) -> None:
    """Deploy slurmrestd and integrate it with slurmctld."""
    juju.deploy(charm_path("slurmrestd"), "slurmrestd", config=LAB_OPTIONS)
    juju.integrate("slurmctld:slurmrestd", "slurmrestd:slurmctld")


def deploy_accounting(
    juju: jubilant.Juju,
    charm_path: Callable[[str], Path],
    *,
    units: int = 1,
    with_slurmctld: bool = True,
) -> None:
    """Deploy slurmdbd (`units`) on MySQL; integrate it with slurmctld unless told not to."""
    juju.deploy(charm_path("slurmdbd"), "slurmdbd", num_units=units, config=LAB_OPTIONS)
    if on_real_juju():
        juju.deploy("mysql", "mysql", channel="8.0/stable", base="ubuntu@22.04")
    else:
        juju.deploy("mysql", "mysql")
    juju.integrate("slurmdbd:database", "mysql:database")
    if with_slurmctld:
        juju.integrate("slurmctld:slurmdbd", "slurmdbd:slurmctld")


def wait_for_active(
    juju: jubilant.Juju, *names: str, timeout: float, apps: Sequence[str] = ()
) -> jubilant.Status:
    """Wait until the apps `names` (else `apps`; else every app) are active; fail on an error.

    A module binds its own defaults: `wait_active = partial(wait_for_active, timeout=SETTLE)`.
    """
    chosen = names or tuple(apps)
    return juju.wait(
        lambda status: jubilant.all_active(status, *chosen),
        error=lambda status: jubilant.any_error(status, *chosen),
        timeout=timeout,
    )
