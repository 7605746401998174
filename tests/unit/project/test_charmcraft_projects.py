"""The charmcraft projects: merged from charmcraft-common.yaml and each charm's own file, and
accepted by charmcraft's own schema (charmcraft from PyPI, no LXD needed).

Charmcraft takes seconds to start, so every project - the five charms and deliberately broken
copies - is checked in one charmcraft process per session and the tests read its results.
"""

import copy
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).parents[3]
CHARMS = sorted(path.parent.name for path in (REPO / "charms").glob("*/charmcraft.yaml"))


def _unknown_top_level_key(project: dict[str, Any]) -> None:
    project["maintainer"] = "nobody"


def _unsupported_base(project: dict[str, Any]) -> None:
    project["base"] = "ubuntu@23.04"
    project["platforms"] = {"amd64": None}


def _unsupported_platform_base(project: dict[str, Any]) -> None:
    # charmcraft's expand-extensions accepts it; only its pack would refuse the base.
    project["platforms"]["ubuntu@23.04:amd64"] = None


def _unsupported_build_for_base(project: dict[str, Any]) -> None:
    project["platforms"] = {
        "old": {"build-on": ["ubuntu@23.10:amd64"], "build-for": ["ubuntu@23.10:amd64"]}
    }


def _unknown_plugin(project: dict[str, Any]) -> None:
    project["parts"]["charm"]["plugin"] = "uvv"


def _bad_config_option_type(project: dict[str, Any]) -> None:
    project["config"]["options"]["slurm-package-source"]["type"] = "text"


#: A deliberate breakage of a valid project, and what charmcraft's complaint must name.
BREAKAGES: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "unknown top-level key": (_unknown_top_level_key, "maintainer"),
    "unsupported base": (_unsupported_base, "ubuntu@23.04"),
    "unsupported platform base": (_unsupported_platform_base, "unsupported base ubuntu@23.04"),
    "unsupported build-for base": (_unsupported_build_for_base, "unsupported base ubuntu@23.10"),
    "unknown plugin": (_unknown_plugin, "uvv"),
    "bad config option type": (_bad_config_option_type, "text"),
}


