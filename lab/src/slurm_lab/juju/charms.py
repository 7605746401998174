"""Charm metadata and staging: a charm dir becomes /lab/charms/<app>/{src,charmcraft.yaml,deps}.

The dependency dir holds exactly what the charm declares (its locked workspace export, or its
pyproject's [project.dependencies] outside the workspace), built for the lab machines' Python,
so a dependency missing from the charm's pyproject fails in the lab as it would in a packed charm.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurm_lab.errors import LabError

logger = logging.getLogger(__name__)

LAB_PYTHON = "3.13"
LAB_PLATFORM = "x86_64-manylinux_2_28"
DEPS_DIR = "_deps"
METADATA_KEYS = (
    "name",
    "display-name",
    "summary",
    "description",
    "subordinate",
    "peers",
    "provides",
    "requires",
    "extra-bindings",
    "storage",
    "resources",
    "assumes",
    "containers",
)


@dataclass(frozen=True)
class CharmSpec:
    """What the backend needs to know about a charm: metadata, config options, actions."""

    name: str
    meta: dict[str, Any]
    config: dict[str, Any]
    actions: dict[str, Any]
    project_file: dict[str, Any]

    @property
    def subordinate(self) -> bool:
        """Whether the charm is a subordinate."""
        return bool(self.meta.get("subordinate"))

    @property
    def options(self) -> dict[str, Any]:
        """config.options."""
        return self.config.get("options") or {}

    def endpoints(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every relation endpoint: name -> (role, spec)."""
        found: dict[str, tuple[str, dict[str, Any]]] = {}
        for role, key in (("provider", "provides"), ("requirer", "requires"), ("peer", "peers")):
            for name, spec in (self.meta.get(key) or {}).items():
                found[name] = (role, spec or {})
        return found


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)  # pyright: ignore[reportArgumentType]
        else:
            merged[key] = value
    return merged


def project_file(charm_dir: Path) -> dict[str, Any]:
    """Read charmcraft.yaml merged over the nearest charmcraft-common.yaml (up to 3 levels up).

    Merge rules as the repository's tools/charmcraft_project.py: mappings merge recursively,
    anything else set by the charm replaces the common value.
    """
    path = charm_dir / "charmcraft.yaml"
    if not path.exists():
        raise LabError(f"{charm_dir} has no charmcraft.yaml")
    data: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    for folder in [charm_dir, *charm_dir.parents][:4]:
        common = folder / "charmcraft-common.yaml"
        if common.exists():
            data = _merge(yaml.safe_load(common.read_text()) or {}, data)
            break
    return data


def load_spec(charm_dir: Path) -> CharmSpec:
    """Read the charm's metadata, config and actions from its charmcraft.yaml."""
    data = project_file(charm_dir)
    meta = {k: data[k] for k in METADATA_KEYS if k in data}
    if "name" not in meta:
        raise LabError(f"{charm_dir}/charmcraft.yaml has no name")
    return CharmSpec(
        name=meta["name"],
        meta=meta,
        config=data.get("config") or {},
        actions=data.get("actions") or {},
        project_file=data,
    )


# --- dependencies ------------------------------------------------------------------------------


def _workspace_root(start: Path) -> Path | None:
    for parent in [start, *start.parents]:
        pyproject = parent / "pyproject.toml"
        if (
            pyproject.exists()
            and "tool" in (doc := tomllib.loads(pyproject.read_text()))
            and "workspace" in doc["tool"].get("uv", {})
        ):
            return parent
    return None


def _project(charm_dir: Path) -> dict[str, Any]:
    pyproject = charm_dir / "pyproject.toml"
    if not pyproject.exists():
        raise LabError(f"{charm_dir} has no pyproject.toml: cannot tell its dependencies")
    return tomllib.loads(pyproject.read_text()).get("project", {})


def _is_member(root: Path, charm_dir: Path) -> bool:
    members = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["uv"]["workspace"]
    patterns: list[str] = members.get("members", [])
    return any(charm_dir.resolve() in {p.resolve() for p in root.glob(pat)} for pat in patterns)


def requirements(charm_dir: Path) -> tuple[list[str], list[Path]]:
    """Return the charm's requirement lines and local source trees."""
    charm_dir = charm_dir.resolve()
    name = _project(charm_dir).get("name", charm_dir.name)
    root = _workspace_root(charm_dir.parent)
    if root is not None and _is_member(root, charm_dir):
        exported = subprocess.run(
            [
                *("uv", "export", "--package", name, "--no-dev", "--no-hashes", "--frozen"),
                *("--no-emit-project", "--no-header", "--no-annotate"),
            ],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
        if exported.returncode != 0:
            raise LabError(f"uv export for {name} failed: {exported.stderr.strip()}")
        lines = [ln.strip() for ln in exported.stdout.splitlines()]
        lines = [ln for ln in lines if ln and not ln.startswith("#")]
    else:
        root = charm_dir
        lines = list(_project(charm_dir).get("dependencies", []))
    reqs: list[str] = []
    local: list[Path] = []
    for line in lines:
        if line.startswith(("-e ", "./", "../", "/")):
            path = (root / line.removeprefix("-e ").strip()).resolve()
            local.append(path)
            reqs.append(str(path))
        else:
            reqs.append(line)
    return reqs, local


def _tree_digest(path: Path, digest: Any) -> None:
    for file in sorted(path.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts and ".venv" not in file.parts:
            digest.update(str(file.relative_to(path)).encode())
            digest.update(file.read_bytes())


def build_deps(charm_dir: Path, charms_dir: Path, python: str = LAB_PYTHON) -> Path:
    """Install the charm's dependencies for the lab's Python; cached by their hash."""
    reqs, local = requirements(charm_dir)
    digest = hashlib.sha256("\n".join([python, LAB_PLATFORM, *reqs]).encode())
    for path in local:
        _tree_digest(path, digest)
    target = charms_dir / DEPS_DIR / digest.hexdigest()[:16]
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text("\n".join(reqs) + "\n")
        build = Path(tmp) / "site"
        logger.info("building dependencies of %s into %s", charm_dir.name, target)
        # uv reuses a wheel it built from a local tree while that tree's pyproject.toml is
        # unchanged: refresh the local packages so the machine gets their current source.
        refresh = [f"--refresh-package={_project(path).get('name', path.name)}" for path in local]
        result = subprocess.run(
            [
                *("uv", "pip", "install", "--quiet", "--target", str(build)),
                *("--python-version", python, "--python-platform", LAB_PLATFORM),
                *refresh,
                *("--no-config", "-r", str(req_file)),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise LabError(f"installing dependencies of {charm_dir}: {result.stderr.strip()}")
        build.rename(target)
    return target


def stage(charm_dir: Path, app: str, charms_dir: Path, python: str = LAB_PYTHON) -> Path:
    """Copy the charm (src, merged charmcraft.yaml) and link its deps under charms_dir/app.

    `python` is the machines' Python version (`Lab.python_version`: 3.13 on trixie).
    """
    charm_dir = charm_dir.resolve()
    deps = build_deps(charm_dir, charms_dir, python)
    dest = charms_dir / app
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    shutil.copytree(charm_dir / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    (dest / "charmcraft.yaml").write_text(yaml.safe_dump(project_file(charm_dir)))
    (dest / "deps").symlink_to(Path("..") / DEPS_DIR / deps.name)
    return dest
