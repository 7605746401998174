"""The table (Markdown) and the hook-cost table, from the result document."""

from __future__ import annotations

import statistics
from typing import Any

NOT_MEASURED = "not measured"


def _ratio(value: float | None, floor: float | None) -> str:
    if value is None or not floor:
        return "-"
    return f"{value / floor:.1f}x"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _median(items: list[dict[str, Any]], key: str) -> float | None:
    values = sorted(v for item in items if (v := item.get(key)) is not None)
    if not values:
        return None
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def _max(items: list[dict[str, Any]], key: str) -> float | None:
    values = [v for item in items if (v := item.get(key)) is not None]
    return max(values) if values else None


def enlistment_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 1: total, boot, charm and Slurm parts, beside the bare slurmd floor."""
    nodes, bare = figures.get("enlistment", []), figures.get("bare", [])
    if not nodes or not bare:
        return [["1", "Enlistment", "not measured", "-", "-"]]
    total, floor = _median(nodes, "total_s"), _median(bare, "total_s")
    boot, bare_boot = _median(nodes, "boot_s"), _median(bare, "boot_s")
    slurm, bare_slurm = _median(nodes, "slurm_s"), _median(bare, "slurm_s")
    charm = _median(nodes, "charm_until_slurmd_start_s")
    return [
        [
            "1",
            f"Enlistment: add_unit to idle in sinfo (median of {len(nodes)}, max)",
            f"{_s(total)} (max {_s(_max(nodes, 'total_s'))})",
            f"bare `slurmd -Z` on a new machine: {_s(floor)} ({len(bare)} runs)",
            _ratio(total, floor),
        ],
        ["1a", "  machine boot", _s(boot), _s(bare_boot), _ratio(boot, bare_boot)],
        [
            "1b",
            "  charm: add_unit to slurmd start, less boot",
            _s(charm),
            f"key copy by hand: {_s(_median(bare, 'key_copy_s'))}",
            "-",
        ],
        [
            "1c",
            "  Slurm: slurmd start to idle",
            _s(slurm),
            _s(bare_slurm),
            _ratio(slurm, bare_slurm),
        ],
        [
            "1d",
            "  hooks of the new unit (sum, overlaps 1b/1c)",
            _s(_median(nodes, "hooks_s")),
            "-",
            "-",
        ],
    ]


def work_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 2: reconfigures and slurm.conf writes per added node, dynamic vs static."""
    dynamic, static = figures.get("controller_work"), figures.get("static_method")
    if not dynamic or not static:
        return [["2", "Controller work per added node", "not measured", "-", "-"]]
    added = max(dynamic["added_nodes"], 1)
    count = max(static["nodes"], 1)
    reconf = static["reconfigure_until_answering_s"]
    at_n = static["reconfigure_dynamic_cluster_s"]
    return [
        [
            "2",
            f"Controller work per added node (1 to {added + 1})",
            f"{dynamic['reconfigures'] / added:.2f} reconfigures, "
            f"{dynamic['conf_writes'] / added:.2f} slurm.conf writes",
            f"static NodeName lines: {static['reconfigures'] / count:.2f} reconfigures, "
            f"{static['conf_writes'] / count:.2f} writes",
            "target 0: "
            + ("met" if dynamic["reconfigures"] == dynamic["conf_writes"] == 0 else "MISSED"),
        ],
        [
            "2b",
            f"scontrol reconfigure until answering, {added + 1} nodes",
            f"never run (one at {added + 1} nodes costs {_s(at_n['answering'])})",
            f"static: {_s(reconf['median'])} per node (max {_s(reconf['max'])}), "
            f"{_s(static['controller_seconds_total'])} in all",
            "-",
        ],
    ]


