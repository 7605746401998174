"""Benchmarks (pytest-benchmark; `just bench`). A first one: rendering every charm's full
charmcraft project, which `just pack`, `just charmcraft-validate` and the tests all do.
"""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from pytest_benchmark.fixture import BenchmarkFixture

TOOL = Path(__file__).parents[1] / "tools" / "charmcraft_project.py"


def load_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("charmcraft_project", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_render_every_charm_project(benchmark: BenchmarkFixture):
    tool = load_tool()

    def render_all() -> list[str]:
        return [tool.dump_project(tool.render_project(c)) for c in tool.charm_names()]

    rendered = benchmark(render_all)

    assert len(rendered) == 5
