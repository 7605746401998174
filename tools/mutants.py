"""Apply known-bad mutations and check that the unit tests kill each.

Each mutation replaces exact text in one file (the tool fails loudly if the text is not
there: the code moved, so the mutation must be updated), runs pytest, and restores the file,
checking the restore by hash. Exit status 1 if a mutant survives.

Mutations run one per CPU at a time, each in a private copy of the source tree (the working
tree is never edited): sys.path and PYTHONPATH put the copy's hpc_libs and lab ahead of the
venv's editable installs, and the tests find the charms next to themselves.

Each pytest run is a fresh process forked from this one after it imported pytest, its plugins
and the heavy third-party libraries (ops, Scenario, pydantic, hypothesis...): a run starts in
a fraction of a second instead of seconds, and still imports every module of the project (the
charms, hpc_libs, the lab, the tests) anew from its copy of the tree, mutated or not; the tool
refuses to fork if one is already imported. The baseline (every mutation's tests, unmutated)
runs the same way, split over the CPUs.

Run: `just mutants` (or `uv run python tools/mutants.py [name ...]`).
"""

import hashlib
import importlib
import os
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import unit_tests

ROOT = Path(__file__).resolve().parents[1]
#: A run's options. Forked runs find pytest's plugins already imported, too late for pytest
#: to rewrite their asserts: its warning says so, and nothing else (the tests' own modules
#: and conftests are imported, and rewritten, by the run).
PYTEST_OPTIONS = [
    "-x",
    "-q",
    "-p",
    "no:cacheprovider",
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
]
#: Third-party modules the runs import, imported once before they are forked.
PRELOADED = (
    "pytest",
    "_hypothesis_pytestplugin",
    "hypothesis",
    "xdist.plugin",
    "xdist.looponfail",
    "pytest_benchmark.plugin",
    "ops",
    "ops.testing",
    "pydantic",
    "yaml",
    "slurmutils",
)
RUN_TIMEOUT = 900
"""Seconds a pytest run may take; SIGALRM ends it and the tool fails."""
BROKEN = 70
"""A forked run's exit status when it failed before pytest could run (not a test failure)."""
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "build", "__pycache__", ".*_cache")


@dataclass(frozen=True)
class Mutation:
    """Replace `original` by `mutant` in `path`; `tests` (pytest paths) must then fail."""

    name: str
    path: str
    original: str
    mutant: str
    tests: str = "tests/unit"


