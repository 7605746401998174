#!/usr/bin/python3 -SE
"""The lab's hook tools: one standard-library program installed under every hook-tool name.

Juju puts its hook tools (`relation-get`, `status-set`, `secret-get`, ...) on a hook's PATH as
links to one binary, `jujuc`, which asks the unit agent to answer from the hook context. This
program plays the agent's part in a lab machine: a hook starts it once as its tool server
(`serve`), and the links in `/var/lib/juju/tools/unit-<app>-<n>/` point to a bash client
(`jujuc.sh`) that hands each call to it. Run directly, it answers one call itself, dispatching
on the name it was run as (`argv[0]`, or `jujuc <tool> ...`).

The hook context is a JSON file the lab's engine writes before the hook (named by
`LAB_HOOK_CONTEXT`, checked against `JUJU_CONTEXT_ID`): the unit's view of the model (config,
leadership, relations and their data, secrets with revisions, ports, statuses, action
parameters, goal state, network). A tool reads it and records what the charm changed in the
same file, under a lock; the engine reads the file back when the hook ends and applies the
changes only if the hook exited 0, as Juju commits a hook context. Status and workload
version take effect at once, as Juju's status-set does (the engine shows them mid-hook).

Flags, output formats (`--format=json|yaml|smart`) and error texts follow Juju 3.6's
commands as ops (ops.hookcmds) calls and parses them; errors print `ERROR <message>` on
stderr and exit 1 (2 for a bad command line), as jujuc does. Only the standard library and
`hooktools.py` (the port rules, shipped beside this file) may be imported.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hmac
import json
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

CONTEXT_ENV = "LAB_HOOK_CONTEXT"
PORT_TOOLS = ("open-port", "close-port", "opened-ports")
"""Answered by `hooktools.run_tool` (imported only for them: every tool call starts Python)."""
SETTABLE_STATUSES = ("maintenance", "blocked", "waiting", "active")
LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
SECRET_KEY = re.compile(r"^([a-z](?:-?[a-z0-9]){2,})$")
ACTION_KEY = re.compile(r"^[a-z0-9](?:[a-z0-9-]*[a-z0-9])?$")
XID_ALPHABET = "0123456789abcdefghijklmnopqrstuv"
ROTATE_POLICIES = ("never", "hourly", "daily", "weekly", "monthly", "quarterly", "yearly")
MAX_SECRET_BYTES = 8 * 1024

Ctx = dict[str, Any]


class ToolError(Exception):
    """A tool refused the call: printed as `ERROR <message>`, exit status `code`."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# --- command line ------------------------------------------------------------------------------


class Args:
    """A parsed command line: flags by long name, positional arguments in order."""

    def __init__(self, flags: dict[str, Any], positional: list[str]) -> None:
        self.flags = flags
        self.positional = positional

    def get(self, name: str, default: Any = None) -> Any:
        """Return a flag's value (the default if it was not given)."""
        return self.flags.get(name, default)


def _parse_bool(name: str, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "t", "true"):
        return True
    if lowered in ("0", "f", "false"):
        return False
    raise ToolError(f'invalid boolean value "{text}" for flag --{name}', 2)


def parse_args(
    argv: list[str], spec: dict[str, str], aliases: dict[str, str] | None = None
) -> Args:
    """Parse flags as Juju's gnuflag does: `-x v`, `--xx=v`, `--flag[=bool]`, `--` ends flags.

    spec maps a long flag name to its kind: "bool", "str" or "int"; aliases maps a short or
    alternative name to the long one. Flags may come after positional arguments.
    """
    aliases = aliases or {}
    flags: dict[str, Any] = {}
    positional: list[str] = []
    words = list(argv)
    while words:
        word = words.pop(0)
        if word == "--":
            positional.extend(words)
            break
        if not word.startswith("-") or word == "-":
            positional.append(word)
            continue
        name, has_value, value = word.lstrip("-").partition("=")
        name = aliases.get(name, name)
        kind = spec.get(name)
        if kind is None:
            raise ToolError(f"flag provided but not defined: {word.split('=')[0]}", 2)
        if kind == "bool":
            flags[name] = _parse_bool(name, value) if has_value else True
            continue
        if not has_value:
            if not words:
                raise ToolError(f"flag needs an argument: {word}", 2)
            value = words.pop(0)
        if kind == "int":
            try:
                flags[name] = int(value)
            except ValueError:
                raise ToolError(
                    f'invalid value "{value}" for flag {word}: parse error', 2
                ) from None
        else:
            flags[name] = value
    return Args(flags, positional)


FORMAT = {"format": "str"}


def _yaml_scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    if text == "" or re.search(r"[:#\n\"'{}\[\],&*!|>%@`]|^\s|\s$|^[-?]", text):
        return json.dumps(text)
    return text


