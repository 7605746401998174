"""Packed charms: charmcraft packs a test charm in the lab's build machine, and its dispatch runs.

Needs root, systemd-nspawn and the network (charmcraft and the charm's wheels come from PyPI);
the first run also builds the build machine's layer (~40 s). Packed charms are cached by a hash
of their inputs, so a second session repacks nothing.
"""

from __future__ import annotations

import shutil
import stat
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from slurm_lab import builder, rootfs
from slurm_lab.juju import charms

pytestmark = pytest.mark.lab

LABTEST = Path(__file__).parent / "charms" / "labtest"
SUITE = "trixie"
UNIT_CHARM_DIR = "/var/lib/juju/agents/unit-labtest-0/charm"
#: Hook-tool stand-ins: juju-log records its message, every other tool answers nothing.
STUB_TOOLS = ("juju-log", "is-leader", "config-get", "status-set", "status-get", "action-get")


@pytest.fixture(scope="module")
def packed() -> Path:
    return charms.packed_charm(LABTEST, SUITE)


@pytest.fixture
def unpacked(packed: Path) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="unpacked-", dir=builder.charms_cache()) as tmp:
        charms.unpack_charm(packed, Path(tmp) / "charm")
        yield Path(tmp) / "charm"


def _modes(packed: Path) -> dict[str, int]:
    with zipfile.ZipFile(packed) as archive:
        return {entry.filename: entry.external_attr >> 16 for entry in archive.infolist()}


def _read_yaml(packed: Path, name: str) -> object:
    with zipfile.ZipFile(packed) as archive:
        return yaml.safe_load(archive.read(name))


def test_the_packed_charm_has_charmcrafts_layout(packed: Path):
    project = yaml.safe_load((LABTEST / "charmcraft.yaml").read_text())
    modes = _modes(packed)

    # The venv is Debian 13's CPython 3.13: the name and the manifest say so (no Ubuntu unit
    # could run it; `just pack` makes the charms users deploy).
    assert packed.name.startswith("labtest_trixie_lab-debian13-python3.13-not-for-ubuntu_")
    assert modes["dispatch"] & stat.S_IXUSR
    assert modes["src/charm.py"] & stat.S_IXUSR
    assert "venv/lib/python3.13/site-packages/ops/__init__.py" in modes
    assert "venv/pyvenv.cfg" in modes
    # charmcraft removes the venv's python links; dispatch links the machine's python3 at run.
    assert not [name for name in modes if name.startswith("venv/bin/python")]
    metadata = _read_yaml(packed, "metadata.yaml")
    assert isinstance(metadata, dict)
    assert metadata["name"] == "labtest"
    assert metadata["peers"] == project["peers"]
    assert metadata["requires"] == project["requires"]
    assert "config" not in metadata and "actions" not in metadata
    assert _read_yaml(packed, "config.yaml") == project["config"]
    assert _read_yaml(packed, "actions.yaml") == project["actions"]
    manifest = _read_yaml(packed, "manifest.yaml")
    assert isinstance(manifest, dict)
    assert manifest["charmcraft-version"] == "4.5.0"
    with zipfile.ZipFile(packed) as archive:
        first_line = archive.read("manifest.yaml").decode().split("\n")[0]
    assert first_line == "# lab: Debian 13, Python 3.13, not for Ubuntu"


def test_a_second_request_reuses_the_packed_charm(packed: Path):
    assert charms.packed_charm(LABTEST, SUITE) == packed


def _dispatch(charm_dir: Path, scratch: Path) -> tuple[int, str, str]:
    """Run the unpacked charm's dispatch for `install` on a machine of the lab's base.

    The machine has no network and no Juju: stub hook tools on PATH record juju-log calls.
    """
    tools = scratch / "tools"
    tools.mkdir()
    for tool in STUB_TOOLS:
        body = 'echo "$*" >> /var/log/juju-log.txt' if tool == "juju-log" else "true"
        (tools / tool).write_text(f"#!/bin/sh\n{body}\n")
        (tools / tool).chmod(0o755)
    env = {
        "PATH": f"/opt/hook-tools:{builder.MACHINE_PATH}",
        "JUJU_DISPATCH_PATH": "hooks/install",
        "JUJU_UNIT_NAME": "labtest/0",
        "JUJU_MODEL_NAME": "lab",
        "JUJU_VERSION": "3.6.0",
        "JUJU_CHARM_DIR": UNIT_CHARM_DIR,
        "JUJU_CONTEXT_ID": "labtest/0-install-1",
    }
    with builder.overlay([rootfs.ensure_base(suite=SUITE)], scratch / "machine") as root:
        result = builder.nspawn(
            root,
            f"{UNIT_CHARM_DIR}/dispatch",
            binds={charm_dir: UNIT_CHARM_DIR},
            read_only={tools: "/opt/hook-tools"},
            env=env,
            timeout=120,
        )
        log = root / "var/log/juju-log.txt"
        juju_log = log.read_text() if log.exists() else ""
    # nspawn hands the container's stderr to its stdout when it is not a terminal.
    return result.returncode, result.stdout + result.stderr, juju_log


def test_dispatch_starts_ops_with_the_charm_and_fails_without_its_venv(unpacked: Path):
    with tempfile.TemporaryDirectory(dir=builder.charms_cache()) as tmp:
        _, _, juju_log = _dispatch(unpacked, Path(tmp))
    assert "Emitting Juju event install." in juju_log, juju_log

    shutil.rmtree(unpacked / "venv" / "lib" / "python3.13" / "site-packages" / "ops")
    with tempfile.TemporaryDirectory(dir=builder.charms_cache()) as tmp:
        returncode, output, juju_log = _dispatch(unpacked, Path(tmp))
    assert returncode != 0
    assert "No module named 'ops'" in output
    assert juju_log == ""
