"""Load a script of tools/ as a module: `tools/` is a folder of scripts, not a package on sys.path.

Each is loaded from its file under a unique name, registered in sys.modules (dataclasses look
their module up by name).
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).parents[3] / "tools"


def load_tool(file_name: str, module_name: str) -> ModuleType:
    """Load tools/`file_name` as the module `module_name`."""
    spec = importlib.util.spec_from_file_location(module_name, TOOLS / file_name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