def _yaml(value: Any, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return pad + "{}\n"
        out = ""
        for key, item in value.items():  # pyright: ignore[reportUnknownVariableType]
            if isinstance(item, (dict, list)) and item:
                out += f"{pad}{_yaml_scalar(key)}:\n{_yaml(item, indent + 2)}"
            else:
                empty = (
                    "{}" if isinstance(item, dict) else "[]" if isinstance(item, list) else None
                )
                out += f"{pad}{_yaml_scalar(key)}: {empty or _yaml_scalar(item)}\n"
        return out
    if isinstance(value, list):
        if not value:
            return pad + "[]\n"
        return "".join(
            f"{pad}-\n{_yaml(item, indent + 2)}"
            if isinstance(item, (dict, list)) and item
            else f"{pad}- {_yaml_scalar(item)}\n"
            for item in value  # pyright: ignore[reportUnknownVariableType]
        )
    return pad + _yaml_scalar(value) + "\n"


def render(value: Any, fmt: str | None) -> str:  # noqa: PLR0911
    """Format a result as Juju does for `--format` json, yaml or smart (the default)."""
    fmt = fmt or "smart"
    if fmt == "json":
        return json.dumps(value) + "\n"
    if fmt == "yaml":
        return _yaml(value)
    if fmt != "smart":
        raise ToolError(f'invalid value "{fmt}" for flag --format: unknown format "{fmt}"', 2)
    if value is None:
        return ""
    if isinstance(value, bool):
        return ("True" if value else "False") + "\n"
    if isinstance(value, (str, int, float)):
        return f"{value}\n"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):  # pyright: ignore[reportUnknownVariableType]
        return "".join(f"{v}\n" for v in value)  # pyright: ignore[reportUnknownVariableType]
    return _yaml(value)


def _no_extra(args: Args, most: int, usage: str) -> None:
    if len(args.positional) > most:
        raise ToolError(f'unrecognized args: ["{args.positional[most]}"]\nusage: {usage}', 2)


# --- context -----------------------------------------------------------------------------------


def _lock_path(path: str) -> str:
    return f"{os.path.dirname(path)}/.{os.path.basename(path)}.lock"


@contextlib.contextmanager
def open_context() -> Iterator[Ctx]:
    """Load the hook context under its lock; write it back if a tool changed it."""
    path = os.environ.get(CONTEXT_ENV)
    context_id = os.environ.get("JUJU_CONTEXT_ID")
    if not path or not context_id:
        raise ToolError("JUJU_CONTEXT_ID not set")
    with open(_lock_path(path), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(path) as handle:
                ctx: Ctx = json.load(handle)
        except FileNotFoundError:
            raise ToolError(f'bad request: unknown context "{context_id}"') from None
        if ctx.get("context_id") != context_id:
            raise ToolError(f'bad request: unknown context "{context_id}"')
        before = json.dumps(ctx, sort_keys=True)
        yield ctx
        if json.dumps(ctx, sort_keys=True) != before:
            tmp = f"{path}.{os.getpid()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(ctx, handle)
            os.replace(tmp, path)


def _out(ctx: Ctx) -> Ctx:
    return ctx.setdefault("out", {})


def _is_leader(ctx: Ctx) -> bool:
    return bool(ctx["leader"])


# --- relations ---------------------------------------------------------------------------------


def _relation(ctx: Ctx, ref: str | None, flag: str = "-r") -> tuple[str, Ctx]:
    """Find the relation named by `-r` (`id` or `endpoint:id`), else the hook's relation."""
    if ref is None:
        current = os.environ.get("JUJU_RELATION_ID", "")
        if not current:
            raise ToolError("no relation id specified")
        ref = current
    endpoint, _, number = ref.rpartition(":")
    rel = ctx["relations"].get(number) if number.isdigit() else None
    if rel is None or (endpoint and endpoint != rel["endpoint"]):
        raise ToolError(f'invalid value "{ref}" for option {flag}: relation not found')
    return number, rel


def _settings_from_args(args: Args, stdin: str) -> dict[str, str]:
    settings: dict[str, str] = {}
    source = args.get("file")
    if source is not None:
        text = stdin if source == "-" else open(source).read()  # noqa: SIM115
        loaded = json.loads(text) if text.strip() else {}
        if not isinstance(loaded, dict):
            raise ToolError("expected a map of settings")
        settings.update({str(k): "" if v is None else str(v) for k, v in loaded.items()})  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    for word in args.positional:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ToolError(f'expected "key=value", got "{word}"', 2)
        settings[key] = value
    return settings


def relation_ids(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "relation-ids [options] <name>")
    name = args.positional[0] if args.positional else os.environ.get("JUJU_RELATION", "")
    if not name:
        raise ToolError("no endpoint name specified")
    if name not in ctx["endpoints"]:
        raise ToolError(f'invalid value "{name}" for option: no endpoint named "{name}"')
    ids = sorted((int(k) for k, r in ctx["relations"].items() if r["endpoint"] == name))
    return render([f"{name}:{i}" for i in ids], args.get("format"))


def relation_list(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 0, "relation-list [options]")
    _, rel = _relation(ctx, args.get("relation"))
    if args.get("app"):
        return render(rel["remote_app"], args.get("format"))
    return render(list(rel["units"]), args.get("format"))


def relation_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 2, "relation-get [options] <key> [<unit id>]")
    number, rel = _relation(ctx, args.get("relation"))
    key = args.positional[0] if args.positional else "-"
    as_app = bool(args.get("app"))
    if len(args.positional) > 1:
        member = args.positional[1]
    elif as_app:
        member = os.environ.get("JUJU_REMOTE_APP", "") or rel["remote_app"]
    else:
        member = os.environ.get("JUJU_REMOTE_UNIT", "")
        if not member:
            raise ToolError("no unit id specified")
    if as_app:
        app = member.split("/")[0]
        if app == ctx["app"] and not rel["peer"] and not _is_leader(ctx):
            raise ToolError("permission denied")
        if app not in rel["app_data"]:
            raise ToolError(
                f'cannot read settings for application "{app}" in relation {number}: not found'
            )
        bag = rel["app_data"][app]
    else:
        if member not in rel["unit_data"]:
            raise ToolError(
                f'cannot read settings for unit "{member}" in relation "{rel["key"]}": '
                f'unit "{member}": settings not found'
            )
        bag = rel["unit_data"][member]
    if key == "-":
        return render(dict(bag), args.get("format"))
    return render(bag.get(key), args.get("format"))


