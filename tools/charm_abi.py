#!/usr/bin/env python3
"""Check that a charm's venv is built for the Python of the Ubuntu base it is packed for.

A packed charm carries a venv of compiled wheels for one CPython: charmcraft's uv plugin makes
it with the build machine's ``python3``, and the unit's ``dispatch`` runs it with the machine's
``python3``. Ubuntu 24.04 runs CPython 3.12, Ubuntu 26.04 CPython 3.14 (``TARGETS``). A venv
made for another Python (the lab's packs: Debian 13's CPython 3.13) fails every hook on
Ubuntu with ``No module named 'ops'``.

Sub-commands:

``targets [CHARM ...] [--platform P ...]``
    For each charm of ``charms/`` (default: all) and each platform of its charmcraft.yaml,
    stage it as ``just pack`` does, export its locked dependencies (``uv export``) and install
    them for the platform's CPython and x86_64 manylinux with uv's cross-target options
    (``uv pip install --python-version --python-platform --target``) into the venv layout
    charmcraft's uv plugin makes (``venv/lib/python3.X/site-packages``), with building from
    source refused for every package from the index. Then check every compiled extension and
    every wheel's tags against the target. A locked dependency without a wheel for the target
    (an sdist, or wheels for other Pythons only) fails, naming it. No interpreter of the target
    is needed.
``check CHARM_FILE ...``
    Check packed ``.charm`` files: the Python of their venv (``pyvenv.cfg``, the
    ``lib/python3.X/site-packages`` directory) and the tags of every compiled extension and
    wheel, against the base named in their ``manifest.yaml``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import charmcraft_project as project_tool


@dataclass(frozen=True)
class Target:
    """The Python and platform a base's units run a charm's venv with."""

    base: str
    python: str  # "3.12"
    glibc: tuple[int, int]

    @property
    def minor(self) -> int:
        """The Python's minor version (12 for 3.12)."""
        return int(self.python.split(".")[1])

    @property
    def abi(self) -> str:
        """The CPython ABI tag: ``cp312``."""
        return f"cp3{self.minor}"

    @property
    def uv_platform(self) -> str:
        """Uv's ``--python-platform`` for the base (uv names manylinux up to 2.40)."""
        major, minor = min(self.glibc, (2, 40))
        return f"x86_64-manylinux_{major}_{minor}"

    @property
    def site_packages(self) -> str:
        """Where the uv plugin's venv keeps packages, relative to the charm."""
        return f"venv/lib/python{self.python}/site-packages"


#: Each base's CPython and glibc (Ubuntu 24.04: 3.12 and 2.39; 26.04: 3.14 and 2.42).
TARGETS = {
    "ubuntu@24.04": Target("ubuntu@24.04", "3.12", (2, 39)),
    "ubuntu@26.04": Target("ubuntu@26.04", "3.14", (2, 42)),
}

#: A compiled extension's file name: ``_pydantic_core.cpython-313-x86_64-linux-gnu.so``.
EXTENSION = re.compile(r"\.(?:cpython-(?P<version>3\d+)-(?P<arch>[^.]+)|(?P<abi3>abi3))\.so$")
MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_x86_64")
LEGACY_MANYLINUX = {"manylinux1_x86_64": (2, 5), "manylinux2010_x86_64": (2, 12)}
LEGACY_MANYLINUX["manylinux2014_x86_64"] = (2, 17)


class AbiError(Exception):
    """A charm's dependencies cannot be installed for a target."""


def target_for(base: str) -> Target:
    """Return the target of a base (``ubuntu@24.04``)."""
    if base not in TARGETS:
        raise AbiError(f"no known Python for base {base} (known: {', '.join(TARGETS)})")
    return TARGETS[base]


def _platform_fits(platform: str, target: Target) -> bool:
    if platform == "any":
        return True
    match = MANYLINUX.fullmatch(platform)
    glibc = (int(match[1]), int(match[2])) if match else LEGACY_MANYLINUX.get(platform)
    return glibc is not None and glibc <= target.glibc


def tag_fits(tag: str, target: Target) -> bool:
    """Whether a wheel tag (``cp312-cp312-manylinux_2_17_x86_64``) runs on ``target``.

    ``linux_x86_64`` (a wheel built on this host) never fits: it was built for this host's
    Python and libraries, not the target's.
    """
    interpreter, abi, platforms = tag.split("-")
    if not any(_platform_fits(platform, target) for platform in platforms.split(".")):
        return False
    pythons = interpreter.split(".")
    if abi == "none":
        return any(python in ("py3", target.abi) for python in pythons)
    if abi == "abi3":
        return any(
            python.startswith("cp3") and int(python[3:]) <= target.minor for python in pythons
        )
    return abi == target.abi and target.abi in pythons


