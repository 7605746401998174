"""The hook-tool server (slurm_lab.juju.jujuc.serve) against hostile local clients, no machines.

Any root process in the machine can connect to a hook's server on its unix socket: what it
sends is bounded in bytes and time, a malformed request is answered as one, and neither
stalls nor ends the server for the hook's own calls.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_lab.juju import jujuc

TOKEN = "t0ken"
CONTEXT_ID = "ctx-1"


def request(*fields: str, token: str = TOKEN, cwd: str = "/", context: str = CONTEXT_ID) -> bytes:
    """A request as the bash client sends it: `token cwd context tool argc args... stdin`."""
    tool, *rest = fields
    *argv, stdin = rest or [""]
    words = [token, cwd, context, tool, str(len(argv)), *argv, stdin]
    return b"".join(word.encode() + b"\0" for word in words)


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    server, client = socket.socketpair()
    with server, client:
        yield server, client


def test_a_request_is_read_to_its_last_field(pair):
    server, client = pair
    client.sendall(request("relation-set", "--file", "-", "k: two\nlines\n"))

    fields = jujuc._read_request(server)

    assert fields[:5] == [TOKEN, "/", CONTEXT_ID, "relation-set", "2"]
    assert fields[5:] == ["--file", "-", "k: two\nlines\n"]


def test_a_request_beyond_the_byte_bound_is_refused_unread(pair):
    server, client = pair
    client.sendall(b"x" * 5000)

    with pytest.raises(jujuc.BadRequestError, match="more than 4096 bytes"):
        jujuc._read_request(server, limit=4096)


def test_a_silent_client_is_cut_off_at_the_time_bound(pair):
    server, client = pair
    client.sendall(request("is-leader")[:7])  # Then nothing more.
    started = time.monotonic()

    with pytest.raises(jujuc.BadRequestError, match=r"not sent within 0\.3 s"):
        jujuc._read_request(server, seconds=0.3)

    assert time.monotonic() - started < 2


MALFORMED = {
    "a negative argument count": b"t\0/\0ctx-1\0is-leader\0-5\0",
    "an argument count that is no number": b"t\0/\0ctx-1\0is-leader\0two\0a\0b\0\0",
    "a huge argument count": b"t\0/\0ctx-1\0is-leader\0" + b"9" * 40 + b"\0",
    "bytes that are not UTF-8": b"\xff\0/\0ctx-1\0is-leader\x000\0\0",
    "a request cut short": b"t\0/\0ctx-1\0",
}


@pytest.mark.parametrize("payload", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_answered_as_one(pair, payload: bytes):
    server, client = pair
    client.sendall(payload)
    client.shutdown(socket.SHUT_WR)

    jujuc._answer(server, TOKEN, threading.Lock())

    code, out, err, _ = client.recv(65536).split(b"\0")
    assert (code, out) == (b"1", b"")
    assert err.startswith(b"ERROR bad request: ")


def test_a_token_that_is_not_ascii_is_not_a_client(pair):
    server, client = pair
    client.sendall(request("is-leader", "", token="é"))

    jujuc._answer(server, TOKEN, threading.Lock())

    assert client.recv(65536) == b"1\0\0ERROR bad request: not a client of this hook\n\0"


# --- the server process ------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    """A hook's tool server (its socket's path) while a stand-in hook process lives."""
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps({"context_id": CONTEXT_ID, "leader": True}))
    path = tmp_path / "1.sock"
    hook = subprocess.Popen(["sleep", "60"])
    env = {
        **os.environ,
        jujuc.TOKEN_ENV: TOKEN,
        jujuc.SOCKET_ENV: str(path),
        jujuc.CONTEXT_ENV: str(context),
        "JUJU_CONTEXT_ID": CONTEXT_ID,
    }
    program = Path(jujuc.__file__)
    serving = subprocess.Popen(
        [sys.executable, "-SE", str(program), jujuc.SERVE_FLAG, str(hook.pid)], env=env
    )
    try:
        deadline = time.monotonic() + 10
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        yield str(path)
    finally:
        hook.kill()
        hook.wait()
        serving.wait(timeout=10)


def connect(path: str, timeout: float | None = None) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout)
    conn.connect(path)
    return conn


def call(path: str, payload: bytes, timeout: float = 5) -> list[bytes]:
    with connect(path, timeout) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)  # All sent, as a request cut short ends.
        answer = b""
        while answer.count(b"\0") < 3 and (chunk := conn.recv(65536)):
            answer += chunk
    return answer.split(b"\0")[:3]


def test_a_silent_client_stalls_no_call_of_the_hook(server: str):
    with connect(server) as silent:
        silent.sendall(b"t0ken\0")  # And nothing more, the connection held open.
        time.sleep(0.3)  # Accepted first.
        started = time.monotonic()

        answer = call(server, request("is-leader", ""))

    assert answer == [b"0", b"True\n", b""]
    assert time.monotonic() - started < 3


def test_malformed_requests_leave_the_server_answering(server: str):
    for payload in MALFORMED.values():
        assert call(server, payload)[0] == b"1"

    assert call(server, request("is-leader", "")) == [b"0", b"True\n", b""]


def test_the_server_listens_on_a_unix_socket_only_its_owner_may_reach(server: str):
    mode = os.stat(server).st_mode

    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    assert call(server, request("is-leader", "")) == [b"0", b"True\n", b""]