def relation_set(ctx: Ctx, args: Args, stdin: str) -> str:
    number, rel = _relation(ctx, args.get("relation"))
    settings = _settings_from_args(args, stdin)
    as_app = bool(args.get("app"))
    if as_app and not _is_leader(ctx):
        raise ToolError("cannot write relation settings")
    bags = rel["app_data"] if as_app else rel["unit_data"]
    owner = ctx["app"] if as_app else ctx["unit"]
    bag = bags.setdefault(owner, {})
    for key, value in settings.items():
        if value == "":
            bag.pop(key, None)
        else:
            bag[key] = value
    _out(ctx).setdefault("relations_written", [])
    if number not in _out(ctx)["relations_written"]:
        _out(ctx)["relations_written"].append(number)
    if args.get("format"):
        sys.stderr.write('--format flag deprecated for command "relation-set"\n')
    return ""


def relation_model_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 0, "relation-model-get [options]")
    _relation(ctx, args.get("relation"))
    return render({"uuid": ctx["model"]["uuid"]}, args.get("format"))


# --- config, leadership, logs, status ----------------------------------------------------------


def config_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "config-get [options] [<key>]")
    config: dict[str, Any] = ctx["config"]
    if args.positional:
        if args.get("all"):
            raise ToolError("cannot use argument --all together with key", 2)
        return render(config.get(args.positional[0]), args.get("format"))
    return render(config, args.get("format"))


def is_leader(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 0, "is-leader [options]")
    return render(_is_leader(ctx), args.get("format"))


def juju_log(ctx: Ctx, args: Args) -> str:
    if not args.positional:
        raise ToolError("no message specified", 2)
    level = str(args.get("log-level") or "INFO").upper()
    if args.get("debug"):
        level = "DEBUG"
    if level not in LOG_LEVELS:
        sys.stderr.write(f'Specified log level of "{level}" is not valid\n')
        level = "INFO"
    _out(ctx).setdefault("log", []).append([level, " ".join(args.positional)])
    return ""


def status_set(ctx: Ctx, args: Args) -> str:
    if not args.positional:
        raise ToolError("invalid args, require <status> [message] [data]", 2)
    status = args.positional[0]
    if status not in SETTABLE_STATUSES:
        raise ToolError(
            f'invalid status "{status}", expected one of [{" ".join(SETTABLE_STATUSES)}]', 2
        )
    message = " ".join(args.positional[1:2])
    entry = {"status": status, "message": message}
    if args.get("application"):
        if not _is_leader(ctx):
            raise ToolError("this unit is not the leader")
        ctx["status"]["app"] = entry
        ctx["status"]["units_of_app"] = ctx["status"].get("units_of_app", {})
    else:
        ctx["status"]["unit"] = entry
        ctx["status"].setdefault("units_of_app", {})[ctx["unit"]] = entry
    _out(ctx)["status_set"] = True
    return ""


def _status_doc(entry: dict[str, str], include_data: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "message": entry.get("message", ""),
        "status": entry.get("status", "unknown"),
    }
    if include_data:
        doc["status-data"] = {}
    return doc


def status_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "status-get [--include-data] [--application] [<key>]")
    include = bool(args.get("include-data"))
    if args.get("application"):
        if not _is_leader(ctx):
            raise ToolError("finding application status: this unit is not the leader")
        units = ctx["status"].get("units_of_app", {})
        doc: dict[str, Any] = {
            "application-status": {
                **_status_doc(ctx["status"]["app"], True),
                "units": {name: _status_doc(entry, True) for name, entry in sorted(units.items())},
            }
        }
        return render(doc, args.get("format"))
    doc = _status_doc(ctx["status"]["unit"], include)
    if not include and args.get("format") in (None, "smart"):
        return render(doc["status"], None)
    if args.positional:
        return render(doc.get(args.positional[0]), args.get("format"))
    return render(doc, args.get("format"))


def application_version_set(ctx: Ctx, args: Args) -> str:
    if len(args.positional) != 1:
        raise ToolError("no version specified" if not args.positional else "too many arguments", 2)
    ctx["workload_version"] = args.positional[0]
    _out(ctx)["version_set"] = True
    return ""


def goal_state(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 0, "goal-state [options]")
    return render(ctx["goal_state"], args.get("format"))


def network_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "network-get [options] <binding-name>")
    if not args.positional:
        raise ToolError("no arguments specified", 2)
    binding = args.positional[0]
    if args.get("relation") is not None:
        _relation(ctx, args.get("relation"))
    if binding not in ctx["bindings"]:
        raise ToolError(f'no network config found for binding "{binding}"')
    address = ctx["address"]
    doc: dict[str, Any] = {
        "bind-addresses": [
            {
                "mac-address": "",
                "interface-name": "eth0",
                "addresses": [{"hostname": "", "value": address, "cidr": ctx["cidr"]}],
                "macaddress": "",
                "interfacename": "eth0",
            }
        ],
        "egress-subnets": [f"{address}/32"],
        "ingress-addresses": [address],
    }
    wanted = [
        k
        for k in ("primary-address", "bind-address", "ingress-address", "egress-subnets")
        if args.get(k)
    ]
    picks = {
        "primary-address": address,
        "bind-address": address,
        "ingress-address": address,
        "egress-subnets": [f"{address}/32"],
    }
    if len(wanted) == 1:
        return render(picks[wanted[0]], args.get("format"))
    if wanted:
        return render({k: picks[k] for k in wanted}, args.get("format"))
    return render(doc, args.get("format"))


