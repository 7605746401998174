"""The Slurm version each daemon publishes, read from raw databag vectors.

`version` (`24.11.5`) is an optional field of every host entry: slurmctld's controllers
(`controllers` in `ControllerData`), slurmdbd's daemons (`dbds` in `SlurmdbdData`), and each
peer unit's own host (slurmctld's plain strings, slurmdbd's JSON), and the own databag of each
unit that joins slurmctld (a login or REST unit, `ConsumerUnitData`). A reader keeps an entry
without one, and refuses data whose version is not a Slurm version.
"""

import json

import ops
import pytest
from hpc_libs.interfaces.base import bounded_json
from hpc_libs.interfaces.controller import (
    ConsumerUnitData,
    ControllerData,
    ControllerEntry,
    auth_key_digest,
)
from hpc_libs.interfaces.sackd import SackdProvider, SackdRequirer
from hpc_libs.interfaces.slurmctld_peer import ControllerHost, SlurmctldPeer
from hpc_libs.interfaces.slurmdbd import DbdEntry, SlurmdbdData
from hpc_libs_fakes import controller_meta
from ops import testing
from pydantic import ValidationError

BAD_VERSIONS = ["24.11", "v24.11.5", "24.11.5-1", "24.11.5\n", "1:24.11.5", "24.11.5; rm", ""]


def controllers(raw: str) -> ControllerData:
    return ControllerData.model_validate({"controllers": bounded_json(raw)})


def test_controllers_carry_their_version():
    data = controllers('[{"hostname": "ctl-0", "address": "10.0.0.1", "version": "26.05.5"}]')

    assert data.controllers == [
        ControllerEntry(hostname="ctl-0", address="10.0.0.1", version="26.05.5")
    ]


def test_an_entry_without_a_version_reads_as_not_said():
    data = controllers('[{"hostname": "ctl-0", "address": "10.0.0.1"}]')

    assert data.controllers is not None and data.controllers[0].version is None


@pytest.mark.parametrize("version", BAD_VERSIONS)
def test_a_version_that_is_not_slurms_is_refused(version: str):
    raw = json.dumps([{"hostname": "ctl-0", "version": version}])

    with pytest.raises(ValidationError, match="not a Slurm version"):
        controllers(raw)
    with pytest.raises(ValidationError, match="not a Slurm version"):
        SlurmdbdData.model_validate({"dbds": json.loads(raw)})


@pytest.mark.parametrize("version", [True, 24.11, ["24.11.5"]])
def test_a_version_that_is_not_text_is_refused(version: object):
    with pytest.raises(ValidationError):
        DbdEntry.model_validate({"hostname": "dbd-0", "version": version})


def test_an_unknown_version_is_left_out_of_the_databag():
    written = SlurmdbdData(dbds=[DbdEntry(hostname="dbd-0", port=6819)]).model_dump()

    assert written == {"dbds": [{"hostname": "dbd-0", "address": None, "port": 6819}]}
    with_version = DbdEntry(hostname="dbd-0", version="26.05.5").model_dump()
    assert with_version["version"] == "26.05.5"


META = {"name": "ctl", "peers": {"slurmctld-peer": {"interface": "slurmctld-peer"}}}


class PeerCharm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.peer = SlurmctldPeer(self)
        self.hosts: dict[str, ControllerHost] = {}
        framework.observe(self.on.update_status, self._on_update_status)
        framework.observe(self.on.config_changed, self._on_config_changed)

    def _on_update_status(self, _: ops.EventBase) -> None:
        self.hosts = self.peer.hosts()

    def _on_config_changed(self, _: ops.EventBase) -> None:
        self.peer.share_host(
            ControllerHost(hostname="ctl-0", address="10.0.0.1", version="26.05.5")
        )


def test_a_controller_shares_its_version_as_a_plain_string():
    ctx = testing.Context(PeerCharm, meta=META)
    peer = testing.PeerRelation("slurmctld-peer")

    out = ctx.run(ctx.on.config_changed(), testing.State(relations=[peer]))

    assert out.get_relation(peer.id).local_unit_data == {
        "hostname": "ctl-0",
        "address": "10.0.0.1",
        "version": "26.05.5",
        **testing.PeerRelation("x").local_unit_data,  # Juju's default keys.
    }


