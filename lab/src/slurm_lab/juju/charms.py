"""Charm metadata and packing.

Metadata (`load_spec`): what the backend needs to know about a charm, from its charmcraft.yaml.
Packing (`packed_charm`, `unpack_charm`): the .charm charmcraft packs for the lab's machines,
unpacked as a unit's charm dir. Its venv holds exactly what the charm declares (charmcraft's uv
plugin), so a dependency missing from the charm's pyproject fails in the lab as on Juju.
"""

from __future__ import annotations

import hashlib
import logging
import re
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from slurm_lab import builder, rootfs
from slurm_lab.errors import LabError

logger = logging.getLogger(__name__)

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


# --- packed charms -----------------------------------------------------------------------------

PROJECT_TOOL = Path("tools") / "charmcraft_project.py"
CONSTRAINTS = Path("tools") / "charmcraft-constraints.txt"
#: Bump when what goes into a packed charm's cache key changes meaning.
PACK_KEY_VERSION = 2


def _tree_digest(path: Path, digest: Any) -> None:
    for file in sorted(path.rglob("*")):
        if file.is_file() and "__pycache__" not in file.parts and ".venv" not in file.parts:
            digest.update(str(file.relative_to(path)).encode())
            digest.update(file.read_bytes())


def _repository(charm_dir: Path) -> Path:
    """Return the checkout whose tools/charmcraft_project.py stages and pins charmcraft."""
    for parent in charm_dir.resolve().parents:
        if (parent / PROJECT_TOOL).is_file() and (parent / CONSTRAINTS).is_file():
            return parent
    raise LabError(f"{charm_dir} is not inside a checkout with {PROJECT_TOOL}: cannot pack it")


def pinned_charmcraft(repository: Path) -> builder.Charmcraft:
    """Return the charmcraft pinned by the repository's tools (version and constraints)."""
    text = (repository / PROJECT_TOOL).read_text()
    match = re.search(r'^CHARMCRAFT_VERSION = "([^"]+)"$', text, re.MULTILINE)
    if match is None:
        raise LabError(f"no CHARMCRAFT_VERSION in {repository / PROJECT_TOOL}")
    return builder.Charmcraft(match.group(1), repository / CONSTRAINTS)


