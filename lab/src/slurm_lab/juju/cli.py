"""`slurm-lab juju VERB`: the juju CLI verbs a charm developer uses, on the lab's model.

Each verb takes the arguments `juju VERB` takes (the subset that makes sense on the lab) and
calls the matching `jubilant.Juju` method of `LabJuju`. The lab runs the hooks a change causes
before the call returns, so after `deploy`, `config` or `remove-unit` the model is settled,
where juju would return at once. Lab-only options say so in their help.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jubilant
import yaml

from slurm_lab import rootfs
from slurm_lab.errors import LabError
from slurm_lab.juju import charms
from slurm_lab.juju.shell import command_string

if TYPE_CHECKING:
    from slurm_lab.juju.backend import LabJuju
    from slurm_lab.machines import Lab

Handler = Callable[[argparse.Namespace], int]
Setup = Callable[[argparse.ArgumentParser], None]
AddCommand = Callable[[str, str, Setup, Handler], None]

DEFAULT_WAIT_TIMEOUT = 1800.0
EXEC_WAIT = 300.0
"""How long `exec` waits for its command unless `--wait` says (lab/README.md, "exec")."""
_TAG = re.compile(r"^(unit-[a-z0-9-]+-\d+): ")
_LEVEL = re.compile(r"^unit-[a-z0-9-]+-\d+: \S+ ([A-Z]+) ")
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
"""juju-log's levels, lowest first; `debug-log` shows INFO and up unless `--level` says."""
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def make_backend(args: argparse.Namespace) -> LabJuju:
    """Open the lab's model (tests replace this with a fake)."""
    from slurm_lab.juju.backend import LabJuju  # noqa: PLC0415
    from slurm_lab.machines import Lab  # noqa: PLC0415

    return LabJuju(Lab(args.state_dir))


def make_lab(args: argparse.Namespace) -> Lab:
    """Open the lab's machines (tests replace this with a fake)."""
    from slurm_lab.machines import Lab  # noqa: PLC0415

    return Lab(args.state_dir)


# --- argument types ------------------------------------------------------------------------------


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key, value


def _count(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def _duration(text: str) -> float:
    """Seconds from a Go-style duration (`90s`, `5m`, `1h30m`) or a bare number of seconds."""
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + unit for n, unit in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 5m, 1h30m)")
    return sum(float(n) * _SECONDS[unit] for n, unit in parts)


def _action_value(raw: str) -> Any:
    """Read an action parameter's value as YAML, like `juju run` (`true` is a boolean)."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw
    if value is None:
        return raw
    if isinstance(value, bool | int | float | str | list | dict):
        return value  # pyright: ignore[reportUnknownVariableType]
    return raw  # dates and other YAML-only types stay as typed


# --- output --------------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    ]


def _unit_row(name: str, unit: Mapping[str, Any], indent: str) -> list[str]:
    workload, agent = unit["workload-status"], unit["juju-status"]
    return [
        f"{indent}{name}{'*' if unit.get('leader') else ''}",
        workload["current"],
        agent["current"],
        str(unit.get("machine", "")),
        unit.get("public-address", ""),
        " ".join(unit.get("open-ports") or []),
        workload.get("message", ""),
    ]


def format_status(doc: Mapping[str, Any]) -> str:
    """Render a `juju status --format json` document as juju's tabular status."""
    model = doc["model"]
    lines = _table(
        [
            ["Model", "Controller", "Cloud/Region", "Version", "Timestamp"],
            [
                model["name"],
                model["controller"],
                f"{model['cloud']}/{model['region']}",
                model["version"],
                time.strftime("%H:%M:%S"),
            ],
        ]
    )
    apps: Mapping[str, Any] = doc["applications"]
    app_rows = [["App", "Version", "Status", "Scale", "Charm", "Rev", "Message"]]
    unit_rows = [["Unit", "Workload", "Agent", "Machine", "Address", "Ports", "Message"]]
    for name, app in sorted(apps.items()):
        status = app["application-status"]
        app_rows.append(
            [
                name,
                app.get("version", ""),
                status["current"],
                str(app.get("scale", len(app.get("units") or {}))),
                app["charm-name"],
                str(app.get("charm-rev", 0)),
                status.get("message", ""),
            ]
        )
        for unit_name, unit in sorted((app.get("units") or {}).items()):
            unit_rows.append(_unit_row(unit_name, unit, ""))
            for sub_name, sub in sorted((unit.get("subordinates") or {}).items()):
                unit_rows.append(_unit_row(sub_name, sub, "  "))
    machine_rows = [["Machine", "State", "Address", "Inst id", "Base"]]
    for machine_id, machine in sorted(doc.get("machines", {}).items(), key=lambda m: int(m[0])):
        base = machine.get("base") or {}
        machine_rows.append(
            [
                machine_id,
                machine["juju-status"]["current"],
                machine.get("dns-name", ""),
                machine.get("instance-id", ""),
                f"{base.get('name', '')}@{base.get('channel', '')}",
            ]
        )
    for rows in (app_rows, unit_rows, machine_rows):
        if len(rows) > 1:
            lines += ["", *_table(rows)]
    if not apps:
        lines += ["", f"Model {model['name']!r} is empty."]
    return "\n".join(lines)


