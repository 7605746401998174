"""Plain `--json` answers: read only in a data_parser version the parsers were checked against.

`scontrol ... --json` (and `sdiag --json`) answer in their release's default version, named in
`meta.plugin.data_parser`: v0.0.42 on 24.11, v0.0.45 on 26.05 (the recordings in
`vectors/slurm-<release>/`, from the lab's trixie and forky machines). A release whose default
moved on (26.11's, say, v0.0.46) must fail the read with both versions named, never be read
field by field as if nothing changed. The future answers here are the recorded 26.05 ones with
only the version they name changed.
"""

import json
from pathlib import Path

import pytest
from hpc_libs.errors import ScontrolError
from hpc_libs.slurm import data_parser
from hpc_libs.slurm.data_parser import DataParserError
from hpc_libs.slurm.scontrol import Scontrol, parse_pings
from hpc_libs_fakes import FakeRun

VECTORS = Path(__file__).parent / "vectors"
RECORDED = {
    "24.11": ("ping.json", "ping-down.json", "node-drained-duplicate-jobid.json", "sdiag.json"),
    "26.05": ("ping.json", "nodes.json", "job-running.json", "job-unknown.json", "sdiag.json"),
}
DEFAULTS = {"24.11": "v0.0.42", "26.05": "v0.0.45"}
FUTURE = "v0.0.46"


def recorded(release: str, name: str) -> str:
    return (VECTORS / f"slurm-{release}" / name).read_text()


def as_future(text: str) -> str:
    """A recorded 26.05 answer as a release with a newer default would name it.

    Slurm escapes the slash (`"data_parser\\/v0.0.45"`): the raw text is kept but for the number.
    """
    named = r'"data_parser\/v0.0.45"'
    assert text.count(named) == 1
    return text.replace(named, named.replace("v0.0.45", FUTURE))


@pytest.mark.parametrize(
    ("release", "name"), [(r, n) for r, names in RECORDED.items() for n in names]
)
def test_each_releases_recorded_answers_are_in_a_version_read_here(release, name) -> None:
    document = json.loads(recorded(release, name))

    assert data_parser.check_known(document) == DEFAULTS[release]


def test_an_answer_in_a_newer_default_is_refused_naming_both_versions() -> None:
    document = json.loads(as_future(recorded("26.05", "nodes.json")))

    with pytest.raises(DataParserError) as error:
        data_parser.check_known(document)

    assert str(error.value) == (
        "the answer is in data_parser v0.0.46, which this client does not read "
        "(v0.0.40 to v0.0.45)"
    )


def test_an_answer_naming_no_version_is_refused() -> None:
    document = json.loads(recorded("26.05", "nodes.json"))
    del document["meta"]["plugin"]

    with pytest.raises(DataParserError, match=r"\(none named\), which this client does not"):
        data_parser.check_known(document)


def test_scontrol_queries_fail_on_a_newer_default_with_both_versions(fake_run: FakeRun) -> None:
    fake_run.on("scontrol", "show", "nodes", stdout=as_future(recorded("26.05", "nodes.json")))
    fake_run.on("scontrol", "show", "job", stdout=as_future(recorded("26.05", "job-running.json")))

    with pytest.raises(
        ScontrolError, match=r"data_parser v0\.0\.46, .*\(v0\.0\.40 to v0\.0\.45\)"
    ):
        Scontrol().show_nodes()
    with pytest.raises(ScontrolError, match=r"data_parser v0\.0\.46"):
        Scontrol().show_job(6)
    with pytest.raises(ScontrolError, match=r"data_parser v0\.0\.46"):
        Scontrol().knows_job(6)


def test_a_ping_in_a_newer_default_is_refused() -> None:
    """The exporter and `Scontrol.ping` read pings through `parse_pings`."""
    assert parse_pings(recorded("26.05", "ping.json"))
    with pytest.raises(ValueError, match=r"data_parser v0\.0\.46"):
        parse_pings(as_future(recorded("26.05", "ping.json")))
