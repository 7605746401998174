"""What importing a charm costs every hook: no pydantic validator is built at import.

Every hook of every charm imports the whole charm, and most hooks validate a few of the many
models it holds (relation contracts, Slurm's JSON answers, the config). Building a model's
validator at class creation cost the slurmd charm some 25 ms a hook (Python 3.13 on a lab
machine), so the models' bases set `defer_build`: a validator is built when the model first
validates. A default that instantiates a model (`signal: Signal = Signal()`) would build it at
import again: defaults that are models use `default_factory`.

Each charm is imported in a fresh interpreter, as its dispatch does, and every pydantic model
of this repository's code (hpc_libs, the charm's own modules) must still be incomplete.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CHARMS = ("slurmd", "slurmctld", "sackd", "slurmdbd", "slurmrestd")
BUILT_AT_IMPORT: dict[str, set[str]] = {
    # network_state's mount request is a module constant, built once per hook (0.7 ms).
    "slurmctld": {"hpc_libs.interfaces.mount_info.MountInfo"},
}
"""Models a charm still builds at import, on purpose."""

_PROBE = """
import json, sys
import pydantic
import charm  # noqa: F401

first_party = set(sys.argv[1:])

def subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)

built = sorted(
    f"{m.__module__}.{m.__qualname__}"
    for m in set(subclasses(pydantic.BaseModel))
    if (m.__module__.split(".")[0] in first_party) and m.__pydantic_complete__
)
print(json.dumps(built))
"""


def _built_at_import(charm: str) -> list[str]:
    src = REPO / "charms" / charm / "src"
    own = {"hpc_libs", *(p.stem for p in src.glob("*.py"))}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *sorted(own)],
        capture_output=True,
        text=True,
        env=env,
        cwd=src,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("charm", CHARMS)
def test_importing_a_charm_builds_no_pydantic_validator(charm: str):
    built = _built_at_import(charm)

    assert set(built) == BUILT_AT_IMPORT.get(charm, set())