def scale_in_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 3: idle and busy departures."""
    idle, busy, floor = figures.get("scale_in_idle"), figures.get("scale_in_busy"), None
    floors = [b["departure_s"] for b in figures.get("bare", []) if "departure_s" in b]
    if floors:
        floor = sorted(floors)[len(floors) // 2]
    rows: list[list[str]] = []
    if idle:
        rows.append(
            [
                "3",
                "Scale-in, idle node: remove_unit to gone from sinfo (to machine gone)",
                f"{_s(idle['node_gone_s'])} ({_s(idle.get('machine_gone_s'))})",
                f"by hand (drain, stop slurmd, delete): {_s(floor)}",
                _ratio(idle["node_gone_s"], floor),
            ]
        )
    if busy:
        rows.append(
            [
                "3b",
                f"Scale-in, node running a {busy['job_seconds']} s job: gone after the job's end",
                f"{_s(busy['after_job_end_s'])} after (job {busy['job_state']}; machine gone "
                f"{_s(busy.get('machine_gone_s'))} after remove_unit)",
                "the job's end (0 s)",
                "-",
            ]
        )
    return rows or [["3", "Scale-in", "not measured", "-", "-"]]


def throughput_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 5: submissions per second and time to complete, then the comparator pairs."""
    out = figures.get("throughput")
    if not out:
        return [["5", "Controller throughput", "not measured", "-", "-"]]
    return [
        [
            "5",
            f"Throughput: {out['jobs']} sbatch /bin/true from the login node, "
            f"{out['nodes']} nodes",
            f"{out['submissions_per_s']} submissions/s; "
            f"all complete in {_s(out['all_complete_s'])}",
            "-",
            "-",
        ],
        _pair_row(
            figures,
            "5a",
            "StateSaveLocation on the shared filesystem (use-network-state)",
            "throughput_shared",
            figures.get("state_save", NOT_MEASURED),
        ),
        _pair_row(
            figures,
            "5b",
            "with accounting (slurmdbd + MySQL stand-in)",
            "throughput_accounting",
            figures.get("accounting", NOT_MEASURED),
        ),
    ]


def _pair_row(
    figures: dict[str, Any], number: str, what: str, key: str, waiting: str
) -> list[str]:
    """A comparator pair of throughput runs: this run beside the run before it."""
    run = figures.get(key)
    if not run:
        return [number, f"  {what}", waiting, "-", "-"]
    base = figures[run["baseline"]]
    extra = f"; {run['accounted_jobs']} jobs in sacct" if "accounted_jobs" in run else ""
    return [
        number,
        f"  {what}, {run['jobs']} jobs, {run['nodes']} nodes{extra}",
        f"{run['submissions_per_s']}/s; complete in {_s(run['all_complete_s'])}",
        f"{run['baseline'].removeprefix('throughput_')} just before: "
        f"{base['submissions_per_s']}/s; {_s(base['all_complete_s'])}",
        f"{run['submissions_per_s'] / base['submissions_per_s']:.2f}x rate, "
        + _ratio(run["all_complete_s"], base["all_complete_s"])
        + " time",
    ]


def hook_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 6: each charm's hooks overall, and config-changed with many partitions."""
    rows: list[list[str]] = []
    for charm in ("slurmctld", "slurmd"):
        hooks = figures.get("hooks", {}).get(charm, {})
        if not hooks:
            continue
        slowest = max(hooks.items(), key=lambda item: item[1]["max"] or 0)
        medians = [h["median"] for h in hooks.values()]
        rows.append(
            [
                "6",
                f"Hook cost, {charm} ({sum(h['n'] for h in hooks.values())} hooks)",
                f"medians {min(medians):.1f}-{max(medians):.1f} s; slowest {slowest[0]} "
                f"max {slowest[1]['max']:.1f} s",
                "per hook: see the hook table",
                "-",
            ]
        )
    one, many = figures.get("config_changed_1"), figures.get("config_changed_many")
    if one and many:
        rows.append(
            [
                "6b",
                f"slurmctld config-changed, {many['partitions']} partitions"
                + (" (20 asked: see notes)" if many["partitions"] < 20 else ""),
                _s(many["hook_s"]),
                f"{one['partitions']} partition: {_s(one['hook_s'])}",
                _ratio(many["hook_s"], one["hook_s"]),
            ]
        )
    return rows


