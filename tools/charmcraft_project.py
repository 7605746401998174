#!/usr/bin/env python3
"""Build, stage and validate the charmcraft projects of the charms in this repository.

Every charm keeps only what is its own in ``charms/<name>/charmcraft.yaml`` (name, metadata,
endpoints, config, actions). What all charms share (type, base, platforms, assumes, the uv
part) lives in ``charmcraft-common.yaml`` at the repository root. This tool joins the two.

Merge rules (``deep_merge``), applied with the common file as the base and the charm's file on
top of it:

* a mapping in both files is merged key by key, recursively;
* any other value set by the charm replaces the common value whole (lists are replaced, never
  concatenated, so a charm states its full list when it needs a different one);
* a key set to null in either file (``platforms: {amd64: }``) is an ordinary value: the charm's
  null wins over a common value, a charm's value wins over a common null;
* a mapping on one side against a list or scalar on the other is an error: it is always a typo.

Sub-commands:

``render CHARM [-o PATH]``
    Write the full project file (default ``build/<charm>/charmcraft.yaml``).
``stage CHARM [--build-dir DIR]``
    CHARM is a charm of ``charms/`` by name, or any charm directory by path (the lab's test
    charms: their own ``charmcraft.yaml``, no common file). Make ``DIR/<charm>/`` a
    self-contained uv project that charmcraft's uv plugin can pack: the
    charm's ``src/``, the full ``charmcraft.yaml``, a copy under ``libs/`` of every workspace
    package the charm depends on, directly or through another (``hpc_libs``, the exporter),
    a generated ``pyproject.toml`` that points at those copies by path (a packed charm cannot
    see the workspace; the copies point at each other the same way), and a ``uv.lock`` locked
    from it. The
    versions in that lock are constrained to the ones in the workspace's own ``uv.lock``, so a
    packed charm runs the dependency versions the tests ran.
``validate [CHARM ...]``
    Render each charm into a temporary directory and check it with charmcraft's own schema:
    ``charmcraft expand-extensions`` (the whole project model) plus charmcraft's ``JujuConfig``
    model for the ``config`` section, which ``expand-extensions`` leaves unchecked (see
    ``tools/charmcraft_check.py``, which runs inside charmcraft's environment), plus every
    base in ``platforms`` against charmcraft's own list of supported bases (charmcraft checks
    those only when it packs). Charmcraft
    comes from PyPI through ``uv tool run`` at the version pinned here, with every dependency
    pinned by ``tools/charmcraft-constraints.txt``. Neither check needs LXD, snapd or a
    non-root user.
``pack [CHARM ...] [--platform P ...] [--build-dir DIR] [--destructive-mode] [CHARMCRAFT ARGS]``
    Stage each charm (default: all) and run ``charmcraft pack --platform P`` from inside
    ``DIR/<charm>/`` (default ``build/``) once per platform, then move the file charmcraft
    wrote there, under charmcraft's own name (``<name>_<platform>.charm``, ``:`` written
    ``-``), to ``DIR``. Charmcraft 4.5 refuses an ``--output`` outside the project, and the
    project is the staged charm: run from the repository root, charmcraft would take the
    whole repository as the part's ``source: .``; without ``--platform`` it refuses a project
    with two platforms matching the host ("Multiple builds match the current platform").
    Every platform is packed in managed mode; in destructive mode only those of the host's
    base (charmcraft refuses the others), and the parts/prime/stage trees it leaves stay in
    ``DIR/<charm>/``. ``--platform`` packs only the platforms named. ``$CHARMCRAFT`` names
    the charmcraft command (default ``charmcraft``, the snap); a missing one is a one-line
    error saying how to install it.
``overlay BUNDLE [-o PATH]``
    Write a bundle overlay (default ``build/local-charms.yaml``) that points every
    application of ours in BUNDLE at its packed charm in the overlay's directory, for
    ``juju deploy BUNDLE --overlay PATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
COMMON_FILE = REPO / "charmcraft-common.yaml"
CHARMS_DIR = REPO / "charms"
BUILD_DIR = REPO / "build"
TOOLS_DIR = REPO / "tools"
CHARMCRAFT_VERSION = "4.5.0"
CHARMCRAFT_CONSTRAINTS = TOOLS_DIR / "charmcraft-constraints.txt"
CHECK_SCRIPT = TOOLS_DIR / "charmcraft_check.py"
#: What never goes into a staged charm.
STAGE_IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", "build", "tests", ".venv", "*.charm", "uv.lock"
)
#: Keys written first in a rendered project, so it reads like a hand-written one.
IDENTITY_KEYS = ("name", "title", "summary", "description", "links")
GENERATED_HEADER = "# Generated by tools/charmcraft_project.py; do not edit.\n"


class ProjectError(Exception):
    """A charm's project files cannot be merged, staged or validated."""


