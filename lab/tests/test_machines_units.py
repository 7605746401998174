"""Machine-layer pieces that need no root: mirror discovery, the recipe key, the hosts file,
resuming a stopped command."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_lab import cli, rootfs
from slurm_lab.errors import LabError
from slurm_lab.machines import Lab, _hosts_file, _Record
from slurm_lab.proc import run_resumed

DEB822 = """\
Types: deb
# http://snapshot.example.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: trixie-security
Components: main
"""


def _apt(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.fixture(autouse=True)
def _no_mirror_override(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SLURM_LAB_MIRROR", raising=False)


def test_mirror_comes_from_a_deb822_sources_file(tmp_path: Path):
    apt = _apt(tmp_path, {"sources.list.d/debian.sources": DEB822})
    assert rootfs.debian_mirror(apt) == "http://mirror.example.org/debian"


def test_mirror_comes_from_a_one_line_list_skipping_security_and_other_repos(tmp_path: Path):
    apt = _apt(
        tmp_path,
        {
            "sources.list": (
                "# deb http://commented.example.org/debian bookworm main\n"
                "deb https://packages.example.com/apt cloud-sdk main\n"
                "deb http://security.example.org/debian-security bookworm-security main\n"
                "deb-src http://src.example.org/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/k.gpg] http://ftp.example.org/debian/ bookworm main\n"
            )
        },
    )
    assert rootfs.debian_mirror(apt) == "http://ftp.example.org/debian/"


def test_disabled_files_and_stanzas_are_ignored(tmp_path: Path):
    apt = _apt(
        tmp_path,
        {
            "sources.list.d/old.list.disabled": "deb http://old.example.org/debian sid main\n",
            "sources.list.d/off.sources": DEB822.replace(
                "Types: deb\n", "Types: deb\nEnabled: no\n"
            ),
            "sources.list.d/on.list": "deb http://on.example.org/debian trixie main\n",
        },
    )
    assert rootfs.debian_mirror(apt) == "http://on.example.org/debian"


def test_no_debian_archive_is_an_error_and_the_environment_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    apt = _apt(tmp_path, {"sources.list": "deb https://packages.example.com/apt x main\n"})
    with pytest.raises(LabError, match="SLURM_LAB_MIRROR"):
        rootfs.debian_mirror(apt)
    monkeypatch.setenv("SLURM_LAB_MIRROR", "http://override.example.org/debian")
    assert rootfs.debian_mirror(apt) == "http://override.example.org/debian"


def test_recipe_hash_changes_with_the_package_list(monkeypatch: pytest.MonkeyPatch):
    before = rootfs.recipe_hash()
    assert rootfs.recipe_hash() == before
    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "vim"))
    assert rootfs.recipe_hash() != before


def test_recipe_has_systemd_slurm_and_mariadb():
    packages = set(rootfs.PACKAGES)
    assert {"systemd", "dbus", "python3-venv", "slurmd", "slurmctld", "sackd"} <= packages
    assert {"slurmrestd", "slurmdbd", "slurm-client", "mariadb-server"} <= packages
    assert "debootstrap" in rootfs.host_requirements()
    assert "systemd-container" in rootfs.host_requirements()


def test_hosts_file_lists_every_machine():
    text = _hosts_file(
        [_Record("a", "10.151.0.2", "veth2", "ns-a"), _Record("b", "10.151.0.3", "veth3", "ns-b")]
    )
    assert "127.0.0.1\tlocalhost" in text
    assert "10.151.0.2\ta\n" in text and "10.151.0.3\tb\n" in text


def test_labs_in_different_state_dirs_use_different_namespaces(tmp_path: Path):
    one, two = Lab(tmp_path / "one"), Lab(tmp_path / "two")
    assert one.netns_prefix != two.netns_prefix
    assert one.lab_netns.startswith(one.netns_prefix)
    assert one.shared_dir == (tmp_path / "one/shared").resolve()
    assert one.machines() == []
    with pytest.raises(LabError, match="no lab machine"):
        one.get("x")


def test_lab_state_dir_defaults_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("SLURM_LAB_STATE", str(tmp_path / "env-state"))
    monkeypatch.setenv("SLURM_LAB_CACHE", str(tmp_path / "env-cache"))
    lab = Lab()
    assert lab.state_dir == (tmp_path / "env-state").resolve()
    assert lab.cache_dir == tmp_path / "env-cache"


def test_cli_has_the_machine_subcommands(capsys: pytest.CaptureFixture[str]):
    parser = cli.build_parser()
    args = parser.parse_args(["exec", "m", "--", "ls", "-l"])
    assert args.machine == "m" and args.command in (["ls", "-l"], ["--", "ls", "-l"])
    assert parser.parse_args(["up", "--machines", "3"]).machines == 3
    assert parser.parse_args(["up", "a", "b"]).names == ["a", "b"]
    assert cli.main(["host-requirements"]) == 0
    required = capsys.readouterr().out.split()
    assert {"debootstrap", "qemu-system-x86", "qemu-utils", "e2fsprogs"} <= set(required)


def test_down_removes_the_state_dir_and_no_file_the_lab_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(Lab, "_sweep", lambda self: None)  # no process or namespace to sweep
    state = tmp_path / "state"
    lab = Lab(state)
    with lab._locked():  # lab.json and lab.lock, as every machine change writes them
        pass
    for folder in ("machines", "shared/fs", "charms/slurmd/venv", "juju/logs"):
        (state / folder).mkdir(parents=True)
    (state / "juju/model.json").write_text("{}")
    (state / "suite").write_text("trixie\n")

    lab.down()

    assert not state.exists()
    mine = tmp_path / "mine"  # `--state-dir` naming a directory that holds other files
    (mine / "charms").mkdir(parents=True)
    (mine / "notes.txt").write_text("kept")
    Lab(mine).down()
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]


def test_down_powers_every_container_off_before_any_leaves_the_network(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    records = {
        name: _Record(name, f"10.151.0.{n + 2}", f"veth{n}", f"ns-{name}")
        for n, name in enumerate(("ctl", "dbd", "node"))
    }
    steps: list[str] = []
    monkeypatch.setattr(Lab, "_load", lambda self: dict(records))
    monkeypatch.setattr(Lab, "_stop", lambda self, record: steps.append("stop"))
    monkeypatch.setattr(Lab, "_teardown", lambda self, record: steps.append("teardown"))
    monkeypatch.setattr(Lab, "_sweep", lambda self: None)

    Lab(tmp_path / "state").down()

    assert steps[:3] == ["stop"] * 3
    assert steps.count("teardown") == 3


def test_bad_machine_names_are_refused(tmp_path: Path):
    with pytest.raises(LabError, match="bad machine name"):
        Lab(tmp_path).create("Bad_Name")


def test_base_is_built_once_atomically_and_outdated_bases_are_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    builds: list[Path] = []

    def fake_build(target: Path, mirror: str, suite: str = "trixie") -> None:
        assert not (tmp_path / f"base-{rootfs.recipe_hash()}").exists(), "built in place"
        (target / "etc").mkdir(parents=True)
        builds.append(target)

    monkeypatch.setattr(rootfs, "_build", fake_build)
    monkeypatch.setenv("SLURM_LAB_MIRROR", "http://mirror.example.org/debian")
    (tmp_path / "base-0ld").mkdir()
    base = rootfs.ensure_base(tmp_path)
    assert base == tmp_path / f"base-{rootfs.recipe_hash()}"
    assert (base / "etc").is_dir() and builds[0].name.startswith(".build-")
    assert not (tmp_path / "base-0ld").exists()
    assert rootfs.ensure_base(tmp_path) == base and len(builds) == 1

    monkeypatch.setattr(rootfs, "PACKAGES", (*rootfs.PACKAGES, "vim"))
    rebuilt = rootfs.ensure_base(tmp_path)
    assert rebuilt != base and len(builds) == 2
    assert sorted(p.name for p in tmp_path.glob("base-*")) == [rebuilt.name]


def test_a_failed_build_leaves_no_base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def failing_build(target: Path, mirror: str, suite: str = "trixie") -> None:
        target.mkdir(parents=True)
        raise LabError("debootstrap failed")

    monkeypatch.setattr(rootfs, "_build", failing_build)
    monkeypatch.setenv("SLURM_LAB_MIRROR", "http://mirror.example.org/debian")
    with pytest.raises(LabError, match="debootstrap failed"):
        rootfs.ensure_base(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_a_command_that_stops_is_resumed_as_nsenter_needs_when_a_machine_shuts_down():
    # nsenter stops itself when its child is stopped (systemd's shutdown stops every process)
    # and waits for a SIGCONT: the lab sends it.
    started = time.monotonic()

    result = run_resumed(["sh", "-c", "kill -STOP $$; echo resumed"], timeout=30)

    assert (result.returncode, result.stdout) == (0, "resumed\n")
    assert time.monotonic() - started < 5


def test_a_command_run_resumed_times_out_as_run_does():
    with pytest.raises(LabError, match="timed out after 1s"):
        run_resumed(["sleep", "30"], timeout=1)
    assert run_resumed(["cat"], input="in").stdout == "in"