def unit_get(ctx: Ctx, args: Args) -> str:
    if len(args.positional) != 1 or args.positional[0] not in (
        "private-address",
        "public-address",
    ):
        raise ToolError('unknown setting "' + " ".join(args.positional) + '"', 2)
    return render(ctx["address"], args.get("format"))


def credential_get(_ctx: Ctx, _args: Args) -> str:
    raise ToolError("cannot access cloud credentials: permission denied")


def resource_get(_ctx: Ctx, args: Args) -> str:
    if len(args.positional) != 1:
        raise ToolError("missing required resource name", 2)
    name = args.positional[0]
    raise ToolError(f'could not download resource: resource "{name}" not found')


# --- storage (the lab's machines have none) -----------------------------------------------------


def storage_list(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "storage-list [options] [<storage-name>]")
    return render(list(ctx.get("storage") or []), args.get("format"))


def storage_get(ctx: Ctx, args: Args) -> str:
    storage_id = args.get("storage") or os.environ.get("JUJU_STORAGE_ID", "")
    if not storage_id:
        raise ToolError("no storage instance specified")
    raise ToolError(
        f'invalid value "{storage_id}" for option -s: storage instance "{storage_id}" not found'
    )


def storage_add(ctx: Ctx, args: Args) -> str:
    if not args.positional:
        raise ToolError("storage add requires a storage directive", 2)
    name = args.positional[0].split("=")[0]
    raise ToolError(f'storage "{name}" not found')


# --- server-side unit state --------------------------------------------------------------------


def state_get(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 1, "state-get [options] [<key>]")
    state: dict[str, str] = ctx["state"]
    if args.positional:
        key = args.positional[0]
        if key not in state and args.get("strict"):
            raise ToolError(f'"{key}" not found')
        return render(state.get(key, ""), args.get("format"))
    return render(state, args.get("format"))


def state_set(ctx: Ctx, args: Args, stdin: str) -> str:
    settings = _settings_from_args(args, stdin)
    for key, value in settings.items():
        if value == "":
            ctx["state"].pop(key, None)
        else:
            ctx["state"][key] = value
    return ""


def state_delete(ctx: Ctx, args: Args) -> str:
    if len(args.positional) != 1:
        raise ToolError("specify a key", 2)
    ctx["state"].pop(args.positional[0], None)
    return ""


# --- actions -----------------------------------------------------------------------------------


def _action(ctx: Ctx) -> Ctx:
    if not ctx.get("action"):
        raise ToolError("not running an action")
    return ctx["action"]


def action_get(ctx: Ctx, args: Args) -> str:
    params: Any = _action(ctx)["params"]
    if args.positional:
        for part in args.positional[0].split("."):
            params = params.get(part) if isinstance(params, dict) else None  # pyright: ignore[reportUnknownMemberType]
    return render(params, args.get("format"))


def action_set(ctx: Ctx, args: Args) -> str:
    action = _action(ctx)
    if not args.positional:
        raise ToolError("no key=value pairs specified", 2)
    results: dict[str, Any] = action.setdefault("results", {})
    for word in args.positional:
        key, sep, value = word.partition("=")
        if not sep:
            raise ToolError(f'argument "{word}" must be of the form key...=value', 2)
        parts = key.split(".")
        for part in parts:
            if not ACTION_KEY.fullmatch(part):
                raise ToolError(
                    f'key "{part}" must start and end with lowercase alphanumeric, '
                    "and contain only lowercase alphanumeric and hyphens",
                    2,
                )
        if parts[0] in ("stdout", "stdout-encoding", "stderr", "stderr-encoding"):
            raise ToolError(f'cannot set reserved action key "{parts[0]}"', 2)
        node = results
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return ""


def action_fail(ctx: Ctx, args: Args) -> str:
    action = _action(ctx)
    action["failed"] = " ".join(args.positional) or "action failed without reason given"
    return ""


def action_log(ctx: Ctx, args: Args) -> str:
    action = _action(ctx)
    if not args.positional:
        raise ToolError("no message specified", 2)
    action.setdefault("logs", []).append(" ".join(args.positional))
    return ""


# --- ports -------------------------------------------------------------------------------------


def port_tool(name: str) -> Callable[[Ctx, list[str]], str]:
    """Wrap the port rules of `hooktools` (shared with the unit tests' fake machine)."""

    def run(ctx: Ctx, argv: list[str]) -> str:
        sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
        import hooktools  # noqa: PLC0415  # pyright: ignore[reportMissingImports]

        code, out, err, after = hooktools.run_tool(name, argv, list(ctx["ports"]))
        if code != 0:
            raise ToolError(err.strip().removeprefix("ERROR ").strip())
        ctx["ports"] = after
        return out

    return run


# --- secrets -----------------------------------------------------------------------------------


def _secret_key(ref: str) -> str:
    """`secret:xid`, `secret://<model>/xid` or `xid` -> `secret:xid`."""
    xid = ref.rsplit("/", 1)[-1].removeprefix("secret:")
    if not re.fullmatch(r"[0-9a-z]{20}", xid):
        raise ToolError(f'invalid secret URI "{ref}"')
    return f"secret:{xid}"


def _find_secret(ctx: Ctx, ref: str | None, label: str | None) -> tuple[str, Ctx]:
    if ref:
        key = _secret_key(ref)
        secret = ctx["secrets"].get(key)
        if secret is None:
            raise ToolError(f'secret "{key.removeprefix("secret:")}" not found')
        return key, secret
    if label:
        for key, secret in ctx["secrets"].items():
            if secret.get("label") == label or secret.get("consumer_label") == label:
                return key, secret
        raise ToolError(f'secret with label "{label}" not found')
    raise ToolError("require either a secret URI or label", 2)