def wheel_file_fits(file_name: str, target: Target) -> bool:
    """Whether a wheel file (``name-version(-build)-tags.whl``) has a tag for ``target``."""
    parts = file_name.removesuffix(".whl").split("-")
    interpreters, abis, platforms = parts[-3].split("."), parts[-2].split("."), parts[-1]
    return any(
        tag_fits(f"{interpreter}-{abi}-{platforms}", target)
        for interpreter in interpreters
        for abi in abis
    )


def venv_problems(files: Mapping[str, bytes | None], target: Target) -> list[str]:
    """Return what in a charm's venv does not run on ``target``; empty if it all does.

    ``files`` maps each path of the charm (``venv/lib/python3.12/...``) to its content, or
    None where the content is not needed (only ``pyvenv.cfg`` and each wheel's ``WHEEL`` are
    read). The layout is what charmcraft's uv plugin makes: ``venv/pyvenv.cfg`` naming the
    Python, packages under ``venv/lib/python3.X/site-packages``.
    """
    problems: list[str] = []
    config = files.get("venv/pyvenv.cfg")
    if config is None:
        problems.append("no venv/pyvenv.cfg")
    else:
        version = re.search(r"^version_info\s*=\s*(\d+\.\d+)", config.decode(), re.MULTILINE)
        found = version[1] if version else "no version_info"
        if found != target.python:
            problems.append(
                f"venv/pyvenv.cfg: CPython {found}, {target.base} runs {target.python}"
            )
    lib_dirs = sorted({PurePosixPath(path).parts[2] for path in files if _in_venv_lib(path)})
    if lib_dirs != [f"python{target.python}"]:
        shown = ", ".join(f"venv/lib/{name}" for name in lib_dirs) or "none"
        problems.append(f"packages in {shown}, {target.base} reads {target.site_packages}")
    for path, content in sorted(files.items()):
        match = EXTENSION.search(path)
        if match and not match["abi3"] and match["version"] != f"3{target.minor}":
            problems.append(f"{path}: built for CPython 3.{match['version'][1:]}")
        elif match and match["arch"] not in (None, "x86_64-linux-gnu"):
            problems.append(f"{path}: built for {match['arch']}")
        if path.endswith(".dist-info/WHEEL") and content is not None:
            tags = re.findall(r"^Tag:\s*(\S+)", content.decode(), re.MULTILINE)
            if not any(tag_fits(tag, target) for tag in tags):
                problems.append(
                    f"{path}: tags {', '.join(tags) or 'none'} do not fit {target.abi}"
                )
    return problems


def _in_venv_lib(path: str) -> bool:
    parts = PurePosixPath(path).parts
    return len(parts) > 3 and parts[:2] == ("venv", "lib") and parts[2].startswith("python")


def tree_files(root: Path) -> dict[str, bytes | None]:
    """Return a directory's files for ``venv_problems``, relative to ``root``."""
    files: dict[str, bytes | None] = {}
    for path in root.rglob("*"):
        if path.is_file():
            relative = path.relative_to(root).as_posix()
            wanted = relative.endswith(("/WHEEL", "pyvenv.cfg"))
            files[relative] = path.read_bytes() if wanted else None
    return files


def charm_base(manifest: bytes) -> str:
    """Return the base a ``manifest.yaml`` names: ``ubuntu@24.04`` (its only base)."""
    bases = (yaml.safe_load(manifest) or {}).get("bases") or []
    if len(bases) != 1:
        raise AbiError(f"manifest.yaml names {len(bases)} bases, not one")
    return f"{bases[0]['name']}@{bases[0]['channel']}"


def charm_problems(charm_file: Path) -> list[str]:
    """Return what in a packed ``.charm``'s venv does not run on its manifest's base."""
    with zipfile.ZipFile(charm_file) as archive:
        names = archive.namelist()
        files = {
            name: archive.read(name) if name.endswith(("/WHEEL", "pyvenv.cfg")) else None
            for name in names
            if not name.endswith("/")
        }
        manifest = archive.read("manifest.yaml")
    return venv_problems(files, target_for(charm_base(manifest)))


# ---------------------------------------------------------------------------------------------
# Cross-target installs of the locked dependencies


def _run(argv: Sequence[str], cwd: Path, what: str) -> str:
    # A local library (hpc-libs) is built here: with no compiler, one needing C fails.
    env = os.environ | {"CC": "false", "CXX": "false"}
    completed = subprocess.run(
        list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise AbiError(f"{what}:\n{completed.stderr.strip()}")
    return completed.stdout


def exported_names(requirements: str) -> set[str]:
    """Return the package names of a ``uv export`` (``name==version ; marker`` lines)."""
    names = set()
    for line in requirements.split("\n"):
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line.strip())
        if match:
            names.add(re.sub(r"[-_.]+", "-", match[1]).lower())
    return names


