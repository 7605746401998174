#!/usr/bin/python3
"""juju-exec of the slurm lab: runs a command in a unit's hook context on this machine.

Juju's way: serialised with the unit's hooks, the hook tools on PATH, cwd the charm dir.

    juju-exec -u <unit> <command...>
    juju-exec -u <unit> "JUJU_DISPATCH_PATH=hooks/<event> <charm dir>/dispatch"

The request goes to `SPOOL`/requests; the lab host picks it up, runs the command and answers in
`SPOOL`/responses (`slurm_lab.juju.juju_exec`). Installed as /usr/local/bin/juju-exec in every
unit machine; the standard library only.
"""

import contextlib
import json
import os
import re
import sys
import time
import uuid

SPOOL = "/var/lib/juju/exec-spool"
TIMEOUT = 300.0
"""Seconds to wait for the answer (`--timeout`): the host answers only while it is driven."""
USAGE = "usage: juju-exec -u|--unit <unit> [--timeout <seconds>] <command...>"


def parse(args: list[str]) -> tuple[str, float, str]:
    """Return the unit, the timeout and the command; exit with the usage if they are wrong."""
    unit, timeout = None, TIMEOUT
    while args and args[0].startswith("-"):
        opt = args.pop(0)
        if opt == "--":
            break
        if opt in ("-u", "--unit") and args:
            unit = args.pop(0)
        elif opt.startswith("--unit="):
            unit = opt.split("=", 1)[1]
        elif opt == "--timeout" and args:
            timeout = float(args.pop(0).rstrip("s"))
        elif opt.startswith("--timeout="):
            timeout = float(opt.split("=", 1)[1].rstrip("s"))
        else:
            sys.exit(USAGE)
    command = " ".join(args)
    if unit is None or not command or not re.fullmatch(r"[a-z][a-z0-9-]*/[0-9]+", unit):
        sys.exit(USAGE)
    return unit, timeout, command


def main() -> None:
    """Hand the command to the host and print its output; exit with its status."""
    unit, timeout, command = parse(sys.argv[1:])
    request_id = uuid.uuid4().hex
    requests = f"{SPOOL}/requests"
    answer = f"{SPOOL}/responses/{request_id}.json"
    os.makedirs(requests, exist_ok=True)
    tmp = f"{requests}/.{request_id}.tmp"
    with open(tmp, "w") as handle:
        json.dump({"unit": unit, "command": command}, handle)
    os.replace(tmp, f"{requests}/{request_id}.json")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(answer):
            with open(answer) as handle:
                result = json.load(handle)
            os.unlink(answer)
            sys.stdout.write(result.get("stdout", ""))
            sys.stderr.write(result.get("stderr", ""))
            if result.get("message"):
                print(result["message"], file=sys.stderr)
            sys.exit(result["code"])
        time.sleep(0.2)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(f"{requests}/{request_id}.json")
    sys.exit("ERROR timed out waiting for the hook to run")


if __name__ == "__main__":
    main()