def _owned(ctx: Ctx, secret: Ctx) -> bool:
    return secret.get("owner") in ("application", "unit")


def _may_manage(ctx: Ctx, secret: Ctx) -> None:
    if not _owned(ctx, secret):
        raise ToolError("permission denied")
    if secret["owner"] == "application" and not _is_leader(ctx):
        raise ToolError("permission denied")


def _content_from_args(args: Args, words: list[str]) -> dict[str, str]:  # noqa: C901
    """Read `key=value`, `key#base64=value`, `key#file=path` and `--file` (JSON or YAML map)."""
    content: dict[str, str] = {}
    source = args.get("file")
    if source:
        text = open(source).read()  # noqa: SIM115
        loaded = json.loads(text) if text.strip().startswith("{") else _simple_yaml_map(text)
        for key, value in loaded.items():
            content[key] = str(value)
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ToolError(f'expected "key=value", got "{word}"', 2)
        key, _, suffix = key.partition("#")
        if suffix == "file":
            with open(value) as handle:
                value = handle.read()
        elif suffix == "base64":
            try:
                value = base64.b64decode(value, validate=True).decode()
            except ValueError:
                raise ToolError(f'invalid base64 value for key "{key}"') from None
        elif suffix:
            raise ToolError(f'key "{key}#{suffix}" not valid')
        content[key] = value
    for key in content:
        if not SECRET_KEY.fullmatch(key):
            raise ToolError(f'key "{key}" not valid')
    size = sum(len(base64.b64encode(v.encode())) for v in content.values())
    if size > MAX_SECRET_BYTES:
        raise ToolError(f"secret content too large: {size} bytes")
    return content


def _simple_yaml_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition(":")
            out[key.strip()] = value.strip().strip("\"'")
    return out


def _check_meta(args: Args) -> None:
    rotate = args.get("rotate")
    if rotate is not None and rotate not in ROTATE_POLICIES:
        raise ToolError(f'rotate policy "{rotate}" not valid')


def _label_taken(ctx: Ctx, label: str | None, key: str | None) -> None:
    if label is None:
        return
    for other_key, other in ctx["secrets"].items():
        if other_key != key and _owned(ctx, other) and other.get("label") == label:
            raise ToolError(f'secret with label "{label}" already exists')


SECRET_META = {
    "label": "str",
    "description": "str",
    "expire": "str",
    "rotate": "str",
    "file": "str",
    "owner": "str",
}


def secret_add(ctx: Ctx, argv: list[str]) -> str:
    args = parse_args(argv, SECRET_META)
    owner = args.get("owner") or "application"
    if owner not in ("application", "unit"):
        raise ToolError(f'secret owner "{owner}" not valid')
    if owner == "application" and not _is_leader(ctx):
        raise ToolError("this unit is not the leader")
    _check_meta(args)
    content = _content_from_args(args, args.positional)
    if not content:
        raise ToolError("missing secret value", 2)
    _label_taken(ctx, args.get("label"), None)
    key = "secret:" + "".join(XID_ALPHABET[b % 32] for b in os.urandom(20))
    ctx["secrets"][key] = {
        "owner": owner,
        "label": args.get("label"),
        "description": args.get("description"),
        "expire": args.get("expire"),
        "rotate": args.get("rotate"),
        "revisions": {"1": content},
        "latest": 1,
        "tracked": 1,
        "grants": {},
    }
    _out(ctx).setdefault("secret_ops", []).append(
        {
            "op": "add",
            "id": key,
            "owner": owner,
            "content": content,
            "label": args.get("label"),
            "description": args.get("description"),
            "expire": args.get("expire"),
            "rotate": args.get("rotate"),
        }
    )
    return key + "\n"


def secret_set(ctx: Ctx, argv: list[str]) -> str:
    args = parse_args(argv, SECRET_META)
    if not args.positional:
        raise ToolError("missing secret URI", 2)
    key, secret = _find_secret(ctx, args.positional[0], None)
    _may_manage(ctx, secret)
    _check_meta(args)
    content = _content_from_args(args, args.positional[1:])
    _label_taken(ctx, args.get("label"), key)
    op: dict[str, Any] = {"op": "set", "id": key}
    for name in ("label", "description", "expire", "rotate"):
        if args.get(name) is not None:
            secret[name] = args.get(name)
            op[name] = args.get(name)
    if content:
        secret["pending"] = content  # Juju 3.6 makes one new revision per hook
        op["content"] = content
    _out(ctx).setdefault("secret_ops", []).append(op)
    return ""


def _content_at(secret: Ctx, revision: int) -> dict[str, str]:
    return secret["revisions"][str(revision)]