# ---------------------------------------------------------------------------------------------
# Rendering


def charm_names() -> list[str]:
    """Every charm in the repository: a folder of ``charms/`` holding a charmcraft.yaml."""
    return sorted(path.parent.name for path in CHARMS_DIR.glob("*/charmcraft.yaml"))


def load_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold a mapping at its top."""
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict):
        raise ProjectError(f"{path} does not hold a YAML mapping")
    return data


def deep_merge(
    base: Mapping[str, Any], override: Mapping[str, Any], *, at: str = ""
) -> dict[str, Any]:
    """Merge ``override`` onto ``base`` by the rules in this module's docstring."""
    merged = dict(base)
    for key, value in override.items():
        where = f"{at}.{key}" if at else key
        if key not in merged:
            merged[key] = value
        elif isinstance(merged[key], Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(merged[key], value, at=where)
        elif (
            merged[key] is not None
            and value is not None
            and (isinstance(merged[key], Mapping) != isinstance(value, Mapping))
        ):
            raise ProjectError(f"'{where}' is a mapping in one file and not in the other")
        else:
            merged[key] = value
    return merged


def charm_dir(charm: str | Path) -> Path:
    """Return the directory of ``charm``: a name under ``charms/``, or a charm directory."""
    path = Path(charm)
    directory = path.resolve() if len(path.parts) > 1 or path.is_absolute() else CHARMS_DIR / charm
    if not (directory / "charmcraft.yaml").exists():
        raise ProjectError(f"no charm named {charm!r} (no {directory / 'charmcraft.yaml'})")
    return directory


def render_project(charm: str | Path) -> dict[str, Any]:
    """``charm``'s full project: its own file merged onto the common file.

    Only the charms of ``charms/`` share the common file; a charm elsewhere (the lab's test
    charms) is a whole project on its own.
    """
    directory = charm_dir(charm)
    own = load_yaml(directory / "charmcraft.yaml")
    if directory.parent.resolve() != CHARMS_DIR.resolve():
        return own
    return deep_merge(load_yaml(COMMON_FILE), own)


def shared_keys_redeclared(charm: str) -> list[str]:
    """Top-level keys of the common file (other than ``parts``) that the charm sets again.

    ``parts`` is the one shared section a charm may extend (build packages, say).
    """
    common = load_yaml(COMMON_FILE)
    own = load_yaml(CHARMS_DIR / charm / "charmcraft.yaml")
    return sorted(key for key in own if key in common and key != "parts")


class _ProjectDumper(yaml.SafeDumper):
    """Writes multi-line strings (descriptions) as literal blocks, as people write them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ProjectDumper.add_representer(str, _represent_str)


def dump_project(project: Mapping[str, Any]) -> str:
    """Write the project as the YAML text charmcraft reads, identity keys first."""
    ordered = {key: project[key] for key in IDENTITY_KEYS if key in project}
    ordered |= {key: value for key, value in project.items() if key not in ordered}
    body = yaml.dump(ordered, Dumper=_ProjectDumper, sort_keys=False, width=99)
    return GENERATED_HEADER + body


def write_project(charm: str | Path, output: Path | None = None) -> Path:
    """Render ``charm`` to ``output`` (default ``build/<charm>/charmcraft.yaml``)."""
    output = output or BUILD_DIR / charm_dir(charm).name / "charmcraft.yaml"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(dump_project(render_project(charm)))
    return output


# ---------------------------------------------------------------------------------------------
# Staging for `charmcraft pack`


def _toml_value(value: object) -> str:
    """TOML for the few value shapes a generated pyproject holds (JSON strings are TOML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        items = "".join(f"  {_toml_value(item)},\n" for item in value)
        return f"[\n{items}]"
    if isinstance(value, dict):
        pairs = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + pairs + " }"
    raise ProjectError(f"cannot write {value!r} to TOML")


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_table(name: str, table: Mapping[str, object]) -> str:
    lines = "".join(f"{_toml_key(key)} = {_toml_value(value)}\n" for key, value in table.items())
    return f"[{name}]\n{lines}"


def workspace_libraries() -> dict[str, Path]:
    """Workspace packages a charm may depend on (``libs/*``, ``exporter``...), by project name.

    Every member of the root ``pyproject.toml``'s workspace that builds a package; the charms
    are members too, but build none.
    """
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    libraries: dict[str, Path] = {}
    for pattern in root["tool"]["uv"]["workspace"]["members"]:
        for member in sorted(REPO.glob(pattern)):
            pyproject = member / "pyproject.toml"
            if pyproject.is_file() and "build-system" in (
                data := tomllib.loads(pyproject.read_text())
            ):
                libraries[data["project"]["name"]] = member
    return libraries


def workspace_sources(pyproject: Path) -> list[str]:
    """Return what ``pyproject`` takes from the workspace (``{ workspace = true }``)."""
    data = tomllib.loads(pyproject.read_text())
    sources = data.get("tool", {}).get("uv", {}).get("sources", {})
    return [name for name, spec in sources.items() if spec.get("workspace")]


def workspace_closure(pyproject: Path, libraries: Mapping[str, Path]) -> list[str]:
    """Return the workspace packages ``pyproject`` needs, directly or through another."""
    needed: list[str] = []
    pending = [(pyproject, name) for name in workspace_sources(pyproject)]
    while pending:
        wanted_by, name = pending.pop(0)
        if name not in libraries:
            raise ProjectError(f"{wanted_by}: {name} is not a package of the workspace")
        if name not in needed:
            needed.append(name)
            library = libraries[name] / "pyproject.toml"
            pending += [(library, dependency) for dependency in workspace_sources(library)]
    return needed


def unworkspaced(pyproject: Path, library_paths: Mapping[str, str]) -> str:
    """Return a staged library's pyproject with its workspace sources as sibling paths.

    The staged charm is a workspace of its own with no members, so a library's
    ``{ workspace = true }`` would name nothing: each becomes ``{ path = "../<copy>" }``.
    """
    text = pyproject.read_text()
    for name in workspace_sources(pyproject):
        copy = Path(library_paths[name]).name
        text, found = re.subn(
            rf"^{re.escape(name)}\s*=\s*\{{\s*workspace\s*=\s*true\s*\}}[ \t]*$",
            f'{name} = {{ path = "../{copy}" }}',
            text,
            flags=re.MULTILINE,
        )
        if found != 1:
            raise ProjectError(f"{pyproject}: cannot rewrite the workspace source of {name}")
    return text


def locked_versions(lock_file: Path = REPO / "uv.lock") -> list[str]:
    """``name==version`` for every registry package of the workspace lock."""
    lock = tomllib.loads(lock_file.read_text())
    return sorted(
        f"{package['name']}=={package['version']}"
        for package in lock.get("package", [])
        if "registry" in package.get("source", {})
    )


def staged_pyproject(charm_pyproject: Path, library_paths: Mapping[str, str]) -> str:
    """Rewrite the charm's pyproject with workspace sources as paths to staged copies."""
    data = tomllib.loads(charm_pyproject.read_text())
    sources = data.get("tool", {}).get("uv", {}).get("sources", {})
    project = {
        key: data["project"][key]
        for key in ("name", "version", "description", "requires-python", "dependencies")
        if key in data["project"]
    }
    uv_settings: dict[str, object] = {
        "package": False,
        "constraint-dependencies": locked_versions(),
    }
    staged_sources = {}
    for name, source in sources.items():
        if source.get("workspace"):
            if name not in library_paths:
                raise ProjectError(f"{charm_pyproject}: {name} is not a package of the workspace")
            staged_sources[name] = {"path": library_paths[name]}
        else:
            staged_sources[name] = source
    parts = [
        GENERATED_HEADER,
        _toml_table("project", project),
        _toml_table("tool.uv", uv_settings),
        # An empty workspace makes the staged project its own root, even inside this checkout.
        _toml_table("tool.uv.workspace", {"members": []}),
    ]
    if staged_sources:
        parts.append(_toml_table("tool.uv.sources", staged_sources))
    return "\n".join(parts)


def stage(charm: str | Path, build_dir: Path = BUILD_DIR) -> Path:
    """Make ``build_dir/<charm>`` a self-contained uv project ready for ``charmcraft pack``."""
    source = charm_dir(charm)
    target = build_dir / source.name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=STAGE_IGNORE)
    # Charmcraft's dispatch script execs src/charm.py, whatever mode the checkout gave it.
    entrypoint = target / "src" / "charm.py"
    entrypoint.chmod(entrypoint.stat().st_mode | 0o111)
    libraries = workspace_libraries()
    wanted = workspace_closure(source / "pyproject.toml", libraries)
    library_paths = {name: (Path("libs") / libraries[name].name).as_posix() for name in wanted}
    for name in wanted:
        copy = target / library_paths[name]
        shutil.copytree(libraries[name], copy, ignore=STAGE_IGNORE)
        (copy / "pyproject.toml").write_text(
            unworkspaced(libraries[name] / "pyproject.toml", library_paths)
        )
    (target / "pyproject.toml").write_text(
        staged_pyproject(source / "pyproject.toml", library_paths)
    )
    write_project(source, target / "charmcraft.yaml")
    locked = _run([_uv(), "lock", "--directory", str(target)])
    if locked.returncode != 0:
        raise ProjectError(f"cannot lock {target}:\n{locked.stderr}")
    return target


def platforms(project: Mapping[str, Any]) -> list[str]:
    """Return the platform names in the project's order (what ``--platform`` takes)."""
    return [str(name) for name in project.get("platforms") or {}]


def charm_file_name(charm: str | Path, platform: str | None = None) -> str:
    """Name the file ``charmcraft pack`` writes for ``charm`` on ``platform``.

    ``<name>_<platform>.charm``, ``:`` written ``-``: ``slurmd_ubuntu@24.04-amd64.charm``.
    Without ``platform``, the first (Ubuntu 24.04): the one the overlay uses.
    """
    project = render_project(charm)
    platform = platform or platforms(project)[0]
    return f"{project['name']}_{platform.replace(':', '-')}.charm"


def host_base(os_release: Path = Path("/etc/os-release")) -> str:
    """Return the host's base as charmcraft names bases: ``<ID>@<VERSION_ID>``."""
    fields: dict[str, str] = {}
    for line in os_release.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip().strip("\"'")
    return f"{fields.get('ID', 'linux')}@{fields.get('VERSION_ID', '')}"


def platform_base(project: Mapping[str, Any], platform: str) -> str:
    """Return the base a platform builds on: its ``<base>:<arch>`` name, else ``base``."""
    spec = (project.get("platforms") or {}).get(platform)
    build_on = spec.get("build-on") if isinstance(spec, Mapping) else None
    base, sep, _ = str((build_on or [platform])[0]).rpartition(":")
    return base if sep else str(project.get("base", ""))


def platforms_to_pack(
    project: Mapping[str, Any], destructive: bool, host: str, chosen: Sequence[str] = ()
) -> list[str]:
    """Return the platforms to pack.

    ``chosen`` (``--platform``) if any, else every platform in a managed pack, else
    (destructive mode) those of the host's base.

    Charmcraft refuses a destructive build for a base other than the host's, so asking for
    one could only fail; a chosen platform is passed on as asked (charmcraft decides).
    """
    names = platforms(project)
    unknown = [name for name in chosen if name not in names]
    if unknown:
        known = ", ".join(names)
        raise ProjectError(f"{project['name']} has no platform {', '.join(unknown)} ({known})")
    if chosen:
        return list(chosen)
    if not destructive:
        return names
    matching = [name for name in names if platform_base(project, name) == host]
    if not matching:
        raise ProjectError(
            f"{project['name']}: no platform builds on this {host} host in destructive mode "
            f"(platforms: {', '.join(names)}); pack without --destructive-mode (LXD)"
        )
    return matching


#: What a missing charmcraft is told to do (one line).
INSTALL_CHARMCRAFT = (
    "install it (sudo snap install charmcraft --classic) or set CHARMCRAFT to the pinned one "
    "from PyPI (docs/deploy.md)"
)


def charmcraft_command() -> list[str]:
    """``$CHARMCRAFT`` split into words (default ``charmcraft``, the snap), checked to exist."""
    charmcraft = os.environ.get("CHARMCRAFT", "charmcraft").split()
    if not charmcraft or shutil.which(charmcraft[0]) is None:
        shown = " ".join(charmcraft) or "$CHARMCRAFT (empty)"
        raise ProjectError(f"{shown}: command not found: {INSTALL_CHARMCRAFT}")
    return charmcraft


def pack_argv(charmcraft: Sequence[str], platform: str, extra: Sequence[str]) -> list[str]:
    """Return ``charmcraft pack`` for one platform (run from inside the staged charm).

    No ``--output``: charmcraft 4.5 refuses one outside the project ("Cannot create packages
    outside of the project tree"), and the project is the staged charm. It writes the file
    into the staged charm, and ``pack`` moves it to the build directory.
    """
    return [*charmcraft, "pack", "--platform", platform, *extra]


def collect_packed(staged: Path, build_dir: Path, label: str) -> Path:
    """Move the one ``.charm`` charmcraft wrote into ``staged`` to ``build_dir``, same name."""
    packed = sorted(staged.glob("*.charm"))
    if len(packed) != 1:
        names = ", ".join(path.name for path in packed) or "none"
        raise ProjectError(f"charmcraft pack of {label} wrote {len(packed)} charms ({names})")
    target = build_dir / packed[0].name
    packed[0].replace(target)
    return target


def pack(
    charm: str | Path,
    extra: Sequence[str] = (),
    build_dir: Path = BUILD_DIR,
    chosen: Sequence[str] = (),
) -> list[Path]:
    """Stage ``charm`` and pack it once per platform; return the ``.charm`` files written.

    Charmcraft runs from inside the staged directory (its ``source: .`` is the staged charm,
    and the trees a destructive build leaves stay under ``build_dir``); each file it writes
    there is moved to ``build_dir`` under the name charmcraft gave it.
    """
    charmcraft = charmcraft_command()
    project = render_project(charm)
    destructive = "--destructive-mode" in extra
    wanted = platforms_to_pack(project, destructive, host_base(), chosen)
    staged = stage(charm, build_dir)
    written = []
    for platform in wanted:
        argv = pack_argv(charmcraft, platform, extra)
        print("+", " ".join(argv), f"(in {staged})", flush=True)
        if subprocess.run(argv, cwd=staged, check=False).returncode != 0:
            raise ProjectError(f"charmcraft pack failed for {project['name']} on {platform}")
        written.append(collect_packed(staged, build_dir, f"{project['name']} on {platform}"))
    return written


def platform_bases(project: Mapping[str, Any]) -> list[str]:
    """Every base the project builds for: ``base``, and each platform's ``<base>:<arch>``.

    A platform names its base in its key (``ubuntu@24.04:amd64``, charmcraft's multi-base
    shorthand) or in its ``build-for`` entries.
    """
    bases = {str(project["base"])} if project.get("base") else set[str]()
    for name, spec in (project.get("platforms") or {}).items():
        build_for = spec.get("build-for") if isinstance(spec, Mapping) else None
        for target in build_for or [name]:
            base, sep, _ = str(target).rpartition(":")
            if sep:
                bases.add(base)
    return sorted(bases)


def local_charms_overlay(bundle: Path, charm_dir: Path = BUILD_DIR) -> str:
    """Return a bundle overlay pointing every application of ours at its packed charm.

    Each application gets the charm of the first platform that was packed (a destructive pack
    on Ubuntu 26.04 writes only the 26.04 one). Written next to the packed charms (paths in an
    overlay are relative to the overlay).
    """
    applications = load_yaml(bundle).get("applications", {})
    ours = set(charm_names())
    overlay: dict[str, dict[str, str]] = {}
    missing: list[str] = []
    for app, spec in applications.items():
        if spec.get("charm") not in ours:
            continue
        names = [
            charm_file_name(spec["charm"], platform)
            for platform in platforms(render_project(spec["charm"]))
        ]
        packed = [name for name in names if (charm_dir / name).exists()]
        if packed:
            overlay[app] = {"charm": f"./{packed[0]}"}
        else:
            missing.append(str(charm_dir / names[0]))
    if missing:
        raise ProjectError(f"pack these charms first: {', '.join(missing)}")
    return GENERATED_HEADER + yaml.safe_dump({"applications": overlay}, sort_keys=False)


# ---------------------------------------------------------------------------------------------
# Validation with charmcraft


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one charmcraft check."""

    command: list[str]
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        """Whether the check passed."""
        return self.returncode == 0


def _uv() -> str:
    """Find uv: the one running us (``uv run`` sets $UV), else the one on PATH."""
    uv = os.environ.get("UV") or shutil.which("uv")
    if not uv:
        raise ProjectError("uv is needed to run charmcraft (pip install uv)")
    return uv


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    # Charmcraft writes its log under $XDG_STATE_HOME; keep it out of the user's home.
    scratch = str(Path(tempfile.gettempdir()) / "charmcraft-state")
    env = os.environ | {"XDG_STATE_HOME": scratch, "XDG_RUNTIME_DIR": tempfile.gettempdir()}
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, check=False)


def charmcraft_argv(*args: str) -> list[str]:
    """Run a command inside charmcraft's own environment (``uv tool run``, pinned)."""
    return [
        _uv(),
        "tool",
        "run",
        "--from",
        f"charmcraft=={CHARMCRAFT_VERSION}",
        "--constraints",
        str(CHARMCRAFT_CONSTRAINTS),
        *args,
    ]


SUPPORTED_BASES_CODE = (
    "import json; from charmcraft.const import SUPPORTED_BASE_STRINGS as s; "
    "print(json.dumps(sorted(s)))"
)


def _supported_bases(completed: subprocess.CompletedProcess[str]) -> list[str]:
    """Read charmcraft's supported bases (``SUPPORTED_BASE_STRINGS``) from its output."""
    try:
        bases = json.loads(completed.stdout)
    except json.JSONDecodeError as e:
        output = completed.stdout + completed.stderr
        raise ProjectError(f"cannot ask charmcraft for its bases:\n{output}") from e
    return [str(base) for base in bases]


def _check_bases(result: CheckResult, project_file: Path, supported: Sequence[str]) -> CheckResult:
    """Fail ``result`` if the project builds for a base charmcraft cannot pack for."""
    bad = [b for b in platform_bases(load_yaml(project_file)) if b not in supported]
    if not result.ok or not bad:
        return result
    output = f"{project_file}: unsupported base {', '.join(bad)} (charmcraft {CHARMCRAFT_VERSION}"
    return CheckResult(result.command, 1, f"{output} supports {', '.join(supported)})")


def validate_files(project_files: Sequence[Path]) -> list[CheckResult]:
    """Check full project files, each alone in its directory, in one charmcraft process.

    Charmcraft's list of supported bases is read by a second process, at the same time.
    """
    if not project_files:
        return []
    dirs = [str(path.parent) for path in project_files]
    with ThreadPoolExecutor(max_workers=1) as pool:
        bases_run = pool.submit(_run, charmcraft_argv("python", "-c", SUPPORTED_BASES_CODE))
        completed = _run(charmcraft_argv("python", str(CHECK_SCRIPT), *dirs))
        supported = _supported_bases(bases_run.result())
    try:
        reports = json.loads(completed.stdout)
    except json.JSONDecodeError as e:
        output = completed.stdout + completed.stderr
        raise ProjectError(
            f"cannot run charmcraft (exit {completed.returncode}):\n{output}"
        ) from e
    return [
        _check_bases(
            CheckResult(
                ["charmcraft", "expand-extensions", report["project"]],
                report["returncode"],
                report["output"],
            ),
            path,
            supported,
        )
        for report, path in zip(reports, project_files, strict=True)
    ]


def validate(charms: Sequence[str]) -> dict[str, CheckResult]:
    """Render each charm in a temporary directory and check it with charmcraft."""
    with tempfile.TemporaryDirectory(prefix="charmcraft-projects-") as tmp:
        files = [write_project(charm, Path(tmp) / charm / "charmcraft.yaml") for charm in charms]
        return dict(zip(charms, validate_files(files), strict=True))


# ---------------------------------------------------------------------------------------------
# Command line


def _parser() -> argparse.ArgumentParser:
    summary = (__doc__ or "").split("\n")[0]
    parser = argparse.ArgumentParser(prog="charmcraft_project", description=summary)
    commands = parser.add_subparsers(dest="command", required=True)
    render = commands.add_parser("render", help="write a charm's full charmcraft.yaml")
    render.add_argument("charm")
    render.add_argument("-o", "--output", type=Path)
    stage_cmd = commands.add_parser("stage", help="stage a charm for `charmcraft pack`")
    stage_cmd.add_argument("charm")
    stage_cmd.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    pack_cmd = commands.add_parser(
        "pack",
        help="stage and `charmcraft pack` each platform",
        description="Options it does not know (--destructive-mode, --verbose, ...) go to "
        "charmcraft pack.",
    )
    pack_cmd.add_argument("charms", nargs="*")
    pack_cmd.add_argument(
        "--platform",
        action="append",
        default=[],
        dest="platforms",
        help="pack only this platform (repeatable; default: every platform, or in destructive "
        "mode those of the host's base)",
    )
    pack_cmd.add_argument("--build-dir", type=Path, default=BUILD_DIR)
    check = commands.add_parser("validate", help="check charms with charmcraft's schema")
    check.add_argument("charms", nargs="*")
    overlay = commands.add_parser("overlay", help="bundle overlay for the packed charms")
    overlay.add_argument("bundle", type=Path)
    overlay.add_argument("-o", "--output", type=Path, default=BUILD_DIR / "local-charms.yaml")
    return parser


def _pack_all(
    charms: Sequence[str], charmcraft_args: Sequence[str], build_dir: Path, chosen: Sequence[str]
) -> None:
    build_dir.mkdir(parents=True, exist_ok=True)
    for charm in charms:
        for charm_file in pack(charm, charmcraft_args, build_dir, chosen):
            print(charm_file)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = _parser()
    args, charmcraft_args = parser.parse_known_args(argv)
    if charmcraft_args and args.command != "pack":
        parser.error(f"unrecognized arguments: {' '.join(charmcraft_args)}")
    try:
        if args.command == "render":
            print(write_project(args.charm, args.output))
        elif args.command == "stage":
            print(stage(args.charm, args.build_dir))
        elif args.command == "pack":
            _pack_all(
                args.charms or charm_names(), charmcraft_args, args.build_dir, args.platforms
            )
        elif args.command == "overlay":
            args.output.write_text(local_charms_overlay(args.bundle, args.output.parent))
            print(args.output)
        else:
            failed = 0
            for charm, result in validate(args.charms or charm_names()).items():
                print(f"{charm}: {'ok' if result.ok else 'INVALID'}")
                if not result.ok:
                    failed += 1
                    print(result.output, file=sys.stderr)
            return 1 if failed else 0
    except ProjectError as e:
        print(f"charmcraft_project: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
