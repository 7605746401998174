"""Slurm's own parser from the cached bases, on the host (slurm_lab.slurmcheck): no machine boots.

Needs root (a private mount namespace and chroot) and the bases (built once, then cached):
trixie's Slurm 24.11 and forky's newer Slurm (26.05 today) must judge alike.
"""

from __future__ import annotations

import os
import shutil

import pytest
from slurm_lab import slurmcheck
from slurm_lab.errors import LabError

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("debootstrap") or not shutil.which("unshare"),
        reason="the lab needs root, debootstrap and unshare",
    ),
]

SLURM_CONF = """\
ClusterName=lab
SlurmctldHost=ctl(10.0.0.1)
AuthType=auth/slurm
CredType=cred/slurm
SlurmUser=slurm
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmctldParameters=enable_configless
SelectType=select/cons_tres
GresTypes=gpu
NodeSet=compute Feature=compute
PartitionName=compute Nodes=compute Default=YES MaxTime=60
"""
SLURMDBD_CONF = """\
DbdHost=dbd-0
SlurmUser=slurm
AuthType=auth/slurm
StorageType=accounting_storage/mysql
StorageHost=10.0.0.5
StoragePass=secret
PurgeJobAfter=12months
DefaultQOS=5
"""
SUITES = ("trixie", "forky")


@pytest.mark.parametrize("suite", SUITES)
def test_normal_files_are_accepted(suite: str):
    slurmcheck.check(SLURM_CONF, suite=suite)
    slurmcheck.check(SLURMDBD_CONF, "slurmdbd.conf", suite=suite)


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("PriorityDecayHalfLife=14days", 'Bad value "14days" for PriorityDecayHalfLife'),
        ("MaxTasksPerNode=70000", "MaxTasksPerNode value (70000) is greater than 65535"),
        ("MaxArraySize=4294967296", "is greater than 4294967295"),
        ("FirstJobId=100\nMaxJobId=50", "FirstJobId > MaxJobId"),
        ("MaxStepCount=0", "MaxStepCount=0, No steps permitted"),
        ("PriorityDecayHalfLife=0", "PriorityUsageResetPeriod"),
        ("FooBar=1", "unrecognized key: FooBar"),
        ("NodeName=n1 CPUs=999999", "CPUs value (999999) is greater than 65535"),
    ],
)
def test_values_slurm_refuses_are_refused_quoting_slurm(suite: str, extra: str, says: str):
    with pytest.raises(slurmcheck.SlurmRefusedError) as refused:
        slurmcheck.check(SLURM_CONF + extra + "\n", suite=suite)

    assert any(says in message for message in refused.value.messages), refused.value.messages


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ("PurgeJobAfter=12x", 'Bad value "12x" for PurgeJobAfter'),
        ("DebugLevel=bogus", "Invalid DebugLevel bogus"),
        ("MessageTimeout=70000", "greater than 65535"),
    ],
)
def test_slurmdbd_refuses_its_bad_values(suite: str, extra: str, says: str):
    conf = SLURMDBD_CONF.replace("PurgeJobAfter=12months\n", "") + extra + "\n"

    with pytest.raises(slurmcheck.SlurmRefusedError) as refused:
        slurmcheck.check(conf, "slurmdbd.conf", suite=suite)

    assert any(says in message for message in refused.value.messages), refused.value.messages


def test_a_value_slurm_corrects_is_accepted_as_slurmctld_accepts_it():
    result = slurmcheck.run_check(SLURM_CONF + "TreeWidth=0\n")

    assert result.returncode == 0
    assert "TreeWidth=0 is invalid" in result.stderr


def test_only_files_with_a_check():
    with pytest.raises(LabError, match=r"no Slurm check for gres\.conf"):
        slurmcheck.run_check("", "gres.conf")