def secret_get(ctx: Ctx, argv: list[str]) -> str:  # noqa: C901
    args = parse_args(argv, {**FORMAT, "label": "str", "refresh": "bool", "peek": "bool"})
    _no_extra(args, 2, "secret-get [options] <ID> [key[#base64]]")
    if args.get("refresh") and args.get("peek"):
        raise ToolError("specify one of --peek or --refresh but not both", 2)
    ref = args.positional[0] if args.positional else None
    label = args.get("label")
    key, secret = _find_secret(ctx, ref, None if ref else label)
    ops = _out(ctx).setdefault("secret_ops", [])
    if _owned(ctx, secret):
        content = secret.get("pending") or _content_at(secret, secret["latest"])
        if ref and label is not None and label != secret.get("label"):
            _label_taken(ctx, label, key)
            if secret["owner"] == "application" and not _is_leader(ctx):
                raise ToolError("permission denied")
            secret["label"] = label
            ops.append({"op": "set", "id": key, "label": label})
    else:
        tracked = secret.get("tracked")
        if tracked is None or args.get("refresh"):
            tracked = secret["latest"]
            if secret.get("tracked") != tracked:
                secret["tracked"] = tracked
                ops.append({"op": "track", "id": key, "revision": tracked})
        revision = secret["latest"] if args.get("peek") else tracked
        content = _content_at(secret, revision)
        if ref and label is not None and label != secret.get("consumer_label"):
            secret["consumer_label"] = label
            ops.append({"op": "consumer_label", "id": key, "label": label})
        _out(ctx).setdefault("secrets_read", [])
        if key not in _out(ctx)["secrets_read"]:
            _out(ctx)["secrets_read"].append(key)
    if len(args.positional) > 1:
        name, _, suffix = args.positional[1].partition("#")
        value = content.get(name)
        if value is not None and suffix == "base64":
            value = base64.b64encode(value.encode()).decode()
        return render(value, args.get("format"))
    return render(dict(content), args.get("format"))


def secret_info_get(ctx: Ctx, argv: list[str]) -> str:
    args = parse_args(argv, {**FORMAT, "label": "str"})
    _no_extra(args, 1, "secret-info-get <ID> | --label <label>")
    ref = args.positional[0] if args.positional else None
    if ref and args.get("label"):
        raise ToolError("specify either a secret URI or label but not both", 2)
    key, secret = _find_secret(ctx, ref, args.get("label"))
    if not _owned(ctx, secret):
        raise ToolError(f'secret "{key.removeprefix("secret:")}" not found')
    info: dict[str, Any] = {"revision": secret["latest"], "owner": secret["owner"]}
    for name, field in (
        ("label", "label"),
        ("description", "description"),
        ("expiry", "expire"),
        ("rotation", "rotate"),
    ):
        if secret.get(field):
            info[name] = secret[field]
    return render({key.removeprefix("secret:"): info}, args.get("format"))


def secret_ids(ctx: Ctx, argv: list[str]) -> str:
    args = parse_args(argv, FORMAT)
    _no_extra(args, 0, "secret-ids [options]")
    owned = sorted(k for k, s in ctx["secrets"].items() if _owned(ctx, s))
    return render(owned, args.get("format"))


def _grant_or_revoke(ctx: Ctx, argv: list[str], op: str) -> str:
    spec = (
        {"relation": "str", "unit": "str"}
        if op == "grant"
        else {"relation": "str", "unit": "str", "app": "str"}
    )
    args = parse_args(argv, spec, {"r": "relation"})
    if len(args.positional) != 1:
        raise ToolError("missing secret URI", 2)
    key, secret = _find_secret(ctx, args.positional[0], None)
    if not _owned(ctx, secret):
        raise ToolError(f'secret "{key.removeprefix("secret:")}" not found')
    _may_manage(ctx, secret)
    record: dict[str, Any] = {
        "op": op,
        "id": key,
        "unit": args.get("unit"),
        "app": args.get("app"),
    }
    if args.get("relation") is not None:
        number, rel = _relation(ctx, args.get("relation"), "--relation")
        record["relation"] = number
        grantee = args.get("unit") or rel["remote_app"]
        grants = secret["grants"].setdefault(number, [])
        if op == "grant" and grantee not in grants:
            grants.append(grantee)
        if op == "revoke" and grantee in grants:
            grants.remove(grantee)
    elif op == "grant":
        raise ToolError("missing relation", 2)
    _out(ctx).setdefault("secret_ops", []).append(record)
    return ""


def secret_grant(ctx: Ctx, argv: list[str]) -> str:
    return _grant_or_revoke(ctx, argv, "grant")


def secret_revoke(ctx: Ctx, argv: list[str]) -> str:
    return _grant_or_revoke(ctx, argv, "revoke")


def secret_remove(ctx: Ctx, argv: list[str]) -> str:
    args = parse_args(argv, {"revision": "int"})
    if len(args.positional) != 1:
        raise ToolError("missing secret URI", 2)
    key, secret = _find_secret(ctx, args.positional[0], None)
    _may_manage(ctx, secret)
    revision = args.get("revision")
    if revision is not None and str(revision) not in secret["revisions"]:
        raise ToolError(f'secret revision "{revision}" not found')
    if revision is None:
        del ctx["secrets"][key]
    _out(ctx).setdefault("secret_ops", []).append(
        {"op": "remove", "id": key, "revision": revision}
    )
    return ""


# --- reboot ------------------------------------------------------------------------------------


def juju_reboot(ctx: Ctx, args: Args) -> str:
    _no_extra(args, 0, "juju-reboot [--now]")
    if ctx.get("action"):
        raise ToolError("juju-reboot is not supported when running an action")
    _out(ctx)["reboot"] = "now" if args.get("now") else "after-hook"
    return ""


# --- dispatch ----------------------------------------------------------------------------------

Simple = Callable[[Ctx, Args], str]
WithInput = Callable[[Ctx, Args, str], str]

