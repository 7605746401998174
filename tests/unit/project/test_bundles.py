"""The bundles: every application is a charm of ours (or a known external one), every option
exists, and every relation joins a `requires` endpoint to a `provides` endpoint of the same
interface - what Juju checks at deploy time, checked here without Juju.
"""

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).parents[3]
BUNDLES = sorted((REPO / "bundles").glob("*.yaml"))
#: Endpoints of the external charms the bundles use (from their published metadata).
EXTERNAL_ENDPOINTS = {"mysql": {"database": ("provides", "mysql_client")}}


def endpoints(tool: ModuleType, charm: str) -> dict[str, tuple[str, str]]:
    if charm in EXTERNAL_ENDPOINTS:
        return EXTERNAL_ENDPOINTS[charm]
    project = tool.render_project(charm)
    return {
        name: (role, spec["interface"])
        for role in ("provides", "requires", "peers")
        for name, spec in (project.get(role) or {}).items()
    }


def load(bundle: Path) -> dict[str, Any]:
    return yaml.safe_load(bundle.read_text())


@pytest.fixture(params=BUNDLES, ids=[b.name for b in BUNDLES])
def bundle(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_the_full_cluster_bundle_has_every_daemon():
    applications = load(REPO / "bundles" / "slurm-cluster.yaml")["applications"]

    assert {app: spec["num_units"] for app, spec in applications.items()} == {
        "slurmctld": 1,
        "slurmd": 2,
        "sackd": 1,
        "slurmdbd": 1,
        "mysql": 1,
        "slurmrestd": 1,
    }


def test_the_lab_bundle_deploys_and_integrates_what_the_full_cluster_bundle_does():
    """Accounting (slurmdbd with MySQL, the lab's stand-in) and the REST API included."""
    lab, full = (load(REPO / "bundles" / name) for name in ("lab.yaml", "slurm-cluster.yaml"))

    def charm_relations(bundle: dict[str, Any]) -> set[frozenset[str]]:
        charm = {app: spec["charm"] for app, spec in bundle["applications"].items()}
        return {
            frozenset(f"{charm[s.split(':')[0]]}:{s.split(':')[1]}" for s in pair)
            for pair in bundle["relations"]
        }

    def charms(bundle: dict[str, Any]) -> list[str]:
        return sorted(spec["charm"] for spec in bundle["applications"].values())

    assert charms(lab) == charms(full)
    assert charm_relations(lab) == charm_relations(full)
    assert {"slurmdbd", "mysql", "slurmrestd"} <= set(charms(lab))


def test_every_application_is_a_known_charm_with_the_options_it_sets(
    bundle: Path, tool: ModuleType
):
    known = set(tool.charm_names()) | set(EXTERNAL_ENDPOINTS)
    for app, spec in load(bundle)["applications"].items():
        assert spec["charm"] in known, f"{app}: unknown charm {spec['charm']}"
        if spec["charm"] in EXTERNAL_ENDPOINTS:
            continue
        options = tool.render_project(spec["charm"]).get("config", {}).get("options", {})
        for option in spec.get("options", {}):
            assert option in options, f"{app}: {spec['charm']} has no option {option}"


def test_every_relation_joins_a_requirer_to_a_provider_of_one_interface(
    bundle: Path, tool: ModuleType
):
    data = load(bundle)
    charms = {app: spec["charm"] for app, spec in data["applications"].items()}
    for pair in data["relations"]:
        sides = []
        for side in pair:
            app, endpoint = side.split(":")
            declared = endpoints(tool, charms[app])
            assert endpoint in declared, f"{charms[app]} has no endpoint {endpoint!r} ({side})"
            sides.append(declared[endpoint])
        (role_a, interface_a), (role_b, interface_b) = sides
        assert {role_a, role_b} == {"provides", "requires"}, f"{pair}: roles {role_a}/{role_b}"
        assert interface_a == interface_b, f"{pair}: interfaces {interface_a}/{interface_b}"


def test_local_charms_overlay_points_our_applications_at_packed_charms(
    tool: ModuleType, tmp_path: Path
):
    bundle = REPO / "bundles" / "slurm-cluster.yaml"
    for charm in tool.charm_names():
        (tmp_path / tool.charm_file_name(charm)).touch()

    overlay = yaml.safe_load(tool.local_charms_overlay(bundle, tmp_path))

    assert overlay["applications"]["slurmd"] == {"charm": "./slurmd_ubuntu@24.04-amd64.charm"}
    assert "mysql" not in overlay["applications"]
    assert set(overlay["applications"]) == set(tool.charm_names())


def test_local_charms_overlay_asks_to_pack_first(tool: ModuleType, tmp_path: Path):
    with pytest.raises(tool.ProjectError, match="pack these charms first"):
        tool.local_charms_overlay(REPO / "bundles" / "slurm-cluster.yaml", tmp_path)
