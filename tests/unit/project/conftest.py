"""Load tools/charmcraft_project.py, the tool that renders and validates charmcraft projects."""

from types import ModuleType

import pytest
from tool_modules import load_tool

_TOOL = load_tool("charmcraft_project.py", "charmcraft_project")


@pytest.fixture(scope="session")
def tool() -> ModuleType:
    return _TOOL
