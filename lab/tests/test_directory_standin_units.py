"""The directory stand-ins (`standins.directory`) without machines: what crosses the `ldap`
relation, and what of it may reach sssd.conf. They run on lab machines in
tests/integration/test_accounting_and_rest.py (its directory-user tests).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from slurm_lab import directory_debs
from slurm_lab.juju import lifecycle
from slurm_lab.juju.model import App, Endpoint, ModelState, Relation, StatusValue, Unit
from slurm_lab.juju.standins.directory import LdapStandIn, SssdStandIn, read_provider, sssd_conf
from test_standins_units import _Host

GOOD = {
    "urls": json.dumps(["ldap://10.151.0.9:389"]),
    "ldaps_urls": "[]",
    "base_dn": "dc=hpc,dc=lab",
    "bind_dn": "cn=sssd,ou=lab,dc=hpc,dc=lab",
    "bind_password_secret": "secret:0123abcd",
    "auth_method": "simple",
    "starttls": "False",
}


class _Machine:
    def __init__(self) -> None:
        self.ran: list[tuple[list[str], str | None]] = []

    def exec(
        self, argv: list[str], *, input: str | None = None, timeout: float | None = 120
    ) -> subprocess.CompletedProcess[str]:
        self.ran.append((argv, input))
        return subprocess.CompletedProcess(argv, 0, "", "")


def _model() -> tuple[ModelState, Relation]:
    """ldap/0 (active) provides `ldap` to the sssd application, whose unit sssd/0 joined."""
    model = ModelState(name="hpc")
    model.apps["ldap"] = LdapStandIn.new_app("ldap", {"domain": "hpc.lab"})
    model.apps["sssd"] = SssdStandIn.new_app("sssd", None)
    for name in ("ldap/0", "sssd/0"):
        app, number = name.split("/")
        model.units[name] = Unit(name, app, f"m-{app}", number, "10.151.0.9")
        model.apps[app].units.append(name)
        model.apps[app].leader = name
    model.units["ldap/0"].workload = StatusValue("active", "serving dc=hpc,dc=lab")
    relation = Relation(
        id=4,
        endpoints=[
            Endpoint("ldap", "ldap", "ldap", "provider"),
            Endpoint("sssd", "ldap", "ldap", "requirer"),
        ],
        seen={"sssd/0": ["ldap/0"], "ldap/0": ["sssd/0"]},
        members=["ldap/0", "sssd/0"],
    )
    model.relations["4"] = relation
    return model, relation


def test_the_requirer_names_itself_and_the_provider_answers_with_the_contract_keys():
    model, relation = _model()
    host = _Host(model)
    machine = _Machine()
    host.machine = lambda unit: machine  # type: ignore[method-assign]

    SssdStandIn(host).handle(model.units["sssd/0"], {"kind": "relation_created", "relation_id": 4})
    LdapStandIn(host).handle(model.units["ldap/0"], {"kind": "relation_changed", "relation_id": 4})

    assert relation.app_data["sssd"] == {"user": "sssd", "group": "hpc"}
    answer = relation.app_data["ldap"]
    assert sorted(answer) == sorted(GOOD)
    assert answer["bind_dn"] == "cn=sssd,ou=hpc,dc=hpc,dc=lab"
    secret = model.secrets[answer["bind_password_secret"]]
    assert secret.grants == {"4": ["sssd"]}
    assert isinstance(read_provider(answer), dict)
    # The password reaches the machine on stdin only, never on a command line.
    password = secret.latest.content["password"]
    assert any(stdin == password for _, stdin in machine.ran)
    assert not any(password in " ".join(argv) for argv, _ in machine.ran)


@pytest.mark.parametrize("name", ["Sssd", "a,ou=x", "a\nb", "-a", "a" * 64, ""])
def test_a_requirer_name_outside_the_grammar_never_reaches_the_server(name: str):
    model, relation = _model()
    relation.app_data["sssd"] = {"user": name or "x", "group": name}
    host = _Host(model)  # its machine() fails the test if called

    LdapStandIn(host).handle(model.units["ldap/0"], {"kind": "relation_changed", "relation_id": 4})

    assert "ldap" not in relation.app_data
    assert any("ignoring invalid user/group" in line for line in host.logs)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("urls", json.dumps(["ldap://10.151.0.9:389\nenumerate = true"])),
        ("urls", json.dumps(["ldap://evil.example:389"])),
        ("urls", "ldap://10.151.0.9:389"),
        ("urls", "[]"),
        ("base_dn", "dc=hpc,dc=lab\nldap_tls_reqcert = never"),
        ("bind_dn", "cn=x, dc=lab"),
        ("bind_password_secret", "secret:a/../b"),
        ("auth_method", "sasl"),
        ("starttls", "True"),
    ],
)
def test_a_provider_value_outside_its_grammar_is_refused(key: str, value: str):
    assert isinstance(read_provider({**GOOD, key: value}), str)


def test_an_incomplete_provider_databag_is_waited_for():
    assert read_provider({k: v for k, v in GOOD.items() if k != "bind_dn"}) is None


def test_sssd_conf_has_one_ldap_domain_named_after_the_provider():
    data: Any = read_provider(GOOD)

    conf = sssd_conf("ldap", data, "Pw0rd")

    assert "domains = ldap\n" in conf
    assert "[domain/ldap]\nid_provider = ldap\n" in conf
    assert "ldap_uri = ldap://10.151.0.9:389\n" in conf
    assert "ldap_default_bind_dn = cn=sssd,ou=lab,dc=hpc,dc=lab\n" in conf
    with pytest.raises(ValueError):
        sssd_conf("ldap", data, "pw\nenumerate = true")


def test_a_new_subordinate_unit_joins_its_applications_global_relations():
    model, ldap_relation = _model()
    model.apps["ctl"] = App("ctl", "/charms/ctl", "slurmctld")
    model.units["ctl/0"] = Unit("ctl/0", "ctl", "m-ctl", "0", "10.151.0.3")
    model.apps["ctl"].units.append("ctl/0")
    info = Relation(
        id=5,
        endpoints=[
            Endpoint("ctl", "juju-info", "juju-info", "provider", "container"),
            Endpoint("sssd", "juju-info", "juju-info", "requirer", "container"),
        ],
    )
    model.relations["5"] = info
    host = _Host(model)

    SssdStandIn(host).add_subordinate_units(info)

    new = next(u for u in model.apps["sssd"].units if model.units[u].principal == "ctl/0")
    assert (new, "relation_created", {"relation_id": ldap_relation.id}) in host.queued


def test_integrating_a_subordinate_with_a_second_principal_leaves_its_other_units_out():
    model, _ = _model()
    for app, number in (("ctl", "0"), ("cmp", "0")):
        model.apps[app] = App(app, f"/charms/{app}", "slurmd")
        model.units[f"{app}/{number}"] = Unit(f"{app}/{number}", app, f"m-{app}", number, "")
        model.apps[app].units.append(f"{app}/{number}")
    model.units["sssd/0"].principal, model.units["sssd/0"].machine = "ctl/0", "m-ctl"
    model.apps["sssd"].units.append("sssd/1")
    model.units["sssd/1"] = Unit("sssd/1", "sssd", "m-cmp", "1", "", principal="cmp/0")
    info = Relation(
        id=6,
        endpoints=[
            Endpoint("cmp", "juju-info", "juju-info", "provider", "container"),
            Endpoint("sssd", "juju-info", "juju-info", "requirer", "container"),
        ],
    )

    created = [
        e["unit"] for e in lifecycle.integrated(model, info) if e["kind"] == "relation_created"
    ]

    assert created == ["cmp/0", "sssd/1"]


def test_a_unit_beside_its_principal_starts_installing_sssd_in_the_background():
    model, _ = _model()
    model.relations["7"] = Relation(
        id=7,
        endpoints=[
            Endpoint("ctl", "juju-info", "juju-info", "provider", "container"),
            Endpoint("sssd", "juju-info", "juju-info", "requirer", "container"),
        ],
    )
    host = _Host(model)
    host.lab.shared_dir = Path("/nonexistent")
    machine = _Machine()
    host.machine = lambda unit: machine  # type: ignore[method-assign]
    published: list[Path] = []

    def publish(shared: Path) -> str:
        published.append(shared)
        return "/lab/shared/directory-debs"

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(directory_debs, "publish", publish)
        SssdStandIn(host).handle(
            model.units["sssd/0"], {"kind": "relation_created", "relation_id": 7}
        )

    ((argv, _),) = machine.ran
    assert argv[:3] == ["systemd-run", "--unit=sssd-install", "--collect"]
    assert argv[-2:] == ["sssd-install.sh", "/lab/shared/directory-debs"]
