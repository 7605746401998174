"""The autoscaler runs beside the operator's Juju client, not in a charm: it must not need ops.

It shares the node naming, drain reasons and busy job states with the charms through
`hpc_libs.slurm.naming`, which has no ops. Each module is imported in a fresh interpreter,
since this test session has long imported ops itself.
"""

import pkgutil
import subprocess
import sys

import pytest
import slurm_autoscale

MODULES = sorted(
    f"slurm_autoscale.{m.name}" for m in pkgutil.iter_modules(slurm_autoscale.__path__)
)


def test_every_module_is_checked() -> None:
    assert {"slurm_autoscale.cli", "slurm_autoscale.decide"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_importing_the_autoscaler_does_not_import_ops(module: str) -> None:
    probe = (
        f"import sys, {module}\n"
        "print(sorted(m for m in sys.modules if m == 'ops' or m.startswith('ops.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout == "[]\n"
