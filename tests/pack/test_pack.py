"""`just pack` with the real charmcraft (PyPI, the pinned version) on this Debian host.

The recipe runs as a user runs it, from a charm's directory (not the repository root), into a
build directory of the test's own ($PACK_DIR): charmcraft writes into the staged charm, the
tool moves each file out. A charmcraft refusal (an ``--output`` outside the project, as before
issue 35) fails the pack and the test.

Charmcraft refuses a destructive build for an Ubuntu base on a Debian host: the first test
runs it through ``charmcraft_any_host.py``, charmcraft's own entry point with that one check
skipped (as the lab's build machine does). What it packs carries this host's CPython, so it is
no file to deploy: the test checks charmcraft named it as ``just pack`` expects, that its venv
has the uv plugin's layout, and that ``tools/charm_abi.py`` refuses it for Ubuntu.
The second runs the documented pinned-charmcraft command as written (docs/deploy.md), with no
skipped check, from a charm's directory: charmcraft must start (its constraints path resolved
from the staged charm, where it runs); on this Debian host it then refuses to pack.

Needs network access to PyPI, or uv's cache, and ``just``.
"""

# pyright: reportMissingImports=false

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import charm_abi  # noqa: E402
import charmcraft_project  # noqa: E402

WRAPPER = Path(__file__).parent / "charmcraft_any_host.py"
CHARM = "sackd"
PLATFORMS = ("ubuntu@24.04:amd64", "ubuntu@26.04:amd64")
#: The pinned charmcraft from PyPI as docs/deploy.md writes it, expanded by the shell.
PINNED = (
    "uv tool run --from charmcraft=={version} --constraints "
    "$(git rev-parse --show-toplevel)/tools/charmcraft-constraints.txt {command}"
)

pytestmark = pytest.mark.skipif(not shutil.which("just"), reason="needs just")


def _just_pack(
    tmp_path: Path, charmcraft: str, pack_args: str
) -> subprocess.CompletedProcess[str]:
    """`just pack sackd` from the charm's directory, $CHARMCRAFT expanded by the shell."""
    env = os.environ | {
        "PACK_DIR": str(tmp_path / "build"),
        "CHARMCRAFT_PACK_ARGS": pack_args,
        # Charmcraft's log and runtime files stay in the test's directory.
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "XDG_RUNTIME_DIR": str(tmp_path),
    }
    return subprocess.run(
        ["bash", "-c", f'CHARMCRAFT="{charmcraft}" just pack {CHARM}'],
        cwd=REPO / "charms" / CHARM,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def _version() -> str:
    return charmcraft_project.CHARMCRAFT_VERSION


def _zip_files(charm_file: Path) -> Mapping[str, bytes | None]:
    with zipfile.ZipFile(charm_file) as archive:
        return {
            name: archive.read(name) if name.endswith(("/WHEEL", "pyvenv.cfg")) else None
            for name in archive.namelist()
            if not name.endswith("/")
        }


def _manifest(charm_file: Path) -> bytes:
    with zipfile.ZipFile(charm_file) as archive:
        return archive.read("manifest.yaml")


def test_just_pack_packs_both_platforms_with_the_real_charmcraft(tmp_path: Path):
    command = PINNED.format(version=_version(), command=f"python {WRAPPER}")
    platforms = " ".join(f"--platform {platform}" for platform in PLATFORMS)

    packed = _just_pack(tmp_path, command, f"--destructive-mode {platforms}")

    output = packed.stdout + packed.stderr
    assert packed.returncode == 0, output[-4000:]
    build = tmp_path / "build"
    names = sorted(path.name for path in build.glob("*.charm"))
    assert names == [charmcraft_project.charm_file_name(CHARM, p) for p in PLATFORMS], output
    assert not list((build / CHARM).glob("*.charm"))
    for platform, name in zip(PLATFORMS, names, strict=True):
        files = _zip_files(build / name)
        base = charm_abi.charm_base(_manifest(build / name))
        assert base == charmcraft_project.platform_base({}, platform)
        # The venv is this host's CPython: the uv plugin's layout for that Python...
        config = files["venv/pyvenv.cfg"] or b""
        host_python = re.search(rb"^version_info = (3\.\d+)", config, re.MULTILINE)
        assert host_python, config
        built_with = charm_abi.Target(base, host_python[1].decode(), (2, 36))
        assert charm_abi.venv_problems(files, built_with) == []
        # ...and so no file for Ubuntu, which the ABI check says.
        assert charm_abi.charm_problems(build / name), f"{name} passed as an Ubuntu charm"


def test_the_documented_pinned_charmcraft_runs_from_any_directory(tmp_path: Path):
    command = PINNED.format(version=_version(), command="charmcraft")

    packed = _just_pack(tmp_path, command, f"--destructive-mode --platform {PLATFORMS[0]}")

    # uv found the constraints from the staged charm (an absolute path) and charmcraft ran: it
    # wrote its log. Only an Ubuntu 24.04 host then passes its checks (this Debian host fails
    # on the base, or before it on python3-apt, which charmcraft's environment lacks here).
    output = packed.stdout + packed.stderr
    assert list((tmp_path / "state" / "charmcraft" / "log").glob("*.log")), output[-4000:]
    if charmcraft_project.host_base() == "ubuntu@24.04":
        assert packed.returncode == 0, output[-4000:]
    else:
        assert "charmcraft pack failed for sackd on ubuntu@24.04:amd64" in output, output[-4000:]