@pytest.mark.parametrize(
    ("version", "kept"), [("24.11.5", "24.11.5"), (None, None), ("24.11.5-1", "refused")]
)
def test_peer_controllers_are_read_with_their_version(version: str | None, kept: str | None):
    raw = {"hostname": "ctl-1", "address": "10.0.0.2"}
    if version is not None:
        raw["version"] = version
    ctx = testing.Context(PeerCharm, meta=META)
    peer = testing.PeerRelation("slurmctld-peer", peers_data={1: raw})

    with ctx(ctx.on.update_status(), testing.State(relations=[peer])) as manager:
        manager.run()
        hosts = manager.charm.hosts

    if kept == "refused":
        assert hosts == {}  # Logged and left out, as any invalid host data.
    else:
        assert hosts["ctl/1"].version == kept


# A login (sackd) or REST (slurmrestd) unit's own databag: `version` beside `auth_key_digest`.

CONSUMER_META = {
    "name": "login",
    "requires": {"slurmctld": {"interface": "sackd", "limit": 1}},
}
CONTROLLER_META = controller_meta("login-node", "sackd", name="ctl")
DIGEST = '"0123456789abcdef"'


class LoginCharm(ops.CharmBase):
    """A login unit: confirms its key on config-changed, then its release on update-status."""

    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.slurmctld = SackdProvider(self, "slurmctld")
        framework.observe(self.on.config_changed, self._on_config_changed)
        framework.observe(self.on.update_status, self._on_update_status)

    def _on_config_changed(self, _: ops.EventBase) -> None:
        self.slurmctld.confirm_auth_key("a2V5")

    def _on_update_status(self, _: ops.EventBase) -> None:
        self.slurmctld.publish_version("26.05.5")


class ControllerCharm(ops.CharmBase):
    def __init__(self, framework: ops.Framework) -> None:
        super().__init__(framework)
        self.login_nodes = SackdRequirer(self)
        self.versions: dict[str, str | None] = {}
        framework.observe(self.on.update_status, self._on_update_status)

    def _on_update_status(self, _: ops.EventBase) -> None:
        relation = self.login_nodes.relations[0]
        self.versions = self.login_nodes.unit_versions(relation)


def test_a_login_unit_publishes_its_release_beside_its_key_digest_and_keeps_both():
    ctx = testing.Context(LoginCharm, meta=CONSUMER_META)
    relation = testing.Relation("slurmctld")

    confirmed = ctx.run(ctx.on.config_changed(), testing.State(relations=[relation]))
    both = ctx.run(ctx.on.update_status(), confirmed)
    again = ctx.run(ctx.on.config_changed(), both)

    digest = json.dumps(auth_key_digest("a2V5"))
    own_keys = testing.Relation("x").local_unit_data  # Juju's default keys.
    assert confirmed.get_relation(relation.id).local_unit_data == {
        "auth_key_digest": digest,
        **own_keys,
    }  # No version key until it is known: an older slurmctld reads the databag as before.
    expected = {"auth_key_digest": digest, "version": '"26.05.5"', **own_keys}
    assert both.get_relation(relation.id).local_unit_data == expected
    assert again.get_relation(relation.id).local_unit_data == expected  # The key kept it.


def test_a_release_that_is_not_slurms_is_never_published():
    with pytest.raises(ValidationError, match="not a Slurm version"):
        ConsumerUnitData(version="26.05.5-1")


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        ({"auth_key_digest": DIGEST, "version": '"26.05.5"'}, "26.05.5"),
        ({"version": '"24.11.5"'}, "24.11.5"),
        ({"auth_key_digest": DIGEST}, None),  # A unit of an older charm revision.
        ({}, None),
        ({"version": '"24.11.5-1"'}, None),  # Logged and counted as not said.
        ({"version": "24.11.5"}, None),  # Not JSON.
        ({"version": "24"}, None),  # JSON, not text.
        ({"version": "null"}, None),
    ],
    ids=["with-digest", "alone", "not-said", "empty", "package-version", "bare", "number", "null"],
)
def test_slurmctld_reads_each_login_units_release(raw: dict[str, str], read: str | None):
    ctx = testing.Context(ControllerCharm, meta=CONTROLLER_META)
    relation = testing.Relation(
        "login-node", remote_app_name="login", remote_units_data={0: raw, 1: {}}
    )

    with ctx(ctx.on.update_status(), testing.State(relations=[relation])) as manager:
        manager.run()
        versions = manager.charm.versions

    assert versions == {"login/0": read, "login/1": None}
