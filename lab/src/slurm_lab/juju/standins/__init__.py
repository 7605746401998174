"""The stand-ins: applications the backend runs itself for charms of other projects.

Each is a `standins.base.StandIn`.

`juju deploy NAME` of a name no local charm has deploys the stand-in of that charm name:

* `mysql` (`standins.mysql`): MariaDB answering `mysql_client` for slurmdbd;
* `prometheus` (`standins.prometheus`): COS's Prometheus, receiving remote write and
  evaluating the charms' alert rules;
* `opentelemetry-collector` (`standins.cos`): the COS agent subordinate, a Prometheus per
  principal machine that scrapes what `cos-agent` publishes;
* `filesystem-client` (`standins.fsclient`): the shared filesystem subordinate, a bind mount
  of one lab directory;
* `ldap` and `sssd` (`standins.directory`): slapd seeded with users and groups, and the SSSD
  subordinate that makes its principal's machine resolve them.
"""

from slurm_lab.juju.standins.base import StandIn, SubordinateStandIn
from slurm_lab.juju.standins.cos import CosCollector
from slurm_lab.juju.standins.directory import LdapStandIn, SssdStandIn
from slurm_lab.juju.standins.fsclient import FilesystemClient
from slurm_lab.juju.standins.mysql import MysqlStandIn
from slurm_lab.juju.standins.prometheus import PrometheusStandIn

STANDINS: tuple[type[StandIn], ...] = (
    MysqlStandIn,
    PrometheusStandIn,
    CosCollector,
    FilesystemClient,
    LdapStandIn,
    SssdStandIn,
)
"""Every stand-in; `KIND` is the charm name that deploys it."""

SUBORDINATES: tuple[type[SubordinateStandIn], ...] = (FilesystemClient, CosCollector, SssdStandIn)

__all__ = [
    "STANDINS",
    "SUBORDINATES",
    "CosCollector",
    "FilesystemClient",
    "LdapStandIn",
    "MysqlStandIn",
    "PrometheusStandIn",
    "SssdStandIn",
    "StandIn",
    "SubordinateStandIn",
]
