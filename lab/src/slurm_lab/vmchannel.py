"""The host's side of a VM's command channel: a broker per VM, and the client `exec` uses.

qemu exposes the VM's virtio serial port `lab.0` as a unix socket (`chardev.sock`). One
broker process per VM holds that connection for the VM's whole life: a virtio port whose host
side is closed cannot be waited on by the guest (its reads return at once), and a port has one
host connection at a time while the lab runs many commands at once. The broker accepts any
number of clients on `exec.sock`, gives each request an id, forwards it to the guest agent
(`slurm_lab.vmagent`), and hands each answer to its client. A client that leaves (its timeout)
cancels its command in the guest. The agent's `hello` names the boot that answers; the broker
records it in `boot.json` (what `Lab` reads as the machine's boot) and fails the requests a
reboot cut. The agent says `bye` when systemd stops it: from then until the next boot's
`hello`, requests fail at once, as commands in a rebooting container do.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_lab.errors import LabError

CHARDEV = "chardev.sock"
EXEC_SOCKET = "exec.sock"
BOOT_FILE = "boot.json"
CONNECT_TIMEOUT = 30.0
MARGIN = 10.0
"""Seconds a client waits past its command's own timeout (the guest enforces that one)."""


@dataclass
class Reply:
    """An answer a client waits for."""

    event: threading.Event = field(default_factory=threading.Event)
    message: dict[str, object] = field(default_factory=dict[str, object])


class Broker:
    """Serve exec clients over one VM's chardev connection (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.guest = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.send_lock = threading.Lock()
        self.pending: dict[str, Reply] = {}
        self.pending_lock = threading.Lock()
        self.ids = itertools.count(1)
        self.boot: dict[str, object] | None = None

    def connect(self) -> None:
        """Connect to qemu's end of the port (qemu creates it as it starts)."""
        deadline = time.monotonic() + CONNECT_TIMEOUT
        while True:
            try:
                self.guest.connect(str(self.directory / CHARDEV))
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def send(self, message: Mapping[str, object]) -> None:
        """Write one line to the guest (after a newline that ends any cut line)."""
        data = b"\n" + json.dumps(message).encode() + b"\n"
        with self.send_lock:
            self.guest.sendall(data)

    def set_boot(self, boot: dict[str, object] | None) -> None:
        """Record the answering boot (None: none answers) and fail what an older one held."""
        path = self.directory / BOOT_FILE
        if boot is None:
            path.unlink(missing_ok=True)
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(boot))
            tmp.replace(path)
        if boot is None or (self.boot and boot.get("boot_id") != self.boot.get("boot_id")):
            self.fail_all("the machine rebooted")
        self.boot = boot

    def fail_all(self, reason: str) -> None:
        """Answer every waiting client with `reason`."""
        with self.pending_lock:
            replies = list(self.pending.values())
            self.pending.clear()
        for reply in replies:
            reply.message = {"error": reason}
            reply.event.set()

    def read_guest(self) -> None:
        """Read the guest's lines until qemu closes the port."""
        pending = b""
        while True:
            chunk = self.guest.recv(65536)
            if not chunk:
                return
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self.from_guest(line)

    def from_guest(self, line: bytes) -> None:
        """Act on one line from the guest agent."""
        try:
            message = json.loads(line) if line else None
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        op = message.get("op")
        if op == "hello":
            self.set_boot({"boot_id": message.get("boot_id"), "btime": message.get("btime")})
        elif op == "bye":
            self.set_boot(None)
        elif op == "done":
            with self.pending_lock:
                reply = self.pending.pop(str(message.get("id")), None)
            if reply is not None:
                reply.message = message
                reply.event.set()

    def serve_client(self, client: socket.socket) -> None:
        """Forward one client's request and its answer; cancel it if the client leaves."""
        with client:
            request = _read_line(client)
            if request is None:
                return
            if self.boot is None:
                _send_line(client, {"error": "the machine is not running"})
                return
            request_id = str(next(self.ids))
            reply = Reply()
            with self.pending_lock:
                self.pending[request_id] = reply
            try:
                self.send({**request, "op": "run", "id": request_id})
            except OSError:
                _send_line(client, {"error": "the machine is not running"})
                return
            while not reply.event.wait(0.2):
                readable, _, _ = select.select([client], [], [], 0)
                if readable and not client.recv(1, socket.MSG_PEEK):  # the client left
                    with self.pending_lock:
                        self.pending.pop(request_id, None)
                    with contextlib.suppress(OSError):
                        self.send({"op": "cancel", "id": request_id})
                    return
            with contextlib.suppress(OSError):
                _send_line(client, reply.message)

    def serve(self) -> None:
        """Run until qemu closes the chardev (the VM is off)."""
        self.connect()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path = self.directory / EXEC_SOCKET
        path.unlink(missing_ok=True)
        listener.bind(str(path))
        os.chmod(path, 0o600)
        listener.listen(64)

        def accept() -> None:
            while True:
                client, _ = listener.accept()
                threading.Thread(target=self.serve_client, args=(client,), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        with contextlib.suppress(OSError):
            self.send({"op": "hello"})
        try:
            self.read_guest()
        except OSError:
            pass
        finally:
            self.set_boot(None)
            path.unlink(missing_ok=True)


def _send_line(sock: socket.socket, message: Mapping[str, object]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _read_line(sock: socket.socket) -> dict[str, object] | None:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return None
        data += chunk
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def read_boot(directory: Path) -> dict[str, object] | None:
    """Return the boot that answers on the VM's channel (`boot_id`, `btime`), None if none."""
    try:
        boot = json.loads((directory / BOOT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return boot if isinstance(boot, dict) else None


def request(
    directory: Path,
    name: str,
    *,
    argv: Sequence[str],
    env: Mapping[str, str],
    stdin: bytes,
    timeout: float | None,
) -> tuple[int, bytes, bytes]:
    """Run argv in the VM whose channel is in `directory`: (exit status, stdout, stderr).

    Raises LabError when the VM does not answer (off, rebooting) or on timeout.
    """
    message = {
        "argv": list(argv),
        "env": dict(env),
        "stdin": base64.b64encode(stdin).decode(),
        "timeout": timeout,
    }
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(str(directory / EXEC_SOCKET))
        except OSError as e:
            raise LabError(f"machine {name} is not running") from e
        sock.settimeout(timeout + MARGIN if timeout else None)
        try:
            _send_line(sock, message)
            answer = _read_line(sock)
        except TimeoutError as e:
            raise LabError(f"{name}: timed out after {timeout}s: {' '.join(argv)}") from e
        except OSError as e:
            raise LabError(f"machine {name} is not running") from e
    if answer is None:
        raise LabError(f"machine {name} is not running")
    if "error" in answer:
        raise LabError(f"{name}: {answer['error']}")
    code = answer.get("rc")
    if answer.get("timed_out"):
        raise LabError(f"{name}: timed out after {timeout}s: {' '.join(argv)}")
    return (
        int(code) if isinstance(code, int) else 1,
        base64.b64decode(str(answer.get("stdout", ""))),
        base64.b64decode(str(answer.get("stderr", ""))),
    )


def main(argv: Sequence[str]) -> int:
    """`python -m slurm_lab.vmchannel DIRECTORY`: run the broker of the VM in DIRECTORY."""
    Broker(Path(argv[0])).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