def hook_tool_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 6c: a Python process per tool call (before) against one server per hook."""
    tools = figures.get("hook_tools")
    if not tools:
        return []
    before, after = tools["modes"]["per_call"], tools["modes"]["served"]
    bare = tools["bare"]["total_s"]
    served, per_call = after["enlistment_s"]["median"], before["enlistment_s"]["median"]
    rows = [
        [
            "6c",
            f"Enlistment, tool server per hook (median of {after['enlistment_s']['n']})",
            f"{_s(served)} ({_ratio(served, bare)} of bare)",
            f"a Python per tool call: {_s(per_call)} "
            f"({_ratio(per_call, bare)} of bare {_s(bare)})",
            _ratio(served, per_call),
        ]
    ]
    for hook in tools["measured_hooks"]:
        new, old = after["hooks"].get(hook), before["hooks"].get(hook)
        if not new or not old or new["median"] is None or old["median"] is None:
            continue
        rows.append(
            [
                "6c",
                f"  slurmd {hook}, median (n {new['n']} / {old['n']})",
                f"{new['median']:.2f} s",
                f"a Python per tool call: {old['median']:.2f} s",
                _ratio(new["median"], old["median"]),
            ]
        )
    return rows


def controller_hook_trend(steps: list[dict[str, Any]]) -> str:
    """The controller's hook seconds per added node over the first and the last three steps
    (medians: one step's hooks can meet another's, and a short last step weighs a hook more);
    nothing for runs from before the figure had them."""
    if "controller_hook_s_per_node" not in steps[0]:
        return ""
    first, last = steps[:3], steps[-3:]

    def median(chosen: list[dict[str, Any]], key: str) -> float:
        return statistics.median(step[key] for step in chosen)

    return (
        f"; controller hooks per added node {median(first, 'controller_hook_s_per_node')} s "
        f"at {first[0]['nodes']}-{first[-1]['nodes']} nodes, "
        f"{median(last, 'controller_hook_s_per_node')} s at {last[0]['nodes']}-"
        f"{last[-1]['nodes']} (slurmd-relation hooks "
        f"{median(first, 'controller_relation_hooks_per_node')} to "
        f"{median(last, 'controller_relation_hooks_per_node')} per node)"
    )


def scale_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 7: how far one host went, and what the controller paid per node."""
    scale = figures.get("scale")
    if not scale or not scale["steps"]:
        return [["7", "Scale", "not measured", "-", "-"]]
    first, last = scale["steps"][0], scale["steps"][-1]
    added = sum(s["added"] for s in scale["steps"])
    work = sum(s["reconfigures"] + s["conf_writes"] for s in scale["steps"])
    idle = scale.get("idle_machine", {})
    return [
        [
            "7",
            f"Scale: dynamic nodes on one host (stopped at {scale['stopped_by']})",
            f"{last['nodes']} nodes; slurmctld RSS {first['slurmctld_rss_mib']} to "
            f"{last['slurmctld_rss_mib']} MiB; "
            f"sinfo {first['sinfo_ms']} to {last['sinfo_ms']} ms; "
            f"{work / max(added, 1):.2f} controller writes+reconfigures per node"
            + controller_hook_trend(scale["steps"]),
            f"idle lab machine: {idle.get('rss_mib', '-')} MiB, "
            f"{idle.get('cpu_percent_of_one_core', '-')}% of a core",
            f"~{scale.get('fits_in_host_memory', '-')} would fit in host memory "
            f"({max(scale.get('host_mib_per_node', 0), scale['compute_unit_machine']['rss_mib'])}"
            " MiB per node)",
        ]
    ]


