"""The `slurmrestd` and `slurm_rest_api` contracts, tested with raw databag vectors."""

import json

import ops
import pytest
from hpc_libs.interfaces.base import DatabagModel, Interface
from hpc_libs.interfaces.controller import ControllerData, ControllerEntry
from hpc_libs.interfaces.slurmrestd import (
    RestApiProvider,
    RestApiUnitData,
    SlurmrestdProvider,
    SlurmrestdRequirer,
    check_url,
    rest_url,
)
from ops import testing

# A portal's side (no charm here is one): how a requirer reads the contract.


class RestApiEndpoint(DatabagModel):
    """One slurmrestd unit as a portal sees it."""

    unit: str | None = None
    url: str | None = None


class RestApiRequirer(Interface):
    """A portal's side of `slurm_rest_api`: the URLs the slurmrestd units serve."""

    def endpoints(self) -> list[RestApiEndpoint]:
        """Every slurmrestd unit with a valid URL, over every relation, by unit name.

        A unit whose databag is invalid is logged and skipped.
        """
        found: list[RestApiEndpoint] = []
        for relation in self.relations:
            for unit in relation.units:
                data = self.load(RestApiUnitData, relation, unit)
                if data is not None and data.url:
                    found.append(RestApiEndpoint(unit=unit.name, url=data.url))
        return sorted(found, key=lambda e: e.unit or "")


META = {
    "name": "probe",
    "requires": {
        "slurmrestd": {"interface": "slurmrestd"},
        "api": {"interface": "slurm_rest_api"},
    },
    "provides": {
        "slurmctld": {"interface": "slurmrestd"},
        "rest-api": {"interface": "slurm_rest_api"},
    },
}


