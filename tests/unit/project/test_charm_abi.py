"""tools/charm_abi.py: a charm's venv must be built for the CPython of the base it is packed for.

Ubuntu 24.04 runs CPython 3.12, Ubuntu 26.04 CPython 3.14; a venv of another Python (the lab's
Debian 13 packs: CPython 3.13) fails every hook on Ubuntu with `No module named 'ops'`.
"""

import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from tool_modules import load_tool

abi: ModuleType = load_tool("charm_abi.py", "charm_abi")
NOBLE = abi.TARGETS["ubuntu@24.04"]
RESOLUTE = abi.TARGETS["ubuntu@26.04"]
SITE = "venv/lib/python3.12/site-packages"
WHEEL_312 = b"Wheel-Version: 1.0\nTag: cp312-cp312-manylinux_2_17_x86_64\n"


def _venv(
    python: str = "3.12", extra: dict[str, bytes | None] | None = None
) -> dict[str, bytes | None]:
    """A venv as charmcraft's uv plugin makes it, with a compiled pydantic-core for 3.12."""
    site = f"venv/lib/python{python}/site-packages"
    return {
        "venv/pyvenv.cfg": f"home = /usr/bin\nversion_info = {python}.3\n".encode(),
        f"{site}/ops/__init__.py": None,
        f"{site}/pydantic_core/_pydantic_core.cpython-312-x86_64-linux-gnu.so": None,
        f"{site}/pydantic_core-2.41.5.dist-info/WHEEL": WHEEL_312,
        **(extra or {}),
    }


def test_a_venv_built_for_the_bases_python_passes():
    assert abi.venv_problems(_venv(), NOBLE) == []


def test_an_extension_for_another_python_in_a_2404_venv_is_caught():
    wrong = f"{SITE}/rpds/rpds.cpython-313-x86_64-linux-gnu.so"

    problems = abi.venv_problems(_venv(extra={wrong: None}), NOBLE)

    assert problems == [f"{wrong}: built for CPython 3.13"]


def test_a_wheel_tagged_for_another_python_is_caught():
    wheel = f"{SITE}/rpds_py-0.1.dist-info/WHEEL"

    problems = abi.venv_problems(
        _venv(extra={wheel: b"Tag: cp313-cp313-manylinux_2_17_x86_64\n"}), NOBLE
    )

    assert problems == [f"{wheel}: tags cp313-cp313-manylinux_2_17_x86_64 do not fit cp312"]


def test_a_venv_of_another_python_is_caught_by_its_layout():
    problems = abi.venv_problems(_venv(python="3.13"), NOBLE)

    assert "venv/pyvenv.cfg: CPython 3.13, ubuntu@24.04 runs 3.12" in problems
    assert (
        "packages in venv/lib/python3.13, ubuntu@24.04 reads venv/lib/python3.12/site-packages"
        in problems
    )


@pytest.mark.parametrize(
    ("tag", "target", "fits"),
    [
        ("py3-none-any", NOBLE, True),
        ("cp312-abi3-manylinux_2_17_x86_64", RESOLUTE, True),
        ("cp314-cp314-manylinux_2_39_x86_64", RESOLUTE, True),
        ("cp314-cp314-manylinux_2_41_x86_64", NOBLE, False),
        ("cp312-cp312-manylinux_2_40_x86_64", NOBLE, False),
        ("cp312-cp312-manylinux2014_x86_64", NOBLE, True),
        ("cp312-cp312-linux_x86_64", NOBLE, False),
        ("cp312-cp312-manylinux_2_17_aarch64", NOBLE, False),
        ("cp313-abi3-manylinux_2_17_x86_64", NOBLE, False),
    ],
)
def test_wheel_tags_fit_the_bases_python_glibc_and_arch(tag: str, target: object, fits: bool):
    assert abi.tag_fits(tag, target) is fits


def test_a_locked_dependency_without_a_wheel_for_the_target_is_named():
    lock = {
        "package": [
            {
                "name": "sdist-only",
                "version": "1.0",
                "source": {"registry": "https://pypi.org/simple"},
                "sdist": {"url": "https://files/sdist_only-1.0.tar.gz"},
            },
            {
                "name": "old-wheels",
                "version": "2.0",
                "source": {"registry": "https://pypi.org/simple"},
                "wheels": [
                    {"url": "https://files/old_wheels-2.0-cp313-cp313-manylinux_2_17_x86_64.whl"}
                ],
            },
            {
                "name": "pure",
                "version": "3.0",
                "source": {"registry": "https://pypi.org/simple"},
                "wheels": [{"url": "https://files/pure-3.0-py3-none-any.whl"}],
            },
            {"name": "hpc-libs", "version": "0.1", "source": {"directory": "libs/hpc_libs"}},
        ]
    }

    missing = abi.wheelless(lock, {"sdist-only", "old-wheels", "pure", "hpc-libs"}, RESOLUTE)

    assert missing == [
        "sdist-only 1.0 (only an sdist)",
        "old-wheels 2.0 (wheels for others only (1))",
    ]


def test_the_exported_requirements_name_each_package_once():
    exported = (
        "# via ops\nops==2.0.0 \\\n    ; python_full_version >= '3.12'\n"
        "PyYAML==6.0.3\n./libs/hpc_libs\n"
    )

    assert abi.exported_names(exported) == {"ops", "pyyaml"}


def test_a_lab_pack_is_refused_as_an_ubuntu_charm(tmp_path: Path):
    charm = tmp_path / "slurmd_trixie.charm"
    with zipfile.ZipFile(charm, "w") as archive:
        archive.writestr("manifest.yaml", "bases:\n- name: ubuntu\n  channel: '24.04'\n")
        for name, data in _venv(python="3.13").items():
            archive.writestr(name.replace("cpython-312", "cpython-313"), data or b"")

    problems = abi.charm_problems(charm)

    assert any("built for CPython 3.13" in problem for problem in problems), problems
    assert abi.main(["check", str(charm)]) == 1
