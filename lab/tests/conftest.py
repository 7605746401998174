"""What the lab's tests share: a lab per module, and a Juju backend on one.

A test marked `lab` (a module's `pytestmark = pytest.mark.lab`) is skipped where the lab cannot
run (the repository's conftest.py).
"""

from collections.abc import Iterator

import pytest
from slurm_lab import rootfs
from slurm_lab.juju import LabJuju
from slurm_lab.machines import Lab


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Lab]:
    """A lab of the module's own on the cached base (built if missing), taken down after it."""
    rootfs.ensure_base()
    machines = Lab(tmp_path_factory.mktemp(request.path.stem) / "state")
    try:
        yield machines
    finally:
        machines.down()


@pytest.fixture(scope="module")
def lab_juju(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[LabJuju]:
    """A Juju backend on a lab of the module's own, taken down after it.

    If a test failed, the units' logs are printed; the hooks' times are printed in any case.
    """
    lab = Lab(tmp_path_factory.mktemp(f"lab-{request.path.stem}"))
    backend = LabJuju(lab)  # update-status every 5 minutes, as on Juju
    try:
        yield backend
    finally:
        if request.session.testsfailed:
            print(backend.dump_logs(journal_lines=50))
        times = sorted(backend.ctl.hook_times)
        if times:
            print(
                f"\n[lab timing] {len(times)} hooks, median {times[len(times) // 2]:.2f}s,"
                f" max {times[-1]:.2f}s"
            )
        lab.down()
