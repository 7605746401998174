"""Slurm's own parser from the cached bases, on the host (slurm_lab.slurmcheck): no machine boots.

Needs root (a private mount namespace and chroot) and the bases (built once, then cached):
trixie's Slurm 24.11 and forky's newer Slurm (26.05 today) must judge alike.
"""

from __future__ import annotations

import os
import shutil

import pytest
from slurm_lab import rootfs, slurmcheck
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
    verdict = slurmcheck.check(SLURM_CONF + "TreeWidth=0\n")

    assert verdict.accepted
    assert "TreeWidth=0 is invalid" in verdict.said


def test_only_files_with_a_check():
    with pytest.raises(LabError, match=r"no Slurm check for gres\.conf"):
        slurmcheck.check("", "gres.conf")


# A batch: each case judged on its own files, in one namespace (the fuzz suite's way).
BATCH_SLURM_CONF = "ClusterName=c\nSlurmctldHost=ctl0\nAuthType=auth/slurm\nGresTypes=gpu\n"
BATCH_SLURMDBD_CONF = (
    "AuthType=auth/slurm\nDbdHost=localhost\nStorageType=accounting_storage/mysql\n"
    "SlurmUser=slurm\n"
)


def test_each_case_is_judged_on_its_own_files():
    base = rootfs.ensure_base()
    before = sorted(os.listdir(base / "etc/slurm"))
    cases = [
        {"slurm.conf": BATCH_SLURM_CONF, "cgroup.conf": "CgroupPlugin=autodetect\n"},
        {"slurm.conf": BATCH_SLURM_CONF + "PriorityDecayHalfLife=14days\n"},
        {"slurm.conf": BATCH_SLURM_CONF + "FirstJobId=100000\nMaxJobId=1000\n"},
        {"slurm.conf": BATCH_SLURM_CONF, "gres.conf": "AutoDetect=nvidia\n"},
        {"slurm.conf": BATCH_SLURM_CONF, "gres.conf": "Bogus=1\n"},
        {"slurm.conf": BATCH_SLURM_CONF, "cgroup.conf": "Foo=bar\n"},
        {"slurmdbd.conf": BATCH_SLURMDBD_CONF + "PurgeJobAfter=12months\n"},
        {"slurmdbd.conf": BATCH_SLURMDBD_CONF + "PurgeJobAfter=12x\n"},
    ]

    verdicts = slurmcheck.judge(cases, base)

    assert [v.accepted for v in verdicts] == [True, False, False, True, False, False, True, False]
    assert "PriorityDecayHalfLife" in verdicts[1].messages
    assert "FirstJobId > MaxJobId" in verdicts[2].messages
    assert verdicts[4].messages.startswith("gres.conf:") and "Bogus" in verdicts[4].messages
    assert verdicts[5].messages.startswith("cgroup.conf:") and "Foo" in verdicts[5].messages
    assert "PurgeJobAfter" in verdicts[7].messages
    assert sorted(os.listdir(base / "etc/slurm")) == before


def test_a_file_slurm_is_not_asked_about_is_refused():
    with pytest.raises(LabError, match="cannot judge"):
        slurmcheck.judge([{"topology.conf": ""}], rootfs.ensure_base())
