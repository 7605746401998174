"""The lab's command agent inside a VM (standard library only; runs as root from boot).

It serves the host's requests on the virtio serial port named `lab.0`, one JSON object per
line (bytes in base64):

* host: `{"op": "run", "id": I, "argv": [...], "env": {...}, "stdin": B64, "timeout": T}`
  runs argv as root in / with exactly env (a new session, so that a cancel kills its tree);
  answer `{"op": "done", "id": I, "rc": N, "timed_out": B, "stdout": B64, "stderr": B64}`;
* host: `{"op": "cancel", "id": I}` kills that command's process group (its client left);
* agent: `{"op": "bye"}` when systemd stops it (the machine shuts down);
* host: `{"op": "hello"}`, and unasked at start: `{"op": "hello", "boot_id": ..., "btime": N}`,
  which tells the host which boot answers (a kernel reboot gives a new one).

Each line starts after a newline the agent writes first, so a line cut by a reboot is dropped
whole by the host. The host side is `slurm_lab.vmchannel`.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

PORT_NAME = "lab.0"
EXIT_TIMEOUT = 124


def find_port() -> str:
    """Return the device of the virtio serial port named PORT_NAME (no udev: read sysfs)."""
    while True:
        for entry in Path("/sys/class/virtio-ports").glob("*"):
            try:
                if (entry / "name").read_text().strip() == PORT_NAME:
                    return f"/dev/{entry.name}"
            except OSError:
                continue
        time.sleep(0.1)


def boot_identity() -> dict[str, object]:
    """Return this boot's id and btime (seconds since the epoch when the kernel booted)."""
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    btime = 0
    for line in Path("/proc/stat").read_text().split("\n"):
        if line.startswith("btime "):
            btime = int(line.split()[1])
    return {"op": "hello", "boot_id": boot_id, "btime": btime}


class Agent:
    """One port, many commands at once; writes serialised by a lock."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.write_lock = threading.Lock()
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.running_lock = threading.Lock()
        self.stopped = threading.Event()

    def stop(self) -> None:
        """Stop reading and writing the port, so that its owner may close it.

        `serve` returns at its next read (an EOF or a line), and no answer is written after
        this returns. Once closed, the port's number goes to the next file its process opens:
        an agent that read or wrote on would take that file's data as the host's (the lab's
        tests serve an agent in their own process, where pytest's pipes get that number).
        """
        with self.write_lock:
            self.stopped.set()

    def send(self, message: dict[str, object]) -> None:
        """Write one line to the host; dropped when no host is connected."""
        data = json.dumps(message).encode() + b"\n"
        with self.write_lock:
            if self.stopped.is_set():
                return
            view = memoryview(data)
            while view:
                try:
                    written = os.write(self.fd, view)
                except OSError:
                    return  # the host is not connected: nobody waits for this answer
                view = view[written:]

    def run(self, request: dict[str, object]) -> None:
        """Run one command (in its own thread) and answer with its outcome."""
        request_id = str(request["id"])
        argv = [str(arg) for arg in request["argv"]]  # type: ignore[union-attr]
        env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}  # type: ignore[arg-type]
        stdin = base64.b64decode(str(request.get("stdin") or ""))
        timeout = request.get("timeout")
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                start_new_session=True,
            )
        except OSError as e:
            self.done(request_id, 127, b"", f"{argv[0]}: {e.strerror}\n".encode())
            return
        with self.running_lock:
            self.running[request_id] = process
        try:
            stdout, stderr = process.communicate(
                stdin,
                timeout=float(timeout) if timeout else None,  # type: ignore[arg-type]
            )
            rc = process.returncode
        except subprocess.TimeoutExpired:
            self.kill(process)
            stdout, stderr = process.communicate()
            rc = EXIT_TIMEOUT
            timed_out = True
        else:
            timed_out = False
        finally:
            with self.running_lock:
                self.running.pop(request_id, None)
        self.done(request_id, rc, stdout, stderr, timed_out=timed_out)

    def done(
        self, request_id: str, rc: int, stdout: bytes, stderr: bytes, *, timed_out: bool = False
    ) -> None:
        """Answer a request with the command's exit status and output."""
        self.send(
            {
                "op": "done",
                "id": request_id,
                "rc": rc,
                "timed_out": timed_out,
                "stdout": base64.b64encode(stdout).decode(),
                "stderr": base64.b64encode(stderr).decode(),
            }
        )

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        """Kill a command's whole process group."""
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)

    def handle(self, line: bytes) -> None:
        """Act on one line from the host."""
        try:
            request = json.loads(line)
        except ValueError:
            return  # a line cut by a reconnect or a reboot
        if not isinstance(request, dict):
            return
        op = request.get("op")
        if op == "run":
            threading.Thread(target=self.run, args=(request,), daemon=True).start()
        elif op == "cancel":
            with self.running_lock:
                process = self.running.get(str(request.get("id")))
            if process is not None:
                self.kill(process)
        elif op == "hello":
            self.send(boot_identity())

    def serve(self) -> None:
        """Greet the host, then read its lines until `stop`."""
        with self.write_lock:
            os.write(self.fd, b"\n")
        self.send(boot_identity())
        pending = b""
        while not self.stopped.is_set():
            try:
                chunk = os.read(self.fd, 65536)
            except InterruptedError:
                continue
            if not chunk:  # no host connected: a read does not block then
                pending = b""
                time.sleep(0.5)
                continue
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if line and not self.stopped.is_set():
                    self.handle(line)


def main() -> None:
    """Serve forever on the lab port; say `bye` when systemd stops the agent (shutdown)."""
    agent = Agent(os.open(find_port(), os.O_RDWR))

    def bye(signum: int, frame: object) -> None:
        agent.send({"op": "bye"})
        os._exit(0)

    signal.signal(signal.SIGTERM, bye)
    agent.serve()


if __name__ == "__main__":
    main()
