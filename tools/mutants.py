"""Apply known-bad mutations and check that the unit tests kill each.

Each mutation names its target by symbol: a file and a function, class or module-level name
in it (`path::Class.method`), plus a code fragment that must occur exactly once inside that
symbol's source. It replaces the fragment there, runs its killing tests (pytest node ids),
and restores the file, checking the restore by hash. A target that no longer matches (the
file, the symbol or the fragment moved, or the fragment is there twice) fails the tool,
naming the mutant: no mutant is ever skipped. Moving a function to another file needs only
the path changed; `--check` lists every target that does not match, at once, without running
any test. A mutant is killed when its tests fail (pytest's exit status 1); any other status
(a test that is not there, an error before the tests ran) fails the tool. Exit status 1 if a
mutant survives or a target does not match.

Mutations run one per CPU at a time, each in a private copy of the source tree (the working
tree is never edited): sys.path and PYTHONPATH put the copy's hpc_libs and lab ahead of the
venv's editable installs, and the tests find the charms next to themselves.

Each pytest run is a fresh process forked from this one after it imported pytest, its plugins
and the heavy third-party libraries (ops, Scenario, pydantic, hypothesis...): a run starts in
a fraction of a second instead of seconds, and still imports every module of the project (the
charms, hpc_libs, the lab, the tests) anew from its copy of the tree, mutated or not; the tool
refuses to fork if one is already imported. The baseline (every mutation's tests, unmutated)
runs the same way, split over the CPUs.

Run: `just mutants` (or `uv run python tools/mutants.py [name ...]`);
`uv run python tools/mutants.py --check` only matches the targets.
"""

import ast
import functools
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
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "__pycache__", ".*_cache", ".hypothesis", ".coverage", ".coverage.*"
)
"""Not copied for the mutants: also what the fuzz suite and coverage write while they run
(`just test` runs the mutants beside the fuzz suite)."""


TESTS_FAILED = 1
"""pytest's exit status when tests ran and some failed: the only one that kills a mutant."""


@dataclass(frozen=True)
class Mutation:
    """Replace `original` by `mutant` inside `target`; the `tests` must then fail.

    `target` is `path::symbol` for a Python file: the symbol is a function, class or
    module-level assignment, dotted for what is defined inside one (`Class.method`,
    `function.inner`), and `original` must occur exactly once in its source (anywhere else in
    the file it may occur any number of times). A program or data file (shell, YAML) is a
    symbol of its own: `target` is its path, and `original` must occur in it exactly once.
    `tests` are the killing tests' pytest node ids (or paths), separated by spaces.
    """

    name: str
    target: str
    original: str
    mutant: str
    tests: str

    @property
    def path(self) -> str:
        """The file the target is in, relative to the repository."""
        return self.target.split("::", maxsplit=1)[0]

    @property
    def symbol(self) -> str | None:
        """The target's symbol (None: the whole file)."""
        _, _, symbol = self.target.partition("::")
        return symbol or None