def wheelless(lock: Mapping[str, object], names: Iterable[str], target: Target) -> list[str]:
    """Return the locked index packages among ``names`` with no wheel for ``target``."""
    wanted = set(names)
    missing = []
    for package in lock.get("package", []):  # type: ignore[union-attr]
        if package["name"] not in wanted or "registry" not in package.get("source", {}):
            continue
        files = [PurePosixPath(wheel["url"]).name for wheel in package.get("wheels", [])]
        if not any(wheel_file_fits(name, target) for name in files):
            kind = "only an sdist" if not files else f"wheels for others only ({len(files)})"
            missing.append(f"{package['name']} {package['version']} ({kind})")
    return missing


def install_for(staged: Path, platform: str, root: Path) -> Target:
    """Install a staged charm's locked dependencies for ``platform``'s base into ``root/venv``.

    uv's cache answers first (``--offline``: every version is pinned, so the cache cannot
    answer another one); only what it lacks is fetched.
    """
    project = project_tool.load_yaml(staged / "charmcraft.yaml")
    target = target_for(project_tool.platform_base(project, platform))
    label = f"{project['name']} on {platform} (CPython {target.python}, {target.uv_platform})"
    uv = project_tool._uv()
    requirements = _run(
        [uv, "export", "--frozen", "--no-dev", "--no-emit-project", "--no-hashes", "-q"],
        staged,
        f"{label}: cannot export the lock",
    )
    lock = tomllib.loads((staged / "uv.lock").read_text())
    names = exported_names(requirements)
    missing = wheelless(lock, names, target)
    if missing:
        raise AbiError(f"{label}: no wheel for the target: {'; '.join(missing)}")
    (root / "requirements.txt").write_text(requirements)
    install = [
        *(uv, "pip", "install", "-q", "--no-deps", "-r", str(root / "requirements.txt")),
        *("--target", str(root / target.site_packages)),
        *("--python-version", target.python, "--python-platform", target.uv_platform),
        *(f"--only-binary={name}" for name in sorted(names)),
    ]
    try:
        _run([*install, "--offline"], staged, label)
    except AbiError:
        _run(install, staged, f"{label}: cannot install the locked dependencies")
    return target


def target_problems(staged: Path, platform: str) -> list[str]:
    """Install a staged charm for ``platform`` and check what was installed."""
    with tempfile.TemporaryDirectory(prefix=f"abi-{staged.name}-") as tmp:
        target = install_for(staged, platform, Path(tmp))
        files = {name: data for name, data in tree_files(Path(tmp)).items() if "venv/" in name}
    # The plugin's venv also holds its pyvenv.cfg (checked in packed charms: `check`); here
    # only the packages and where they are.
    files["venv/pyvenv.cfg"] = f"version_info = {target.python}.0\n".encode()
    return venv_problems(files, target)


def check_targets(charms: Sequence[str], chosen: Sequence[str] = ()) -> list[str]:
    """Install and check every charm for every platform; return the failures."""
    failures = []
    with tempfile.TemporaryDirectory(prefix="abi-staged-") as tmp:
        for charm in charms:
            try:
                staged = project_tool.stage(charm, Path(tmp))
                wanted = chosen or project_tool.platforms(project_tool.render_project(charm))
            except project_tool.ProjectError as e:
                failures.append(str(e))
                continue
            for platform in wanted:
                try:
                    problems = target_problems(staged, platform)
                except AbiError as e:
                    problems = [str(e)]
                print(f"{charm} {platform}: {'WRONG' if problems else 'ok'}", flush=True)
                failures += [f"{charm} on {platform}: {problem}" for problem in problems]
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; see the module docstring."""
    parser = argparse.ArgumentParser(prog="charm_abi", description=(__doc__ or "").split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    targets = commands.add_parser("targets", help="install each charm for each platform's Python")
    targets.add_argument("charms", nargs="*")
    targets.add_argument("--platform", action="append", default=[], dest="platforms")
    check = commands.add_parser("check", help="check packed .charm files")
    check.add_argument("charm_files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "targets":
            failures = check_targets(args.charms or project_tool.charm_names(), args.platforms)
        else:
            failures = [
                f"{path}: {problem}"
                for path in args.charm_files
                for problem in charm_problems(path)
            ]
    except (AbiError, project_tool.ProjectError) as e:
        failures = [str(e)]
    for failure in failures:
        print(f"charm_abi: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