MUTATIONS = [
    Mutation(
        "upgrade-timeout-raised-too-late",
        "charms/slurmctld/src/major_upgrade.py",
        '        return "the leader must raise SlurmctldTimeout for the upgrade first"',
        "        return None",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-timeout-never-restored",
        "charms/slurmctld/src/charm.py",
        "            plan.target, facts.dbds, versions, config.slurmctld_timeout\n        )\n",
        "            plan.target, facts.dbds, versions, config.slurmctld_timeout\n"
        "        ) or facts.memory.upgrade_slurmctld_timeout\n",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "leader-standing-by-never-reloads",
        "charms/slurmctld/src/applied.py",
        "            if standby:\n                self._refresh_standby(conf)\n",
        "",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "fence-follows-raised-timeout",
        "charms/slurmctld/src/placement.py",
        "        grace = fence.grace_seconds(facts.config.slurmctld_timeout)\n",
        "        grace = fence.grace_seconds(facts.running_timeout)\n",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "backup-never-reloads",
        "charms/slurmctld/src/applied.py",
        "        elif config != self._stored.config:\n"
        "            self._refresh_standby(on_disk)\n",
        "",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "standby-reloaded-as-accounting-comes",
        "charms/slurmctld/src/applied.py",
        "        if has_accounting(conf) and not self._stored.accounting:\n"
        "            self._manager.service.restart()\n",
        "        if False:\n            self._manager.service.restart()\n",
        "tests/unit/slurmctld/test_slurmctld_cluster_id_and_digest.py",
    ),
    Mutation(
        "redaction-of-one-token",
        "charms/slurmctld/src/actions.py",
        '            shown.append(f"{secret}={REDACTED}{ending}")',
        '            shown.append(re.sub(rf"{secret}=\\S+", f"{secret}={REDACTED}", line))',
        "tests/unit/slurmctld/test_actions_show_config.py",
    ),
    Mutation(
        "slurmdbd-conf-served",
        "charms/slurmctld/src/actions.py",
        '    "acct-gather-conf": "acct_gather.conf",\n}',
        '    "acct-gather-conf": "acct_gather.conf",\n    "slurmdbd-conf": "slurmdbd.conf",\n}',
        "tests/unit/slurmctld/test_actions_show_config.py",
    ),
    Mutation(
        "slurm-never-judges-slurm-conf",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py",
        '            slurm_check="slurm.conf",\n',
        "",
        "tests/unit/slurmctld/test_overrides_charm.py",
    ),
    Mutation(
        "token-rule-for-keys-without-a-rule",
        "libs/hpc_libs/src/hpc_libs/slurm/grammar.py",
        "    return spelling(model, key) in _RULES[model]\n",
        "    return True\n",
        "tests/unit/slurmctld/test_overrides.py",
    ),
    Mutation(
        "key-briefly-0644",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "            os.fchmod(f.fileno(), mode)\n            f.write(data)\n",
        "            os.fchmod(f.fileno(), 0o644)\n            f.write(data)\n"
        "            os.fchmod(f.fileno(), mode)\n",
        "tests/unit/hpc_libs/test_guards.py tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "port-refusal-removed",
        "charms/slurmd/src/config.py",
        '"is refused: a dynamic node cannot take it through --conf", "Port", "State", "Reason"',
        '"is refused: a dynamic node cannot take it through --conf", "State", "Reason"',
        "tests/unit/slurmd/test_slurmd_guards.py",
    ),
    Mutation(
        "scontrol-without-timeout",
        "libs/hpc_libs/src/hpc_libs/slurm/scontrol.py",
        'return host.run(["scontrol", *args], timeout=self.timeout).stdout',
        'return host.run(["scontrol", *args]).stdout',
        "tests/unit/hpc_libs/test_scontrol.py",
    ),
    Mutation(
        "peer-host-unchecked",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py",
        "class ControllerHost(HostEntry):",
        "class ControllerHost(DatabagModel):\n    hostname: str | None = None\n"
        "    address: str | None = None\n",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "bad-peer-not-blocked",
        "charms/slurmctld/src/placement.py",
        "        for problem in self.peer.host_problems():",
        "        for problem in []:",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "own-bad-hostname-configures",
        "charms/slurmctld/src/facts.py",
        "        return None, f\"this unit's",
        "        return ControllerHost.model_construct(hostname=hostname, address=address),"
        " f\"this unit's",
        "tests/unit/slurmctld/test_ha_charm.py",
    ),
    Mutation(
        "ipv6-scope-any-text",
        "libs/hpc_libs/src/hpc_libs/slurm/grammar.py",
        "    if scope is not None and (not _SCOPE_ID_RE.fullmatch(scope) or scope in "
        '(".", "..")):',
        "    if False:",
        "tests/unit/hpc_libs/test_grammar.py",
    ),
    Mutation(
        "databag-json-unbounded",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py",
        "relation.load(model, source, decoder=decoder)",
        "relation.load(model, source)",
        "tests/unit/hpc_libs/test_interfaces_slurmctld_peer.py",
    ),
    Mutation(
        "old-revision-kept",
        "charms/slurmctld/src/actions.py",
        "        event.remove_revision()",
        "        pass",
        "tests/unit/slurmctld/test_actions_keys.py",
    ),
    Mutation(
        "lab-no-secret-remove",
        "lab/src/slurm_lab/juju/commit.py",
        '        events.append(hooks.event(owner, "secret_remove", secret_id=secret.id, '
        "revision=number))",
        "        pass",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-enters-scope-despite-a-failed-relation-created",
        "lab/src/slurm_lab/juju/engine.py",
        "        if entering is not None and entering.in_error:",
        "        if entering is not None and not entering:",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-takes-a-reused-pid-for-the-hooks-runner",
        "lab/src/slurm_lab/juju/engine.py",
        "            if start_time(unit.runner_pid) == unit.runner_start:",
        "            if start_time(unit.runner_pid):",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-scope-not-recorded",
        "lab/src/slurm_lab/juju/lifecycle.py",
        "    rel.in_scope.append(unit_name)\n",
        "",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-removed-revision-stays",
        "lab/src/slurm_lab/juju/commit.py",
        "        secret.revisions = [r for r in secret.revisions if r.revision != revision]",
        "        return",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "fenced-controller-started",
        "charms/slurmctld/src/placement.py",
        "        return self.fence.reason() is None  # Fenced",
        "        return True  # Fenced",
        "tests/unit/slurmctld/test_ha_fence.py::test_a_fenced_backup_says_why_and_starts_no_slurmctld",
    ),
    Mutation(
        "fence-never-kills",
        "charms/slurmctld/src/programs/fence.sh",
        '            kill -KILL "$pid"',
        '            : "$pid"',
        "tests/unit/slurmctld/test_ha_fence.py::"
        "test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "port-failure-aborts-reconcile",
        "libs/hpc_libs/src/hpc_libs/charm/base.py",
        "            self.failure = self.failure or e\n\n    def converge",
        "            raise\n\n    def converge",
        "tests/unit/sackd/test_sackd_ports.py tests/unit/slurmd/test_slurmd_ports.py",
    ),
    Mutation(
        "srun-range-overlap-accepted",
        "libs/hpc_libs/src/hpc_libs/charm/ports.py",
        "        if clash := next((kept for kept in target if kept.overlaps(ports)), None):",
        "        if clash := None:",
        "tests/unit/hpc_libs/test_charm_ports.py tests/unit/sackd/test_sackd_ports.py",
    ),
    # ClusterMember (issue 24): restart on what was applied, one ladder for the four members.
    Mutation(
        "member-restart-ignores-fingerprint",
        "libs/hpc_libs/src/hpc_libs/charm/member.py",
        "        changed = not active or fingerprint != self._stored.applied",
        "        changed = not active",
        "tests/unit/hpc_libs/test_charm_member.py",
    ),
    Mutation(
        "member-records-fingerprint-before-restart",
        "libs/hpc_libs/src/hpc_libs/charm/member.py",
        '            self._stored.applied = ""\n            if not active and start_when',
        "            self._stored.applied = fingerprint\n            if not active and start_when",
        "tests/unit/hpc_libs/test_charm_member.py",
    ),
    Mutation(
        "member-ladder-ignores-departure",
        "libs/hpc_libs/src/hpc_libs/charm/member.py",
        "NEEDS_SLURMCTLD) if self.relation is None else None",
        "NEEDS_SLURMCTLD) if self.slurmctld.relation is None else None",
        "tests/unit/hpc_libs/test_charm_member.py",
    ),
    Mutation(
        "member-ladder-skips-not-ready",
        "libs/hpc_libs/src/hpc_libs/charm/member.py",
        "        if not self.slurmctld.is_ready():\n            return ops.WaitingStatus(WAITING",
        "        if False:\n            return ops.WaitingStatus(WAITING",
        "tests/unit/hpc_libs/test_charm_member.py",
    ),
    # Root never follows a link a less trusted user can plant (issue 20, High 1, Medium 8).
    Mutation(
        "no-follow-dropped",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC",
        "_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "set-owner-follows-link",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "os.chown(path, user.pw_uid, gid, follow_symlinks=False)",
        "os.chown(path, user.pw_uid, gid, follow_symlinks=True)",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "copy-follows-link",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "info = os.stat(name, dir_fd=source_fd, follow_symlinks=False)",
        "info = os.stat(name, dir_fd=source_fd, follow_symlinks=True)",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "state-dir-made-by-path",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py",
        "        files.make_dir(\n            target, mode=0o750,",
        "        target.mkdir(parents=True, exist_ok=True)\n        target.chmod(0o750)\n"
        "        files.make_dir(\n            target, mode=0o750,",
        "tests/unit/hpc_libs/test_files_no_follow.py "
        "tests/unit/slurmctld/test_slurmctld_waits_and_failures.py",
    ),
    Mutation(
        "lib-dir-left-to-slurm",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py",
        "        target = path or self.state_save_location\n        self._own_lib_dir()\n",
        "        target = path or self.state_save_location\n",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "cluster-id-deleted-through-link",
        "charms/slurmctld/src/applied.py",
        "            with files.open_dir(state_dir, under=root) as state_fd:\n"
        "                os.unlink(CLUSTER_ID_FILE, dir_fd=state_fd)",
        "            path.unlink()",
        "tests/unit/slurmctld/test_slurmctld_cluster_id_and_digest.py",
    ),
    Mutation(
        "key-copy-briefly-0644",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "writer = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=target_fd)",
        "writer = os.open(name, _CREATE_FLAGS, 0o644, dir_fd=target_fd)",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "staging-dir-open",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "os.mkdir(target.name, 0o700, dir_fd=parent_fd)",
        "os.mkdir(target.name, 0o755, dir_fd=parent_fd)",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "backup-keeps-keys",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py",
        "                self._drop_keys(backup)\n",
        "                pass\n",
        "tests/unit/hpc_libs/test_slurm_managers.py tests/unit/slurmctld/test_ha_network_state.py",
    ),
    # The fence watchdog (root) wakes the charm without writing where slurm can (High 2).
    Mutation(
        "watchdog-writes-slurms-dir",
        "charms/slurmctld/src/programs/fence.sh",
        "wake_charm() { systemctl start --no-block slurmctld-charm-primary.service || true; }",
        "wake_charm() { date -u +%s > /run/slurmctld-charm/primary-changed 2>/dev/null || true; }",
        "tests/unit/slurmctld/test_ha_fence.py",
    ),
    Mutation(
        "watchdog-wakes-nobody",
        "charms/slurmctld/src/programs/fence.sh",
        "wake_charm() { systemctl start --no-block slurmctld-charm-primary.service || true; }",
        "wake_charm() { :; }",
        "tests/unit/slurmctld/test_ha_fence.py::"
        "test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "takeover-repairs-an-operators-drain",
        "charms/slurmctld/src/takeover.py",
        "        and node.reason_set_by_user == slurm_user\n",
        "",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-repairs-without-seeing-a-takeover",
        "charms/slurmctld/src/takeover.py",
        "saw_another = stored.in_charge not in (-1, my_index)",
        "saw_another = stored.in_charge != my_index",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-repairs-without-slurmctlds-signal",
        "charms/slurmctld/src/takeover.py",
        "unseen = stored.in_charge == -1 and my_index > 0 and took_control > 0",
        "unseen = stored.in_charge == -1 and my_index > 0",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    # Issue 25: the wake-up after a takeover is level-triggered and the window stays awake.
    Mutation(
        "primary-wake-is-an-edge",
        "libs/hpc_libs/src/hpc_libs/charm/wake.py",
        """f"{'PathExists' if self.flag else 'PathChanged'}={self.watched}",""",
        """f"PathChanged={self.watched}",""",
        "tests/unit/hpc_libs/test_charm_wake.py tests/unit/slurmctld/test_ha_primary_watch.py",
    ),
    Mutation(
        "takeover-one-look-per-watcher",
        "charms/slurmctld/src/takeover.py",
        "        self._keep_looking(int(stored.window_until))\n",
        "        self._keep_looking(int(now) + RECHECK)\n",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-no-look-before-the-first-beat",
        "charms/slurmctld/src/takeover.py",
        "            if now - took_control < WINDOW:",
        "            if now - took_control < 0:",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "repeating-watcher-dispatches-once",
        "libs/hpc_libs/src/hpc_libs/charm/programs/wake-repeat.sh",
        'while [ "$(date +%s)" -lt "$until" ]; do',
        "for _ in 1; do",
        "tests/unit/hpc_libs/test_charm_wake.py",
    ),
    # Issue 24: the shell programs are files; their values arrive as arguments.
    Mutation(
        "wake-watch-dispatches-the-check-words-too",
        "libs/hpc_libs/src/hpc_libs/charm/programs/wake-watch.sh",
        '            [ "$i" -lt "$dispatch_words" ] && set -- "$@" "$word"\n',
        '            set -- "$@" "$word"\n',
        "tests/unit/hpc_libs/test_charm_wake.py",
    ),
    Mutation(
        "reregister-restarts-after-a-failed-delete",
        "charms/slurmd/src/programs/reregister.sh",
        'scontrol delete nodename="$node" || exit 1\n',
        'scontrol delete nodename="$node"\n',
        "tests/unit/slurmd/test_charm_slurmd_transient.py",
    ),
    Mutation(
        "native-metrics-despite-privatedata",
        "charms/slurmctld/src/native_metrics.py",
        '    return config.native_metrics != "off" and not config.slurm_conf_parameters.get(',
        '    return config.native_metrics != "off" or not config.slurm_conf_parameters.get(',
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-despite-off",
        "charms/slurmctld/src/native_metrics.py",
        '    return config.native_metrics != "off" and not config.slurm_conf_parameters.get(',
        "    return not config.slurm_conf_parameters.get(",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-on-older-slurm",
        "charms/slurmctld/src/native_metrics.py",
        "    return (parsed.major, parsed.minor) >= FIRST_RELEASE",
        "    return True",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    # Issue 22: auto turns it on only once every reader of slurm.conf runs 25.11 or newer.
    Mutation(
        "native-metrics-ignores-node-versions",
        "charms/slurmctld/src/native_metrics.py",
        '        yield Daemon(f"slurmd node {name}", release)\n',
        "        pass\n",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-counts-placeholder-nodes",
        "charms/slurmctld/src/native_metrics.py",
        '        if "future" not in state.lower().split("+"):',
        "        if True:",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-ignores-login-and-rest-units",
        "charms/slurmctld/src/native_metrics.py",
        "            for unit, release in publisher.unit_versions(relation).items():",
        "            for unit, release in {}.items():",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-ignores-peer-controllers",
        "charms/slurmctld/src/native_metrics.py",
        "    for controller in peer.hosts().values():",
        "    for controller in []:",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-auto-takes-unknown-as-new",
        "charms/slurmctld/src/native_metrics.py",
        "        if daemon.release is None and vouch_for_unknown:",
        "        if daemon.release is None:",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-on-takes-old-as-unknown",
        "charms/slurmctld/src/native_metrics.py",
        "        if daemon.release is None and vouch_for_unknown:",
        "        if vouch_for_unknown:",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-toggles-when-nodes-unreadable",
        "charms/slurmctld/src/native_metrics.py",
        "        return Decision(previous)",
        "        return Decision(False)",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-backup-decides-from-its-own-options",
        "charms/slurmctld/src/charm.py",
        "            jobs += native_metrics.scrape_jobs(leader_on, config)",
        "            jobs += native_metrics.scrape_jobs(True, config)",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "sackd-publishes-no-release",
        "charms/sackd/src/charm.py",
        "        self.slurmctld.publish_version(self.running_slurm())  # sackd runs it now.\n",
        "",
        "tests/unit/sackd/test_sackd_auth_key_confirmation.py",
    ),
    Mutation(
        "slurmd-publishes-no-release",
        "charms/slurmd/src/charm.py",
        "        self.slurmctld.publish_version(self.running_slurm())\n",
        "",
        "tests/unit/slurmd/test_charm_slurmd.py",
    ),
    Mutation(
        "slurmrestd-publishes-no-release",
        "charms/slurmrestd/src/charm.py",
        "        self.slurmctld.publish_version(self.running_slurm())\n",
        "",
        "tests/unit/slurmrestd/test_slurmrestd_charm.py",
    ),
    Mutation(
        "consumer-unit-data-overwritten-field-by-field",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py",
        "        current = self.load(ConsumerUnitData, relation, self.model.unit) "
        "or ConsumerUnitData()",
        "        current = ConsumerUnitData()",
        "tests/unit/hpc_libs/test_interfaces_versions.py",
    ),
    Mutation(
        "native-metrics-backup-follows-the-redirect",
        "charms/slurmctld/src/native_metrics.py",
        "            follow_redirects=False,",
        "            follow_redirects=True,",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-not-renamed",
        "charms/slurmctld/src/native_metrics.py",
        '            rename=("slurm_", NATIVE_PREFIX),',
        "            rename=None,",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "exporter-drain-as-a-state",
        "exporter/src/slurm_exporter/metrics.py",
        "        nodes.add(line.partition, line.state)\n",
        "        nodes.add(line.partition, line.flags[0] if line.flags else line.state)\n",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "exporter-every-controller-exports-the-cluster",
        "exporter/src/slurm_exporter/exporter.py",
        "        cluster: list[Family] = []\n"
        "        if self._may_export_cluster(metrics.in_control(pings) == self.hostname):\n",
        "        cluster: list[Family] = []\n        if self._may_export_cluster(bool(pings)):\n",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        # The gate itself gone: a backup exports the cluster too (after the handover delay),
        # as exporters that run on both HA controllers do.
        "exporter-backup-exports-the-cluster",
        "exporter/src/slurm_exporter/exporter.py",
        "        if not in_control:\n"
        "            self._exports_from = None\n"
        "        elif self._exports_from is None:\n",
        "        if self._exports_from is None:\n",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "exporter-new-primary-exports-at-once",
        "exporter/src/slurm_exporter/exporter.py",
        "self._exports_from = now if first_pass else now + self.handover",
        "self._exports_from = now",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "exporter-no-second-ping",
        "exporter/src/slurm_exporter/exporter.py",
        "pings = self._pings(durations, failed)  # Still in control after the commands?",
        "pass",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "exporter-cluster-totals-per-partition-line",
        "exporter/src/slurm_exporter/metrics.py",
        "        if line.node not in seen:",
        "        if True:",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "autoscale-enlisting-not-capacity",
        "autoscaler/src/slurm_autoscale/decide.py",
        "    short = needed - len(free) - len(enlisting)\n",
        "    short = needed - len(free)\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-never-fitting-jobs-counted",
        "autoscaler/src/slurm_autoscale/decide.py",
        "        fits = job.node_count <= policy.max and shape.fits(job)\n",
        "        fits = job.node_count <= policy.max\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-busy-node-removed",
        "autoscaler/src/slurm_autoscale/decide.py",
        "        if node is None or node.busy or not node.usable",
        "        if node is None or not node.usable",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-drained-node-removed",
        "autoscaler/src/slurm_autoscale/slurm.py",
        "        return not self.drained and not self.state & unusable",
        "        return not self.state & unusable",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-idle-timeout-ignored",
        "autoscaler/src/slurm_autoscale/decide.py",
        "        if slurm.now - node.last_busy >= policy.idle_timeout:\n",
        "        if True:\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-cooldown-ignored-for-scale-in",
        "autoscaler/src/slurm_autoscale/decide.py",
        "    if last_action is not None and slurm.now - last_action < policy.cooldown:\n",
        "    if False:\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-past-max",
        "autoscaler/src/slurm_autoscale/decide.py",
        "    add = min(add, policy.max - len(staying), policy.step)\n",
        "    add = min(add, policy.step)\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "future-nodes-not-rendered",
        "charms/slurmctld/src/render.py",
        "        conf.nodes[node_name] = node\n",
        "        del node_name, node\n",
        "tests/unit/slurmctld/test_future_nodes.py",
    ),
    Mutation(
        "no-partition-before-the-first-unit",
        "charms/slurmctld/src/partitions.py",
        "            if app in relations and app not in known\n",
        "            if False\n",
        "tests/unit/slurmctld/test_future_nodes.py",
    ),
    Mutation(
        "rebuild-partition-shown-to-users",
        "charms/slurmctld/src/rebuild.py",
        '        "hidden": True,\n',
        '        "hidden": False,\n',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-partition-open-to-users",
        "charms/slurmctld/src/rebuild.py",
        '        "rootonly": True,\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-jobs-all-one-name",
        "charms/slurmctld/src/rebuild.py",
        '            f"--job-name={job_name(partition, index % groups)}",',
        '            f"--job-name={job_name(partition, 0)}",',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-jobs-without-singleton",
        "charms/slurmctld/src/rebuild.py",
        '            "--dependency=singleton",\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-failure-does-not-stop",
        "charms/slurmctld/src/rebuild.py",
        "        if rollout.failed and rollout.waiting_jobs:",
        "        if False:",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-node-down-before-counts-as-failure",
        "charms/slurmctld/src/rebuild.py",
        "            if down and (node.reason_changed_at or since) >= since:",
        "            if down:",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-a-rebooting-node-counts-as-failed",
        "charms/slurmctld/src/rebuild.py",
        'FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG")',
        'FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG", "NOT_RESPONDING")',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-cancel-reboots-already-issued",
        "charms/slurmctld/src/rebuild.py",
        '        n.name for n in nodes if n.name in targets and n.has_state("REBOOT_REQUESTED")',
        "        n.name for n in nodes if n.name in targets",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-any-partition-name-accepted",
        "charms/slurmctld/src/rebuild.py",
        "        if value not in known:",
        "        if not value:",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "reboot-program-upgrades-for-another-node",
        "charms/slurmd/src/programs/reboot-program.sh",
        '    rebuild:*:*:upgrade:"$node")',
        "    rebuild:*:*:upgrade:*)",
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "reboot-program-fails-without-setting-the-node-down",
        "charms/slurmd/src/programs/reboot-program.sh",
        '    scontrol update nodename="$node" state=down reason="rebuild: $1" || true\n',
        "",
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "rebuild-partition-in-a-users-partition-list",
        "charms/slurmctld/src/rebuild.py",
        '        "enforcepartlimits": ENFORCE_PART_LIMITS,\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-reads-users-jobs",
        "libs/hpc_libs/src/hpc_libs/slurm/queue.py",
        '        "--user=root",\n        "--states=all",',
        '        "--states=all",',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-holds-ids-it-did-not-submit",
        "charms/slurmctld/src/rebuild.py",
        '                waiting_jobs=sorted(j for j, _ in jobs if states.get(j) == "PENDING"),',
        '                waiting_jobs=sorted(j for j, s in states.items() if s == "PENDING"),',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-cancels-ids-it-did-not-submit",
        "charms/slurmctld/src/rebuild.py",
        '    pending = sorted(job_id for job_id, _ in jobs if states.get(job_id) == "PENDING")',
        '    pending = sorted(job_id for job_id, state in states.items() if state == "PENDING")',
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-record-dropped-by-the-reconcile",
        "charms/slurmctld/src/facts.py",
        "            rollouts=memory.rollouts,\n",
        "",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "rebuild-submitted-jobs-left-after-a-failed-submission",
        "charms/slurmctld/src/rebuild.py",
        "                queue.scancel(job_ids, timeout=TIMEOUT)",
        "                pass",
        "tests/unit/slurmctld/test_rebuild.py",
    ),
    Mutation(
        "reboot-program-reads-users-comments",
        "charms/slurmd/src/programs/reboot-program.sh",
        '--nodelist="$node" --user=root \\',
        '--nodelist="$node" \\',
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "reboot-program-holds-users-jobs",
        "charms/slurmd/src/programs/reboot-program.sh",
        "--partition=rebuild --user=root --states=PENDING",
        "--partition=rebuild --states=PENDING",
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "resume-timeout-silently-replaced",
        "charms/slurmctld/src/overrides.py",
        '    "ResumeTimeout": "is the charm\'s: use the reboot-timeout option",\n',
        "",
        "tests/unit/slurmctld/test_overrides.py",
    ),
    Mutation(
        "upgrade-sackd-before-the-controllers",
        "charms/sackd/src/charm.py",
        "        return controllers_wait_reason(target, self.slurmctld.controller_data)",
        "        return None",
        "tests/unit/sackd/test_sackd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-slurmd-in-the-charm",
        "charms/slurmd/src/charm.py",
        "    upgrades_in_charm = False\n",
        "",
        "tests/unit/slurmd/test_slurmd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-slurmdbd-backup-before-the-primary",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py",
        "    earlier = order[: order.index(unit)] if unit in order else order",
        "    earlier: Sequence[str] = []",
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-slurmctld-before-slurmdbd",
        "charms/slurmctld/src/major_upgrade.py",
        '    versions = [(d.host or "slurmdbd", d.version) for d in dbds]',
        "    versions: list[tuple[str, str | None]] = []",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-slurmctld-backup-before-the-primary",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py",
        "    earlier = order[: order.index(unit)] if unit in order else order",
        "    earlier: Sequence[str] = []",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-without-a-backup",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py",
        "            self._turn.before_upgrade(plan)\n",
        "",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py "
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-pin-moves-out-of-turn",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py",
        "        if plan.target is None or self._turn.upgrade_waits_for(plan.target) is not None:",
        "        if plan.target is None:",
        "tests/unit/sackd/test_sackd_major_upgrade.py "
        "tests/unit/slurmd/test_slurmd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-wait-ignores-an-older-daemon",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py",
        "        elif is_newer(target, runs):",
        "        elif False:",
        "tests/unit/hpc_libs/test_slurm_upgrade.py",
    ),
    Mutation(
        "upgrade-controllers-hide-their-version",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py",
        '                shared["version"] = host.version',
        "                pass",
        "tests/unit/hpc_libs/test_interfaces_versions.py",
    ),
    Mutation(
        "upgrade-backup-dir-open-to-all",
        "libs/hpc_libs/src/hpc_libs/slurm/backup.py",
        '    files.make_dir(path, mode=0o700, owner="root", group="root", under=root)',
        '    files.make_dir(path, mode=0o755, owner="root", group="root", under=root)',
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-first-install-outside-the-gate",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py",
        "        if _names_own_repository(config.slurm_package_source) and apt.missing(",
        "        if False and apt.missing(",
        "tests/unit/slurmd/test_slurmd_major_upgrade.py "
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-first-install-takes-the-newest",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py",
        "            if waits_for(candidate) is None:",
        "            if True:",
        "tests/unit/slurmd/test_slurmd_major_upgrade.py "
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-retry-takes-another-backup",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py",
        "        if not self.saved(plan):",
        "        if True:",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "upgrade-failed-install-leaves-the-daemon-down",
        "libs/hpc_libs/src/hpc_libs/slurm/base.py",
        "                self._start_after_failed_install()\n",
        "                pass\n",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "apt-update-passes-an-unreachable-source",
        "libs/hpc_libs/src/hpc_libs/machine/apt.py",
        '    _apt_get(["update", ERROR_ON_ANY, _LOCK_OPTION]',
        '    _apt_get(["update", _LOCK_OPTION]',
        "tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "reboot-program-update-passes-an-unreachable-source",
        "charms/slurmd/src/programs/reboot-program.sh",
        "        apt-get update --error-on=any ||",
        "        apt-get update ||",
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "reboot-program-reboots-with-slurmd-kept-back",
        "charms/slurmd/src/programs/reboot-program.sh",
        '            "$installed") ;;',
        "            *) ;;",
        "tests/unit/slurmd/test_reboot_program.py",
    ),
    Mutation(
        "stale-unit-not-reloaded",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py",
        '    if result.stdout.strip() != "no":\n        daemon_reload()',
        '    if result.stdout.strip() == "always":\n        daemon_reload()',
        "tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "schema-checked-in-every-hook",
        "libs/hpc_libs/src/hpc_libs/slurm/schema_cache.py",
        "        cls = validators.validator_for(schema)\n",
        "        cls = validators.validator_for(schema)\n        cls.check_schema(schema)\n",
        "tests/unit/hpc_libs/test_schema_cache.py",
    ),
    Mutation(
        "exit-collects-the-whole-heap",
        "libs/hpc_libs/src/hpc_libs/charm/base.py",
        "    ops.main(charm_class)\n    gc.freeze()\n",
        "    ops.main(charm_class)\n",
        "tests/unit/hpc_libs/test_charm_base.py",
    ),
    Mutation(
        "refused-start-not-tried-again",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py",
        '            _systemctl("reset-failed", self.name, timeout=QUICK_TIMEOUT)\n',
        "            raise\n",
        "tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "enable-syncs-sysv-links",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py",
        '"--no-reload", self.name, timeout=QUICK_TIMEOUT, env=SKIP_SYSV)',
        '"--no-reload", self.name, timeout=QUICK_TIMEOUT)',
        "tests/unit/hpc_libs/test_machine.py",
    ),
    Mutation(
        "lab-action-refuses-unknown-params-by-default",
        "lab/src/slurm_lab/juju/actionparams.py",
        '"additionalProperties": declared.get("additionalProperties", True),',
        '"additionalProperties": declared.get("additionalProperties", False),',
        "lab/tests/test_actionparams_units.py",
    ),
    Mutation(
        "rotate-auth-key-takes-unknown-params",
        "charms/slurmctld/charmcraft.yaml",
        "      Afterwards a daemon with the old key is refused. Run it on the leader.\n"
        "    additionalProperties: false\n",
        "      Afterwards a daemon with the old key is refused. Run it on the leader.\n",
        "tests/unit/project/test_charmcraft_projects.py",
    ),
    Mutation(
        "lab-exec-does-not-hold-its-unit",
        "lab/src/slurm_lab/juju/engine.py",
        '        unit.running, unit.agent = event, "executing"\n'
        "        unit.runner_pid, unit.runner_start = os.getpid(), start_time(os.getpid())\n"
        "        return event, run",
        "        return event, run",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-lost-exec-is-a-failed-hook",
        "lab/src/slurm_lab/juju/engine.py",
        '            if event["kind"] == "custom" and not event.get("exec"):\n'
        "                continue",
        '            if event["kind"] == "custom" and not event.get("exec"):\n'
        "                pass",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-leaves-a-stopped-nsenter-stopped",
        "lab/src/slurm_lab/proc.py",
        "                    os.kill(proc.pid, signal.SIGCONT)",
        "                    pass",
        "lab/tests/test_machines_units.py",
    ),
    Mutation(
        "scaling-view-reads-text-output",
        "charms/slurmctld/src/scaling_view.py",
        '    return host.run(["scontrol", "show", *what, "--json"], timeout=QUERY_TIMEOUT).stdout',
        '    return host.run(["scontrol", "show", *what], timeout=QUERY_TIMEOUT).stdout',
        "tests/unit/slurmctld/test_actions_scaling_view.py",
    ),
    Mutation(
        "autoscale-view-read-loosely",
        "autoscaler/src/slurm_autoscale/slurm.py",
        "Number = Annotated[int, Field(ge=0, le=MAX_NUMBER, strict=True)]\n",
        "Number = Annotated[int, Field(ge=0)]\n",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-array-throttle-ignored",
        "charms/slurmctld/src/scaling_view.py",
        "    cap = int(limit) if percent else (throttle or 0)\n",
        "    cap = int(limit) if percent else 0\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py",
    ),
    Mutation(
        "autoscale-policy-numbers-loose",
        "autoscaler/src/slurm_autoscale/policy.py",
        "populate_by_name=True, strict=True)",
        "populate_by_name=True)",
        "tests/unit/autoscaler",
    ),
    Mutation(
        "autoscale-missing-juju-is-a-traceback",
        "autoscaler/src/slurm_autoscale/cli.py",
        "    except OSError as e:  # No juju program, or the state file cannot be written.\n"
        '        logger.error("%s", e)\n'
        "        return EXIT_FAILED\n",
        "",
        "tests/unit/autoscaler",
    ),
    # Issue 33 (A3, A4): the takeover repair decides on Slurm's records, from narrow queries.
    Mutation(
        "takeover-requeues-any-failed-job",
        "charms/slurmctld/src/takeover.py",
        "        and job.state_reason == REFUSED_REASON\n",
        "",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-splits-records-on-any-line-break",
        "charms/slurmctld/src/takeover.py",
        '    return [line for line in output.split("\\n") if line]',
        "    return [line for line in output.splitlines() if line]",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-huge-job-id-taken",
        "charms/slurmctld/src/takeover.py",
        "        and int(job_id) <= _MAX_JOB_ID\n",
        "",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-error-is-a-hook-error",
        "charms/slurmctld/src/takeover.py",
        "        except Exception as e:\n",
        "        except SlurmOpsError as e:\n",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-rereads-rejected-candidates",
        "charms/slurmctld/src/takeover.py",
        "        self._stored.passed = [*self._stored.passed, key]\n",
        "",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-lists-every-job",
        "charms/slurmctld/src/takeover.py",
        '    "--states=PENDING,FAILED,COMPLETING",\n',
        '    "--states=all",\n',
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-looks-without-a-cap",
        "charms/slurmctld/src/takeover.py",
        "        if now > stored.window_until or stored.looks >= MAX_LOOKS:\n",
        "        if now > stored.window_until:\n",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-failed-look-not-in-status",
        "charms/slurmctld/src/takeover.py",
        "        if trouble := str(self._stored.trouble):\n",
        "        if trouble := str(self._stored.trouble)[:0]:\n",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "native-metrics-reads-every-node-record",
        "charms/slurmctld/src/native_metrics.py",
        "    output = host.run(NODES_QUERY, timeout=scontrol.timeout).stdout\n",
        "    nodes = scontrol.show_nodes()\n"
        "    output = ''.join(f'{n.name}|idle|{n.version or \"N/A\"}\\n' for n in nodes)\n",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "native-metrics-guesses-past-a-bad-sinfo-line",
        "charms/slurmctld/src/native_metrics.py",
        "            raise SlurmOpsError(f\"sinfo printed a line that is no node's: "
        '{line[:80]!r}")\n',
        "            continue\n",
        "tests/unit/slurmctld/test_native_metrics.py",
    ),
    Mutation(
        "signal-dated-in-the-future-counted",
        "charms/slurmctld/src/takeover.py",
        "    if not stat.S_ISREG(info.st_mode) or info.st_mtime > now:\n",
        "    if not stat.S_ISREG(info.st_mode):\n",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "future-nodes-fill-the-node-table",
        "charms/slurmctld/src/future_nodes.py",
        "    if 2 * total > max_node_count:\n",
        "    if total > max_node_count:\n",
        "tests/unit/slurmctld/test_future_nodes.py",
    ),
    Mutation(
        "lab-tool-server-reads-clients-in-turn",
        "lab/src/slurm_lab/juju/jujuc.py",
        "target=_client, args=(conn, token, turn, slots)",
        "target=_client(conn, token, turn, slots), args=()",
        "lab/tests/test_jujuc_server_units.py",
    ),
    Mutation(
        "shared-etc-group-writable-adopted",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "        if mode & 0o022:\n",
        "        if mode & 0o002:\n",
        "tests/unit/hpc_libs/test_slurm_managers.py",
    ),
    Mutation(
        "exporter-trusts-a-line-after-a-broken-one",
        "exporter/src/slurm_exporter/metrics.py",
        "        if record is None or None in neighbours or printed[key(record)] > 1:\n",
        "        if record is None or printed[key(record)] > 1:\n",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "log-file-keeps-a-second-name",
        "libs/hpc_libs/src/hpc_libs/machine/files.py",
        "        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:\n",
        "        if stat.S_ISREG(info.st_mode):\n",
        "tests/unit/hpc_libs/test_files_no_follow.py",
    ),
    Mutation(
        "exporter-per-user-ignores-private-data",
        "exporter/src/slurm_exporter/exporter.py",
        "        self.per_user = per_user and not private & PER_USER_PRIVATE\n",
        "        self.per_user = per_user\n",
        "tests/unit/exporter/test_exporter.py",
    ),
    Mutation(
        "exporter-runs-as-root",
        "charms/slurmctld/src/exporter_service.py",
        '    "DynamicUser=yes",\n',
        "",
        "tests/unit/slurmctld/test_exporter_service.py",
    ),
    Mutation(
        "cgroup-isolation-confines-nothing",
        "charms/slurmctld/src/render.py",
        '"cgroup": {"constraincores": True, "constrainramspace": True, "constraindevices": True},',
        '"cgroup": {},',
        "tests/unit/slurmctld/test_overrides_charm.py",
    ),
    Mutation(
        "confinement-defaults-override-the-operator",
        "charms/slurmctld/src/render.py",
        "fields = {**CONFINEMENT[config.process_isolation], **config.cgroup_parameters}",
        "fields = {**config.cgroup_parameters, **CONFINEMENT[config.process_isolation]}",
        "tests/unit/slurmctld/test_overrides_charm.py",
    ),
    Mutation(
        "databag-parsed-on-every-read",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py",
        "        kept = self._parsed.get(key)\n",
        "        kept = None\n",
        "tests/unit/hpc_libs/test_interfaces_base.py",
    ),
    Mutation(
        "databag-parsed-once-whatever-was-written",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py",
        "        if kept is None or kept[0] != content:\n",
        "        if kept is None:\n",
        "tests/unit/hpc_libs/test_interfaces_base.py",
    ),
    Mutation(
        # Models compared, not text: the renamed secret id reads the same under its old name,
        # so an upgraded slurmctld would never write the new one.
        "databag-save-compares-models",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py",
        'if all(published.get(key, "") == text for key, text in saved_text(data).items()):',
        "if self.load(type(data), relation, target) == data:",
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "secret-id-old-name-not-read",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py",
        '                secret_id = fields.get("auth_key_id")\n',
        "                pass\n",
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "secret-id-old-name-not-written",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py",
        '            return {**fields, "auth_secret_id": secret_id, "auth_key_id": secret_id}\n',
        '            return {**fields, "auth_secret_id": secret_id}\n',
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "pack-passes-output-outside-the-project",
        "tools/charmcraft_project.py",
        '    return [*charmcraft, "pack", "--platform", platform, *extra]',
        '    return [*charmcraft, "pack", "--platform", platform, "--output", "/tmp", *extra]',
        "tests/unit/project/test_charmcraft_projects.py",
    ),
    Mutation(
        "charm-abi-ignores-the-extensions-python",
        "tools/charm_abi.py",
        'and match["version"] != f"3{target.minor}":',
        'and match["version"] == "0":',
        "tests/unit/project/test_charm_abi.py",
    ),
    Mutation(
        "lab-pack-not-marked-as-lab",
        "lab/src/slurm_lab/juju/charms.py",
        '                data = f"# {build.note}\\n".encode() + data',
        "                pass",
        "lab/tests/test_packing_units.py",
    ),
    Mutation(
        "slurmd-without-dbus",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py",
        '    packages = ("slurmd", "slurm-client", "dbus")\n',
        '    packages = ("slurmd", "slurm-client")\n',
        "tests/unit/slurmd/test_charm_slurmd.py",
    ),
]


def digest(data: bytes) -> str:
    """Return the SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def editable_sources(tree: Path) -> list[Path]:
    """Return the source dirs of the editable installs (hpc_libs, lab...) as found in `tree`.

    The venv's `.pth` files name them under ROOT; the same relative paths in `tree`.
    """
    site = Path(sysconfig.get_paths()["purelib"])
    sources: list[Path] = []
    for pth in sorted(site.glob("_editable_impl_*.pth")):
        for line in pth.read_text().splitlines():
            path = Path(line.strip())
            if path.is_absolute() and path.is_relative_to(ROOT):
                sources.append(tree / path.relative_to(ROOT))
    return sources


def preload() -> None:
    """Import PRELOADED; fail if that imported a module of the project (a run imports its own)."""
    for name in PRELOADED:
        importlib.import_module(name)
    this_tool = {Path(__file__).resolve(), Path(unit_tests.__file__).resolve()}
    venv = Path(sys.prefix).resolve()
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if path.is_relative_to(ROOT) and not path.is_relative_to(venv) and path not in this_tool:
            raise SystemExit(f"{module.__name__} ({path}) is imported before the runs are forked")


def fork_pytest(paths: list[str], tree: Path, output: Path) -> int:
    """Start pytest on `paths` in a process forked from this one, in `tree`; return its pid.

    The child is what `python -m pytest` started in `tree` with PYTHONPATH naming the tree's
    editable sources would be, minus the imports already done (PRELOADED). Its output is
    appended to `output`.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    status = BROKEN
    try:
        fd = os.open(output, os.O_WRONLY | os.O_APPEND)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(tree)
        sources = [str(source) for source in editable_sources(tree)]
        os.environ["PYTHONPATH"] = os.pathsep.join(sources)
        sys.path[:1] = [str(tree), *sources]
        importlib.invalidate_caches()
        signal.alarm(RUN_TIMEOUT)
        pytest = importlib.import_module("pytest")  # preloaded
        status = int(pytest.main([*PYTEST_OPTIONS, *paths]))
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


@dataclass
class Job:
    """pytest runs in one tree, one after the other, until one fails.

    A run per charm (`unit_tests.processes`), with `mutation` applied to the tree meanwhile
    (None: the baseline). `status` is the first failure's (0: all passed).
    """

    name: str
    runs: list[list[str]]
    mutation: "Mutation | None" = None
    status: int = 0
    output: str = ""
    seconds: float = 0.0


@dataclass
class Running:
    """A job under way: its tree, the file its output goes to, the runs left, the original."""

    job: Job
    tree: Path
    output: Path
    started: float
    original: bytes = b""
    left: list[list[str]] = field(default_factory=list[list[str]])


def start(job: Job, tree: Path, output: Path) -> tuple[int, Running]:
    """Apply the job's mutation in `tree` and fork its first run; return its pid and state."""
    output.write_bytes(b"")
    running = Running(job, tree, output, time.monotonic(), left=list(job.runs))
    if job.mutation:
        path = tree / job.mutation.path
        running.original = path.read_bytes()
        path.write_text(
            running.original.decode().replace(job.mutation.original, job.mutation.mutant)
        )
    return fork_pytest(running.left.pop(0), tree, output), running


def finish(running: Running, status: int) -> Job:
    """Restore the job's tree (checked by hash) and record the job's outcome."""
    job = running.job
    if job.mutation:
        path = running.tree / job.mutation.path
        path.write_bytes(running.original)
        if digest(path.read_bytes()) != digest(running.original):
            raise SystemExit(f"{job.mutation.path} was not restored")
    job.status = status
    job.output = running.output.read_text()
    job.seconds = time.monotonic() - running.started
    return job


def run_jobs(jobs: list[Job], trees: list[Path], scratch: Path, report=lambda job: None) -> None:
    """Run `jobs`, a tree each, as many at a time as there are trees; call `report` on each end.

    A run that dies by a signal (its timeout) or fails before pytest starts fails the tool.
    """
    free = list(trees)
    waiting = list(jobs)
    running: dict[int, Running] = {}
    try:
        while waiting or running:
            while waiting and free:
                pid, state = start(waiting.pop(0), free.pop(), scratch / f"output-{len(waiting)}")
                running[pid] = state
            pid, wait_status = os.wait()
            state = running.pop(pid)
            if os.WIFSIGNALED(wait_status):
                raise SystemExit(
                    f"{state.job.name}: pytest died by signal {os.WTERMSIG(wait_status)} "
                    f"(a run may take {RUN_TIMEOUT} s)\n{state.output.read_text()}"
                )
            status = os.waitstatus_to_exitcode(wait_status)
            if status == BROKEN:
                raise SystemExit(
                    f"{state.job.name}: pytest could not run\n{state.output.read_text()}"
                )
            if status == 0 and state.left:
                running[fork_pytest(state.left.pop(0), state.tree, state.output)] = state
                continue
            report(finish(state, status))
            free.append(state.tree)
    finally:
        for pid in running:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


def baseline_jobs(chosen: list[Mutation], workers: int) -> list[Job]:
    """Return the chosen mutations' tests, unmutated, as jobs (the largest run split in `workers`).

    A charm's test files can share processes in any grouping; the split lets the CPUs share
    the slurmctld tests, most of the baseline.
    """
    tests = sorted({path for mutation in chosen for path in mutation.tests.split()})
    runs = unit_tests.processes(tests)
    largest = runs.pop(0)
    runs[:0] = [largest[n::workers] for n in range(workers) if largest[n::workers]]
    return [Job(f"baseline {' '.join(paths)}", [paths]) for paths in runs]


def report_mutant(job: Job) -> None:
    """Print whether the mutant was killed, by which test, and how long it took."""
    failed = [line for line in job.output.splitlines() if line.startswith("FAILED")]
    verdict = "killed" if job.status != 0 else "SURVIVED"
    by = failed[0].removeprefix("FAILED ").split(" - ")[0] if failed else "-"
    assert job.mutation
    print(f"{job.mutation.name}: {verdict} by {by} ({job.seconds:.1f} s)", flush=True)


def check_applies(mutation: Mutation) -> None:
    """Fail unless the mutation's original text is in its file exactly once."""
    if (ROOT / mutation.path).read_text().count(mutation.original) != 1:
        raise SystemExit(f"{mutation.name}: the original text is not in {mutation.path} once")


def main(names: list[str]) -> int:
    """Run the named mutations (default: all); return 1 if any survives.

    First the baseline: every chosen mutation's tests must pass unmutated (a red baseline
    would "kill" every mutant).
    """
    chosen = [m for m in MUTATIONS if not names or m.name in names]
    for mutation in chosen:
        check_applies(mutation)
    preload()
    workers = min(os.cpu_count() or 1, len(chosen)) or 1
    with tempfile.TemporaryDirectory(prefix="mutants-") as scratch:
        trees = [
            Path(shutil.copytree(ROOT, Path(scratch) / str(n), ignore=NOT_COPIED))
            for n in range(workers)
        ]
        baseline = baseline_jobs(chosen, workers)
        run_jobs(baseline, trees, Path(scratch))
        for job in baseline:
            if job.status != 0:
                raise SystemExit(
                    f"the mutations' tests fail without any mutation ({job.name}):\n{job.output}"
                )
        mutants = [Job(m.name, unit_tests.processes(m.tests.split()), mutation=m) for m in chosen]
        run_jobs(mutants, trees, Path(scratch), report_mutant)
    return 0 if all(job.status != 0 for job in mutants) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
