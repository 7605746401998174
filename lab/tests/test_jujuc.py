"""The lab's hook tools (slurm_lab.juju.jujuc) against a hook context file, without machines.

ops calls them as `ops.hookcmds` does; test_runtime.py runs them for real under dispatch.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_lab.juju import jujuc


def _context(leader: bool) -> dict[str, Any]:
    return {
        "context_id": "ctx-1",
        "unit": "a/1",
        "app": "a",
        "leader": leader,
        "model": {"name": "lab", "uuid": "u-1"},
        "config": {"n": 3},
        "endpoints": {"peers": {"role": "peer"}, "db": {"role": "requirer"}},
        "bindings": ["peers", "db"],
        "address": "10.0.0.3",
        "cidr": "10.0.0.0/24",
        "relations": {
            "4": {
                "endpoint": "db",
                "interface": "x",
                "remote_app": "b",
                "peer": False,
                "key": "a:db b:db",
                "units": ["b/0"],
                "app_data": {"a": {"mine": "1"}, "b": {"theirs": "2"}},
                "unit_data": {"a/1": {}, "b/0": {"host": "b0"}},
            }
        },
        "secrets": {
            "secret:" + "c" * 20: {
                "owner": None,
                "consumer_label": None,
                "revisions": {"1": {"token": "old"}, "2": {"token": "new"}},
                "latest": 2,
                "tracked": 1,
                "grants": {},
            }
        },
        "ports": [],
        "status": {
            "unit": {"status": "waiting", "message": ""},
            "app": {"status": "unknown", "message": ""},
        },
        "workload_version": "",
        "action": None,
        "goal_state": {"units": {}, "relations": {}},
        "storage": [],
        "state": {},
        "out": {},
    }


@pytest.fixture
def context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ctx.json"
    path.write_text(json.dumps(_context(leader=False)))
    monkeypatch.setenv(jujuc.CONTEXT_ENV, str(path))
    monkeypatch.setenv("JUJU_CONTEXT_ID", "ctx-1")
    monkeypatch.delenv("JUJU_RELATION_ID", raising=False)
    return path


def tool(line: str, stdin: str = "") -> tuple[int, str, str]:
    name, *argv = line.split()
    return jujuc.run(name, argv, stdin)


SECRET = "secret:" + "c" * 20


def test_reads_answer_in_the_json_ops_parses(context: Path):
    assert tool("config-get --format=json") == (0, '{"n": 3}\n', "")
    assert tool("is-leader --format=json") == (0, "false\n", "")
    assert tool("relation-ids db --format=json") == (0, '["db:4"]\n', "")
    assert tool("relation-list --format=json -r db:4") == (0, '["b/0"]\n', "")
    assert tool("relation-list --format=json --app -r 4") == (0, '"b"\n', "")
    assert tool("relation-get --format=json -r db:4 - b/0") == (0, '{"host": "b0"}\n', "")
    assert tool("relation-get --format=json -r 4 --app - b") == (0, '{"theirs": "2"}\n', "")
    assert tool("relation-model-get --format=json -r 4") == (0, '{"uuid": "u-1"}\n', "")


def test_a_follower_may_neither_read_nor_write_its_own_app_databag(context: Path):
    assert tool("relation-get --format=json -r 4 --app - a")[2] == "ERROR permission denied\n"
    refused = tool("relation-set -r 4 --app --file -", '{"k": "v"}')
    assert refused == (1, "", "ERROR cannot write relation settings\n")
    assert tool("status-set --application=True active")[2] == (
        "ERROR this unit is not the leader\n"
    )


def test_writes_are_recorded_for_the_commit_and_read_back_in_the_hook(context: Path):
    assert tool("relation-set -r db:4 --file -", '{"k": "v"}')[0] == 0
    assert tool("relation-set -r 4 k=")[0] == 0  # an empty value deletes the key
    assert tool("relation-set -r 4 other=x")[0] == 0

    assert tool("relation-get --format=json -r 4 - a/1")[1] == '{"other": "x"}\n'
    out = json.loads(context.read_text())["out"]
    assert out["relations_written"] == ["4"]


def test_unknown_relation_and_flags_fail_as_juju_does(context: Path):
    assert tool("relation-get -r 9 - b/0")[2] == (
        'ERROR invalid value "9" for option -r: relation not found\n'
    )
    assert tool("relation-get -r peers:4 - b/0")[0] == 1  # id of another endpoint
    assert tool("config-get --bogus")[0] == 2
    assert tool("action-get")[2] == "ERROR not running an action\n"


def test_a_consumer_reads_its_tracked_revision_until_it_refreshes(context: Path):
    assert json.loads(tool(f"secret-get --format=json {SECRET}")[1]) == {"token": "old"}
    assert json.loads(tool(f"secret-get --format=json {SECRET} --peek")[1]) == {"token": "new"}
    assert json.loads(tool(f"secret-get --format=json {SECRET}")[1]) == {"token": "old"}
    assert json.loads(tool(f"secret-get --format=json {SECRET} --refresh")[1]) == {"token": "new"}
    ops = json.loads(context.read_text())["out"]["secret_ops"]
    assert ops == [{"op": "track", "id": SECRET, "revision": 2}]


def test_secret_content_and_ownership_are_checked(context: Path):
    assert tool("secret-add --owner application key=v")[2] == (
        "ERROR this unit is not the leader\n"
    )
    assert tool("secret-add --owner unit k=v")[2] == 'ERROR key "k" not valid\n'
    code, out, _ = tool("secret-add --owner unit --label mine token=v")
    assert code == 0
    assert out.startswith("secret:")
    assert tool(f"secret-set {SECRET} token=x")[2] == "ERROR permission denied\n"
    assert tool(f"secret-info-get --format=json {SECRET}")[0] == 1  # not its own
    assert tool("secret-ids --format=json")[1] == json.dumps([out.strip()]) + "\n"


def test_status_is_kept_and_read_back(context: Path):
    assert tool("status-set maintenance installing")[0] == 0
    assert tool("status-get --include-data --format=json --application=false")[1] == (
        '{"message": "installing", "status": "maintenance", "status-data": {}}\n'
    )
    assert tool("status-set bogus")[0] == 2


def test_a_stale_context_is_refused(context: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("JUJU_CONTEXT_ID", "ctx-0")

    assert tool("is-leader")[2] == 'ERROR bad request: unknown context "ctx-0"\n'


def test_the_port_tools_are_the_port_rules_of_hooktools():
    from slurm_lab.juju import hooktools

    assert set(jujuc.PORT_TOOLS) == set(hooktools.TOOLS)


def test_the_owner_removes_a_revision_and_a_consumer_may_not(context: Path):
    """`secret-remove --revision N` (ops' remove_revision) is recorded for the commit."""
    assert tool(f"secret-remove {SECRET} --revision 1")[2] == "ERROR permission denied\n"
    data = json.loads(context.read_text())
    data["leader"] = True
    data["secrets"][SECRET].update(owner="application", tracked=2)
    context.write_text(json.dumps(data))

    assert tool(f"secret-remove {SECRET} --revision 7")[2] == (
        'ERROR secret revision "7" not found\n'
    )
    assert tool(f"secret-remove {SECRET} --revision 1")[0] == 0
    ops = json.loads(context.read_text())["out"]["secret_ops"]
    assert ops == [{"op": "remove", "id": SECRET, "revision": 1}]


# --- one server per hook, the tools as a bash client -------------------------------------------

JUJUC_DIR = Path(jujuc.__file__).parent
HOOK = """read -r LAB_TOOLS_TOKEN < /proc/sys/kernel/random/uuid
LAB_TOOLS_SOCKET="${LAB_HOOK_CONTEXT%/*}/${JUJU_CONTEXT_ID##*-}.sock"
export LAB_TOOLS_TOKEN LAB_TOOLS_SOCKET
/usr/bin/python3 -SE "$TOOLS/jujuc.py" --serve $$ </dev/null >/dev/null 2>&1 &
echo "server $!"
"""


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    """The tools as a unit's machine gets them: every name a link to the client."""
    folder = tmp_path / "tools"
    folder.mkdir()
    shutil.copy(JUJUC_DIR / "jujuc.py", folder / "jujuc.py")
    shutil.copy(JUJUC_DIR / "hooktools.py", folder / "hooktools.py")
    shutil.copy(JUJUC_DIR / "jujuc.sh", folder / jujuc.CLIENT)
    for name in jujuc.TOOLS:
        (folder / name).symlink_to(jujuc.CLIENT)
    return folder


def hook(tools: Path, body: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TOOLS": str(tools), "PATH": f"{tools}:{os.environ['PATH']}"}
    return subprocess.run(
        ["/bin/sh", "-c", HOOK + body],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


def test_a_hooks_tools_are_answered_by_its_server_with_the_same_rules(
    context: Path, tools: Path, tmp_path: Path
):
    (tmp_path / "settings.json").write_text('{"from": "file"}')
    body = """
printf '{"k": "two\\\\nlines\\\\n\\\\n"}' | relation-set -r db:4 --file -; echo "rc=$?"
relation-set -r 4 --file settings.json; echo "rc=$?"
relation-get --format=json -r 4 - a/1
relation-get -r 9 - b/0; echo "rc=$?"
config-get --bogus; echo "rc=$?"
LAB_TOOLS_TOKEN=guess is-leader; echo "rc=$?"
JUJU_CONTEXT_ID=other is-leader; echo "rc=$?"
"""
    done = hook(tools, body, tmp_path)

    lines = done.stdout.splitlines()[1:]
    assert lines[:2] == ["rc=0", "rc=0"]
    assert json.loads(lines[2]) == {"k": "two\nlines\n\n", "from": "file"}
    assert lines[3:] == ["rc=1", "rc=2", "rc=1", "rc=1"]
    assert done.stderr.splitlines() == [
        'ERROR invalid value "9" for option -r: relation not found',
        "ERROR flag provided but not defined: --bogus",
        "ERROR bad request: not a client of this hook",
        'ERROR bad request: unknown context "other"',
    ]
    assert json.loads(context.read_text())["out"]["relations_written"] == ["4"]


def test_the_server_goes_with_its_hook(context: Path, tools: Path, tmp_path: Path):
    done = hook(tools, "is-leader", tmp_path)
    server = int(done.stdout.split()[1])
    assert done.stdout.split()[2] == "False"

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{server}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{server}").exists()
    assert not (context.parent / "1.sock").exists()