SIMPLE: dict[str, tuple[Simple, dict[str, str], dict[str, str]]] = {
    "relation-ids": (relation_ids, FORMAT, {}),
    "relation-list": (
        relation_list,
        {**FORMAT, "relation": "str", "app": "bool"},
        {"r": "relation"},
    ),
    "relation-get": (
        relation_get,
        {**FORMAT, "relation": "str", "app": "bool"},
        {"r": "relation"},
    ),
    "relation-model-get": (relation_model_get, {**FORMAT, "relation": "str"}, {"r": "relation"}),
    "config-get": (config_get, {**FORMAT, "all": "bool"}, {"a": "all"}),
    "is-leader": (is_leader, FORMAT, {}),
    "juju-log": (juju_log, {**FORMAT, "log-level": "str", "debug": "bool"}, {"l": "log-level"}),
    "status-set": (status_set, {"application": "bool"}, {}),
    "status-get": (status_get, {**FORMAT, "application": "bool", "include-data": "bool"}, {}),
    "application-version-set": (application_version_set, {}, {}),
    "goal-state": (goal_state, FORMAT, {}),
    "network-get": (
        network_get,
        {
            **FORMAT,
            "relation": "str",
            "primary-address": "bool",
            "bind-address": "bool",
            "ingress-address": "bool",
            "egress-subnets": "bool",
        },
        {"r": "relation"},
    ),
    "unit-get": (unit_get, FORMAT, {}),
    "credential-get": (credential_get, FORMAT, {}),
    "resource-get": (resource_get, {}, {}),
    "storage-list": (storage_list, FORMAT, {}),
    "storage-get": (storage_get, {**FORMAT, "storage": "str"}, {"s": "storage"}),
    "storage-add": (storage_add, {}, {}),
    "state-get": (state_get, {**FORMAT, "strict": "bool"}, {}),
    "state-delete": (state_delete, {}, {}),
    "action-get": (action_get, FORMAT, {}),
    "action-set": (action_set, {}, {}),
    "action-fail": (action_fail, {}, {}),
    "action-log": (action_log, {}, {}),
    "juju-reboot": (juju_reboot, {"now": "bool"}, {}),
}
WITH_INPUT: dict[str, tuple[WithInput, dict[str, str], dict[str, str]]] = {
    "relation-set": (
        relation_set,
        {**FORMAT, "relation": "str", "app": "bool", "file": "str"},
        {"r": "relation"},
    ),
    "state-set": (state_set, {"file": "str"}, {}),
}
RAW: dict[str, Callable[[Ctx, list[str]], str]] = {
    "secret-add": secret_add,
    "secret-set": secret_set,
    "secret-get": secret_get,
    "secret-info-get": secret_info_get,
    "secret-ids": secret_ids,
    "secret-grant": secret_grant,
    "secret-revoke": secret_revoke,
    "secret-remove": secret_remove,
    **{name: port_tool(name) for name in PORT_TOOLS},
}
TOOLS = sorted({*SIMPLE, *WITH_INPUT, *RAW})
"""Every hook-tool name this program answers to (the links the engine makes)."""


