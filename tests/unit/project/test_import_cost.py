"""What importing a charm costs every hook: no pydantic validator is built at import.

Every hook of every charm imports the whole charm, and most hooks validate a few of the many
models it holds (relation contracts, Slurm's JSON answers, the config). Building every
validator at class creation was 3.6% of the slurmd charm's import (23 models, 54 M of 1.49 G
instructions, CPython 3.13) and 5.7% of slurmctld's (46 models, 95 M of 1.66 G); at host load
9 in a lab machine, at best 50 ms and 130 ms a hook. So the models' bases set
`defer_build` (a validator is built when its model first validates), defaults that are models
use `default_factory` (`signal: Signal = Signal()` would build both at import), and a model
a module needs is made when asked, not as a module constant (the first model built in a
process also pays pydantic's set-up).

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

    assert built == []
