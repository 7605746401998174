"""Choosing the data_parser version: the newest offered one this product reads, never a guess.

The offers are what the lab's Slurm lists (`scontrol --json=list`, `/openapi/v3`'s paths:
tests/unit/autoscaler/recorded/<release>/openapi-paths.json); 25.11's is SchedMD's removal
schedule (v0.0.40 leaves in 25.11, v0.0.41 in 26.05), not run here.
"""

import pytest
from hpc_libs.slurm import data_parser
from hpc_libs.slurm.data_parser import DataParserError

LISTED_26_05 = (
    "data_parser/v0.0.43\ndata_parser/v0.0.42\ndata_parser/v0.0.45\ndata_parser/v0.0.44\n"
)
"""`scontrol --json=list` of Slurm 26.05.5 on the forky lab (stdout, in its order)."""


@pytest.mark.parametrize(
    ("release", "offered", "chosen"),
    [
        ("24.11", ["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.42"),
        ("25.11", ["v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44"], "v0.0.44"),
        ("26.05", ["v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"], "v0.0.45"),
    ],
)
def test_each_supported_release_gets_its_newest_version(release, offered, chosen) -> None:
    assert data_parser.choose(reversed(offered)) == chosen, release


def test_scontrols_list_is_read_in_version_order() -> None:
    assert data_parser.offered_by_list(LISTED_26_05) == [
        "v0.0.42",
        "v0.0.43",
        "v0.0.44",
        "v0.0.45",
    ]
    assert data_parser.offered_by_list("Possible data_parser plugins:\nnot/v0.0.44\n") == []


def test_a_newer_unknown_version_is_passed_over_for_the_newest_known_one() -> None:
    """A future Slurm (27.05, say) also serves v0.0.46: this product keeps to v0.0.45."""
    assert data_parser.choose(["v0.0.44", "v0.0.45", "v0.0.46", "v0.0.47"]) == "v0.0.45"


def test_an_offer_with_no_known_version_is_an_error_naming_both() -> None:
    with pytest.raises(DataParserError) as error:
        data_parser.choose(["v0.0.47", "v0.0.46"])

    assert str(error.value) == (
        "Slurm offers data_parser v0.0.46, v0.0.47, none of which this client reads "
        "(v0.0.40 to v0.0.45)"
    )
    with pytest.raises(DataParserError, match="offers no data_parser version"):
        data_parser.choose([])


def test_the_override_must_be_offered_and_known() -> None:
    assert data_parser.choose(["v0.0.41", "v0.0.42"], "v0.0.41") == "v0.0.41"
    with pytest.raises(DataParserError, match=r"v0\.0\.40 is not offered \(Slurm offers v0\.0"):
        data_parser.choose(["v0.0.41", "v0.0.42"], "v0.0.40")
    with pytest.raises(DataParserError, match=r"v0\.0\.46 is not one this client reads"):
        data_parser.choose(["v0.0.45", "v0.0.46"], "v0.0.46")


def test_openapi_paths_name_the_versions() -> None:
    spec = {
        "paths": {
            "/slurm/v0.0.43/nodes/": {},
            "/slurmdb/v0.0.44/jobs/": {},
            "/openapi/v3": {},
            "/slurm/v0.0.4x/": {},
        }
    }

    assert data_parser.offered_by_openapi(spec) == ["v0.0.43", "v0.0.44"]
    with pytest.raises(DataParserError, match="has no paths"):
        data_parser.offered_by_openapi({"paths": []})


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ({"meta": {"plugin": {"data_parser": "data_parser/v0.0.44"}}}, "v0.0.44"),
        ({"meta": {"plugin": {"data_parser": "v0.0.44"}}}, "(none named)"),
        ({"meta": {"plugin": "data_parser/v0.0.45"}}, "(none named)"),
        ({"meta": []}, "(none named)"),
        ({}, "(none named)"),
    ],
)
def test_an_answer_in_another_version_is_refused_naming_both(answer, named) -> None:
    with pytest.raises(DataParserError) as error:
        data_parser.check_answer(answer, "v0.0.45")

    assert str(error.value) == (
        f"the answer is in data_parser {named}, not the v0.0.45 this client asked for and reads"
    )


def test_an_answer_in_the_asked_version_passes() -> None:
    data_parser.check_answer(
        {"meta": {"plugin": {"data_parser": "data_parser/v0.0.45"}}}, "v0.0.45"
    )