MUTATIONS = [
    Mutation(
        "vm-agent-reads-on-after-stop",
        "lab/src/slurm_lab/vmagent.py::Agent.serve",
        "        while not self.stopped.is_set():",
        "        while True:",
        "lab/tests/test_vm_units.py::test_a_missing_program_is_exit_127",
    ),
    Mutation(
        "upgrade-timeout-raised-too-late",
        "charms/slurmctld/src/major_upgrade.py::waits_for",
        '        return "the leader must raise SlurmctldTimeout for the upgrade first"',
        "        return None",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_slurmctld_timeout_is_raised_before_the_primary_stops_and_restored_after",
    ),
    Mutation(
        "upgrade-timeout-never-restored",
        "charms/slurmctld/src/charm.py::SlurmctldCharm.reconcile",
        "            plan.target, facts.dbds, versions, config.slurmctld_timeout\n        )\n",
        "            plan.target, facts.dbds, versions, config.slurmctld_timeout\n"
        "        ) or facts.memory.upgrade_slurmctld_timeout\n",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_slurmctld_timeout_is_raised_before_the_primary_stops_and_restored_after",
    ),
    Mutation(
        "leader-standing-by-never-reloads",
        "charms/slurmctld/src/applied.py::AppliedConfig.apply",
        "            if standby:\n                self._refresh_standby(conf, plugins)\n",
        "            if standby:\n                pass\n",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_leader_standing_by_restarts_what_its_reconfigure_does_not_reach",
    ),
    Mutation(
        "fence-follows-raised-timeout",
        "charms/slurmctld/src/placement.py::NetworkState.prepare",
        "        grace = fence.grace_seconds(facts.config.slurmctld_timeout)\n",
        "        grace = fence.grace_seconds(facts.running_timeout)\n",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_raised_upgrade_timeout_leaves_the_fence_on_the_configured_one",
    ),
    Mutation(
        "backup-never-reloads",
        "charms/slurmctld/src/applied.py::AppliedConfig.follow",
        "        elif config != self._stored.config or plugins != self._stored.plugins:\n"
        "            self._stored.config = UNCONFIRMED\n"
        "            self._refresh_standby(on_disk, plugins)\n",
        "",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_standby_restarts_for_a_change_and_says_the_timeout_it_runs_with",
    ),
    Mutation(
        "redaction-of-one-token",
        "charms/slurmctld/src/actions.py::redact",
        '            shown.append(f"{secret}={REDACTED}{ending}")',
        '            shown.append(re.sub(rf"{secret}=\\S+", f"{secret}={REDACTED}", line))',
        "tests/unit/slurmctld/test_actions_show_config.py::test_no_key_and_no_password_appears",
    ),
    Mutation(
        "slurmdbd-conf-served",
        "charms/slurmctld/src/actions.py::SERVED_FILES",
        '    "acct-gather-conf": "acct_gather.conf",\n}',
        '    "acct-gather-conf": "acct_gather.conf",\n    "slurmdbd-conf": "slurmdbd.conf",\n}',
        "tests/unit/slurmctld/test_actions_show_config.py::test_slurmdbd_conf_is_never_served",
    ),
    Mutation(
        "slurm-never-judges-slurm-conf",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py::SlurmctldManager.__init__",
        '            slurm_check="slurm.conf",\n',
        "",
        "tests/unit/slurmctld/test_overrides_charm.py::test_a_file_slurm_refuses_is_not_written_and_blocks_quoting_slurm_until_fixed",
    ),
    Mutation(
        "token-rule-for-keys-without-a-rule",
        "libs/hpc_libs/src/hpc_libs/slurm/grammar.py::admitted",
        "    return spelling(model, key) in _RULES[model]\n",
        "    return True\n",
        "tests/unit/slurmctld/test_overrides.py::test_keys_without_a_rule_are_not_admitted",
    ),
    Mutation(
        "key-briefly-0644",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::write_atomic",
        "            os.fchmod(f.fileno(), mode)\n            f.write(data)\n",
        "            os.fchmod(f.fileno(), 0o644)\n            f.write(data)\n"
        "            os.fchmod(f.fileno(), mode)\n",
        "tests/unit/hpc_libs/test_guards.py::test_a_key_is_never_readable_by_others_while_its_bytes_are_written",
    ),
    Mutation(
        "port-refusal-removed",
        "charms/slurmd/src/config.py::NODE_PARAMETERS",
        '"is refused: a dynamic node cannot take it through --conf", "Port", "State", "Reason"',
        '"is refused: a dynamic node cannot take it through --conf", "State", "Reason"',
        "tests/unit/slurmd/test_slurmd_guards.py::test_node_config_refuses_port",
    ),
    Mutation(
        "scontrol-without-timeout",
        "libs/hpc_libs/src/hpc_libs/slurm/scontrol.py::Scontrol._run",
        'return host.run(["scontrol", *args], timeout=self.timeout).stdout',
        'return host.run(["scontrol", *args]).stdout',
        "tests/unit/hpc_libs/test_scontrol.py::test_update_node_passes_reason_as_one_argument",
    ),
    Mutation(
        "peer-host-unchecked",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py::ControllerHost",
        "class ControllerHost(HostEntry):",
        "class ControllerHost(DatabagModel):\n    hostname: str | None = None\n"
        "    address: str | None = None\n",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_second_unit_without_network_state_is_blocked_and_serves_nothing",
    ),
    Mutation(
        "bad-peer-not-blocked",
        "charms/slurmctld/src/placement.py::Placement.problems",
        "        for problem in self.peer.host_problems():",
        "        for problem in []:",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_peer_with_invalid_host_data_blocks_naming_it_and_is_never_rendered",
    ),
    Mutation(
        "own-bad-hostname-configures",
        "charms/slurmctld/src/facts.py::own_host",
        "        return None, f\"this unit's",
        "        return ControllerHost.model_construct(hostname=hostname, address=address),"
        " f\"this unit's",
        "tests/unit/slurmctld/test_ha_charm.py::test_a_unit_whose_hostname_slurm_cannot_use_is_blocked_not_active",
    ),
    Mutation(
        "ipv6-scope-any-text",
        "libs/hpc_libs/src/hpc_libs/slurm/grammar.py::_ip",
        "    if scope is not None and (not _SCOPE_ID_RE.fullmatch(scope) or scope in "
        '(".", "..")):',
        "    if False:",
        "tests/unit/hpc_libs/test_grammar.py::test_an_ipv6_scope_id_must_be_an_interface_name",
    ),
    Mutation(
        "old-revision-kept",
        "charms/slurmctld/src/actions.py::remove_unused_revision",
        "        event.remove_revision()",
        "        pass",
        "tests/unit/slurmctld/test_actions_keys.py::test_the_leader_removes_a_revision_no_unit_tracks_any_more",
    ),
    Mutation(
        "lab-no-secret-remove",
        "lab/src/slurm_lab/juju/commit.py::obsolete_revisions",
        '        events.append(hooks.event(owner, "secret_remove", secret_id=secret.id, '
        "revision=number))",
        "        pass",
        "lab/tests/test_backend_units.py::test_secret_remove_goes_to_the_owners_leader_once_no_consumer_tracks_a_revision",
    ),
    Mutation(
        "lab-enters-scope-despite-a-failed-relation-created",
        "lab/src/slurm_lab/juju/engine.py::Controller._blocked",
        "        if entering is not None and entering.in_error:",
        "        if entering is not None and not entering:",
        "lab/tests/test_backend_units.py::test_a_unit_whose_relation_created_failed_stays_out_of_scope_until_it_succeeds",
    ),
    Mutation(
        "lab-takes-a-reused-pid-for-the-hooks-runner",
        "lab/src/slurm_lab/juju/engine.py::Controller._recover_lost_hooks",
        "            if start_time(unit.runner_pid) == unit.runner_start:",
        "            if start_time(unit.runner_pid):",
        "lab/tests/test_backend_units.py::test_a_hook_whose_runner_died_is_retried_even_once_its_pid_names_another_process",
    ),
    Mutation(
        "lab-scope-not-recorded",
        "lab/src/slurm_lab/juju/lifecycle.py::enter_scope",
        "    rel.in_scope.append(unit_name)\n",
        "",
        "lab/tests/test_backend_units.py::test_units_in_scope_see_a_new_unit_join_only_after_its_relation_created",
    ),
    Mutation(
        "lab-removed-revision-stays",
        "lab/src/slurm_lab/juju/commit.py::_remove_revision",
        "        secret.revisions = [r for r in secret.revisions if r.revision != revision]",
        "        return",
        "lab/tests/test_backend_units.py::test_secret_remove_goes_to_the_owners_leader_once_no_consumer_tracks_a_revision",
    ),
    Mutation(
        "fenced-controller-started",
        "charms/slurmctld/src/placement.py::NetworkState.prepare",
        "        return self.fence.reason() is None  # Fenced",
        "        return True  # Fenced",
        "tests/unit/slurmctld/test_ha_fence.py::test_a_fenced_backup_says_why_and_starts_no_slurmctld",
    ),
    Mutation(
        "fence-never-kills",
        "charms/slurmctld/src/programs/fence.sh",
        '            kill -KILL "$pid"',
        '            : "$pid"',
        "tests/unit/slurmctld/test_ha_fence.py::test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "new-idle-node-never-updated",
        "charms/slurmd/src/charm.py::SlurmdCharm._apply_initial_state",
        "            self.scontrol.update_node(self.node_name, comment=self.unit.name)\n",
        "            pass\n",
        "tests/unit/slurmd/test_charm_slurmd.py::"
        "test_a_new_idle_node_is_updated_once_registered_so_slurm_schedules_at_once",
    ),
    Mutation(
        "standby-plugins-only-reloaded",
        "charms/slurmctld/src/applied.py::AppliedConfig._refresh_standby",
        "        if in_control is False:\n            self.manager.service.restart()\n",
        "        if in_control is False:\n            self.manager.service.reload()\n",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_restarts_to_load_a_plugin_slurm_conf_now_names",
    ),
    Mutation(
        "journal-reason-of-any-run",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::journal_reason",
        '    selector = [f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else '
        '["-u", unit]\n',
        '    selector = ["-u", unit]\n',
        "tests/unit/hpc_libs/test_machine.py::test_only_the_last_run_of_a_unit_gives_its_reason",
    ),
    Mutation(
        "standby-reloaded-for-a-change-of-no-plugin",
        "charms/slurmctld/src/applied.py::AppliedConfig._refresh_standby",
        "        in_control = self._in_control(conf)\n",
        "        if plugins == self._stored.plugins:\n"
        "            self.manager.service.reload()\n"
        "            return\n"
        "        in_control = self._in_control(conf)\n",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_restarts_for_a_change_and_says_the_timeout_it_runs_with",
    ),
    Mutation(
        "undecided-refresh-never-retried",
        "charms/slurmctld/src/applied.py::AppliedConfig._refresh_standby",
        "        self._stored.plugins = UNCONFIRMED if in_control is None else plugins\n",
        "        self._stored.plugins = plugins\n",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_that_cannot_tell_its_role_reloads_and_restarts_once_it_can",
    ),
    Mutation(
        "undecided-leader-standby-never-retried",
        "charms/slurmctld/src/applied.py::AppliedConfig.apply",
        "        elif standby and plugins != self._stored.plugins:\n"
        "            self._refresh_standby(conf, plugins)  # A refresh that could not tell "
        "its role.\n",
        "",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_leader_standing_by_that_could_not_tell_restarts_later_without_a_reconfigure",
    ),
    Mutation(
        "heartbeat-ignored-for-in-control",
        "charms/slurmctld/src/applied.py::AppliedConfig._in_control",
        "        beat = fresh_heartbeat(self.manager.network_state_save_location, timeout, "
        "time.time())\n",
        "        beat = None\n",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_whose_ping_times_out_is_told_by_the_heartbeat",
    ),
    Mutation(
        "stale-heartbeat-trusted",
        "charms/slurmctld/src/takeover.py::fresh_heartbeat",
        "now - beat.time <= slurmctld_timeout / 2 else None",
        "now - beat.time <= slurmctld_timeout * 100 else None",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_answering_alone_without_a_fresh_heartbeat_waits_to_tell",
    ),
    Mutation(
        "takeover-under-way-taken-for-standby",
        "charms/slurmctld/src/applied.py::AppliedConfig._in_control",
        "        if first_up is None or first_up == hostname:\n",
        "        if first_up is None:\n",
        "tests/unit/slurmctld/test_ha_charm.py::"
        "test_a_standby_answering_alone_without_a_fresh_heartbeat_waits_to_tell",
    ),
    Mutation(
        "invented-id-forgotten-after-the-shared-conf",
        "charms/slurmctld/src/applied.py::AppliedConfig.apply",
        "        # the file, and must not read the id slurmctld invented (module doc).\n"
        "        self._forget_invented_cluster_id(conf)\n",
        "        # the file, and must not read the id slurmctld invented (module doc).\n",
        "tests/unit/slurmctld/test_slurmctld_cluster_id_and_digest.py::"
        "test_the_id_is_gone_before_the_shared_slurm_conf_names_accounting",
    ),
    Mutation(
        "other-controllers-never-told-of-the-applied-config",
        "charms/slurmctld/src/charm.py::SlurmctldCharm.reconcile",
        '            "config_digest": config_digest,\n',
        "",
        "tests/unit/slurmctld/test_slurmctld_cluster_id_and_digest.py::"
        "test_the_other_controllers_hear_of_the_applied_config_through_the_peer_memory",
    ),
    Mutation(
        "failed-reconfigure-leaves-the-old-record",
        "charms/slurmctld/src/applied.py::AppliedConfig.apply",
        "            self._stored.config = UNCONFIRMED\n",
        "",
        "tests/unit/slurmctld/test_slurmctld_waits_and_failures.py::"
        "test_a_change_undone_after_a_failed_reconfigure_is_reconfigured_again",
    ),
    Mutation(
        "unregistered-node-counted-old",
        "charms/slurmctld/src/native_metrics.py::cluster_daemons",
        "release, node=True)",
        "release)",
        "tests/unit/slurmctld/test_native_metrics.py::"
        "test_a_node_not_registered_again_since_a_failover_keeps_the_last_decision",
    ),
    Mutation(
        "new-node-registration-left-to-a-later-hook",
        "charms/slurmd/src/charm.py::SlurmdCharm._apply_initial_state",
        "        looks = round(node.REGISTRATION_ATTEMPTS / node.REGISTRATION_LOOK_S)\n",
        "        looks = 1\n",
        "tests/unit/slurmd/test_charm_slurmd.py::"
        "test_a_new_idle_node_is_updated_once_registered_so_slurm_schedules_at_once",
    ),
    Mutation(
        "lib-dir-left-to-dpkg",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py::SlurmctldManager._own_lib_dir",
        '        self.keep_root_after_dpkg(f"/{LIB_DIR}")\n',
        "",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_dpkg_gives_the_directories_the_charm_keeps_root_s_back_after_each_run",
    ),
    Mutation(
        "fence-counts-whole-seconds",
        "charms/slurmctld/src/programs/fence.sh",
        '    age_ms=$(( $(date +%s%3N) - $(stat -c %.3Y "$ok" | tr -d .) ))',
        '    age_ms=$(( ($(date +%s) - $(stat -c %Y "$ok")) * 1000 ))',
        "tests/unit/slurmctld/test_ha_fence.py::"
        "test_probes_that_are_slow_but_succeed_fence_nothing_at_the_shortest_grace",
    ),
    Mutation(
        "port-failure-aborts-reconcile",
        "libs/hpc_libs/src/hpc_libs/charm/base.py::SlurmCharm",
        "            self.failure = self.failure or e\n\n    def converge",
        "            raise\n\n    def converge",
        "tests/unit/sackd/test_sackd_ports.py::test_a_port_juju_refuses_is_a_status_and_sackd_runs_anyway",
    ),
    Mutation(
        "srun-range-overlap-accepted",
        "libs/hpc_libs/src/hpc_libs/charm/ports.py::set_opened_ports",
        "        if clash := next((kept for kept in target if kept.overlaps(ports)), None):",
        "        if clash := None:",
        "tests/unit/sackd/test_sackd_ports.py::test_a_range_holding_sackds_own_port_is_left_out",
    ),
    # ClusterMember (issue 24): restart on what was applied, one ladder for the four members.
    Mutation(
        "member-restart-ignores-fingerprint",
        "libs/hpc_libs/src/hpc_libs/charm/member.py::ClusterMember.run",
        "        changed = not active or fingerprint != self._stored.applied",
        "        changed = not active",
        "tests/unit/hpc_libs/test_charm_member.py::test_a_new_key_or_controller_list_restarts_a_running_daemon",
    ),
    Mutation(
        "member-records-fingerprint-before-restart",
        "libs/hpc_libs/src/hpc_libs/charm/member.py::ClusterMember.run",
        '            self._stored.applied = ""\n            if not active and start_when',
        "            self._stored.applied = fingerprint\n            if not active and start_when",
        "tests/unit/hpc_libs/test_charm_member.py::test_a_failed_restart_records_nothing_confirms_nothing_and_is_retried",
    ),
    Mutation(
        "member-ladder-ignores-departure",
        "libs/hpc_libs/src/hpc_libs/charm/member.py::ClusterMember.integration_status",
        "NEEDS_SLURMCTLD) if self.relation is None else None",
        "NEEDS_SLURMCTLD) if self.slurmctld.relation is None else None",
        "tests/unit/hpc_libs/test_charm_member.py::test_its_own_departure_leaves_and_needs_the_integration_again",
    ),
    Mutation(
        "member-ladder-skips-not-ready",
        "libs/hpc_libs/src/hpc_libs/charm/member.py::ClusterMember.waiting_status",
        "        if not self.slurmctld.is_ready():\n            return ops.WaitingStatus(WAITING",
        "        if False:\n            return ops.WaitingStatus(WAITING",
        "tests/unit/hpc_libs/test_charm_member.py::test_an_empty_databag_waits_for_slurmctld",
    ),
    # Root never follows a link a less trusted user can plant (issue 20, High 1, Medium 8).
    Mutation(
        "no-follow-dropped",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::_DIR_FLAGS",
        "_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC",
        "_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_make_dir_refuses_a_link_at_the_directory_and_touches_nothing_outside",
    ),
    Mutation(
        "set-owner-follows-link",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::set_owner",
        "os.chown(path, user.pw_uid, gid, follow_symlinks=False)",
        "os.chown(path, user.pw_uid, gid, follow_symlinks=True)",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_set_owner_of_a_link_changes_the_link_not_its_target",
    ),
    Mutation(
        "copy-follows-link",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::_copy_entries",
        "info = os.stat(name, dir_fd=source_fd, follow_symlinks=False)",
        "info = os.stat(name, dir_fd=source_fd, follow_symlinks=True)",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_copy_tree_copies_links_as_links_and_skips_what_is_not_a_file",
    ),
    Mutation(
        "state-dir-made-by-path",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py::SlurmctldManager.create_state_save_location",
        "        files.make_dir(\n            target, mode=0o750,",
        "        target.mkdir(parents=True, exist_ok=True)\n        target.chmod(0o750)\n"
        "        files.make_dir(\n            target, mode=0o750,",
        "tests/unit/slurmctld/test_slurmctld_waits_and_failures.py::test_a_state_directory_planted_as_a_link_blocks_and_touches_nothing",
    ),
    Mutation(
        "lib-dir-left-to-slurm",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py::SlurmctldManager.create_state_save_location",
        "        target = path or self.state_save_location\n        self._own_lib_dir()\n",
        "        target = path or self.state_save_location\n",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_a_planted_state_directory_link_is_refused_and_lib_becomes_roots",
    ),
    Mutation(
        "cluster-id-deleted-through-link",
        "charms/slurmctld/src/applied.py::AppliedConfig._forget_invented_cluster_id",
        "            with files.open_dir(state_dir, under=root) as state_fd:\n"
        "                os.unlink(CLUSTER_ID_FILE, dir_fd=state_fd)",
        "            path.unlink()",
        "tests/unit/slurmctld/test_slurmctld_cluster_id_and_digest.py::test_the_id_is_never_deleted_through_a_link_planted_as_the_state_directory",
    ),
    Mutation(
        "key-copy-briefly-0644",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::_copy_file",
        "writer = os.open(name, _CREATE_FLAGS, 0o600, dir_fd=target_fd)",
        "writer = os.open(name, _CREATE_FLAGS, 0o644, dir_fd=target_fd)",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_copy_tree_writes_every_file_0600_into_a_0700_staging_dir",
    ),
    Mutation(
        "staging-dir-open",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::copy_tree",
        "os.mkdir(target.name, 0o700, dir_fd=parent_fd)",
        "os.mkdir(target.name, 0o755, dir_fd=parent_fd)",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_copy_tree_writes_every_file_0600_into_a_0700_staging_dir",
    ),
    Mutation(
        "backup-keeps-keys",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmctld.py::SlurmctldManager.share_etc",
        "                self._drop_keys(backup)\n",
        "                pass\n",
        "tests/unit/slurmctld/test_ha_network_state.py::test_a_running_controller_is_stopped_before_its_state_is_copied",
    ),
    # The fence watchdog (root) wakes the charm without writing where slurm can (High 2).
    Mutation(
        "watchdog-writes-slurms-dir",
        "charms/slurmctld/src/programs/fence.sh",
        "wake_charm() { systemctl start --no-block slurmctld-charm-primary.service || true; }",
        "wake_charm() { date -u +%s > /run/slurmctld-charm/primary-changed 2>/dev/null || true; }",
        "tests/unit/slurmctld/test_ha_fence.py::test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "watchdog-wakes-nobody",
        "charms/slurmctld/src/programs/fence.sh",
        "wake_charm() { systemctl start --no-block slurmctld-charm-primary.service || true; }",
        "wake_charm() { :; }",
        "tests/unit/slurmctld/test_ha_fence.py::test_the_watchdog_kills_slurmctld_without_the_state_and_starts_it_once_back",
    ),
    Mutation(
        "takeover-repairs-an-operators-drain",
        "charms/slurmctld/src/takeover.py::drained_by_launch",
        "        and node.reason_set_by_user == slurm_user\n",
        "",
        "tests/unit/slurmctld/test_takeover.py::test_slurms_words_typed_by_an_operator_stay",
    ),
    Mutation(
        "takeover-repairs-without-seeing-a-takeover",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "saw_another = stored.in_charge not in (-1, my_index)",
        "saw_another = stored.in_charge != my_index",
        "tests/unit/slurmctld/test_takeover.py::test_without_a_takeover_this_unit_saw_nothing_is_repaired",
    ),
    Mutation(
        "takeover-repairs-without-slurmctlds-signal",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "unseen = stored.in_charge == -1 and my_index > 0 and took_control > 0",
        "unseen = stored.in_charge == -1 and my_index > 0",
        "tests/unit/slurmctld/test_takeover.py::test_without_a_takeover_this_unit_saw_nothing_is_repaired",
    ),
    # Issue 25: the wake-up after a takeover is level-triggered and the window stays awake.
    Mutation(
        "primary-wake-is-an-edge",
        "libs/hpc_libs/src/hpc_libs/charm/wake.py::PathWake.path_unit_text",
        """f"{'PathExists' if self.flag else 'PathChanged'}={self.watched}",""",
        """f"PathChanged={self.watched}",""",
        "tests/unit/slurmctld/test_ha_primary_watch.py::test_the_path_unit_starts_the_dispatch_service_while_the_flag_is_raised",
    ),
    Mutation(
        "takeover-one-look-per-watcher",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "        self._keep_looking(int(stored.window_until))\n",
        "        self._keep_looking(int(now) + RECHECK)\n",
        "tests/unit/slurmctld/test_takeover.py::test_the_window_keeps_the_charm_awake",
    ),
    Mutation(
        "takeover-no-look-before-the-first-beat",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "            if now - took_control < WINDOW:",
        "            if now - took_control < 0:",
        "tests/unit/slurmctld/test_takeover.py::test_a_wake_before_the_new_primarys_first_beat_keeps_looking",
    ),
    Mutation(
        "repeating-watcher-dispatches-once",
        "libs/hpc_libs/src/hpc_libs/charm/programs/wake-repeat.sh",
        'while [ "$(date +%s)" -lt "$until" ]; do',
        "for _ in 1; do",
        "tests/unit/hpc_libs/test_charm_wake.py::test_the_repeating_watcher_dispatches_on_its_timer_until_its_deadline",
    ),
    # Issue 24: the shell programs are files; their values arrive as arguments.
    Mutation(
        "wake-watch-dispatches-the-check-words-too",
        "libs/hpc_libs/src/hpc_libs/charm/programs/wake-watch.sh",
        '            [ "$i" -lt "$dispatch_words" ] && set -- "$@" "$word"\n',
        '            set -- "$@" "$word"\n',
        "tests/unit/hpc_libs/test_charm_wake.py::test_the_watcher_dispatches_once_the_check_prints_nothing",
    ),
    Mutation(
        "reregister-restarts-after-a-failed-delete",
        "charms/slurmd/src/programs/reregister.sh",
        'scontrol delete nodename="$node" || exit 1\n',
        'scontrol delete nodename="$node"\n',
        "tests/unit/slurmd/test_charm_slurmd_transient.py::test_reregister_leaves_the_node_drained_when_the_delete_fails",
    ),
    Mutation(
        "native-metrics-under-privatedata-without-the-token-check",
        "charms/slurmctld/src/native_metrics.py::private",
        '    return bool(config.slurm_conf_parameters.get("privatedata"))',
        "    return False",
        "tests/unit/slurmctld/test_native_metrics.py::test_privatedata_turns_it_on_with_a_token_check_of_its_own",
    ),
    Mutation(
        "native-metrics-despite-off",
        "charms/slurmctld/src/native_metrics.py::asked",
        '    return config.native_metrics != "off"',
        "    return True",
        "tests/unit/slurmctld/test_native_metrics.py::test_no_endpoint_only_the_exporter_and_no_word_about_it",
    ),
    Mutation(
        "native-metrics-on-older-slurm",
        "charms/slurmctld/src/native_metrics.py::knows_metrics",
        "    return (parsed.major, parsed.minor) >= first",
        "    return True",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    # Issue 22: auto turns it on only once every reader of slurm.conf runs 25.11 or newer.
    Mutation(
        "native-metrics-ignores-node-versions",
        "charms/slurmctld/src/native_metrics.py::cluster_daemons",
        '        yield Daemon(f"slurmd node {name}", release, node=True)\n',
        "        pass\n",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    Mutation(
        "native-metrics-counts-placeholder-nodes",
        "charms/slurmctld/src/native_metrics.py::node_releases",
        '        if "future" not in state.lower().split("+"):',
        "        if True:",
        "tests/unit/slurmctld/test_native_metrics.py::test_a_future_placeholder_sinfo_lists_after_all_holds_nothing",
    ),
    Mutation(
        "native-metrics-ignores-login-and-rest-units",
        "charms/slurmctld/src/native_metrics.py::cluster_daemons",
        "            for unit, release in publisher.unit_versions(relation).items():",
        "            for unit, release in {}.items():",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    Mutation(
        "native-metrics-ignores-peer-controllers",
        "charms/slurmctld/src/native_metrics.py::cluster_daemons",
        "    for controller in peer.hosts().values():",
        "    for controller in []:",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    Mutation(
        "native-metrics-auto-takes-unknown-as-new",
        "charms/slurmctld/src/native_metrics.py::_first_older",
        "        if daemon.release is None and vouch_for_unknown:",
        "        if daemon.release is None:",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    Mutation(
        "native-metrics-on-takes-old-as-unknown",
        "charms/slurmctld/src/native_metrics.py::_first_older",
        "        if daemon.release is None and vouch_for_unknown:",
        "        if vouch_for_unknown:",
        "tests/unit/slurmctld/test_native_metrics.py::test_on_still_refuses_a_daemon_known_to_be_older",
    ),
    Mutation(
        "native-metrics-toggles-when-nodes-unreadable",
        "charms/slurmctld/src/native_metrics.py::decide",
        "        return Decision(previous)",
        "        return Decision(False)",
        "tests/unit/slurmctld/test_native_metrics.py::test_node_records_that_cannot_be_read_keep_the_last_decision",
    ),
    Mutation(
        "native-metrics-backup-decides-from-its-own-options",
        "charms/slurmctld/src/charm.py::SlurmctldCharm._scrape_jobs",
        "            jobs += native_metrics.scrape_jobs(leader_on, config)",
        "            jobs += native_metrics.scrape_jobs(True, config)",
        "tests/unit/slurmctld/test_native_metrics.py::test_one_older_or_unknown_daemon_keeps_it_off_and_the_status_names_it",
    ),
    Mutation(
        "sackd-publishes-no-release",
        "charms/sackd/src/charm.py::SackdCharm.reconcile",
        "            self.slurmctld.publish_version(self.running_slurm())  # sackd runs it now.\n",
        "            pass\n",
        "tests/unit/sackd/test_sackd_auth_key_confirmation.py::test_a_running_sackd_publishes_its_slurm_release_for_slurmctld",
    ),
    Mutation(
        "slurmd-publishes-no-release",
        "charms/slurmd/src/charm.py::SlurmdCharm._run_slurmd",
        "        self.slurmctld.publish_version(self.running_slurm())\n",
        "",
        "tests/unit/slurmd/test_charm_slurmd.py::test_a_running_slurmd_tells_slurmctld_its_release_after_a_new_one_starts",
    ),
    Mutation(
        "slurmrestd-publishes-no-release",
        "charms/slurmrestd/src/charm.py::SlurmrestdCharm.reconcile",
        "        self.slurmctld.publish_version(self.running_slurm())\n",
        "",
        "tests/unit/slurmrestd/test_slurmrestd_charm.py::test_a_running_unit_tells_slurmctld_its_slurm_release_beside_its_key",
    ),
    Mutation(
        "consumer-unit-data-overwritten-field-by-field",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py::ControllerConsumer._update_unit_data",
        "        current = self.load(ConsumerUnitData, relation, self.model.unit) "
        "or ConsumerUnitData()",
        "        current = ConsumerUnitData()",
        "tests/unit/hpc_libs/test_interfaces_versions.py::test_a_login_unit_publishes_its_release_beside_its_key_digest_and_keeps_both",
    ),
    Mutation(
        "native-metrics-backup-follows-the-redirect",
        "charms/slurmctld/src/native_metrics.py::scrape_jobs",
        "            follow_redirects=False,",
        "            follow_redirects=True,",
        "tests/unit/slurmctld/test_native_metrics.py::test_every_reader_of_slurm_conf_on_25_11_or_newer_turns_it_on_by_default",
    ),
    Mutation(
        "native-metrics-not-renamed",
        "charms/slurmctld/src/native_metrics.py::scrape_jobs",
        '            rename=("slurm_", NATIVE_PREFIX),',
        "            rename=None,",
        "tests/unit/slurmctld/test_native_metrics.py::test_every_reader_of_slurm_conf_on_25_11_or_newer_turns_it_on_by_default",
    ),
    Mutation(
        "exporter-drain-as-a-state",
        "exporter/src/slurm_exporter/metrics.py::node_families",
        "        nodes.add(line.partition, line.state)\n",
        "        nodes.add(line.partition, line.flags[0] if line.flags else line.state)\n",
        "tests/unit/exporter/test_exporter.py::test_nodes_count_base_states_and_drain_as_a_flag",
    ),
    Mutation(
        "exporter-every-controller-exports-the-cluster",
        "exporter/src/slurm_exporter/exporter.py::SlurmCollector.collect_once",
        "        cluster: list[Family] = []\n"
        "        if self._may_export_cluster(metrics.in_control(pings) == self.hostname):\n",
        "        cluster: list[Family] = []\n        if self._may_export_cluster(bool(pings)):\n",
        "tests/unit/exporter/test_exporter.py::test_the_controller_in_control_exports_the_cluster_and_a_backup_only_itself",
    ),
    Mutation(
        # The gate itself gone: a backup exports the cluster too (after the handover delay),
        # as exporters that run on both HA controllers do.
        "exporter-backup-exports-the-cluster",
        "exporter/src/slurm_exporter/exporter.py::SlurmCollector._may_export_cluster",
        "        if not in_control:\n"
        "            self._exports_from = None\n"
        "        elif self._exports_from is None:\n",
        "        if self._exports_from is None:\n",
        "tests/unit/exporter/test_exporter.py::test_the_controller_in_control_exports_the_cluster_and_a_backup_only_itself",
    ),
    Mutation(
        "exporter-new-primary-exports-at-once",
        "exporter/src/slurm_exporter/exporter.py::SlurmCollector._may_export_cluster",
        "self._exports_from = now if first_pass else now + self.handover",
        "self._exports_from = now",
        "tests/unit/exporter/test_exporter.py::test_a_new_primary_exports_the_cluster_only_after_the_old_one_dropped_it",
    ),
    Mutation(
        "exporter-no-second-ping",
        "exporter/src/slurm_exporter/exporter.py::SlurmCollector.collect_once",
        "pings = self._pings(durations, failed)  # Still in control after the commands?",
        "pass",
        "tests/unit/exporter/test_exporter.py::test_a_pass_that_outlived_its_controller_is_not_served_as_the_primarys",
    ),
    Mutation(
        "exporter-cluster-totals-per-partition-line",
        "exporter/src/slurm_exporter/metrics.py::node_families",
        "        if line.node not in seen:",
        "        if True:",
        "tests/unit/exporter/test_exporter.py::test_cluster_totals_count_a_node_in_two_partitions_once",
    ),
    Mutation(
        "autoscale-enlisting-not-capacity",
        "autoscaler/src/slurm_autoscale/decide.py::decide",
        "    short = needed - len(free) - len(enlisting)\n",
        "    short = needed - len(free)\n",
        "tests/unit/autoscaler/test_cli.py::test_one_pass_adds_the_units_pending_jobs_need",
    ),
    Mutation(
        "autoscale-never-fitting-jobs-counted",
        "autoscaler/src/slurm_autoscale/decide.py::decide",
        "        fits = job.node_count <= policy.max and shape.fits(job)\n",
        "        fits = job.node_count <= policy.max\n",
        "tests/unit/autoscaler/test_decide.py::test_a_job_needing_more_cpus_than_the_nodes_have_never_fits",
    ),
    Mutation(
        "autoscale-busy-node-removed",
        "autoscaler/src/slurm_autoscale/decide.py::_scale_in",
        "        if node is None or node.busy or not node.usable",
        "        if node is None or not node.usable",
        "tests/unit/autoscaler/test_cli.py::test_scale_in_removes_the_idle_unit",
    ),
    Mutation(
        "autoscale-drained-node-removed",
        "autoscaler/src/slurm_autoscale/slurm.py::Node.usable",
        "        return not self.drained and not self.state & unusable",
        "        return not self.state & unusable",
        "tests/unit/autoscaler/test_decide.py::test_reserved_and_operator_drained_nodes_are_never_removed",
    ),
    Mutation(
        "autoscale-idle-timeout-ignored",
        "autoscaler/src/slurm_autoscale/decide.py::_scale_in",
        "        if slurm.now - node.last_busy >= policy.idle_timeout:\n",
        "        if True:\n",
        "tests/unit/autoscaler/test_decide.py::test_held_and_later_jobs_add_nothing",
    ),
    Mutation(
        "autoscale-cooldown-ignored-for-scale-in",
        "autoscaler/src/slurm_autoscale/decide.py::decide",
        "    if last_action is not None and slurm.now - last_action < policy.cooldown:\n",
        "    if False:\n",
        "tests/unit/autoscaler/test_cli.py::test_the_cooldown_in_the_state_file_holds_scale_in",
    ),
    Mutation(
        "autoscale-past-max",
        "autoscaler/src/slurm_autoscale/decide.py::decide",
        "    add = min(add, policy.max - len(staying), policy.step)\n",
        "    add = min(add, policy.step)\n",
        "tests/unit/autoscaler/test_decide.py::test_scale_up_stops_at_max",
    ),
    Mutation(
        "future-nodes-not-rendered",
        "charms/slurmctld/src/render.py::render_slurm_conf",
        "        conf.nodes[node_name] = node\n",
        "        del node_name, node\n",
        "tests/unit/slurmctld/test_future_nodes.py::test_placeholders_are_rendered_for_an_application_with_no_unit",
    ),
    Mutation(
        "no-partition-before-the-first-unit",
        "charms/slurmctld/src/partitions.py::Partitions.awaited",
        "            if app in relations and app not in known\n",
        "            if False\n",
        "tests/unit/slurmctld/test_future_nodes.py::test_an_application_that_never_had_a_unit_gets_its_partition",
    ),
    Mutation(
        "rebuild-partition-shown-to-users",
        "charms/slurmctld/src/rebuild.py::hidden_partition",
        '        "hidden": True,\n',
        '        "hidden": False,\n',
        "tests/unit/slurmctld/test_rebuild.py::test_the_rebuild_partition_covers_every_node_set_hidden_root_only_and_never_default",
    ),
    Mutation(
        "rebuild-partition-open-to-users",
        "charms/slurmctld/src/rebuild.py::hidden_partition",
        '        "rootonly": True,\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py::test_the_rebuild_partition_covers_every_node_set_hidden_root_only_and_never_default",
    ),
    Mutation(
        "rebuild-jobs-all-one-name",
        "charms/slurmctld/src/rebuild.py::submissions",
        '            f"--job-name={job_name(partition, index % groups)}",',
        '            f"--job-name={job_name(partition, 0)}",',
        "tests/unit/slurmctld/test_rebuild.py::test_max_unavailable_spreads_the_nodes_over_that_many_singleton_names",
    ),
    Mutation(
        "rebuild-jobs-without-singleton",
        "charms/slurmctld/src/rebuild.py::submissions",
        '            "--dependency=singleton",\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py::test_max_unavailable_spreads_the_nodes_over_that_many_singleton_names",
    ),
    Mutation(
        "rebuild-failure-does-not-stop",
        "charms/slurmctld/src/rebuild.py::stop_failed",
        "        if rollout.failed and rollout.waiting_jobs:",
        "        if False:",
        "tests/unit/slurmctld/test_rebuild.py::test_a_failed_node_stops_the_rollout_and_is_named_with_slurms_reason",
    ),
    Mutation(
        "rebuild-node-down-before-counts-as-failure",
        "charms/slurmctld/src/rebuild.py::progress",
        "            if down and (node.reason_changed_at or since) >= since:",
        "            if down:",
        "tests/unit/slurmctld/test_rebuild.py::test_a_node_down_before_the_rollout_does_not_stop_it",
    ),
    Mutation(
        "rebuild-a-rebooting-node-counts-as-failed",
        "charms/slurmctld/src/rebuild.py::FAILED_STATES",
        'FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG")',
        'FAILED_STATES = ("DOWN", "FAIL", "FAILING", "INVALID_REG", "NOT_RESPONDING")',
        "tests/unit/slurmctld/test_rebuild.py::test_the_status_counts_done_and_rebooting_nodes",
    ),
    Mutation(
        "rebuild-cancel-reboots-already-issued",
        "charms/slurmctld/src/rebuild.py::cancel",
        '        n.name for n in nodes if n.name in targets and n.has_state("REBOOT_REQUESTED")',
        "        n.name for n in nodes if n.name in targets",
        "tests/unit/slurmctld/test_rebuild.py::test_cancel_cancels_pending_jobs_and_reboots_not_issued_yet",
    ),
    Mutation(
        "rebuild-any-partition-name-accepted",
        "charms/slurmctld/src/rebuild.py::Rebuild._partition_param",
        "        if value not in known:",
        "        if not value:",
        "tests/unit/slurmctld/test_rebuild.py::test_rebuild_nodes_refuses_a_partition_that_is_not_ours_and_runs_nothing",
    ),
    Mutation(
        "reboot-program-upgrades-for-another-node",
        "charms/slurmd/src/programs/reboot-program.sh",
        '    rebuild:*:*:upgrade:"$node")',
        "    rebuild:*:*:upgrade:*)",
        "tests/unit/slurmd/test_reboot_program.py::test_without_an_upgrade_request_for_this_node_it_only_reboots",
    ),
    Mutation(
        "reboot-program-fails-without-setting-the-node-down",
        "charms/slurmd/src/programs/reboot-program.sh",
        '    scontrol update nodename="$node" state=down reason="rebuild: $1" || true\n',
        "",
        "tests/unit/slurmd/test_reboot_program.py::test_an_upgrade_that_leaves_slurmd_behind_its_candidate_fails_before_the_reboot",
    ),
    Mutation(
        "rebuild-partition-in-a-users-partition-list",
        "charms/slurmctld/src/rebuild.py::conf_settings",
        '        "enforcepartlimits": ENFORCE_PART_LIMITS,\n',
        "",
        "tests/unit/slurmctld/test_rebuild.py::test_the_rebuild_partition_covers_every_node_set_hidden_root_only_and_never_default",
    ),
    Mutation(
        "rebuild-reads-users-jobs",
        "libs/hpc_libs/src/hpc_libs/slurm/queue.py::root_jobs_query",
        '        "--user=root",\n        "--states=all",',
        '        "--states=all",',
        "tests/unit/slurmctld/test_rebuild.py::test_rebuild_nodes_refuses_a_second_rollout_of_a_partition_in_progress",
    ),
    Mutation(
        "rebuild-holds-ids-it-did-not-submit",
        "charms/slurmctld/src/rebuild.py::progress",
        '                waiting_jobs=sorted(j for j, _ in jobs if states.get(j) == "PENDING"),',
        '                waiting_jobs=sorted(j for j, s in states.items() if s == "PENDING"),',
        "tests/unit/slurmctld/test_rebuild.py::test_a_forged_squeue_line_never_picks_a_job_to_hold",
    ),
    Mutation(
        "rebuild-cancels-ids-it-did-not-submit",
        "charms/slurmctld/src/rebuild.py::cancel",
        '    pending = sorted(job_id for job_id, _ in jobs if states.get(job_id) == "PENDING")',
        '    pending = sorted(job_id for job_id, state in states.items() if state == "PENDING")',
        "tests/unit/slurmctld/test_rebuild.py::test_cancel_never_cancels_an_id_it_did_not_submit",
    ),
    Mutation(
        "peer-memory-rebuilt-from-the-pass-alone",
        "charms/slurmctld/src/facts.py::Facts.remembered",
        "        return self.memory.model_copy(update=now)\n",
        "        return SlurmctldPeerData(**now)\n",
        "tests/unit/slurmctld/test_rebuild.py::test_the_status_counts_done_and_rebooting_nodes",
    ),
    Mutation(
        "rebuild-submitted-jobs-left-after-a-failed-submission",
        "charms/slurmctld/src/rebuild.py::submit",
        "                queue.scancel(job_ids, timeout=TIMEOUT)",
        "                pass",
        "tests/unit/slurmctld/test_rebuild.py::test_a_failed_submission_cancels_the_jobs_already_submitted",
    ),
    Mutation(
        "reboot-program-reads-users-comments",
        "charms/slurmd/src/programs/reboot-program.sh",
        '--nodelist="$node" --user=root \\',
        '--nodelist="$node" \\',
        "tests/unit/slurmd/test_reboot_program.py::test_an_upgrade_request_upgrades_then_reboots",
    ),
    Mutation(
        "reboot-program-holds-users-jobs",
        "charms/slurmd/src/programs/reboot-program.sh",
        "--partition=rebuild --user=root --states=PENDING",
        "--partition=rebuild --states=PENDING",
        "tests/unit/slurmd/test_reboot_program.py::test_it_reads_root_jobs_only_so_no_user_text_picks_a_job",
    ),
    Mutation(
        "resume-timeout-silently-replaced",
        "charms/slurmctld/src/overrides.py::SLURM_CONF_OWNED",
        '    "ResumeTimeout": "is the charm\'s: use the reboot-timeout option",\n',
        "",
        "tests/unit/slurmctld/test_overrides.py::test_keys_the_charm_owns_are_refused_by_name",
    ),
    Mutation(
        "upgrade-sackd-before-the-controllers",
        "charms/sackd/src/charm.py::SackdCharm.upgrade_waits_for",
        "        return controllers_wait_reason(target, self.slurmctld.controller_data)",
        "        return None",
        "tests/unit/sackd/test_sackd_major_upgrade.py::test_out_of_turn_the_login_node_waits_for_the_controllers_and_holds_slurm",
    ),
    Mutation(
        "upgrade-slurmd-in-the-charm",
        "charms/slurmd/src/charm.py::SlurmdCharm",
        "    upgrades_in_charm = False\n",
        "",
        "tests/unit/slurmd/test_slurmd_major_upgrade.py::test_in_turn_the_pin_moves_and_the_rollout_is_left_to_upgrade",
    ),
    Mutation(
        "upgrade-slurmdbd-backup-before-the-primary",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py::join_order_wait_reason",
        "    earlier = order[: order.index(unit)] if unit in order else order",
        "    earlier: Sequence[str] = []",
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py::test_the_backup_unit_waits_for_the_primary",
    ),
    Mutation(
        "upgrade-slurmctld-before-slurmdbd",
        "charms/slurmctld/src/major_upgrade.py::waits_for",
        '    versions = [(d.host or "slurmdbd", d.version) for d in dbds]',
        "    versions: list[tuple[str, str | None]] = []",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_out_of_turn_the_controller_waits_for_slurmdbd",
    ),
    Mutation(
        "upgrade-slurmctld-backup-before-the-primary",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py::join_order_wait_reason",
        "    earlier = order[: order.index(unit)] if unit in order else order",
        "    earlier: Sequence[str] = []",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_a_backup_controller_waits_for_the_primary",
    ),
    Mutation(
        "upgrade-wait-ignores-an-older-daemon",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py::wait_reason",
        "        elif is_newer(target, runs):",
        "        elif False:",
        "tests/unit/hpc_libs/test_slurm_upgrade.py::test_the_wait_names_each_daemon_behind_and_what_it_runs",
    ),
    Mutation(
        "upgrade-controllers-hide-their-version",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py::SlurmctldPeer.share_host",
        '                shared["version"] = host.version',
        "                pass",
        "tests/unit/hpc_libs/test_interfaces_versions.py::test_a_controller_shares_its_version_as_a_plain_string",
    ),
    Mutation(
        "upgrade-backup-dir-open-to-all",
        "libs/hpc_libs/src/hpc_libs/slurm/backup.py::backup_dir",
        '    files.make_dir(path, mode=0o700, owner="root", group="root", under=root)',
        '    files.make_dir(path, mode=0o755, owner="root", group="root", under=root)',
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py::test_the_primary_dumps_the_database_through_its_account_then_upgrades",
    ),
    Mutation(
        "upgrade-first-install-outside-the-gate",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py::MajorUpgrade.install_first",
        "        if _names_own_repository(config.slurm_package_source) and apt.missing(",
        "        if False and apt.missing(",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_a_controller_added_during_the_upgrade_installs_what_the_primary_allows",
    ),
    Mutation(
        "upgrade-first-install-takes-the-newest",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py::MajorUpgrade.install_major",
        "            if waits_for(candidate) is None:",
        "            if True:",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_a_controller_added_during_the_upgrade_installs_what_the_primary_allows",
    ),
    Mutation(
        "upgrade-failed-install-leaves-the-daemon-down",
        "libs/hpc_libs/src/hpc_libs/slurm/base.py::SlurmManager.upgrade_packages",
        "                self._start_after_failed_install()\n",
        "                pass\n",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::test_a_failed_install_after_the_backup_is_a_status_and_the_retry_completes",
    ),
    Mutation(
        "apt-update-passes-an-unreachable-source",
        "libs/hpc_libs/src/hpc_libs/machine/apt.py::update",
        '    _apt_get(["update", ERROR_ON_ANY, _LOCK_OPTION]',
        '    _apt_get(["update", _LOCK_OPTION]',
        "tests/unit/hpc_libs/test_machine.py::test_install_updates_then_installs_only_missing_packages",
    ),
    Mutation(
        "reboot-program-update-passes-an-unreachable-source",
        "charms/slurmd/src/programs/reboot-program.sh",
        "        apt-get update --error-on=any ||",
        "        apt-get update ||",
        "tests/unit/slurmd/test_reboot_program.py::test_an_upgrade_request_upgrades_then_reboots",
    ),
    Mutation(
        "reboot-program-reboots-with-slurmd-kept-back",
        "charms/slurmd/src/programs/reboot-program.sh",
        '            "$installed") ;;',
        "            *) ;;",
        "tests/unit/slurmd/test_reboot_program.py::test_an_upgrade_that_leaves_slurmd_behind_its_candidate_fails_before_the_reboot",
    ),
    Mutation(
        "stale-unit-not-reloaded",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::reload_for",
        '    if result.stdout.strip() != "no":\n        daemon_reload()',
        '    if result.stdout.strip() == "always":\n        daemon_reload()',
        "tests/unit/hpc_libs/test_machine.py::test_a_reload_only_for_a_unit_systemd_holds_stale",
    ),
    Mutation(
        "schema-checked-in-every-hook",
        "libs/hpc_libs/src/hpc_libs/slurm/schema_cache.py::validate",
        "        cls = validators.validator_for(schema)\n",
        "        cls = validators.validator_for(schema)\n        cls.check_schema(schema)\n",
        "tests/unit/hpc_libs/test_schema_cache.py::test_a_hook_never_checks_slurmutils_schemas",
    ),
    Mutation(
        "exit-collects-the-whole-heap",
        "libs/hpc_libs/src/hpc_libs/charm/base.py::main",
        "    ops.main(charm_class)\n    gc.freeze()\n",
        "    ops.main(charm_class)\n",
        "tests/unit/hpc_libs/test_charm_base.py::test_main_dispatches_then_freezes_the_heap_for_a_quick_exit",
    ),
    Mutation(
        "refused-start-not-tried-again",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::Service._run",
        '            _systemctl("reset-failed", self.name, timeout=QUICK_TIMEOUT)\n',
        "            raise\n",
        "tests/unit/hpc_libs/test_machine.py::test_a_start_refused_for_starting_too_often_is_tried_once_more_after_reset_failed",
    ),
    Mutation(
        "enable-syncs-sysv-links",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::Service.enable",
        '"--no-reload", self.name, timeout=QUICK_TIMEOUT, env=SKIP_SYSV)',
        '"--no-reload", self.name, timeout=QUICK_TIMEOUT)',
        "tests/unit/hpc_libs/test_machine.py::test_service_operations_run_systemctl_with_timeouts",
    ),
    Mutation(
        "lab-action-refuses-unknown-params-by-default",
        "lab/src/slurm_lab/juju/actionparams.py::validate",
        '"additionalProperties": declared.get("additionalProperties", True),',
        '"additionalProperties": declared.get("additionalProperties", False),',
        "lab/tests/test_actionparams_units.py::test_an_unknown_parameter_reaches_the_charm_unless_the_action_refuses_additional_ones",
    ),
    Mutation(
        "rotate-auth-key-takes-unknown-params",
        "charms/slurmctld/charmcraft.yaml",
        "      Afterwards a daemon with the old key is refused. Run it on the leader.\n"
        "    additionalProperties: false\n",
        "      Afterwards a daemon with the old key is refused. Run it on the leader.\n",
        "tests/unit/project/test_charmcraft_projects.py::test_every_action_refuses_a_parameter_it_does_not_declare",
    ),
    Mutation(
        "lab-exec-does-not-hold-its-unit",
        "lab/src/slurm_lab/juju/engine.py::Controller.start_exec",
        '        unit.running, unit.agent = event, "executing"\n'
        "        unit.runner_pid, unit.runner_start = os.getpid(), start_time(os.getpid())\n"
        "        return event, run",
        "        return event, run",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-lost-exec-is-a-failed-hook",
        "lab/src/slurm_lab/juju/engine.py::Controller._recover_lost_hooks",
        '            if event["kind"] == "custom" and not event.get("exec"):\n'
        "                continue",
        '            if event["kind"] == "custom" and not event.get("exec"):\n'
        "                pass",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "soak-any-controller-fault-loses-an-end",
        "tests/soak/history.py::ends_lost_by_the_controller",
        "if f.kind in HARD_KINDS and f.controller_in_charge]",
        "if f.kind in HARD_KINDS]",
        "tests/unit/soak/test_soak_units.py",
    ),
    Mutation(
        "takeover-keeps-a-failed-look-after-control-moved",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        '                stored.trouble = ""\n            stored.in_charge, stored.others_seen_at',
        "                pass\n            stored.in_charge, stored.others_seen_at",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-registers-flagged-nodes",
        "charms/slurmctld/src/takeover.py::busy_nodes",
        "if base in BUSY and HARMLESS_FLAGS.issuperset(flags) and fields[0] not in found:",
        "if base in BUSY and fields[0] not in found:",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-never-registers-the-busy-nodes",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._repair",
        "            self._register_busy_nodes()",
        "            pass",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "takeover-registers-before-slurm-would-purge",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._repair",
        " and time.time() >= opened + REGISTER_AFTER:",
        ":",
        "tests/unit/slurmctld/test_takeover.py",
    ),
    Mutation(
        "soak-any-fault-excuses-a-failed-hook",
        "tests/soak/history.py::hook_failure_cause",
        "if record.kind in FAULTS_THAT_FAIL_HOOKS and machine_of(record.target) == machine:",
        "if machine_of(record.target) == machine:",
        "tests/unit/soak/test_soak_units.py",
    ),
    Mutation(
        "lab-prelude-keeps-the-stamp-through-a-copy",
        "lab/src/slurm_lab/juju/runner.py::prelude",
        '  rm -f "$charm{REVISION_SUFFIX}"\n',
        "",
        "lab/tests/test_vm_units.py",
    ),
    Mutation(
        "lab-runs-hooks-on-a-machine-that-is-down",
        "lab/src/slurm_lab/juju/engine.py::Controller._start_runnable",
        "held = hook and (unit.in_error or down(unit.machine))",
        "held = hook and unit.in_error",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-retries-on-a-machine-that-is-down",
        "lab/src/slurm_lab/juju/engine.py::Controller._start_runnable",
        "                and not down(unit.machine)\n",
        "",
        "lab/tests/test_backend_units.py",
    ),
    Mutation(
        "lab-leaves-a-stopped-nsenter-stopped",
        "lab/src/slurm_lab/proc.py::run_resumed",
        "                    os.kill(proc.pid, signal.SIGCONT)",
        "                    pass",
        "lab/tests/test_machines_units.py::test_a_command_that_stops_is_resumed_as_nsenter_needs_when_a_machine_shuts_down",
    ),
    Mutation(
        "scaling-view-reads-text-output",
        "charms/slurmctld/src/scaling_view.py::_scontrol_json",
        '    argv = ["scontrol", "show", what, f"--json={version}"]',
        '    argv = ["scontrol", "show", what]',
        "tests/unit/slurmctld/test_actions_scaling_view.py::test_returns_the_partitions_nodes_pending_shapes_and_reserved_nodes",
    ),
    Mutation(
        "autoscale-view-read-loosely",
        "autoscaler/src/slurm_autoscale/slurm.py::Number",
        "Number = Annotated[int, Field(ge=0, le=MAX_NUMBER, strict=True)]\n",
        "Number = Annotated[int, Field(ge=0)]\n",
        "tests/unit/autoscaler/test_slurm.py::test_a_malformed_answer_is_slurm_unreadable",
    ),
    Mutation(
        "autoscale-array-throttle-ignored",
        "charms/slurmctld/src/scaling_view.py::array_copies",
        "    cap = int(limit) if percent else (throttle or 0)\n",
        "    cap = int(limit) if percent else 0\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py::test_array_tasks_are_counted_from_the_bounds",
    ),
    Mutation(
        "autoscale-policy-numbers-loose",
        "autoscaler/src/slurm_autoscale/policy.py::AppPolicy",
        "populate_by_name=True, strict=True)",
        "populate_by_name=True)",
        "tests/unit/autoscaler/test_policy.py::test_bad_policy_is_a_clear_error",
    ),
    Mutation(
        "autoscale-missing-juju-is-a-traceback",
        "autoscaler/src/slurm_autoscale/cli.py::_pass",
        "    except OSError as e:  # No juju program, or the state file cannot be written.\n"
        '        logger.error("%s", e)\n'
        "        return EXIT_FAILED\n",
        "",
        "tests/unit/autoscaler/test_cli.py::test_without_a_juju_program_a_pass_logs_why_and_exits_1",
    ),
    # Issue 33 (A3, A4): the takeover repair decides on Slurm's records, from narrow queries.
    Mutation(
        "takeover-requeues-any-failed-job",
        "charms/slurmctld/src/takeover.py::ended_for_revoked",
        "        and job.state_reason == REFUSED_REASON\n",
        "",
        "tests/unit/slurmctld/test_takeover.py::test_a_job_that_ended_otherwise_stays_ended",
    ),
    Mutation(
        "takeover-splits-records-on-any-line-break",
        "charms/slurmctld/src/takeover.py::lines",
        '    return [line for line in output.split("\\n") if line]',
        "    return [line for line in output.splitlines() if line]",
        "tests/unit/slurmctld/test_takeover.py::test_a_record_broken_by_another_line_break_names_no_candidate",
    ),
    Mutation(
        "takeover-huge-job-id-taken",
        "charms/slurmctld/src/takeover.py::parse_job_line",
        "        and int(job_id) <= _MAX_JOB_ID\n",
        "",
        "tests/unit/slurmctld/test_takeover.py::test_a_huge_number_or_an_impossible_time_makes_a_line_no_record",
    ),
    Mutation(
        "takeover-error-is-a-hook-error",
        "charms/slurmctld/src/takeover.py::TakeoverRepair.check",
        "        except Exception as e:\n",
        "        except SlurmOpsError as e:\n",
        "tests/unit/slurmctld/test_takeover.py::test_an_error_in_a_look_is_a_status_and_the_repairs_before_it_are_saved",
    ),
    Mutation(
        "takeover-rereads-rejected-candidates",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._pass",
        "        self._stored.passed = [*self._stored.passed, key]\n",
        "",
        "tests/unit/slurmctld/test_takeover.py::test_a_candidate_its_record_rejects_is_read_once_per_takeover",
    ),
    Mutation(
        "takeover-lists-every-job",
        "charms/slurmctld/src/takeover.py::JOBS_QUERY",
        '    "--states=PENDING,FAILED,COMPLETING",\n',
        '    "--states=all",\n',
        "tests/unit/slurmctld/test_takeover.py::test_each_look_lists_only_drained_nodes_and_pending_or_ended_jobs",
    ),
    Mutation(
        "takeover-looks-without-a-cap",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "        if now > stored.window_until or stored.looks >= MAX_LOOKS:\n",
        "        if now > stored.window_until:\n",
        "tests/unit/slurmctld/test_takeover.py::test_looks_stop_after_the_cap_and_a_last_failure_stays_in_the_status",
    ),
    Mutation(
        "takeover-failed-look-not-in-status",
        "charms/slurmctld/src/takeover.py::TakeoverRepair.statuses",
        "        if trouble := str(self._stored.trouble):\n",
        "        if trouble := str(self._stored.trouble)[:0]:\n",
        "tests/unit/slurmctld/test_takeover.py::test_an_error_in_a_look_is_a_status_and_the_repairs_before_it_are_saved",
    ),
    Mutation(
        "native-metrics-reads-every-node-record",
        "charms/slurmctld/src/native_metrics.py::cluster_daemons",
        "    output = host.run(NODES_QUERY, timeout=scontrol.timeout).stdout\n",
        "    nodes = scontrol.show_nodes()\n"
        "    output = ''.join(f'{n.name}|idle|{n.version or \"N/A\"}\\n' for n in nodes)\n",
        "tests/unit/slurmctld/test_native_metrics.py::test_every_reader_of_slurm_conf_on_25_11_or_newer_turns_it_on_by_default",
    ),
    Mutation(
        "native-metrics-guesses-past-a-bad-sinfo-line",
        "charms/slurmctld/src/native_metrics.py::node_releases",
        "            raise SlurmOpsError(f\"sinfo printed a line that is no node's: "
        '{line[:80]!r}")\n',
        "            continue\n",
        "tests/unit/slurmctld/test_native_metrics.py::test_a_line_of_sinfo_that_is_no_nodes_keeps_the_last_decision",
    ),
    Mutation(
        "signal-dated-in-the-future-counted",
        "charms/slurmctld/src/takeover.py::signalled_at",
        "    if not stat.S_ISREG(info.st_mode) or info.st_mtime > now:\n",
        "    if not stat.S_ISREG(info.st_mode):\n",
        "tests/unit/slurmctld/test_takeover.py::test_a_signal_dated_in_the_future_is_no_signal",
    ),
    Mutation(
        "future-nodes-fill-the-node-table",
        "charms/slurmctld/src/future_nodes.py::check_room",
        "    if 2 * total > max_node_count:\n",
        "    if total > max_node_count:\n",
        "tests/unit/slurmctld/test_future_nodes.py::test_placeholders_that_leave_no_room_for_the_units_block_naming_both_options",
    ),
    Mutation(
        "lab-tool-server-reads-clients-in-turn",
        "lab/src/slurm_lab/juju/jujuc.py::serve",
        "target=_client, args=(conn, token, turn, slots)",
        "target=_client(conn, token, turn, slots), args=()",
        "lab/tests/test_jujuc_server_units.py::test_a_silent_client_stalls_no_call_of_the_hook",
    ),
    Mutation(
        "shared-etc-group-writable-adopted",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::TrustedOwners.problem",
        "        if mode & 0o022:\n",
        "        if mode & 0o002:\n",
        "tests/unit/hpc_libs/test_slurm_managers.py::test_only_a_tree_as_the_charm_writes_it_is_adopted",
    ),
    Mutation(
        "exporter-trusts-a-line-after-a-broken-one",
        "exporter/src/slurm_exporter/metrics.py::_records",
        "        if record is None or None in neighbours or printed[key(record)] > 1:\n",
        "        if record is None or printed[key(record)] > 1:\n",
        "tests/unit/exporter/test_exporter.py::test_hostile_slurm_output_cannot_add_a_series",
    ),
    Mutation(
        "log-file-keeps-a-second-name",
        "libs/hpc_libs/src/hpc_libs/machine/files.py::_kept_log",
        "        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:\n",
        "        if stat.S_ISREG(info.st_mode):\n",
        "tests/unit/hpc_libs/test_files_no_follow.py::test_a_log_planted_to_reach_another_file_is_replaced_and_the_file_untouched",
    ),
    Mutation(
        "exporter-per-user-ignores-private-data",
        "exporter/src/slurm_exporter/exporter.py::SlurmCollector.__init__",
        "        self.per_user = per_user and not private & PER_USER_PRIVATE\n",
        "        self.per_user = per_user\n",
        "tests/unit/exporter/test_exporter.py::test_private_data_turns_the_per_user_series_off",
    ),
    Mutation(
        "exporter-runs-as-root",
        "charms/slurmctld/src/exporter_service.py::HARDENING",
        '    "DynamicUser=yes",\n',
        "",
        "tests/unit/slurmctld/test_exporter_service.py::test_the_exporter_runs_unprivileged_in_a_sandbox",
    ),
    Mutation(
        "cgroup-isolation-confines-nothing",
        "charms/slurmctld/src/render.py::CONFINEMENT",
        '"cgroup": {"constraincores": True, "constrainramspace": True, "constraindevices": True},',
        '"cgroup": {},',
        "tests/unit/slurmctld/test_overrides_charm.py::test_the_default_isolation_confines_cores_ram_and_devices",
    ),
    Mutation(
        "confinement-defaults-override-the-operator",
        "charms/slurmctld/src/render.py::render_cgroup_conf",
        "fields = {**CONFINEMENT[config.process_isolation], **config.cgroup_parameters}",
        "fields = {**config.cgroup_parameters, **CONFINEMENT[config.process_isolation]}",
        "tests/unit/slurmctld/test_overrides_charm.py::test_the_operator_overrides_a_default_confinement",
    ),
    Mutation(
        "pack-passes-output-outside-the-project",
        "tools/charmcraft_project.py::pack_argv",
        '    return [*charmcraft, "pack", "--platform", platform, *extra]',
        '    return [*charmcraft, "pack", "--platform", platform, "--output", "/tmp", *extra]',
        "tests/unit/project/test_charmcraft_projects.py",
    ),
    Mutation(
        "charm-abi-ignores-the-extensions-python",
        "tools/charm_abi.py::venv_problems",
        'and match["version"] != f"3{target.minor}":',
        'and match["version"] == "0":',
        "tests/unit/project/test_charm_abi.py",
    ),
    Mutation(
        "lab-pack-not-marked-as-lab",
        "lab/src/slurm_lab/juju/charms.py::mark_lab_build",
        '                data = f"# {build.note}\\n".encode() + data',
        "                pass",
        "lab/tests/test_packing_units.py",
    ),
    Mutation(
        "slurmd-without-dbus",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::SlurmdManager",
        '    packages = ("slurmd", "slurm-client", "dbus")\n',
        '    packages = ("slurmd", "slurm-client")\n',
        "tests/unit/slurmd/test_charm_slurmd.py",
    ),
    Mutation(
        "databag-json-unbounded",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py::Interface._parse",
        "relation.load(model, source, decoder=decoder)",
        "relation.load(model, source)",
        "tests/unit/hpc_libs/test_interfaces_slurmctld_peer.py",
    ),
    Mutation(
        "upgrade-without-a-backup",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py::MajorUpgrade.step",
        "            self._turn.before_upgrade(plan)\n",
        "",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py "
        "tests/unit/slurmdbd/test_slurmdbd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-pin-moves-out-of-turn",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py::MajorUpgrade.step",
        "        if plan.target is None or self._turn.upgrade_waits_for(plan.target) is not None:",
        "        if plan.target is None:",
        "tests/unit/sackd/test_sackd_major_upgrade.py "
        "tests/unit/slurmd/test_slurmd_major_upgrade.py",
    ),
    Mutation(
        "upgrade-retry-takes-another-backup",
        "libs/hpc_libs/src/hpc_libs/charm/upgrade.py::MajorUpgrade.step",
        "        if not self.saved(plan):",
        "        if True:",
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py",
    ),
    Mutation(
        "databag-parsed-on-every-read",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py::Interface._parse",
        "        kept = self._parsed.get(key)\n",
        "        kept = None\n",
        "tests/unit/hpc_libs/test_interfaces_base.py",
    ),
    Mutation(
        "databag-parsed-once-whatever-was-written",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py::Interface._parse",
        "        if kept is None or kept[0] != content:\n",
        "        if kept is None:\n",
        "tests/unit/hpc_libs/test_interfaces_base.py",
    ),
    Mutation(
        "databag-save-compares-models",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py::Interface.save",
        'if all(published.get(key, "") == text for key, text in saved_text(data).items()):',
        "if self.load(type(data), relation, target) == data:",
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "secret-id-old-name-not-read",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py::ControllerData._one_secret_id_under_both_names",
        '                secret_id = fields.get("auth_key_id")\n',
        "                pass\n",
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "secret-id-old-name-not-written",
        "libs/hpc_libs/src/hpc_libs/interfaces/controller.py::ControllerData._one_secret_id_under_both_names",
        '            return {**fields, "auth_secret_id": secret_id, "auth_key_id": secret_id}\n',
        '            return {**fields, "auth_secret_id": secret_id}\n',
        "tests/unit/hpc_libs/test_interfaces_secret_id.py",
    ),
    Mutation(
        "return-to-service-left-at-slurms-zero",
        "charms/slurmctld/src/render.py::OPERATOR_DEFAULTS",
        '    "returntoservice": 1,\n',
        "",
        "tests/unit/slurmctld/test_overrides_charm.py::"
        "test_a_node_down_not_responding_returns_at_its_registration_by_default",
    ),
    Mutation(
        "new-nodes-jobs-wait-for-slurms-batch-delay",
        "charms/slurmctld/src/render.py::OPERATOR_DEFAULTS",
        '    "schedulerparameters": {"batch_sched_delay": 1},\n',
        "",
        "tests/unit/slurmctld/test_overrides_charm.py::"
        "test_a_new_nodes_jobs_are_scheduled_within_a_second_by_default",
    ),
    Mutation(
        "return-to-service-default-outranks-the-operator",
        "charms/slurmctld/src/render.py::render_slurm_conf",
        "operator = {**OPERATOR_DEFAULTS, **config.slurm_conf_parameters}",
        "operator = {**config.slurm_conf_parameters, **OPERATOR_DEFAULTS}",
        "tests/unit/slurmctld/test_overrides_charm.py::"
        "test_the_operator_chooses_return_to_service",
    ),
    Mutation(
        "health-resumes-an-operators-drain",
        "charms/slurmd/src/programs/health_check.py::decide",
        "        if ours and outcome.healthy:",
        '        if "DRAIN" in states and outcome.healthy:',
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_drain_set_by_anyone_else_is_never_resumed_nor_replaced",
    ),
    Mutation(
        "health-drains-past-the-share",
        "charms/slurmd/src/programs/health_check.py::drain_allowed",
        "    return len(others) + 1 <= limit",
        "    return True",
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_failing_node_is_not_drained_past_the_partitions_share",
    ),
    Mutation(
        "health-reads-drains-within-its-second",
        "charms/slurmd/src/programs/health_check.py::act",
        "            time.sleep(SAME_SECOND_S)",
        "            pass",
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_drain_stamped_in_the_same_second_is_read_before_the_node_keeps_its_own",
    ),
    Mutation(
        "health-keeps-a-drain-past-the-share",
        "charms/slurmd/src/programs/health_check.py::still_failing",
        "    if not rebuilt and not keeps_its_drain(members(), name, max_drain):",
        "    if False:",
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_drain_past_the_share_left_by_a_failed_resume_is_undone_by_the_next_check",
    ),
    Mutation(
        "health-hanging-check-blocks-slurmd",
        "charms/slurmd/src/programs/health_check.py::run_checks",
        "        thread.join(max(0.0, deadline - time.monotonic()))",
        "        thread.join()",
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_hanging_check_cannot_decide_and_never_blocks_slurmd",
    ),
    Mutation(
        "health-hanging-mount-blocks-slurmd",
        "charms/slurmd/src/programs/health_check.py::statvfs_all",
        "        thread.join(max(0.0, deadline - time.monotonic()))",
        "        thread.join()",
        "tests/unit/slurmd/test_health_check.py::"
        "test_a_mount_that_does_not_answer_fails_in_time_and_never_hangs",
    ),
    Mutation(
        "rebuild-ignores-the-health-gate",
        "charms/slurmctld/src/rebuild.py::progress",
        "any(map(node.has_state, FAILED_STATES)) or failed_the_gate(node, since)",
        "any(map(node.has_state, FAILED_STATES))",
        "tests/unit/slurmctld/test_rebuild.py::"
        "test_a_node_failing_its_health_check_after_the_reboot_stops_the_rollout",
    ),
    Mutation(
        "lost-jobs-follow-a-script-link",
        "charms/slurmctld/src/lost_jobs.py::_read_owned_file",
        "flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC",
        "flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC",
        "tests/unit/slurmctld/test_lost_jobs.py::test_a_script_that_is_a_link_is_not_followed",
    ),
    Mutation(
        "lost-jobs-report-a-job-the-controller-knows",
        "charms/slurmctld/src/lost_jobs.py::LostJobs._scan",
        "if self.scontrol.knows_job(job_id):",
        "if False:",
        "tests/unit/slurmctld/test_lost_jobs.py::test_a_job_the_controller_knows_is_not_reported",
    ),
    Mutation(
        "lost-jobs-resubmit-as-root",
        "charms/slurmctld/src/lost_jobs.py::resubmit",
        '            "setpriv",\n'
        '            f"--reuid={user.pw_uid}",\n'
        '            f"--regid={user.pw_gid}",\n'
        '            "--init-groups",\n'
        '            "--reset-env",\n'
        '            "--",\n',
        "",
        "tests/unit/slurmctld/test_lost_jobs.py::"
        "test_resubmit_runs_sbatch_as_the_user_from_the_kept_files",
    ),
    Mutation(
        "data-parser-takes-the-newest-offered-even-unknown",
        "libs/hpc_libs/src/hpc_libs/slurm/data_parser.py::choose",
        "    return usable[-1]",
        "    return versions[-1]",
        "tests/unit/hpc_libs/test_data_parser.py::"
        "test_a_newer_unknown_version_is_passed_over_for_the_newest_known_one "
        "tests/unit/slurmctld/test_actions_scaling_view.py::"
        "test_a_newer_slurm_is_read_in_the_newest_version_this_charm_knows",
    ),
    Mutation(
        "data-parser-takes-an-older-known-version",
        "libs/hpc_libs/src/hpc_libs/slurm/data_parser.py::choose",
        "    return usable[-1]",
        "    return usable[0]",
        "tests/unit/hpc_libs/test_data_parser.py::"
        "test_each_supported_release_gets_its_newest_version "
        "tests/unit/autoscaler/test_recorded_versions.py::"
        "test_openapi_offers_these_versions_and_the_newest_is_chosen",
    ),
    Mutation(
        "scaling-view-reads-an-answer-of-another-version",
        "charms/slurmctld/src/scaling_view.py::_answer",
        "        data_parser.check_answer(answer, version)\n",
        "        pass\n",
        "tests/unit/autoscaler/test_recorded_versions.py::"
        "test_an_answer_of_one_version_is_refused_when_another_was_asked_for",
    ),
    Mutation(
        "upgrade-allows-a-jump-slurm-forbids",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py::refusal",
        "steps(running, target) > MAX_MAJOR_STEPS",
        "steps(running, target) > MAX_MAJOR_STEPS + 1",
        "tests/unit/hpc_libs/test_upgrade_chain.py::test_schedmds_table "
        "tests/unit/slurmctld/test_slurmctld_major_upgrade.py::"
        "test_a_jump_slurm_forbids_is_refused_before_anything_moves_naming_the_path",
    ),
    Mutation(
        "upgrade-path-names-a-hop-slurm-forbids",
        "libs/hpc_libs/src/hpc_libs/slurm/upgrade.py::upgrade_path",
        "range(here + MAX_MAJOR_STEPS, here, -1)",
        "range(here + MAX_MAJOR_STEPS + 1, here, -1)",
        "tests/unit/hpc_libs/test_upgrade_chain.py::"
        "test_every_hop_of_the_path_is_one_slurm_allows",
    ),
    Mutation(
        "scaling-view-ignores-the-operators-data-parser",
        "charms/slurmctld/src/scaling_view.py::negotiate",
        "data_parser.offered_by_list(listed), override)",
        "data_parser.offered_by_list(listed))",
        "tests/unit/slurmctld/test_actions_scaling_view.py::"
        "test_the_operator_may_name_an_older_version_both_know",
    ),
    Mutation(
        "slurmctld-requires-the-nodeset-again",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmd.py::ComputeData.is_complete",
        "return self.partition is not None",
        "return self.partition is not None and self.nodeset is not None",
        "tests/unit/hpc_libs/test_partition_wire.py::"
        "test_this_releases_slurmctld_serves_an_old_slurmds_partition_with_or_without_nodeset",
    ),
    Mutation(
        "slurmd-stops-sending-the-nodeset-a-release-early",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmd.py::ComputeData.published",
        "nodeset=node_set(app)",
        "nodeset=None",
        "tests/unit/hpc_libs/test_partition_wire.py::"
        "test_this_releases_slurmd_sends_the_keys_and_still_the_node_set",
    ),
    Mutation(
        "leader-remembers-no-nodeset-for-the-previous-release",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py::PartitionEntry.serving",
        "nodeset=node_set(name)",
        "nodeset=None",
        "tests/unit/hpc_libs/test_partition_wire.py::"
        "test_this_releases_leader_remembers_what_the_previous_release_reads_back",
    ),
    Mutation(
        "partition-spec-keeps-the-datas-names",
        "libs/hpc_libs/src/hpc_libs/slurm/partition.py::PartitionSpec.of",
        " if k not in NAMES",
        "",
        "tests/unit/slurmctld/test_slurmctld_waits_and_failures.py::"
        "test_a_remembered_partition_gets_its_names_forced_again",
    ),
    Mutation(
        "exporter-ping-hosts-unchecked",
        "exporter/src/slurm_exporter/metrics.py::controller_pings",
        "host=name_label(c.hostname)",
        "host=c.hostname",
        "tests/unit/exporter/test_exporter.py::"
        "test_a_ping_it_cannot_read_is_a_failed_ping_and_no_controller_series",
    ),
    # The exporter and the fence watchdog share `CharmService`: one that stopped is started.
    Mutation(
        "charm-service-left-stopped",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::Service.keep_running",
        "        elif not self.is_active():\n",
        "        elif False:\n",
        "tests/unit/hpc_libs/test_machine.py::"
        "test_a_charm_service_restarts_on_a_change_and_is_started_when_stopped",
    ),
    Mutation(
        "slurmd-stop-unbounded",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::START_OVERRIDE",
        "TimeoutStopSec=10\n",
        "",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_slurmd_stop_is_bounded_far_below_systemds_default",
    ),
    Mutation(
        "scaling-view-squeue-memory-per-cpu-read-as-per-node",
        "charms/slurmctld/src/scaling_view.py::memory_per_node",
        "        return asked * cpus_per_node\n",
        "        return asked\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py::test_memory_per_node_reads_from_squeue_as_from_the_jobs_json",
    ),
    Mutation(
        "scaling-view-squeue-description-taken-as-reason",
        "charms/slurmctld/src/scaling_view.py::queue_shape",
        "    if memory is None or not WORD.fullmatch(reason):\n",
        "    if memory is None:\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py::"
        "test_a_reason_squeue_prints_as_a_description_reads_the_jobs_json_instead",
    ),
    Mutation(
        "scaling-view-squeue-inexact-memory-guessed",
        "charms/slurmctld/src/scaling_view.py::memory_per_node",
        "        return asked * cpus_per_node\n    return None\n",
        "        return asked * cpus_per_node\n    return asked\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py::test_a_memory_squeue_cannot_say_exactly_reads_the_jobs_json",
    ),
    Mutation(
        "scaling-view-squeue-job-twice-counted",
        "charms/slurmctld/src/scaling_view.py::queue_jobs",
        "        if int(job_id) in seen:\n",
        "        if False:\n",
        "tests/unit/slurmctld/test_actions_scaling_view.py::test_a_line_squeue_never_prints_fails_the_action",
    ),
    Mutation(
        "plain-json-answer-read-in-any-version",
        "libs/hpc_libs/src/hpc_libs/slurm/scontrol.py::parse_answer",
        "    data_parser.check_known(cast(dict[str, Any], document))\n",
        "",
        "tests/unit/hpc_libs/test_plain_json_versions.py::"
        "test_scontrol_queries_fail_on_a_newer_default_with_both_versions "
        "tests/unit/exporter/test_exporter.py::"
        "test_an_sdiag_in_a_data_parser_it_does_not_read_is_a_failed_source "
        "tests/unit/slurmctld/test_rebuild.py::"
        "test_nodes_in_a_data_parser_the_charm_does_not_read_fail_the_status_naming_both",
    ),
    Mutation(
        "plain-json-known-versions-unchecked",
        "libs/hpc_libs/src/hpc_libs/slurm/data_parser.py::check_known",
        "version is None or version not in readable",
        "version is None",
        "tests/unit/hpc_libs/test_plain_json_versions.py::"
        "test_an_answer_in_a_newer_default_is_refused_naming_both_versions",
    ),
    Mutation(
        "health-check-reads-node-records-in-any-version",
        "charms/slurmd/src/programs/health_check.py::show_nodes",
        "    if version not in DATA_PARSERS:",
        "    if not version:",
        "tests/unit/slurmd/test_health_check.py::"
        "test_node_records_in_a_newer_data_parser_leave_the_check_undecided",
    ),
    Mutation(
        "soak-lost-in-silence-counted-as-reported",
        "tests/soak/history.py::_lost",
        "    if sub.job_id not in ends.reported:\n",
        "    if False:\n",
        "tests/unit/soak/test_soak_units.py::"
        "test_a_job_lost_in_silence_fails_the_run_and_a_reported_one_in_the_window_does_not",
    ),
    Mutation(
        "soak-lost-saved-job-allowed",
        "tests/soak/history.py::at_risk",
        "0 <= t - submitted_at < SAVE_MARGIN_S",
        "0 <= t - submitted_at",
        "tests/unit/soak/test_soak_units.py::"
        "test_a_job_lost_in_silence_fails_the_run_and_a_reported_one_in_the_window_does_not",
    ),
    Mutation(
        "lab-leader-change-without-leader-elected",
        "lab/src/slurm_lab/juju/commit.py::move_leadership",
        'return app.leader, [hooks.event(app.leader, "leader_elected")]',
        "return app.leader, []",
        "lab/tests/test_backend_units.py::"
        "test_a_leader_change_moves_leadership_to_the_next_unit_which_gets_leader_elected",
    ),
    Mutation(
        "soak-deploy-waits-for-an-app-without-units",
        "tests/soak/history.py::deployed_and_active",
        "[name for name in status.apps if status.get_units(name)]",
        "list(status.apps)",
        "tests/unit/soak/test_soak_units.py::"
        "test_an_application_scaled_to_zero_does_not_hold_the_deploy_wait_and_an_inactive_unit_does",
    ),
    Mutation(
        "soak-user-not-on-the-controllers",
        "tests/soak/plan.py::user_machines",
        "for app in USER_APPS for",
        "for app in USER_APPS[1:] for",
        "tests/unit/soak/test_soak_units.py::"
        "test_the_workloads_user_is_made_on_every_controller_too_and_on_units_added_later",
    ),
    Mutation(
        "soak-own-exit-on-a-removed-node-is-a-violation",
        "tests/soak/history.py::autoscaler_removed_busy",
        " or (state in OWN_END and job_id in meant_to_fail)",
        "",
        "tests/unit/soak/test_soak_units.py::"
        "test_a_job_failing_by_its_own_exit_on_a_node_removed_later_is_no_autoscaler_violation",
    ),
    Mutation(
        "masked-unit-reported-by-an-older-runs-journal",
        "libs/hpc_libs/src/hpc_libs/machine/systemd.py::Service._change",
        "_refusal(e.stderr, verb, self.name) or journal_reason(self.name)",
        "journal_reason(self.name)",
        "tests/unit/hpc_libs/test_machine.py::"
        "test_a_masked_unit_is_reported_as_masked_not_by_an_older_runs_journal",
    ),
    Mutation(
        "accounts-description-case-kept",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::desired",
        "(spec.description or name).lower()",
        "(spec.description or name)",
        "tests/unit/hpc_libs/test_accounts.py::test_applied_document_reads_back_as_no_change",
    ),
    Mutation(
        "accounts-inherited-limits-not-shown",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::desired",
        "        if spec.parent != ROOT:\n",
        "        if False:\n",
        "tests/unit/hpc_libs/test_accounts.py::test_applied_document_reads_back_as_no_change",
    ),
    Mutation(
        "accounts-qos-planned-after-accounts",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::plan",
        "    planner.qos()\n    planner.accounts()\n",
        "    planner.accounts()\n    planner.qos()\n",
        "tests/unit/hpc_libs/test_accounts.py::test_plan_orders_qos_then_accounts_parents_first_then_users",
    ),
    Mutation(
        "accounts-children-added-before-parents",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Planner.accounts",
        "key=lambda g: (g[0][0], g[1])",
        "key=lambda g: (-g[0][0], g[1])",
        "tests/unit/hpc_libs/test_accounts.py::test_plan_orders_qos_then_accounts_parents_first_then_users",
    ),
    Mutation(
        "accounts-parents-removed-before-children",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Planner.remove_accounts",
        "sorted(by_depth.items(), reverse=True)",
        "sorted(by_depth.items())",
        "tests/unit/hpc_libs/test_accounts.py::test_removals_come_last_users_then_children_then_qos",
    ),
    Mutation(
        "accounts-busy-association-removed",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Planner.remove_associations",
        "if self.busy.user(name, account)]",
        "if False]",
        "tests/unit/hpc_libs/test_accounts.py::test_a_removal_with_jobs_is_held",
    ),
    Mutation(
        "accounts-busy-child-does-not-hold-its-parent",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Planner._busy_accounts",
        "                account = self.state.accounts[account].parent\n",
        "                break\n",
        "tests/unit/hpc_libs/test_accounts.py::test_a_removal_with_jobs_is_held",
    ),
    Mutation(
        "accounts-unmanaged-names-in-scope",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Scope.of",
        "        if prune:\n",
        "        if True:\n",
        "tests/unit/hpc_libs/test_accounts.py::test_names_never_managed_are_left_alone_unless_pruned",
    ),
    Mutation(
        "accounts-previous-document-forgotten",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Scope.of",
        "names = document.managed().union(previously)",
        "names = document.managed()",
        "tests/unit/hpc_libs/test_accounts.py::test_a_name_the_previous_document_managed_is_removed",
    ),
    Mutation(
        "accounts-one-command-per-name",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_grouped",
        "groups.setdefault(wanted[name], []).append(name)",
        "groups[wanted[name] | {(name, name)}] = [name]",
        "tests/unit/hpc_libs/test_accounts.py::test_commands_are_batched_for_1000_users_in_100_accounts",
    ),
    Mutation(
        "accounts-reader-splits-on-any-line-break",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_records",
        'output.split("\\n")',
        "output.splitlines()",
        "tests/unit/hpc_libs/test_accounts.py::test_reader_splits_on_newlines_only_and_skips_torn_records",
    ),
    Mutation(
        "accounts-repeated-description-trusted",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::parse_descriptions",
        "None if name in descriptions else text",
        "text",
        "tests/unit/hpc_libs/test_accounts.py::test_descriptions_that_forge_lines_read_as_unknown",
    ),
    Mutation(
        "accounts-busy-reads-any-account-text",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::parse_busy",
        " and _NAME_FIELD_RE.fullmatch(account)",
        "",
        "tests/unit/hpc_libs/test_accounts.py::test_busy_reads_user_then_account_and_skips_forged_lines",
    ),
    Mutation(
        "accounts-unknown-keys-ignored",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_Spec",
        'extra="forbid"',
        'extra="ignore"',
        "tests/unit/hpc_libs/test_accounts.py::test_document_refuses_input_naming_the_key",
    ),
    Mutation(
        "accounts-default-account-unchecked",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::Document.check_references",
        "(user.default,)",
        "()",
        "tests/unit/hpc_libs/test_accounts.py::test_document_refuses_input_naming_the_key",
    ),
    Mutation(
        "accounts-parent-cycle-accepted",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::Document.check_references",
        "            self._check_no_cycle(name)\n",
        "            pass\n",
        "tests/unit/hpc_libs/test_accounts.py::test_document_refuses_input_naming_the_key",
    ),
    Mutation(
        "accounts-dropped-tres-not-cleared",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::_setting",
        'cleared = [f"{name}=-1" for name in sorted(dropped)]',
        "cleared = list[str]()",
        "tests/unit/hpc_libs/test_accounts.py::test_a_key_left_out_is_put_back_to_slurms_default",
    ),
    Mutation(
        "accounts-description-of-an-unknown-account-read",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::parse_descriptions",
        "if bar and name in accounts:",
        "if bar and _NAME_FIELD_RE.fullmatch(name):",
        "tests/unit/hpc_libs/test_accounts.py::test_descriptions_that_forge_lines_read_as_unknown",
    ),
    Mutation(
        "accounts-held-names-forgotten",
        "libs/hpc_libs/src/hpc_libs/slurm/accounts.py::Plan.managed_after",
        "managed.union(previously_managed) if self.held else managed",
        "managed",
        "tests/unit/hpc_libs/test_accounts.py::test_held_removals_keep_their_names_recorded_until_done",
    ),
    Mutation(
        "accounts-bad-document-accepted",
        "charms/slurmctld/src/config.py::_accounts_document",
        "        return Document.parse(value)\n    except DocumentError as e:\n",
        "        return Document.parse(value)\n    except DocumentError as e:\n        return "
        "None\n",
        "tests/unit/slurmctld/test_associations.py::test_a_bad_document_blocks_naming_the_key_"
        "and_nothing_is_applied",
    ),
    Mutation(
        "accounts-reconciled-without-slurmdbd",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "if document is None or not facts.dbds:",
        "if document is None:",
        "tests/unit/slurmctld/test_associations.py::test_without_slurmdbd_the_document_waits_"
        "and_nothing_is_enforced",
    ),
    Mutation(
        "accounts-recorded-though-sacctmgr-failed",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "self.outcome = Outcome(failure=reason)\n            return None",
        'self.outcome = Outcome(failure=reason)\n            return {"accounts_managed": '
        "AccountsManaged.of(document.managed())}",
        "tests/unit/slurmctld/test_associations.py::test_slurmdbd_down_is_a_status_quoting_"
        "sacctmgr_retried_by_update_status",
    ),
    Mutation(
        "accounts-enforced-without-document",
        "charms/slurmctld/src/associations.py::conf_settings",
        "if config.accounts is None or not dbds:",
        "if not dbds:",
        "tests/unit/slurmctld/test_associations.py::test_without_a_document_slurmdbd_is_left_"
        "alone_and_nothing_is_enforced",
    ),
    Mutation(
        "accounts-enforced-without-slurmdbd",
        "charms/slurmctld/src/associations.py::conf_settings",
        "if config.accounts is None or not dbds:",
        "if config.accounts is None:",
        "tests/unit/slurmctld/test_associations.py::test_without_slurmdbd_the_document_waits_"
        "and_nothing_is_enforced",
    ),
    Mutation(
        "accounts-operator-enforce-items-dropped",
        "charms/slurmctld/src/overrides.py::COMBINED",
        '    "accountingstorageenforce": _union,\n',
        "",
        "tests/unit/slurmctld/test_associations.py::test_the_operators_enforce_items_are_added_"
        "to_the_charms",
    ),
    Mutation(
        "accounts-held-removal-forgotten",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "managed = plan.managed_after(document, previously)",
        "managed = document.managed()",
        "tests/unit/slurmctld/test_associations.py::test_a_removal_held_by_jobs_is_a_status_"
        "line_and_stays_managed",
    ),
    Mutation(
        "accounts-record-keeps-removed-names",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "managed = plan.managed_after(document, previously)",
        "managed = document.managed().union(previously)",
        "tests/unit/slurmctld/test_associations.py::test_a_user_a_former_document_managed_is_"
        "removed",
    ),
    Mutation(
        "accounts-record-ignored",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "previously = remembered(facts.memory)",
        "previously = Managed()",
        "tests/unit/slurmctld/test_associations.py::test_a_user_a_former_document_managed_is_"
        "removed",
    ),
    Mutation(
        "accounts-prune-option-ignored",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "prune_unmanaged=facts.config.accounts_prune_unmanaged",
        "prune_unmanaged=False",
        "tests/unit/slurmctld/test_associations.py::test_prune_unmanaged_removes_a_user_no_"
        "document_managed",
    ),
    Mutation(
        "accounts-new-document-called-drift",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "unchanged = facts.memory.accounts_applied == digest(document)",
        "unchanged = True",
        "tests/unit/slurmctld/test_associations.py::test_what_a_new_document_changes_is_no_"
        "hand_made_change",
    ),
    Mutation(
        "accounts-drift-not-said",
        "charms/slurmctld/src/associations.py::Associations.statuses",
        "        if outcome.drift:\n",
        "        if False:\n",
        "tests/unit/slurmctld/test_associations.py::test_a_hand_made_change_is_a_status_line_"
        "and_put_back",
    ),
    Mutation(
        "accounts-held-removal-not-said",
        "charms/slurmctld/src/associations.py::Associations.statuses",
        "        if outcome.held:\n",
        "        if False:\n",
        "tests/unit/slurmctld/test_associations.py::test_a_removal_held_by_jobs_is_a_status_"
        "line_and_stays_managed",
    ),
    Mutation(
        "accounts-failure-not-blocked",
        "charms/slurmctld/src/associations.py::Associations.statuses",
        'yield ops.BlockedStatus(f"accounts not applied: {outcome.failure}")',
        'yield ops.ActiveStatus(f"accounts not applied: {outcome.failure}")',
        "tests/unit/slurmctld/test_associations.py::test_slurmdbd_down_is_a_status_quoting_"
        "sacctmgr_retried_by_update_status",
    ),
    Mutation(
        "accounts-empty-plan-applied",
        "charms/slurmctld/src/associations.py::Associations.reconcile",
        "            if plan.changes:\n",
        "            if True:\n",
        "tests/unit/slurmctld/test_associations.py::test_nothing_differs_no_command_runs",
    ),
    Mutation(
        "accounts-status-behind-accountings",
        "charms/slurmctld/src/charm.py::SlurmctldCharm._status_order",
        "            (self.associations.statuses, False),  # the accounts document,\n          "
        "  (self.accounting.statuses, False),  # accounting's target,\n",
        "            (self.accounting.statuses, False),  # accounting's target,\n            "
        "(self.associations.statuses, False),  # the accounts document,\n",
        "tests/unit/slurmctld/test_associations.py::test_a_removal_held_by_jobs_is_a_status_"
        "line_and_stays_managed",
    ),
    Mutation(
        "accounts-peer-record-names-unchecked",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py::SlurmctldPeerData._accounts_"
        "managed",
        "AccountsManaged.model_validate(value).managed()",
        "AccountsManaged.model_validate(value)",
        "tests/unit/hpc_libs/test_interfaces_slurmctld_peer.py::test_an_invalid_accounts_"
        "record_reads_as_nothing_managed_and_keeps_the_rest",
    ),
    Mutation(
        "accounts-peer-digest-unchecked",
        "libs/hpc_libs/src/hpc_libs/interfaces/slurmctld_peer.py::SlurmctldPeerData._digests",
        "if value is None or (isinstance(value, str) and pattern.fullmatch(value)):",
        "if True:",
        "tests/unit/hpc_libs/test_interfaces_slurmctld_peer.py::test_an_invalid_applied_digest_"
        "reads_as_not_said",
    ),
    Mutation(
        "metrics-token-signed-with-the-cluster-jwt-key",
        "charms/slurmctld/src/metrics_auth.py::KEY_SECRET",
        '"slurm-metrics-jwt-key"',
        '"slurm-jwt-key"',
        "tests/unit/slurmctld/test_native_metrics.py::test_privatedata_turns_it_on_with_a_token_check_of_its_own",
    ),
    Mutation(
        "metrics-token-of-slurmuser",
        "charms/slurmctld/src/metrics_auth.py::USER",
        '"slurm-metrics"',
        '"slurm"',
        "tests/unit/slurmctld/test_native_metrics.py::test_privatedata_turns_it_on_with_a_token_check_of_its_own",
    ),
    Mutation(
        "native-jobs-send-no-token-under-privatedata",
        "charms/slurmctld/src/native_metrics.py::scrape_jobs",
        "credentials_file=token,",
        "credentials_file=None,",
        "tests/unit/slurmctld/test_native_metrics.py::test_each_job_names_the_token_file_and_no_databag_holds_the_token",
    ),
    Mutation(
        "metrics-token-readable-by-all",
        "charms/slurmctld/src/metrics_auth.py::MetricsAuth._renew",
        "mode=0o600",
        "mode=0o644",
        "tests/unit/slurmctld/test_native_metrics.py::test_each_job_names_the_token_file_and_no_databag_holds_the_token",
    ),
    Mutation(
        "metrics-token-never-renewed",
        "charms/slurmctld/src/metrics_auth.py::MetricsAuth._renew",
        "if expires is not None and expires - now > RENEW_WITHIN:",
        "if current:",
        "tests/unit/slurmctld/test_native_metrics.py::test_update_status_renews_a_token_well_before_it_expires",
    ),
    Mutation(
        "metrics-token-of-another-key-kept",
        "charms/slurmctld/src/metrics_auth.py::expiry",
        'options={"require": ["exp"]}',
        'options={"require": ["exp"], "verify_signature": False}',
        "tests/unit/slurmctld/test_native_metrics.py::test_a_token_signed_with_another_key_is_replaced",
    ),
    Mutation(
        "privatedata-token-check-on-25-11",
        "charms/slurmctld/src/native_metrics.py::first_release",
        "AUTH_RELEASE if private(config) else FIRST_RELEASE",
        "FIRST_RELEASE",
        "tests/unit/slurmctld/test_native_metrics.py::test_a_daemon_before_26_05_keeps_it_off_under_privatedata",
    ),
    Mutation(
        "metrics-token-kept-once-privatedata-is-lifted",
        "charms/slurmctld/src/charm.py::SlurmctldCharm._publish_telemetry",
        "needed and native_metrics.private(config)",
        "needed",
        "tests/unit/slurmctld/test_native_metrics.py::test_lifting_privatedata_removes_the_token_and_the_jobs_send_none",
    ),
    Mutation(
        "metrics-user-only-on-the-leader",
        "charms/slurmctld/src/metrics_auth.py::MetricsAuth.reconcile",
        "            ensure_user()\n",
        "",
        "tests/unit/slurmctld/test_native_metrics.py::test_a_backup_signs_its_own_token_with_the_leaders_key",
    ),
    Mutation(
        "slurm-check-without-the-included-file",
        "libs/hpc_libs/src/hpc_libs/slurm/check.py::check_with_slurm",
        "for name in relative_includes(text):",
        "for name in []:",
        "tests/unit/hpc_libs/test_slurm_check.py::"
        "test_a_file_included_by_name_is_read_beside_the_candidate_as_slurm_reads_it",
    ),
    Mutation(
        "slurmd-stop-kills-job-steps",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::START_OVERRIDE",
        "TimeoutStopSec=10\n",
        "TimeoutStopSec=10\nExecStopPost=-/bin/systemctl kill --signal=KILL *_slurmstepd.scope\n",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_slurmds_drop_in_leaves_running_job_steps_alone_at_a_stop",
    ),
    Mutation(
        "slurmd-stop-leaves-an-untracked-slurmd-holding-the-port",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::START_OVERRIDE",
        "ExecStopPost=/usr/bin/python3 /usr/local/sbin/hpc-libs-reap-leftovers /usr/sbin/slurmd\n",
        "",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_slurmds_stop_ends_with_the_reaper_of_the_slurmd_systemd_lost_track_of",
    ),
    Mutation(
        "sackd-stop-leaves-an-untracked-sackd",
        "libs/hpc_libs/src/hpc_libs/slurm/sackd.py::STOP_OVERRIDE",
        "KillMode=control-group\n",
        "",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_a_sackd_stop_ends_every_process_of_its_unit_within_a_bound",
    ),
    Mutation(
        "reaper-kills-any-program-of-the-unit",
        "libs/hpc_libs/src/hpc_libs/slurm/programs/reap_leftovers.py::runs",
        "    return owner == 0 and image in wanted\n",
        "    return owner == 0\n",
        "tests/unit/hpc_libs/test_reap_leftovers.py::"
        "test_the_daemon_left_in_the_unit_is_killed_and_its_job_steps_are_not",
    ),
    Mutation(
        "reaper-misses-the-daemon-named-by-a-link",
        "libs/hpc_libs/src/hpc_libs/slurm/programs/reap_leftovers.py::images",
        "    paths = {executable, os.path.realpath(executable)}\n",
        "    paths = {executable}\n",
        "tests/unit/hpc_libs/test_reap_leftovers.py::"
        "test_the_daemon_left_in_the_unit_is_killed_and_its_job_steps_are_not",
    ),
    Mutation(
        "slurmd-leaves-the-new-system-bus-stopped",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::SlurmdManager.install",
        "            self.system_bus.start()\n",
        "            pass\n",
        "tests/unit/hpc_libs/test_package_source.py::"
        "test_slurmd_starts_the_system_bus_it_installed",
    ),
    Mutation(
        "slurmd-counts-any-users-slurmstepd",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::_stepd_title",
        '        if _real_uid(process / "status") != 0:\n            return None\n',
        "",
        "tests/unit/hpc_libs/test_slurm_managers.py::"
        "test_running_jobs_are_the_jobs_of_roots_slurmstepd_processes "
        "tests/unit/slurmd/test_slurmd_departure.py::test_only_roots_slurmstepd_processes_are_jobs",
    ),
    Mutation(
        "slurmd-takes-an-untitled-step-for-no-job",
        "libs/hpc_libs/src/hpc_libs/slurm/slurmd.py::SlurmdManager.running_jobs",
        "        if not all(steps):\n            return None\n",
        "",
        "tests/unit/slurmd/test_slurmd_departure.py::"
        "test_a_step_whose_job_id_cannot_be_read_yet_keeps_the_departure_waiting",
    ),
    Mutation(
        "reregister-counts-any-users-slurmstepd",
        "charms/slurmd/src/programs/reregister.sh",
        "    pgrep -x -u root slurmstepd >/dev/null\n",
        "    pgrep -x slurmstepd >/dev/null\n",
        "tests/unit/slurmd/test_charm_slurmd_transient.py::"
        "test_reregister_waits_while_a_step_of_roots_runs",
    ),
    Mutation(
        "databag-models-built-at-import",
        "libs/hpc_libs/src/hpc_libs/interfaces/base.py::DatabagModel",
        'model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)',
        'model_config = ConfigDict(extra="ignore", frozen=True)',
        "tests/unit/project/test_import_cost.py::"
        "test_importing_a_charm_builds_no_pydantic_validator",
    ),
    Mutation(
        "scontrol-default-model-built-at-import",
        "libs/hpc_libs/src/hpc_libs/slurm/scontrol.py::ExitCode",
        "    signal: Signal = Field(default_factory=Signal)",
        "    signal: Signal = Signal()",
        "tests/unit/project/test_import_cost.py::"
        "test_importing_a_charm_builds_no_pydantic_validator",
    ),
    Mutation(
        "slurmd-ports-skipped-when-the-node-fails",
        "charms/slurmd/src/charm.py::SlurmdCharm.reconcile",
        "        try:\n            self._converge_node(config, controller)\n        finally:\n",
        "        if True:\n            self._converge_node(config, controller)\n"
        "        if True:\n",
        "tests/unit/slurmd/test_slurmd_ports.py::"
        "test_a_slurmd_that_cannot_start_still_has_its_port_opened",
    ),
    Mutation(
        "takeover-since-compared-below-the-second",
        "charms/slurmctld/src/takeover.py::TakeoverRepair._check",
        "self._repair(float(math.floor(stored.since)))",
        "self._repair(float(stored.since))",
        "tests/unit/slurmctld/test_takeover.py::"
        "test_a_job_killed_in_the_second_the_takeover_began_is_requeued",
    ),
    Mutation(
        "soak-autoscaler-blamed-for-a-job-ended-before-the-removal",
        "tests/soak/history.py::autoscaler_removed_busy",
        "if last.ended is None or last.ended >= removed[node]",
        "if True",
        "tests/unit/soak/test_soak_units.py::"
        "test_a_job_that_ended_before_the_autoscaler_removed_its_node_is_no_violation",
    ),
    Mutation(
        "slurmd-resumes-an-operator-down-in-slurms-words",
        "charms/slurmd/src/node.py::_down_for_its_boot",
        "_slurmctlds_reason(found, REBOOTED_REASON)",
        "found.reason == REBOOTED_REASON",
        "tests/unit/slurmd/test_slurmd_reboot_return.py::"
        "test_any_other_state_after_the_boot_is_left_and_the_watch_ends",
    ),
    Mutation(
        "slurmd-start-looks-once-before-the-registration",
        "charms/slurmd/src/charm.py::SlurmdCharm._on_start_after_boot",
        "self._return_after_reboot(node.REGISTRATION_ATTEMPTS)",
        "self._return_after_reboot(1)",
        "tests/unit/slurmd/test_slurmd_reboot_return.py::"
        "test_the_start_waits_for_the_registration_from_this_boot",
    ),
    Mutation(
        "slurmd-watch-ends-on-an-earlier-boots-registration",
        "charms/slurmd/src/node.py::return_after_reboot",
        "(found.boot_time or 0) >= booted - BOOT_TIME_SLACK_S",
        "found.boot_time is not None",
        "tests/unit/slurmd/test_slurmd_reboot_return.py::"
        "test_the_start_waits_for_the_registration_from_this_boot "
        "tests/unit/slurmd/test_slurmd_reboot_return.py::"
        "test_a_registration_after_the_start_hook_is_resumed_by_a_later_event",
    ),
    Mutation(
        "slurmctld-left-unit-reconciles-again",
        "charms/slurmctld/src/charm.py::SlurmctldCharm.reconcile",
        "        if self.departure.left:\n            return",
        "        if False:\n            return",
        "tests/unit/slurmctld/test_departure.py::test_once_left_no_later_hook_starts_anything",
    ),
    Mutation(
        "slurmctld-departure-hands-over-to-the-primary-index",
        "charms/slurmctld/src/departure.py::Departure._hand_over",
        "if i not in (0, mine) and p.is_up",
        "if i != mine and p.is_up",
        "tests/unit/slurmctld/test_departure.py::"
        "test_a_backup_in_charge_hands_over_to_another_backup_never_to_index_0",
    ),
    Mutation(
        "slurmctld-departure-stops-before-the-handover",
        "charms/slurmctld/src/departure.py::Departure._leave",
        "        self._hand_over()\n        self.manager.service.stop_for_good()\n",
        "        self.manager.service.stop_for_good()\n        self._hand_over()\n",
        "tests/unit/slurmctld/test_departure.py::"
        "test_the_controller_in_charge_hands_over_then_stops_for_good",
    ),
    Mutation(
        "fence-holds-nothing-busy",
        "charms/slurmctld/src/programs/fence.sh",
        '( cd "$checkpoint" && exec sleep infinity )',
        "( exec sleep infinity )",
        "tests/unit/slurmctld/test_ha_fence.py::test_the_watchdog_holds_the_share_busy_until_it_stops",
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
        path.write_text(mutated(job.mutation, running.original.decode()))
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
    failed = [line for line in job.output.split("\n") if line.startswith("FAILED")]
    verdict = "killed" if job.status == TESTS_FAILED else "SURVIVED"
    by = failed[0].removeprefix("FAILED ").split(" - ")[0] if failed else "-"
    assert job.mutation
    print(f"{job.mutation.name}: {verdict} by {by} ({job.seconds:.1f} s)", flush=True)


class TargetError(Exception):
    """A mutation's target does not match its file (the message names the mutant)."""


@functools.lru_cache(maxsize=64)
def parsed(text: str) -> ast.Module:
    """Parse a Python module's source, once per text (a file holds many mutants' targets)."""
    return ast.parse(text)


def symbol_span(text: str, symbol: str) -> tuple[int, int]:
    """Return where `symbol`'s source starts and ends in `text`, a Python module's source.

    From its first decorator's line (or its own first line) to the end of its last line.
    Raises ValueError if the symbol is not defined, or is defined more than once.
    """
    found: list[ast.stmt] = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = prefix + node.name
                if name == symbol:
                    found.append(node)
                elif symbol.startswith(f"{name}."):
                    visit(node.body, f"{name}.")
            elif isinstance(node, ast.Assign | ast.AnnAssign) and not prefix:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == symbol for t in targets):
                    found.append(node)

    visit(parsed(text).body, "")
    if len(found) != 1:
        raise ValueError(f"{symbol} is defined {len(found)} times")
    node = found[0]
    decorators = getattr(node, "decorator_list", [])
    first = min([node.lineno] + [d.lineno for d in decorators])
    lines = text.split("\n")
    start = sum(len(line) + 1 for line in lines[: first - 1])
    end = sum(len(line) + 1 for line in lines[: node.end_lineno])
    return start, min(end, len(text))


def fragment_at(mutation: Mutation, text: str) -> int:
    """Return where the mutation's original text is in `text`, its file's content.

    Raises:
        TargetError: the symbol is not in the file (or is there twice), or the original text
            is not in the symbol's source exactly once.

    """
    start, end = 0, len(text)
    where = mutation.path
    if mutation.symbol is not None:
        where = mutation.target
        try:
            start, end = symbol_span(text, mutation.symbol)
        except (SyntaxError, ValueError) as error:
            raise TargetError(f"{mutation.name}: {mutation.target}: {error}") from None
    count = text.count(mutation.original, start, end)
    if count != 1:
        raise TargetError(
            f"{mutation.name}: the original text is in {where} {count} times, not once: "
            f"{mutation.original!r}"
        )
    return text.index(mutation.original, start, end)


def mutated(mutation: Mutation, text: str) -> str:
    """Return `text` (the target's file) with the mutation applied inside its symbol."""
    at = fragment_at(mutation, text)
    return text[:at] + mutation.mutant + text[at + len(mutation.original) :]


def target_problems(mutations: list[Mutation], root: Path = ROOT) -> list[str]:
    """Return what is wrong with each mutation's target in the tree at `root` (all at once)."""
    problems: list[str] = []
    for mutation in mutations:
        if mutation.path.endswith(".py") and mutation.symbol is None:
            problems.append(f"{mutation.name}: {mutation.target} names no symbol (path::symbol)")
            continue
        try:
            fragment_at(mutation, (root / mutation.path).read_text())
        except FileNotFoundError:
            problems.append(f"{mutation.name}: {mutation.path} does not exist")
        except TargetError as error:
            problems.append(str(error))
    return problems


def main(arguments: list[str]) -> int:
    """Run the named mutations (default: all); return 1 if any survives.

    First every target must match (`--check` stops there), then the baseline: every chosen
    mutation's tests must pass unmutated (a red baseline would "kill" every mutant).
    """
    names = [a for a in arguments if a != "--check"]
    unknown = sorted(set(names) - {m.name for m in MUTATIONS})
    if unknown:
        raise SystemExit(f"no mutation is called {', '.join(unknown)}")
    chosen = [m for m in MUTATIONS if not names or m.name in names]
    problems = target_problems(chosen)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} of {len(chosen)} targets do not match", file=sys.stderr)
        return 1
    if "--check" in arguments:
        print(f"all {len(chosen)} targets match")
        return 0
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
    broken = [job for job in mutants if job.status not in (0, TESTS_FAILED)]
    for job in broken:
        print(f"{job.name}: pytest exit status {job.status}, not a test failure:\n{job.output}")
    return 0 if all(job.status == TESTS_FAILED for job in mutants) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
