"""One ``llama-server`` process: started on 127.0.0.1 at a port it picks and reports (``--port 0``, its log's
``listening on http://127.0.0.1:<port>``: no race for a free port), ready when ``/health`` answers 200 within the
deadline, stopped by its pid (SIGTERM, then SIGKILL).

Nothing is left behind: ``stop`` ends it; every live server is stopped at exit (``atexit``) and on SIGTERM (turned
into a ``KeyboardInterrupt`` while a server lives, so the job records the interruption); and the kernel ends it if
this process dies without a word (``PR_SET_PDEATHSIG``, Linux). A server that exits unasked fails the request in
flight with its log's last lines (``ServerDied``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import http.client
import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
_LIVE: set[Server] = set()
_PREVIOUS_TERM: Any = None


class ServerDied(RuntimeError):
    """The server exited (or never came up); the message ends with its log's last lines."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _on_term(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("SIGTERM")


class Server:
    """A ``llama-server`` (module docstring): ``argv`` without host and port; ``start`` → ``port`` → ``stop``."""

    def __init__(self, binary: str | Path, argv: list[str], startup_s: float = 120.0,
                 env: dict[str, str] | None = None) -> None:
        self.binary, self.argv, self.startup_s = str(binary), list(argv), float(startup_s)
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.log_path: Path | None = None

    @property
    def command(self) -> list[str]:
        return [self.binary, *self.argv, "--host", "127.0.0.1", "--port", "0"]

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def start(self) -> Server:
        fd, name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
        self.log_path = Path(name)
        with os.fdopen(fd, "wb") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         preexec_fn=_die_with_parent, env=self.env)
        _register(self)
        deadline = time.monotonic() + self.startup_s
        try:
            while self.port is None:
                match = LISTENING.search(self.log())
                if match:
                    self.port = int(match.group(1))
                    break
                self._check(deadline, "to report its port")
                time.sleep(0.05)
            while not self._healthy():
                self._check(deadline, "to answer /health")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        return self

    def _check(self, deadline: float, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise ServerDied(f"llama-server exited with {self.proc.returncode} before it came up; its log "
                             f"ends:\n{self.tail()}")
        if time.monotonic() > deadline:
            raise ServerDied(f"llama-server took longer than {self.startup_s:.0f} s {what}; its log ends:\n"
                             f"{self.tail()}")

    def _healthy(self) -> bool:
        try:
            status, _ = self.get("/health", timeout=5)
        except OSError:
            return False
        return status == 200

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self, grace: float = 0.0) -> None:
        """``ServerDied`` if the server has exited; ``grace``: seconds to let an exit under way finish (a server that
        dies closes its sockets a moment before it can be reaped)."""
        if grace and self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(grace)
        if not self.alive():
            code = self.proc.returncode if self.proc is not None else None
            raise ServerDied(f"llama-server (pid {self.pid}) exited with {code}; its log ends:\n{self.tail()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            return ""

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def connection(self, timeout: float = 600.0) -> http.client.HTTPConnection:
        assert self.port is not None, "start() first"
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, Any]:
        conn = self.connection(timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read().decode("utf-8", errors="replace")
        finally:
            conn.close()
        with contextlib.suppress(ValueError):
            return resp.status, json.loads(body)
        return resp.status, body

    def post(self, path: str, payload: dict, timeout: float = 600.0) -> Any:
        conn = self.connection(timeout)
        try:
            conn.request("POST", path, body=json.dumps(payload), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read().decode("utf-8")
        except OSError as exc:
            self.check_alive(grace=2.0)
            raise ServerDied(f"llama-server did not answer {path}: {exc}") from exc
        finally:
            conn.close()
        if resp.status != 200:
            raise RuntimeError(f"llama-server answered {path} with {resp.status}: {body[:500]}")
        return json.loads(body)

    def stop(self) -> None:
        """SIGTERM by pid, SIGKILL after 10 s; idempotent. The log file is removed."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        _unregister(self)
        if self.log_path is not None and proc is not None and proc.returncode in (0, -signal.SIGTERM):
            self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _register(server: Server) -> None:
    global _PREVIOUS_TERM
    if not _LIVE and threading.current_thread() is threading.main_thread():
        _PREVIOUS_TERM = signal.signal(signal.SIGTERM, _on_term)
    _LIVE.add(server)


def _unregister(server: Server) -> None:
    global _PREVIOUS_TERM
    _LIVE.discard(server)
    if not _LIVE and _PREVIOUS_TERM is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _PREVIOUS_TERM)
        _PREVIOUS_TERM = None


def live() -> list[Server]:
    return list(_LIVE)


@atexit.register
def stop_all() -> None:
    for server in list(_LIVE):
        server.stop()