def failover_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 4, per timeout of the sweep: per fault kind, from the fault to the backup in
    charge and to a client served; then the spurious takeovers and fences without a fault."""
    failover = figures.get("failover")
    if not failover:
        why = figures.get("failover_skipped", NOT_MEASURED)
        return [["4", "Failover", why, "SlurmctldTimeout 120 s (Slurm's default)", "-"]]
    comparator = failover["comparator_s"]
    rows: list[list[str]] = []
    for block in failover["sweep"]:
        timers = (
            f"SlurmctldTimeout {block['slurmctld_timeout']} s "
            f"(MessageTimeout {block['message_timeout']} s)"
        )
        for kind, summary in block["summary"].items():
            in_charge, served = summary["in_charge_s"], summary["served_s"]
            rows.append(
                [
                    "4",
                    f"Failover, {kind}, {timers} ({failover['runs']} runs): fault to backup "
                    "in charge / to a login node served",
                    f"median {in_charge['median']:.1f} s, max {in_charge['max']:.1f} s / "
                    f"median {served['median']:.1f} s, max {served['max']:.1f} s",
                    f"SlurmctldTimeout {comparator} s (Slurm's default)",
                    f"{in_charge['median'] / comparator:.2f}x",
                ]
            )
        load, spurious, burst = block["load_1min"], block["spurious"], block["burst"]
        rows.append(
            [
                "4s",
                f"Spurious takeovers / fences, {timers}: {block['unfaulted_s']:.0f} s without "
                f"a fault, {burst['jobs']} sbatch in {burst['s']:.0f} s ({burst['failed']} "
                f"failed), host load {load['median']:.1f} (max {load['max']:.1f})",
                f"{len(spurious['takeovers'])} / {len(spurious['fences'])}",
                "0 (the goal)",
                "-",
            ]
        )
    return rows


GOALS = {
    "1": "charm within 1.15x an ops charm that only starts slurmd (issue 41; that floor is"
    " `benchmarks.lab.enlist_compare --ops-floor`'s)",
    "2": "0 per node",
    "4": "under 10 s for kill and power (issue 41)",
    "4s": "0, under CI's load",
    "7": "controller cost per node flat in N",
    "9": "within 1.5x one node's enlistment plus the pass interval (issue 41)",
    "9b": "under 2 s; under 0.5 s when nothing changed (issue 41)",
}
"""The goal of each figure that has one, in the row of its first line."""


def with_goals(rows: list[list[str]]) -> list[list[str]]:
    """Each row with its figure's goal (`GOALS`) as a last column, on the figure's first row."""
    seen: set[str] = set()
    out: list[list[str]] = []
    for row in rows:
        first = row[0] not in seen
        seen.add(row[0])
        out.append([*row, GOALS.get(row[0], "-") if first else ""])
    return out


def table(figures: dict[str, Any]) -> str:
    """The main table, as Markdown."""
    rows = [
        *enlistment_rows(figures),
        *work_rows(figures),
        *scale_in_rows(figures),
        *failover_rows(figures),
        *throughput_rows(figures),
        *hook_rows(figures),
        *hook_tool_rows(figures),
        *scale_rows(figures),
        *exporter_rows(figures),
        *autoscale_rows(figures),
        *rebuild_rows(figures),
        *vm_rows(figures),
    ]
    return markdown(
        ["#", "Figure", "Charms", "Comparator (same run)", "Ratio", "Goal"], with_goals(rows)
    )


def rebuild_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 10: a node's time out in a rollout (upgrade=true) beside a bare scontrol reboot."""
    out = figures.get("rebuild")
    if not out:
        return [["10", "Rolling rebuild", "not measured", "-", "-"]]
    bare, ours = out["bare_reboot_s"], out["rollout_node_s"]
    per_node = out["rollout_per_node_s"]
    return [
        [
            "10",
            f"Rollout of {out['nodes']} node(s), upgrade=true, max-unavailable=1: {out['node']}"
            " out (reboot issued to idle on its new boot); all nodes: median / max; "
            "rollout total per node",
            f"{ours} s; {per_node['median']} / {per_node['max']} s; "
            f"{out['rollout_total_per_node_s']} s",
            f"bare `scontrol reboot {out['node']}`: {bare} s out; {out['bare_total_s']} s "
            "command to back",
            f"{out['rollout_total_per_node_s'] / out['bare_total_s']:.1f}x (command to back)"
            if out["bare_total_s"]
            else "-",
        ]
    ]


def vm_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 11 (`--vm`): a VM's boot, cost and enlistment beside a bare slurmd on a VM."""
    out = figures.get("vm")
    if not out:
        return []  # opt-in: no row unless asked for
    charm, bare = out["charm"], out["bare"]
    idle = charm["idle"]
    return [
        [
            "11a",
            "VM: add_unit to the unit's first hook (lab boot: qemu start to systemd up)",
            f"{charm['to_first_hook_s']} s ({charm['boot_s']} s)",
            f"bare VM boot: {bare['boot_s']} s",
            "-",
        ],
        [
            "11b",
            f"VM idle on the host: qemu RSS, CPU over {idle['sampled_s']} s",
            f"{idle['qemu_rss_mib']} MiB, {idle['qemu_cpu_percent_of_one_core']} % of a core",
            "-",
            "-",
        ],
        [
            "11c",
            "Enlistment on a VM: add_unit to idle",
            f"{charm['enlistment_s']} s",
            f"bare `slurmd -Z` on a VM: {bare['total_s']} s (boot {bare['boot_s']} s,"
            f" slurmd to idle {bare['slurm_s']} s)",
            f"{charm['enlistment_over_bare']}x" if charm["enlistment_over_bare"] else "-",
        ],
    ]


