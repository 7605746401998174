"""Check charmcraft project directories with charmcraft's own code; runs in charmcraft's venv.

Started by charmcraft_project.py as ``uv tool run --from charmcraft python charmcraft_check.py
DIR...``. For every directory it:

1. runs ``charmcraft expand-extensions`` there: charmcraft's own console-script entry point,
   called in a forked child, so charmcraft (seconds to import) is imported once for all
   projects while each run still gets a fresh process, as on the command line;
2. validates the ``config`` section with charmcraft's ``JujuConfig`` model, which
   ``expand-extensions`` leaves unchecked (charmcraft checks option types only when linting a
   packed charm).

Prints one JSON list on stdout: ``[{"project": DIR, "returncode": N, "output": TEXT}, ...]``.
"""
# pyright: reportMissingImports=false

import json
import os
import sys
import tempfile
from importlib.metadata import entry_points
from pathlib import Path

import pydantic
import yaml
from charmcraft.models.config import JujuConfig

CHARMCRAFT = entry_points(group="console_scripts", name="charmcraft")["charmcraft"].load()


def expand_extensions(project_dir: Path) -> tuple[int, str]:
    """Run ``charmcraft expand-extensions`` in ``project_dir``; its exit status and output."""
    with tempfile.TemporaryFile() as output:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            returncode = 1
            try:
                os.chdir(project_dir)
                os.dup2(output.fileno(), 1)
                os.dup2(output.fileno(), 2)
                sys.argv = ["charmcraft", "expand-extensions"]
                returncode = CHARMCRAFT() or 0
            except SystemExit as e:
                returncode = e.code if isinstance(e.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(returncode)
        _, status = os.waitpid(pid, 0)
        output.seek(0)
        return os.waitstatus_to_exitcode(status), output.read().decode(errors="replace")


def config_errors(project_file: Path) -> str | None:
    """Validate the file's ``config`` section: its errors, or None when it is valid."""
    project = yaml.safe_load(project_file.read_text())
    try:
        JujuConfig.model_validate(project.get("config") or {})
    except pydantic.ValidationError as e:
        return f"{project_file}: invalid config: {e}"
    return None


def check(project_dir: Path) -> dict[str, object]:
    """Both checks for one project directory."""
    returncode, output = expand_extensions(project_dir)
    if returncode == 0 and (errors := config_errors(project_dir / "charmcraft.yaml")):
        returncode, output = 1, errors
    return {"project": str(project_dir), "returncode": returncode, "output": output}


if __name__ == "__main__":
    json.dump([check(Path(arg).resolve()) for arg in sys.argv[1:]], sys.stdout)