@pytest.fixture(scope="session")
def charmcraft_results(
    tool: ModuleType, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Every charm's project and every broken copy of the sackd project, checked at once."""
    root = tmp_path_factory.mktemp("charmcraft-projects")
    files: dict[str, Path] = {}
    for charm in CHARMS:
        files[charm] = tool.write_project(charm, root / charm / "charmcraft.yaml")
    for breakage, (breaks, _) in BREAKAGES.items():
        project = copy.deepcopy(tool.render_project("sackd"))
        breaks(project)
        path = root / breakage.replace(" ", "-") / "charmcraft.yaml"
        path.parent.mkdir()
        path.write_text(tool.dump_project(project))
        files[breakage] = path
    results = tool.validate_files(list(files.values()))
    return dict(zip(files, results, strict=True))


def test_there_are_five_charms():
    assert CHARMS == ["sackd", "slurmctld", "slurmd", "slurmdbd", "slurmrestd"]


@pytest.mark.parametrize("charm", CHARMS)
def test_charm_project_passes_charmcraft_validation(
    charm: str, charmcraft_results: dict[str, Any]
):
    result = charmcraft_results[charm]

    assert result.ok, f"{' '.join(result.command)} failed:\n{result.output}"


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_a_broken_project_fails_charmcraft_validation(
    breakage: str, charmcraft_results: dict[str, Any]
):
    result = charmcraft_results[breakage]
    _, complaint = BREAKAGES[breakage]

    assert not result.ok, f"charmcraft accepted a project with an {breakage}"
    assert complaint in result.output


@pytest.mark.parametrize("charm", CHARMS)
def test_rendered_project_has_the_shared_build_and_the_charms_own_metadata(
    charm: str, tool: ModuleType
):
    project = tool.render_project(charm)

    assert project["name"] == charm
    assert project["type"] == "charm"
    assert "base" not in project
    assert project["platforms"] == {"ubuntu@24.04:amd64": None, "ubuntu@26.04:amd64": None}
    assert project["parts"]["charm"]["plugin"] == "uv"
    assert project["config"]["options"]["slurm-package-source"]["default"] == "auto"


@pytest.mark.parametrize("charm", CHARMS)
def test_charm_file_holds_only_what_is_its_own(charm: str, tool: ModuleType):
    assert tool.shared_keys_redeclared(charm) == []


def test_every_charm_is_built_for_ubuntu_24_04_and_26_04(tool: ModuleType):
    for charm in CHARMS:
        assert tool.platform_bases(tool.render_project(charm)) == ["ubuntu@24.04", "ubuntu@26.04"]
    assert tool.charm_file_name("slurmd") == "slurmd_ubuntu@24.04-amd64.charm"


@pytest.mark.parametrize(
    ("project", "bases"),
    [
        ({"base": "ubuntu@22.04", "platforms": {"amd64": None}}, ["ubuntu@22.04"]),
        (
            {"platforms": {"ubuntu@24.04:amd64": None, "ubuntu@26.04:arm64": {}}},
            [
                "ubuntu@24.04",
                "ubuntu@26.04",
            ],
        ),
        (
            {
                "platforms": {
                    "jammy": {
                        "build-on": ["ubuntu@22.04:amd64"],
                        "build-for": ["ubuntu@22.04:amd64"],
                    }
                }
            },
            ["ubuntu@22.04"],
        ),
        ({"platforms": None}, []),
    ],
)
def test_platform_bases_reads_every_form(
    tool: ModuleType, project: dict[str, Any], bases: list[str]
):
    assert tool.platform_bases(project) == bases


def test_rendered_file_reads_back_as_the_merged_project(tool: ModuleType, tmp_path: Path):
    path = tool.write_project("sackd", tmp_path / "charmcraft.yaml")

    assert path.read_text().startswith(tool.GENERATED_HEADER)
    assert yaml.safe_load(path.read_text()) == tool.render_project("sackd")


def test_charm_endpoints_match_what_slurmctld_integrates_with(tool: ModuleType):
    provided = {
        charm: {
            name: spec["interface"]
            for name, spec in tool.render_project(charm)["provides"].items()
        }
        for charm in ("sackd", "slurmdbd", "slurmrestd")
    }

    cos = {"cos-agent": "cos_agent"}  # Every charm sends its telemetry to COS.
    assert provided == {
        "sackd": {"slurmctld": "sackd", **cos},
        "slurmdbd": {"slurmctld": "slurmdbd", **cos},
        "slurmrestd": {"slurmctld": "slurmrestd", "rest-api": "slurm_rest_api", **cos},
    }
    assert tool.render_project("slurmdbd")["requires"] == {
        "database": {"interface": "mysql_client", "limit": 1}
    }


class TestDeepMerge:
    def test_mappings_merge_key_by_key(self, tool: ModuleType):
        merged = tool.deep_merge(
            {"parts": {"charm": {"plugin": "uv", "source": "."}}},
            {"parts": {"charm": {"build-packages": ["git"]}}},
        )

        assert merged == {
            "parts": {"charm": {"plugin": "uv", "source": ".", "build-packages": ["git"]}}
        }

    def test_lists_are_replaced_not_concatenated(self, tool: ModuleType):
        merged = tool.deep_merge({"assumes": ["juju >= 3.6"]}, {"assumes": ["juju >= 3.7"]})

        assert merged == {"assumes": ["juju >= 3.7"]}

    def test_null_is_an_ordinary_value(self, tool: ModuleType):
        assert tool.deep_merge({"platforms": {"amd64": None}}, {}) == {
            "platforms": {"amd64": None}
        }
        assert tool.deep_merge({"a": {"b": 1}}, {"a": None}) == {"a": None}
        assert tool.deep_merge({"a": None}, {"a": {"b": 1}}) == {"a": {"b": 1}}

    def test_a_mapping_against_a_scalar_is_an_error_naming_the_key(self, tool: ModuleType):
        with pytest.raises(tool.ProjectError, match=r"'parts\.charm'"):
            tool.deep_merge({"parts": {"charm": {"plugin": "uv"}}}, {"parts": {"charm": "uv"}})

    def test_inputs_are_not_modified(self, tool: ModuleType):
        base = {"parts": {"charm": {"plugin": "uv"}}}
        tool.deep_merge(base, {"parts": {"charm": {"source": "."}}})

        assert base == {"parts": {"charm": {"plugin": "uv"}}}


def test_staged_charm_is_a_self_contained_uv_project(tool: ModuleType, tmp_path: Path):
    staged = tool.stage("sackd", tmp_path)

    assert os.access(staged / "src" / "charm.py", os.X_OK)
    assert (staged / "libs" / "hpc_libs" / "src" / "hpc_libs" / "__init__.py").exists()
    assert yaml.safe_load((staged / "charmcraft.yaml").read_text()) == tool.render_project("sackd")
    lock = (staged / "uv.lock").read_text()
    assert 'source = { directory = "libs/hpc_libs" }' in lock
    assert "workspace = true" not in (staged / "pyproject.toml").read_text()


LABTEST = REPO / "lab" / "tests" / "charms" / "labtest"


def test_a_charm_outside_charms_is_its_own_whole_project(tool: ModuleType):
    project = tool.render_project(LABTEST)

    assert project == yaml.safe_load((LABTEST / "charmcraft.yaml").read_text())
    assert "assumes" not in project  # nothing from charmcraft-common.yaml


def test_a_test_charm_stages_by_path(tool: ModuleType, tmp_path: Path):
    staged = tool.stage(str(LABTEST), tmp_path)

    assert staged == tmp_path / "labtest"
    assert yaml.safe_load((staged / "charmcraft.yaml").read_text())["name"] == "labtest"
    assert "constraint-dependencies" in (staged / "pyproject.toml").read_text()
    assert (staged / "uv.lock").exists()


def test_each_platform_has_its_own_charm_file_name(tool: ModuleType):
    assert tool.charm_file_name("slurmd", "ubuntu@26.04:amd64") == (
        "slurmd_ubuntu@26.04-amd64.charm"
    )
    assert tool.charm_file_name(LABTEST) == "labtest_amd64.charm"


def test_host_base_reads_os_release(tool: ModuleType, tmp_path: Path):
    os_release = tmp_path / "os-release"
    os_release.write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="24.04"\n')

    assert tool.host_base(os_release) == "ubuntu@24.04"


def test_destructive_mode_packs_only_the_hosts_base(tool: ModuleType):
    project = tool.render_project("slurmd")

    assert tool.platforms_to_pack(project, False, "debian@12") == [
        "ubuntu@24.04:amd64",
        "ubuntu@26.04:amd64",
    ]
    assert tool.platforms_to_pack(project, True, "ubuntu@26.04") == ["ubuntu@26.04:amd64"]
    with pytest.raises(tool.ProjectError, match="debian@12"):
        tool.platforms_to_pack(project, True, "debian@12")
    labtest = tool.render_project(LABTEST)  # base + platform `amd64`
    assert tool.platforms_to_pack(labtest, True, "ubuntu@24.04") == ["amd64"]


FAKE_CHARMCRAFT = """#!/bin/sh
# Records where and how it ran, then does what charmcraft 4.5 does: refuses an --output
# outside the project (the current directory), else writes <name>_<platform>.charm there.
echo "$PWD $*" >> "$CALLS"
output=.
while [ $# -gt 0 ]; do
    case "$1" in --platform) platform=$(echo "$2" | tr : -);; --output) output=$2;; esac
    shift
done
case "$(realpath "$output")/" in
    "$PWD"/*) ;;
    *) echo "Cannot create packages outside of the project tree." >&2; exit 1;;
esac
name=$(sed -n 's/^name: //p' charmcraft.yaml)
touch "$output/${name}_${platform}.charm"
"""


@pytest.fixture
def fake_charmcraft(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put FAKE_CHARMCRAFT in $CHARMCRAFT; return the file its calls are recorded in."""
    fake = tmp_path / "charmcraft"
    fake.write_text(FAKE_CHARMCRAFT)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("CHARMCRAFT", str(fake))
    monkeypatch.setenv("CALLS", str(calls))
    return calls


def test_pack_runs_charmcraft_from_inside_the_staged_charm_once_per_platform(
    tool: ModuleType, tmp_path: Path, fake_charmcraft: Path
):
    build = tmp_path / "build"

    written = tool.pack("sackd", ["--verbose"], build)

    assert [path.name for path in written] == [
        "sackd_ubuntu@24.04-amd64.charm",
        "sackd_ubuntu@26.04-amd64.charm",
    ]
    assert all(path.parent == build and path.is_file() for path in written)
    ran = fake_charmcraft.read_text().splitlines()
    assert ran == [
        f"{build}/sackd pack --platform {platform} --verbose"
        for platform in ("ubuntu@24.04:amd64", "ubuntu@26.04:amd64")
    ]
    assert not list((build / "sackd").glob("*.charm"))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["build", "calls", "charmcraft"]


def test_pack_packs_only_the_platforms_asked_for(
    tool: ModuleType, tmp_path: Path, fake_charmcraft: Path
):
    written = tool.pack("sackd", ["--destructive-mode"], tmp_path, ["ubuntu@26.04:amd64"])

    assert [path.name for path in written] == ["sackd_ubuntu@26.04-amd64.charm"]
    with pytest.raises(tool.ProjectError, match=r"no platform ubuntu@22\.04:amd64 "):
        tool.pack("sackd", [], tmp_path, ["ubuntu@22.04:amd64"])


def test_just_pack_writes_every_charm_and_an_overlay_naming_each(
    tool: ModuleType, tmp_path: Path, fake_charmcraft: Path
):
    build = tmp_path / "build"
    overlay = build / "local-charms.yaml"
    bundle = REPO / "bundles" / "slurm-cluster.yaml"

    # What the justfile's `pack` recipe runs, in a build directory of the test's own.
    assert tool.main(["pack", "--build-dir", str(build)]) == 0
    assert tool.main(["overlay", str(bundle), "-o", str(overlay)]) == 0

    packed = {path.name for path in build.glob("*.charm")}
    assert packed == {
        f"{charm}_ubuntu@{release}-amd64.charm"
        for charm in tool.charm_names()
        for release in ("24.04", "26.04")
    }
    named = yaml.safe_load(overlay.read_text())["applications"]
    assert {spec["charm"].removeprefix("./") for spec in named.values()} >= {
        f"{charm}_ubuntu@24.04-amd64.charm" for charm in tool.charm_names()
    }


def test_pack_fails_when_charmcraft_fails(
    tool: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("CHARMCRAFT", "false")

    with pytest.raises(tool.ProjectError, match="charmcraft pack failed for sackd"):
        tool.pack("sackd", [], tmp_path)


def test_a_missing_charmcraft_is_one_line_saying_how_to_install_it(
    tool: ModuleType,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CHARMCRAFT", raising=False)

    assert tool.main(["pack", "sackd", "--build-dir", str(tmp_path / "build")]) == 1

    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert "charmcraft: command not found" in error
    assert "snap install charmcraft" in error
    assert not (tmp_path / "build" / "sackd").exists()


@pytest.mark.parametrize("charm", CHARMS)
def test_every_action_refuses_a_parameter_it_does_not_declare(charm: str, tool: ModuleType):
    # Juju 3.6 runs an action with an unknown parameter (a typo of a real one) in silence
    # unless the action sets `additionalProperties: false`; Juju 4 refuses it by default.
    actions: dict[str, Any] = tool.render_project(charm).get("actions") or {}

    lacking = [
        name
        for name, spec in actions.items()
        if (spec or {}).get("additionalProperties") is not False
    ]

    assert lacking == []