def _stage_for_pack(charm_dir: Path, repository: Path, build_dir: Path) -> Path:
    """Stage the charm as `just pack` does (tools/charmcraft_project.py stage)."""
    staged = subprocess.run(
        [
            *(sys.executable, str(repository / PROJECT_TOOL), "stage"),
            *(str(charm_dir.resolve()), "--build-dir", str(build_dir)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if staged.returncode != 0:
        raise LabError(f"cannot stage {charm_dir}: {staged.stderr.strip()}")
    return Path(staged.stdout.strip())


def _first_platform(staged: Path) -> str:
    data = yaml.safe_load((staged / "charmcraft.yaml").read_text()) or {}
    names = list(data.get("platforms") or {})
    if not names:
        raise LabError(f"{staged}/charmcraft.yaml has no platforms")
    return str(names[0])


def _pack_key(staged: Path, platform: str, suite: str, charmcraft: builder.Charmcraft) -> str:
    """Hash every input of a pack: the staged charm, platform, base, charmcraft and uv."""
    digest = hashlib.sha256()
    builder_key = builder.builder_key(suite, charmcraft, builder.host_uv())
    for part in (str(PACK_KEY_VERSION), platform, suite, builder_key):
        digest.update(part.encode() + b"\0")
    _tree_digest(staged, digest)
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class LabBuild:
    """What a lab pack is built for: its file name and manifest say so, never Ubuntu."""

    debian: str  # "13", or the codename of a testing suite ("forky")
    python: str  # "3.13"

    @property
    def note(self) -> str:
        """The manifest's first line: ``lab: Debian 13, Python 3.13, not for Ubuntu``."""
        return f"lab: Debian {self.debian}, Python {self.python}, not for Ubuntu"

    @property
    def file_tag(self) -> str:
        """The same in a file name: ``lab-debian13-python3.13-not-for-ubuntu``."""
        return f"lab-debian{self.debian}-python{self.python}-not-for-ubuntu"


def lab_build(base: Path) -> LabBuild:
    """Read the Debian release and the Python (``python3``) of a lab base's root."""
    release = (base / "etc" / "debian_version").read_text().strip()
    debian = release.split(".")[0] if release[:1].isdigit() else release.split("/")[0]
    python = (base / "usr" / "bin" / "python3").readlink().name.removeprefix("python")
    if not re.fullmatch(r"3\.\d+", python) or not re.fullmatch(r"[a-z0-9]+", debian):
        raise LabError(f"cannot tell the Debian and Python of {base} ({release}, {python})")
    return LabBuild(debian, python)


def mark_lab_build(charm_file: Path, build: LabBuild) -> None:
    """Write ``# <build.note>`` as the first line of the packed charm's ``manifest.yaml``.

    The archive is rewritten entry by entry (modes, links and compression kept).
    """
    marked = charm_file.with_name(f".{charm_file.name}.marked")
    with zipfile.ZipFile(charm_file) as source, zipfile.ZipFile(marked, "w") as target:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "manifest.yaml":
                data = f"# {build.note}\n".encode() + data
            target.writestr(entry, data)
    marked.replace(charm_file)


def packed_charm(charm_dir: Path, suite: str | None = None) -> Path:
    """Return the .charm of `charm_dir` packed by charmcraft for the lab machines of `suite`.

    The charm is staged as `just pack` stages it, then packed for its first platform in the
    suite's build machine (`slurm_lab.builder`: the machines' Debian and Python). Packed
    charms are cached under `<lab cache>/charms`, keyed by a hash of the staged charm and of
    everything that builds it, so an unchanged charm is packed once; a lock keeps parallel
    labs from packing the same charm twice. A failed pack raises LabError with charmcraft's
    output. Its venv is the lab's Debian Python, so it is named and marked as such
    (`<name>_<suite>_lab-debian13-python3.13-not-for-ubuntu_<key>.charm`, `LabBuild`): it
    cannot start on Ubuntu, and `just pack` makes the charms a user deploys.
    """
    suite = rootfs.check_suite(suite or rootfs.default_suite())
    repository = _repository(charm_dir)
    charmcraft = pinned_charmcraft(repository)
    cache = builder.charms_cache()
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".stage-", dir=cache) as tmp:
        staged = _stage_for_pack(charm_dir, repository, Path(tmp))
        platform = _first_platform(staged)
        name = load_spec(staged).name
        build = lab_build(rootfs.ensure_base(suite=suite))
        key = _pack_key(staged, platform, suite, charmcraft)
        target = cache / f"{name}_{suite}_{build.file_tag}_{key}.charm"
        if target.is_file():
            return target
        with builder.locked(cache / f".{target.name}.lock"):
            if target.is_file():
                return target
            started = time.monotonic()
            packed = builder.charmcraft_pack(staged, platform, suite, charmcraft)
            mark_lab_build(packed, build)
            packed.rename(target)
            logger.info("packed %s for %s in %.1fs", name, suite, time.monotonic() - started)
    return target


def unpack_charm(charm_file: Path, dest: Path) -> None:
    """Unpack a .charm into `dest` as Juju unpacks a unit's charm: modes and symlinks kept.

    `dest` is a host path (for a unit: `Lab.host_path(machine,
    "/var/lib/juju/agents/unit-<app>-<n>/charm")`). Files already there are replaced, others
    left (the unit state database lives there too). An entry leading out of `dest` is refused.
    """
    dest = dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(charm_file) as archive:
        for entry in archive.infolist():
            target = (dest / entry.filename).resolve()
            if not target.is_relative_to(dest):
                raise LabError(f"{charm_file}: {entry.filename} leads out of the charm dir")
            mode = entry.external_attr >> 16
            if entry.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink() or target.exists():
                target.unlink()
            if stat.S_ISLNK(mode):
                target.symlink_to(archive.read(entry).decode())
                continue
            target.write_bytes(archive.read(entry))
            target.chmod(stat.S_IMODE(mode) or 0o644)