def exporter_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 8: the exporter's pass and scrape beside a naive exporter's scrape."""
    out = figures.get("exporter")
    if not out:
        return [["8", "Slurm exporter", "not measured", "-", "-"]]
    ours, naive = out["exporter"], out["naive"]
    return [
        [
            "8",
            f"Exporter at {out['nodes']} nodes, {out['pending_jobs']} pending jobs "
            f"({out['runs']} runs): pass wall s / slurmctld CPU s / RPCs; scrape",
            f"pass {ours['wall_s_median']} s / {ours['slurmctld_cpu_s_median']} s / "
            f"{sum(ours['rpcs_per_pass'].values())}; scrape {ours['scrape_s_median']} s",
            f"naive squeue+sinfo --json per scrape: {naive['wall_s_median']} s / "
            f"{naive['slurmctld_cpu_s_median']} s / {sum(naive['rpcs_per_pass'].values())}",
            f"{naive['wall_s_median'] / max(ours['scrape_s_median'], 1e-6):.0f}x (scrape)",
        ]
    ]


def autoscale_rows(figures: dict[str, Any]) -> list[list[str]]:
    """Figure 9: slurm-autoscale's scale-from-zero latency and its cost per pass."""
    zero, cost = figures.get("autoscale_from_zero"), figures.get("autoscale_pass")
    enlistment = _median(figures.get("enlistment", []), "total_s")
    rows: list[list[str]] = []
    if not zero:
        rows.append(["9", "slurm-autoscale, scale from zero", "not measured", "-", "-"])
    else:
        rows.append(
            [
                "9",
                f"Scale from zero: a {zero['job_nodes']}-node job, submission to running "
                "(and to the end of the one pass adding the units: the lab's add_unit returns "
                "once every hook it caused has run)",
                f"{_s(zero['submit_to_running_s'])} (pass {_s(zero['pass_s'])})",
                f"enlistment of one unit (figure 1): {_s(enlistment)}",
                _ratio(zero["submit_to_running_s"], enlistment),
            ]
        )
    if not cost:
        rows.append(["9b", "slurm-autoscale, cost per pass", "not measured", "-", "-"])
        return rows
    rows.append(
        [
            "9b",
            f"Autoscaler pass at {cost['nodes']} nodes, {cost['pending_jobs']} pending jobs "
            f"({cost['runs']} runs): pass / juju status / "
            f"{'scaling-view action' if 'view_action_s_median' in cost else 'token + 3 GETs'}"
            " / own CPU; "
            "slurmctld CPU",
            f"{_s(cost['pass_s_median'])} / {_s(cost['juju_status_s_median'])} / "
            f"{_s(_read_slurm_s(cost))} / "
            f"{cost['own_cpu_s_median']:.2f} s; {cost['slurmctld_cpu_s_median']:.2f} s",
            f"answer {_answer_bytes(cost) / 2**10:.1f} KiB; "
            f"{len(cost['failed_passes'])} passes failed{_comparators(cost)}",
            "-",
        ]
    )
    return rows


def _comparators(cost: dict[str, Any]) -> str:
    """Issue 41's comparators of a pass, timed in the controller in the same run."""
    times = cost.get("comparators_s_median")
    if not times:
        return ""
    return (
        f"; unchanged pass {_s(cost['unchanged_pass_s_median'])}; on the controller: floor "
        f"`squeue -h -t PD -o '%D %P %r'` {times['floor_squeue']:.2f} s, the action's squeue "
        f"{times['action_squeue']:.2f} s, `scontrol show jobs --json` {times['json_jobs']:.2f} s;"
        f" `juju run` of an action reading no Slurm {times['juju_run_no_slurm']:.2f} s"
    )


def _read_slurm_s(cost: dict[str, Any]) -> float:
    """The pass's read of Slurm: the scaling-view action (before issue 33: token and GETs)."""
    if "view_action_s_median" in cost:
        return cost["view_action_s_median"]
    return cost["token_action_s_median"] + cost["rest_gets_s_median"]


def _answer_bytes(cost: dict[str, Any]) -> int:
    """What the pass read: the action's result (before issue 33: slurmrestd's answers)."""
    return cost.get("result_bytes") or sum(cost["bytes"].values())


def hook_table(figures: dict[str, Any]) -> str:
    """Every hook of slurmctld and slurmd: median, max, count."""
    rows: list[list[str]] = []
    for charm, hooks in figures.get("hooks", {}).items():
        for hook, stats in hooks.items():
            rows.append(
                [charm, hook, f"{stats['median']:.2f}", f"{stats['max']:.2f}", str(stats["n"])]
            )
    return markdown(["Charm", "Hook", "Median s", "Max s", "Runs"], rows)


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)