def run(tool: str, argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    """Run one tool on the current hook context: exit status, stdout, stderr."""
    try:
        if tool not in TOOLS:
            raise ToolError(f'unknown command "{tool}"', 2)
        with open_context() as ctx:
            if tool in SIMPLE:
                handler, spec, aliases = SIMPLE[tool]
                out = handler(ctx, parse_args(argv, spec, aliases))
            elif tool in WITH_INPUT:
                handler_in, spec, aliases = WITH_INPUT[tool]
                out = handler_in(ctx, parse_args(argv, spec, aliases), stdin)
            else:
                out = RAW[tool](ctx, argv)
    except ToolError as e:
        return e.code, "", f"ERROR {e}\n"
    except OSError as e:
        return 1, "", f"ERROR {e}\n"
    return 0, out, ""


# --- serving a hook's tool calls ---------------------------------------------------------------

SERVE_FLAG = "--serve"
SOCKET_ENV = "LAB_TOOLS_SOCKET"
TOKEN_ENV = "LAB_TOOLS_TOKEN"
CLIENT = "jujuc"
"""The tool links' target: a bash client (jujuc.sh) that asks this program's server."""


MAX_REQUEST_BYTES = 8 * 1024 * 1024
"""Most bytes read from one client (a request's largest part, relation data, is far less)."""
REQUEST_SECONDS = 10.0
"""Seconds a client has to send its whole request (the bash client sends it at once)."""
ANSWER_SECONDS = 30.0
"""Seconds an answer may take to leave (a client that does not read it loses it)."""
MAX_CLIENTS = 16
"""Clients whose requests are read at once; more wait in the listen backlog."""


class BadRequestError(Exception):
    """A client's request is not one the bash client sends (or came too slowly, or too big)."""


def _read_request(
    conn: socket.socket, *, limit: int = MAX_REQUEST_BYTES, seconds: float = REQUEST_SECONDS
) -> list[str]:
    """Read `token cwd context-id tool argc args... stdin`, each field NUL-terminated.

    At most `limit` bytes within `seconds` in all: any local process can connect, so a
    silent, slow or endless client is cut off rather than waited for.

    Raises:
        BadRequestError: The request is malformed, not UTF-8, too big, too slow, or cut short.

    """
    deadline = time.monotonic() + seconds
    data = bytearray()
    terminated = 0
    wanted: int | None = None
    while wanted is None or terminated < wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BadRequestError(f"not sent within {seconds:g} s")
        conn.settimeout(remaining)
        try:
            chunk = conn.recv(min(65536, limit + 1 - len(data)))
        except TimeoutError:
            raise BadRequestError(f"not sent within {seconds:g} s") from None
        if not chunk:
            raise BadRequestError("cut short")
        data += chunk
        if len(data) > limit:
            raise BadRequestError(f"more than {limit} bytes")
        terminated += chunk.count(b"\0")
        if wanted is None and terminated >= 5:
            argc = bytes(data.split(b"\0", 5)[4])
            if not argc.isdigit() or int(argc) > limit:
                raise BadRequestError("the argument count is not a number")
            wanted = 6 + int(argc)
    try:
        return [field.decode() for field in data.split(b"\0", wanted)[:wanted]]
    except UnicodeDecodeError:
        raise BadRequestError("not UTF-8") from None


def _reply(request: list[str], token: str) -> tuple[int, str, str]:
    """Run a request's tool in its working directory: exit status, stdout, stderr."""
    if not token or not hmac.compare_digest(request[0].encode(), token.encode()):
        return 1, "", "ERROR bad request: not a client of this hook\n"
    if request[2] != os.environ.get("JUJU_CONTEXT_ID"):
        return 1, "", f'ERROR bad request: unknown context "{request[2]}"\n'
    _token, cwd, _context, tool, _argc, *argv, stdin = request
    try:
        os.chdir(cwd)  # `--file <relative path>` is the client's, as with jujuc
    except OSError as e:
        return 1, "", f"ERROR {e}\n"
    try:
        return run(tool, argv, stdin)
    except Exception as e:  # a broken call must not take the hook's other calls down
        return 1, "", f"ERROR {type(e).__name__}: {e}\n"


def _answer(conn: socket.socket, token: str, turn: threading.Lock) -> None:
    """Answer one client: read its request, run its tool in its turn, send `code out err`.

    Requests are read at once (a client that stalls delays no other), tools run one at a
    time (`turn`, as the context file's lock did; `os.chdir` is the process's). Nothing a
    client sends can end the server: a bad request is answered as such.
    """
    with conn:
        try:
            request = _read_request(conn)
        except (BadRequestError, OSError) as e:
            code, out, err = 1, "", f"ERROR bad request: {e}\n"
        else:
            with turn:
                code, out, err = _reply(request, token)
        conn.settimeout(ANSWER_SECONDS)
        with contextlib.suppress(OSError):
            conn.sendall(f"{code}\0{out}\0{err}\0".encode())


def _client(conn: socket.socket, token: str, turn: threading.Lock, slots: threading.Semaphore):
    """Answer `conn` (`_answer`) in its own thread, then give its slot back, come what may."""
    try:
        _answer(conn, token, turn)
    except Exception as e:  # the server outlives any client
        sys.stderr.write(f"ERROR answering a client: {type(e).__name__}: {e}\n")
    finally:
        slots.release()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _listen(path: str) -> socket.socket:
    """Listen on a unix socket at `path`, root only; it appears there once it accepts.

    Bound under a temporary name and renamed into place after `listen`: a client that waits
    for the path (the bash client) never finds a socket that refuses it.
    """
    pending = f"{path}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(pending)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_mask = os.umask(0o177)
    try:
        listener.bind(pending)
    finally:
        os.umask(old_mask)
    listener.listen(MAX_CLIENTS)
    os.replace(pending, path)
    return listener


def serve(hook_pid: int) -> int:
    """Serve the hook's tool calls until the hook's process `hook_pid` is gone.

    Starting Python for every tool call costs more than the rest of a hook's own work (ops
    makes one call per log line), so a hook starts this server once, in the background while
    the charm starts: it listens on the unix socket `$LAB_TOOLS_SOCKET` (in the machine's /run,
    root only: `runner.SOCKET_DIR`), as Juju's unit agent answers jujuc on a unix socket:
    nothing of it shows on the machine's network (a TCP port would sit among the ports the
    charms open, and in what an operator reads from /proc/net/tcp). The tool links run the bash
    client, which sends the hook's token (`$LAB_TOOLS_TOKEN`, random per hook, only in the
    hook's environment), its working directory, the hook's context id, the tool's name,
    arguments and input, and prints the answer. Calls are answered one at a time, each by `run`
    in this process, whose environment is the hook's own, as Juju's agent answers jujuc from
    the hook's context. Any root process can connect: each client is read in a thread of its
    own, bounded in bytes and time (`_read_request`), at most `MAX_CLIENTS` at once.
    """
    token = os.environ.get(TOKEN_ENV, "")
    path = os.environ.get(SOCKET_ENV, "")
    if not token or not path:
        sys.stderr.write(f"ERROR {TOKEN_ENV} and {SOCKET_ENV} must be set\n")
        return 2
    listener = _listen(path)
    mine = os.stat(path).st_ino
    listener.settimeout(1.0)
    turn = threading.Lock()
    slots = threading.BoundedSemaphore(MAX_CLIENTS)
    try:
        while not _gone(hook_pid):
            if not slots.acquire(timeout=1.0):
                continue
            try:
                conn, _ = listener.accept()
            except OSError:  # TimeoutError: look at the hook again
                slots.release()
                continue
            threading.Thread(target=_client, args=(conn, token, turn, slots), daemon=True).start()
        return 0
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == mine:  # not a later server's socket of the same name
                os.unlink(path)


def main() -> int:
    """Run as the tool named by argv[0] (a link), or by argv[1] when run as jujuc itself.

    `jujuc.py --serve <hook shell pid>` starts a hook's tool server instead (`serve`).
    """
    tool = os.path.basename(sys.argv[0])
    argv = sys.argv[1:]
    if argv[:1] == [SERVE_FLAG] and len(argv) == 2:
        return serve(int(argv[1]))
    if tool in ("jujuc", "jujuc.py"):
        if not argv:
            sys.stderr.write("usage: jujuc <tool> [args...]\n")
            return 2
        tool, argv = argv[0], argv[1:]
    needs_input = tool in WITH_INPUT and ("-" in argv or "--file=-" in argv)
    stdin = sys.stdin.read() if needs_input else ""
    code, out, err = run(tool, argv, stdin)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return code


if __name__ == "__main__":
    sys.exit(main())