def _print_task_output(task: jubilant.Task) -> None:
    print(task.stdout, end="")
    print(task.stderr, end="", file=sys.stderr)


# --- verbs ---------------------------------------------------------------------------------------


def _setup_deploy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "charm", help="local charm directory, a charm name under charms/, or a bundle YAML"
    )
    parser.add_argument("application", nargs="?", help="application name (default: the charm's)")
    parser.add_argument("-n", "--num-units", type=_count, default=None, help="units (default 1)")
    parser.add_argument(
        "--config",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a config option (repeat for more)",
    )
    parser.add_argument(
        "--constraints",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="a constraint (repeat for more); lab only: lab-gpus=COUNT[:MODEL] simulates GPUs",
    )
    parser.add_argument(
        "--wait",
        action="store_true",
        help="lab only: then wait until every unit is active; exit 1 if one errors",
    )
    parser.add_argument(
        "--timeout", type=_duration, default=DEFAULT_WAIT_TIMEOUT, help="how long --wait waits"
    )


def _deploy(args: argparse.Namespace) -> int:
    juju = make_backend(args)
    started = time.monotonic()
    target = Path(args.charm)
    if target.suffix in (".yaml", ".yml"):
        if not target.is_file():
            raise LabError(f"deploy: no bundle file at {target}")
        if args.application or args.num_units or args.config or args.constraints:
            raise LabError(
                "deploy: a bundle takes no application name, -n, --config or --constraints"
            )
        juju.deploy(target.resolve())
        print(f"Deployed bundle {args.charm}")
    else:
        charm: str | Path = target.resolve() if target.exists() else args.charm
        juju.deploy(
            charm,
            args.application,
            config=dict(args.config) or None,
            constraints=dict(args.constraints) or None,
            num_units=args.num_units or 1,
        )
        print(f"Deployed {args.charm}" + (f" as {args.application}" if args.application else ""))
    if not args.wait:
        return 0
    try:
        juju.wait(jubilant.all_active, error=jubilant.any_error, timeout=args.timeout)
    except (jubilant.WaitError, TimeoutError) as e:
        print(format_status(juju.status_dict()))
        print(juju.debug_log(limit=200), end="", file=sys.stderr)
        print(f"ERROR {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    print(format_status(juju.status_dict()))
    print(f"\nactive in {time.monotonic() - started:.0f}s")
    return 0


def _setup_add_unit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("application")
    parser.add_argument("-n", "--num-units", type=_count, default=1)


def _add_unit(args: argparse.Namespace) -> int:
    make_backend(args).add_unit(args.application, num_units=args.num_units)
    return 0


def _add_removal_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true", help="remove even if in error")
    parser.add_argument("--no-prompt", action="store_true", help="accepted; the lab never asks")


def _setup_remove_unit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("units", nargs="+", metavar="UNIT", help="e.g. slurmd/1")
    _add_removal_flags(parser)


def _remove_unit(args: argparse.Namespace) -> int:
    for name in args.units:
        if "/" not in name:
            raise LabError(f'remove-unit: "{name}" is not a unit; see remove-application')
    make_backend(args).remove_unit(*args.units, force=args.force)
    for name in args.units:
        print(f"removed unit {name}")
    return 0


def _setup_remove_application(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("applications", nargs="+", metavar="APPLICATION")
    _add_removal_flags(parser)


def _remove_application(args: argparse.Namespace) -> int:
    make_backend(args).remove_application(*args.applications, force=args.force)
    for name in args.applications:
        print(f"removed application {name}")
    return 0


def _setup_relation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("first", metavar="APP[:ENDPOINT]")
    parser.add_argument("second", metavar="APP[:ENDPOINT]")


def _integrate(args: argparse.Namespace) -> int:
    make_backend(args).integrate(args.first, args.second)
    return 0


def _setup_remove_relation(parser: argparse.ArgumentParser) -> None:
    _setup_relation(parser)
    parser.add_argument("--force", action="store_true")


def _remove_relation(args: argparse.Namespace) -> int:
    make_backend(args).remove_relation(args.first, args.second, force=args.force)
    return 0


def _setup_config(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("application")
    parser.add_argument(
        "settings",
        nargs="*",
        metavar="KEY | KEY=VALUE",
        help="no argument: every option; KEY: its value; KEY=VALUE...: set them",
    )
    parser.add_argument(
        "--reset", action="append", default=[], metavar="KEY[,KEY]", help="back to the default"
    )


def _config_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _config(args: argparse.Namespace) -> int:
    juju = make_backend(args)
    wanted = [s for s in args.settings if "=" not in s]
    values = dict(_key_value(s) for s in args.settings if "=" in s)
    reset = [key for item in args.reset for key in item.split(",") if key]
    if wanted and (values or reset):
        raise LabError("config: either get one key or set/reset keys, not both")
    if len(wanted) > 1:
        raise LabError("config: get one key at a time, or every key with none")
    if values:
        juju.config(args.application, values, reset=reset)
    elif reset:
        juju.config(args.application, reset=reset)
    else:
        current = juju.config(args.application)
        if wanted:
            if wanted[0] not in current:
                raise LabError(f'config: "{args.application}" has no option "{wanted[0]}"')
            print(_config_text(current[wanted[0]]))
        else:
            print(_yaml_with_blocks(_config_document(juju, args.application, current)), end="")
    return 0


def _config_document(juju: LabJuju, app_name: str, current: Mapping[str, Any]) -> dict[str, Any]:
    """Build what `juju config APP` prints: each option's default, description, source, value."""
    app = juju.state.apps[app_name]
    options: dict[str, Any] = (
        charms.load_spec(Path(app.charm_dir)).options if app.kind == "charm" else {}
    )
    return {
        "application": app_name,
        "charm": app.charm_name,
        "settings": {
            key: _config_setting(options.get(key) or {}, key in app.config, current.get(key))
            for key in sorted({*options, *current})
        },
    }


def _config_setting(option: Mapping[str, Any], set_by_user: bool, value: Any) -> dict[str, Any]:
    """One option as `juju config` shows it; an option with no default and no value is unset."""
    setting = {key: option[key] for key in ("default", "description") if key in option}
    if set_by_user:
        setting["source"] = "user"
    else:
        setting["source"] = "default" if "default" in option else "unset"
    if "type" in option:
        setting["type"] = option["type"]
    if value is not None:
        setting["value"] = value
    return setting


class _BlockDumper(yaml.SafeDumper):
    """YAML with multi-line strings as literal blocks (`|`), as juju prints descriptions."""


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _represent_text)


def _yaml_with_blocks(doc: Mapping[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_BlockDumper, sort_keys=False, default_flow_style=False)


def _setup_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("unit", help="e.g. slurmctld/0 or slurmctld/leader")
    parser.add_argument("action")
    parser.add_argument("params", nargs="*", type=_key_value, metavar="KEY=VALUE")
    parser.add_argument(
        "--string-args", action="store_true", help="pass values as strings, not YAML"
    )


def _run(args: argparse.Namespace) -> int:
    params = {k: v if args.string_args else _action_value(v) for k, v in args.params}
    try:
        task = make_backend(args).run(args.unit, args.action, params or None)
    except jubilant.TaskError as e:
        task = e.task
    for line in task.log:
        print(line, file=sys.stderr)
    if task.results:
        print(yaml.safe_dump(task.results, default_flow_style=False), end="")
    _print_task_output(task)
    if task.success:
        return 0
    reason = task.message or f"exit status {task.return_code}"
    print(f'ERROR action "{args.action}" on {args.unit} failed: {reason}', file=sys.stderr)
    return 1


def _setup_exec(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--unit", "-u", help="the unit whose machine runs the command")
    parser.add_argument(
        "--wait",
        type=_duration,
        default=EXEC_WAIT,
        help="how long to wait for the command (90s, 10m, 1h; default 5m); then it is killed",
    )
    parser.add_argument(
        "words",
        nargs=argparse.REMAINDER,
        metavar="[UNIT] -- COMMAND",
        help="the command; one argument is run as a shell script",
    )


def _exec_target(args: argparse.Namespace) -> tuple[str, list[str]]:
    """Split the unit from the command: `--unit U -- CMD...` (juju 3) or `U -- CMD...`."""
    words: list[str] = list(args.words)
    unit: str | None = args.unit
    if unit is None:
        if len(words) < 2 or words[1] != "--":
            raise LabError("exec: give the unit: exec --unit UNIT -- COMMAND")
        unit, words = words[0], words[1:]
    if words[:1] == ["--"]:
        words = words[1:]
    if not words:
        raise LabError("exec: no command given after --")
    return unit, words


def _exec(args: argparse.Namespace) -> int:
    unit, words = _exec_target(args)
    try:
        task = make_backend(args).exec(command_string(words), unit=unit, wait=args.wait)
    except jubilant.TaskError as e:
        task = e.task
    _print_task_output(task)
    return task.return_code


def _setup_status(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("tabular", "json", "yaml"), default="tabular")


def _status(args: argparse.Namespace) -> int:
    doc = make_backend(args).status_dict()
    if args.format == "json":
        print(json.dumps(doc))
    elif args.format == "yaml":
        print(yaml.safe_dump(doc, default_flow_style=False), end="")
    else:
        print(format_status(doc))
    return 0


def _setup_debug_log(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--lines", "-n", type=int, default=0, help="the last N entries (default: all; no tail)"
    )
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="ENTITY",
        help="only this unit (app/0, unit-app-0) or application's lines (repeat for more)",
    )
    parser.add_argument(
        "--level",
        type=str.upper,
        choices=LOG_LEVELS,
        default="INFO",
        help="the lowest level shown (default INFO: the model's logging-config on Juju)",
    )


def _entity_pattern(entity: str) -> re.Pattern[str]:
    if entity.startswith("unit-"):
        return re.compile(re.escape(entity))
    app, _, number = entity.partition("/")
    number_pattern = re.escape(number) if number else r"\d+"
    return re.compile(f"unit-{re.escape(app)}-{number_pattern}")


def _lines(text: str) -> list[str]:
    """Split at line feeds only, keeping them: a charm's message may hold a CR or U+2028."""
    lines = [f"{line}\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    return lines if lines[-1] else lines[:-1]


def _shown_at(level: str) -> Callable[[list[str]], bool]:
    """Whether an entry's level is `level` or above (an entry with no level is shown)."""
    lowest = LOG_LEVELS.index(level)

    def shown(entry: list[str]) -> bool:
        found = _LEVEL.match(entry[0])
        return not found or found[1] not in LOG_LEVELS or LOG_LEVELS.index(found[1]) >= lowest

    return shown


def filter_log(text: str, include: Iterable[str], last: int = 0, level: str = "INFO") -> str:
    """Keep the debug log's entries (a tagged line and its continuations) from some units.

    Only entries at `level` or above are kept, as Juju's debug-log shows what the model's
    logging-config lets through (`<root>=INFO` by default).
    """
    patterns = [_entity_pattern(entity) for entity in include]
    entries: list[list[str]] = []
    for line in _lines(text):
        if _TAG.match(line) or not entries:
            entries.append([line])
        else:
            entries[-1].append(line)
    entries = list(filter(_shown_at(level), entries))
    if patterns:
        entries = [
            entry
            for entry in entries
            if (tag := _TAG.match(entry[0])) and any(p.fullmatch(tag[1]) for p in patterns)
        ]
    return "".join(line for entry in entries[-last if last else 0 :] for line in entry)


def _debug_log(args: argparse.Namespace) -> int:
    text = make_backend(args).debug_log()
    print(filter_log(text, args.include, args.lines, args.level), end="")
    return 0


def _no_args(parser: argparse.ArgumentParser) -> None:
    del parser


def _destroy_model(args: argparse.Namespace) -> int:
    make_backend(args).destroy_lab_model()
    print("destroyed the lab model (machines gone, no hooks run)")
    return 0


VERBS: list[tuple[str, str, Setup, Handler]] = [
    ("deploy", "deploy a local charm or a bundle", _setup_deploy, _deploy),
    ("add-unit", "add units to an application", _setup_add_unit, _add_unit),
    ("remove-unit", "remove units (their machines go too)", _setup_remove_unit, _remove_unit),
    (
        "remove-application",
        "remove applications",
        _setup_remove_application,
        _remove_application,
    ),
    ("integrate", "integrate two applications", _setup_relation, _integrate),
    (
        "remove-relation",
        "remove an integration",
        _setup_remove_relation,
        _remove_relation,
    ),
    ("config", "get, set or reset an application's config", _setup_config, _config),
    ("run", "run an action: run UNIT ACTION [KEY=VALUE...]", _setup_run, _run),
    ("exec", "run a command on a unit: exec --unit UNIT -- COMMAND", _setup_exec, _exec),
    ("status", "the model's status", _setup_status, _status),
    ("debug-log", "the charms' log lines", _setup_debug_log, _debug_log),
    (
        "destroy-model",
        "lab only: destroy every unit's machine and forget the model (no hooks)",
        _no_args,
        _destroy_model,
    ),
]


# --- faults --------------------------------------------------------------------------------------

FAULTS: dict[str, str] = {
    "kill-daemon": "SIGKILL a daemon (default slurmctld) and keep it down (masked)",
    "revive-daemon": "unmask and start the daemon again",
    "power-off": "pull the plug: kill the machine, keep its disk and address",
    "power-on": "boot a powered-off machine again",
    "cut-network": "take the machine's link to the lab bridge down",
    "restore-network": "bring the machine's link up again",
}


def _setup_fault(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "fault",
        choices=list(FAULTS),
        help="; ".join(f"{name}: {text}" for name, text in FAULTS.items()),
    )
    parser.add_argument("target", help="a unit (slurmctld/0, slurmctld/leader) or a lab machine")
    parser.add_argument(
        "--daemon", default="slurmctld", help="the systemd unit kill-daemon/revive-daemon act on"
    )


def _fault_machine(args: argparse.Namespace) -> str:
    """Return the lab machine of `args.target`: a unit (resolved in the model) or a machine."""
    target: str = args.target
    if "/" not in target:
        return target
    model = make_backend(args).state
    app, _, number = target.partition("/")
    if number == "leader" and app in model.apps:
        target = model.apps[app].leader or target
    unit = model.units.get(target)
    if unit is None:
        raise LabError(f'fault: unit "{args.target}" not found')
    return unit.machine


def _fault(args: argparse.Namespace) -> int:
    lab = make_lab(args)
    name = _fault_machine(args)
    if args.fault == "kill-daemon":
        lab.get(name).kill_service(args.daemon)
    elif args.fault == "revive-daemon":
        lab.get(name).revive_service(args.daemon)
    elif args.fault == "power-off":
        lab.power_off(name)
    elif args.fault == "power-on":
        lab.power_on(name)
    elif args.fault == "cut-network":
        lab.cut_network(name)
    else:
        lab.restore_network(name)
    print(f"{args.fault}: {name}")
    return 0


def _setup_juju(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    for name, help, setup, handler in VERBS:
        verb = verbs.add_parser(name, help=help, description=help)
        setup(verb)
        verb.set_defaults(juju_handler=handler)


def _run_verb(args: argparse.Namespace) -> int:
    """Run the verb; the model's refusals (unknown unit, bad option) print like juju's."""
    handler: Handler = args.juju_handler
    try:
        return handler(args)
    except jubilant.CLIError as e:
        print((e.stderr or "").strip() or f"ERROR {e}", file=sys.stderr)
    except (ValueError, TimeoutError) as e:
        print(f"ERROR {e}", file=sys.stderr)
    return 1


def _setup_pack(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("charm_dirs", nargs="+", type=Path, help="charm directories")
    parser.add_argument(
        "--suite",
        choices=rootfs.SUITES,
        default=None,
        help="Debian suite of the machines the charms are for (default: $SLURM_LAB_SUITE, "
        "else trixie)",
    )
    parser.add_argument("--jobs", "-j", type=int, default=2, help="charms packed at once")


def _pack(args: argparse.Namespace) -> int:
    def pack(charm_dir: Path) -> str:
        started = time.monotonic()
        packed = charms.packed_charm(charm_dir, args.suite)
        size = packed.stat().st_size / 1e6
        return f"{packed}\t{size:.1f} MB\t{time.monotonic() - started:.1f}s"

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for line in pool.map(pack, args.charm_dirs):
            print(line)
    return 0


def register(add_command: AddCommand) -> None:
    """Add `slurm-lab juju VERB` and `slurm-lab fault FAULT TARGET` to `slurm-lab`."""
    add_command(
        "juju",
        "the lab's Juju model with juju's verbs: deploy, status, exec, run, config, ...",
        _setup_juju,
        _run_verb,
    )
    add_command(
        "fault",
        "lab only: inject a controller fault or undo it (kill-daemon, power-off, cut-network...)",
        _setup_fault,
        _fault,
    )
    add_command("pack", "pack charms for the lab machines (cached)", _setup_pack, _pack)
