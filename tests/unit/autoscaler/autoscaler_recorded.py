"""Recorded Slurm answers as the autoscaler receives them: through the `scaling-view` action.

The fixtures (fixtures/<state>-<version>-<endpoint>.json) are the lab's data_parser documents
(slurmrestd's, which `scontrol show ... --json` prints alike). The action's own module
(charms/slurmctld/src/scaling_view.py, loaded here by path: the autoscaler's tests run beside
other charms' modules) turns them into the action's results, so each test goes from Slurm's
answer through the charm's reading to the autoscaler's.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from hpc_libs.slurm import data_parser
from slurm_autoscale.slurm import Snapshot, parse_view

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = ["compute", "empty"]


def load_scaling_view() -> ModuleType:
    """The slurmctld charm's `scaling_view` module, under a name no charm uses."""
    name = "slurmctld_scaling_view"
    if name not in sys.modules:
        path = ROOT / "charms" / "slurmctld" / "src" / "scaling_view.py"
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def answers(state: str, version: str = "v0.0.41") -> dict[str, dict[str, Any]]:
    """The three recorded answers of `state`, parsed (to edit before `results`)."""
    return {
        what: json.loads((FIXTURES / f"{state}-{version}-{what}.json").read_text())
        for what in ("nodes", "jobs", "reservations")
    }


def results(documents: dict[str, dict[str, Any]], now: int) -> dict[str, str]:
    """The action's results for these answers at `now` (the controller's clock)."""
    module = load_scaling_view()
    texts = [json.dumps(documents[what]) for what in ("nodes", "jobs", "reservations")]
    version = data_parser.answer_version(documents["nodes"])
    assert version is not None
    return module.as_results(module.view(*texts, PARTITIONS, now, version=version))


def recorded(state: str, version: str = "v0.0.41", now: int = 1795630780) -> Snapshot:
    """The autoscaler's snapshot of a recorded state."""
    return parse_view(results(answers(state, version), now))