class Probe(ops.CharmBase):
    """Both sides of both contracts, for the tests to drive."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.controller = SlurmrestdProvider(self, "slurmctld")
        self.publisher = SlurmrestdRequirer(self)
        self.rest = RestApiProvider(self)
        self.portal = RestApiRequirer(self, "api")


def ctx() -> testing.Context[Probe]:
    return testing.Context(Probe, meta=META)


def test_slurmctld_publishes_the_auth_key_id_and_controllers_and_grants_only_that_key():
    relation = testing.Relation("slurmrestd")
    key = testing.Secret(tracked_content={"key": "a2V5"}, owner="app")
    state = testing.State(leader=True, relations={relation}, secrets={key})
    c = ctx()
    with c(c.on.update_status(), state) as mgr:
        charm = mgr.charm
        secret = charm.model.get_secret(id=key.id)
        entries = [ControllerEntry(hostname="ctl0", address="10.0.0.1", port=6817)]
        rel = charm.model.get_relation("slurmrestd", relation.id)
        assert rel is not None
        assert charm.publisher.publish_controller_data(rel, secret, entries)
        out = mgr.run()
    data = out.get_relation(relation.id).local_app_data
    assert json.loads(data["controllers"]) == [
        {"hostname": "ctl0", "address": "10.0.0.1", "port": 6817}
    ]
    assert json.loads(data["auth_key_id"]) == key.id
    assert "jwt_key_id" not in data
    assert all("a2V5" not in value for value in data.values())


@pytest.mark.parametrize(
    "raw",
    [
        {"auth_key_id": '"secret:abc"', "controllers": '[{"address": "ctl --foo", "port": 6817}]'},
        {"auth_key_id": '"secret:abc"', "controllers": '[{"address": "a,b", "port": 6817}]'},
        {"auth_key_id": '"secret:abc"', "controllers": '[{"address": "ctl\\nX=1"}]'},
        {"auth_key_id": '"secret:abc"', "controllers": '[{"address": "ctl", "port": 70000}]'},
        {"auth_key_id": '"secret abc"', "controllers": '[{"address": "ctl"}]'},
        {"auth_key_id": '"secret:abc"', "controllers": '"ctl:6817"'},
        {"controllers": "not json"},
    ],
)
def test_slurmrestd_reads_hostile_controller_data_as_not_ready(raw: dict[str, str]):
    relation = testing.Relation("slurmctld", remote_app_data=raw)
    c = ctx()
    with c(c.on.update_status(), testing.State(relations={relation})) as mgr:
        consumer = mgr.charm.controller
        assert consumer.controller_data is None
        assert not consumer.is_ready()
        rel = mgr.charm.model.get_relation("slurmctld")
        assert rel is not None
        problem = consumer.problem(ControllerData, rel, rel.app)
        assert problem is not None and problem.startswith("remote sent")


def test_slurmrestd_reads_a_valid_raw_databag():
    raw = {
        "auth_key_id": '"secret:cu0s8dqvk8ss6a5esu5g"',
        "controllers": '[{"hostname": "ctl0", "address": "fd00::1", "port": 6817}, '
        '{"address": "ctl1"}]',
        "unknown_key": '"ignored"',
    }
    relation = testing.Relation("slurmctld", remote_app_data=raw)
    c = ctx()
    with c(c.on.update_status(), testing.State(relations={relation})) as mgr:
        data = mgr.charm.controller.controller_data
        assert data is not None and mgr.charm.controller.is_ready()
        assert data.conf_servers() == ["[fd00::1]:6817", "ctl1:6817"]


def test_each_unit_publishes_its_url_and_withdraws_it():
    relation = testing.Relation("rest-api")
    c = ctx()
    with c(c.on.update_status(), testing.State(relations={relation})) as mgr:
        mgr.charm.rest.publish_url("http://10.0.0.5:6820")
        out = mgr.run()
    assert out.get_relation(relation.id).local_unit_data["url"] == '"http://10.0.0.5:6820"'

    with c(c.on.update_status(), out) as mgr:
        mgr.charm.rest.publish_url(None)
        out = mgr.run()
    assert "url" not in out.get_relation(relation.id).local_unit_data


def test_a_portal_lists_every_unit_with_a_valid_url_and_skips_the_rest():
    relation = testing.Relation(
        "api",
        remote_units_data={
            0: {"url": '"http://10.0.0.5:6820"'},
            1: {"url": '"https://[fd00::2]:443"'},
            2: {"url": '"http://evil:6820/x?y=1"'},
            3: {"url": "not json"},
            4: {},
        },
    )
    c = ctx()
    with c(c.on.update_status(), testing.State(relations={relation})) as mgr:
        endpoints = mgr.charm.portal.endpoints()
    assert endpoints == [
        RestApiEndpoint(unit="remote/0", url="http://10.0.0.5:6820"),
        RestApiEndpoint(unit="remote/1", url="https://[fd00::2]:443"),
    ]


@pytest.mark.parametrize(
    "url",
    [
        "ftp://h:1",
        "http://h",
        "http://h:0",
        "http://h:99999",
        "http://u@h:1",
        "http://h:1/path",
        "http://h:1?q",
        "http://h:1#f",
        "http://h h:1",
        "http://h\n:1",
        "http://-bad:1",
        'http://h":1',
        "http://[::1:1",
        "",
    ],
)
def test_hostile_urls_are_refused(url: str):
    with pytest.raises(ValueError):
        check_url(url)
    with pytest.raises(ValueError):
        RestApiUnitData(url=url)


@pytest.mark.parametrize(
    ("host", "port", "url"),
    [
        ("10.0.0.5", 6820, "http://10.0.0.5:6820"),
        ("fd00::1", 6820, "http://[fd00::1]:6820"),
        ("rest.example.com", 8080, "http://rest.example.com:8080"),
        # A listen-address in capitals (the fuzz suite's `NaN`) is a host name as well.
        ("Rest-0.Example.COM", 6820, "http://Rest-0.Example.COM:6820"),
        ("NaN", 6820, "http://NaN:6820"),
        ("FD00::1", 6820, "http://[fd00::1]:6820"),
    ],
)
def test_rest_url(host: str, port: int, url: str):
    assert rest_url(host, port) == url
    check_url(url)
    check_url(url + "/")


def test_rest_url_refuses_a_bad_host_or_scheme():
    with pytest.raises(ValueError):
        rest_url("a b", 1)
    with pytest.raises(ValueError):
        rest_url("h", 1, scheme="gopher")
