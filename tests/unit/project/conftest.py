"""Load tools/charmcraft_project.py, the tool that renders and validates charmcraft projects.

`tools/` is a folder of scripts, not a package on sys.path, so the module is loaded from its
file under a unique name.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).parents[3] / "tools" / "charmcraft_project.py"


def _load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("charmcraft_project", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


_TOOL = _load_tool()


@pytest.fixture(scope="session")
def tool() -> ModuleType:
    return _TOOL
