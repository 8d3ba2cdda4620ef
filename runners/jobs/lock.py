"""One writer per job folder: a lock that dies with its holder.

Two processes running the same job into the same folder (a sweep launched twice, a SLURM requeue
while the first attempt still runs, two Ray workers given the same job) must not both append
records. ``JobLock(job_dir).acquire()`` takes two locks, in this order:

1. **An OS file lock** (``fcntl.flock``, exclusive, on ``<job_dir>/.lock``, a file that is never
   replaced or removed): the kernel drops it when the holder exits or is killed (``kill -9``
   included), so a crashed holder never blocks the next run. On a local disk, and on network
   filesystems whose client passes ``flock`` to the server (NFSv4, Lustre/GPFS with locking
   enabled), this alone decides.
2. **A holder file** (``<job_dir>/.lock.json``: host, pid, job, start time and a heartbeat the
   holder rewrites every ``heartbeat_s`` seconds from a daemon thread), for shared filesystems that
   cannot hold an OS lock across nodes (``flock`` silently local to each client). A holder file
   written by another *live* process is respected even when the OS lock was granted: on this host
   "live" means its pid still runs (unless this process got the OS lock, which proves it gone); on
   another host it means its heartbeat is younger than
   ``stale_s`` (default 5 × ``heartbeat_s``). A stale holder file (a dead pid here, a silent host
   there) is taken over. The holder file is replaced atomically (write + rename); after writing it,
   the taker reads it back once, so of two hosts taking over the same stale lock at once only the
   one whose file survived goes on.

A second process gets ``JobLocked`` naming the holder (``run_job`` turns it into a one-line
"skipped" message and writes nothing into the folder), or waits for the holder to finish when
``wait=True`` (``on_locked=wait``), re-checking every ``poll_s`` seconds.

If the heartbeat thread finds its holder file replaced by another process (this holder was
judged stale, e.g. after a long network partition), ``lost`` is set and the job stops before
writing its next record (``JobLockLost``).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_FILE = ".lock"
HOLDER_FILE = ".lock.json"
HEARTBEAT_S = 30.0


class JobLocked(RuntimeError):
    """Another live process holds the job folder's lock."""

    def __init__(self, job_dir: Path, holder: dict[str, Any]) -> None:
        self.job_dir = Path(job_dir)
        self.holder = holder
        super().__init__(f"{self.job_dir.name}: locked by {describe(holder)}")


class JobLockLost(RuntimeError):
    """This process's lock was taken over by another process (judged stale)."""


def describe(holder: dict[str, Any]) -> str:
    """``host H pid P since 13:02:11 (heartbeat 4 s ago)`` for messages."""
    if not holder:
        return "another process (no holder file: it holds the OS lock)"
    started = holder.get("started")
    since = time.strftime("%H:%M:%S", time.localtime(started)) if started else "?"
    beat = holder.get("heartbeat")
    ago = f", heartbeat {time.time() - beat:.0f} s ago" if beat else ""
    return f"host {holder.get('host')} pid {holder.get('pid')} since {since}{ago}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


@dataclass
class JobLock:
    """The lock of one job folder (module docstring). Use ``acquire()``/``release()`` or ``with``."""

    job_dir: Path
    wait: bool = False
    heartbeat_s: float = HEARTBEAT_S
    stale_s: float | None = None
    poll_s: float = 2.0

    def __post_init__(self) -> None:
        self.job_dir = Path(self.job_dir)
        self.stale_s = self.stale_s if self.stale_s is not None else 5 * self.heartbeat_s
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.token = f"{self.host}:{self.pid}:{time.time_ns()}"
        self._fd: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost = False

    # ------------------------------------------------------------------ paths
    @property
    def lock_path(self) -> Path:
        return self.job_dir / LOCK_FILE

    @property
    def holder_path(self) -> Path:
        return self.job_dir / HOLDER_FILE

    # ------------------------------------------------------------------ holder file
    def read_holder(self) -> dict[str, Any]:
        try:
            data = json.loads(self.holder_path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _write_holder(self, started: float) -> None:
        now = time.time()
        info = {"host": self.host, "pid": self.pid, "token": self.token, "job": self.job_dir.name,
                "started": started, "heartbeat": now}
        tmp = self.holder_path.with_name(f"{HOLDER_FILE}.{self.host}.{self.pid}.tmp")
        tmp.write_text(json.dumps(info), encoding="utf-8")
        os.replace(tmp, self.holder_path)

    def holder_is_live(self, holder: dict[str, Any], os_locked: bool = False) -> bool:
        """Whether a holder file names another process that still holds the job (module docstring).
        ``os_locked``: this process holds the OS lock, which proves a holder on this host is gone (its
        pid may have been reused since)."""
        if not holder or holder.get("token") == self.token:
            return False
        if holder.get("host") == self.host:
            if os_locked:
                return False
            pid = holder.get("pid")
            return isinstance(pid, int) and pid != self.pid and _pid_alive(pid)
        beat = holder.get("heartbeat")
        return isinstance(beat, int | float) and time.time() - beat < float(self.stale_s or 0)

    # ------------------------------------------------------------------ acquire / release
    def _try_os_lock(self) -> bool:
        import fcntl

        self.job_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP):  # a filesystem without locks: holder file only
                self._fd = None
                return True
            raise
        self._fd = fd
        return True

    def _release_os_lock(self) -> None:
        if self._fd is not None:
            import fcntl

            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None

    def try_acquire(self) -> dict[str, Any] | None:
        """Take the lock if free; ``None`` on success, else the holder's info (``{}`` when only the OS
        lock says so)."""
        if not self._try_os_lock():
            return self.read_holder() or {}
        holder = self.read_holder()
        if self.holder_is_live(holder, os_locked=self._fd is not None):
            self._release_os_lock()
            return holder
        started = time.time()
        self._write_holder(started)
        if holder and holder.get("host") != self.host:
            # Taking over another host's stale file: if two hosts do it at once, the last rename wins.
            time.sleep(min(1.0, self.heartbeat_s / 10))
            if self.read_holder().get("token") != self.token:
                self._release_os_lock()
                return self.read_holder()
        self._start_heartbeat(started)
        return None

    def acquire(self) -> JobLock:
        """Take the lock, or raise ``JobLocked`` (``wait=False``), or wait until it is free."""
        while True:
            holder = self.try_acquire()
            if holder is None:
                return self
            if not self.wait:
                raise JobLocked(self.job_dir, holder)
            time.sleep(self.poll_s)

    def _start_heartbeat(self, started: float) -> None:
        def beat() -> None:
            while not self._stop.wait(self.heartbeat_s):
                if self.read_holder().get("token") not in (None, self.token):
                    self.lost = True
                    return
                try:
                    self._write_holder(started)
                except OSError:
                    pass  # a transient filesystem error; the next beat retries

        self._stop.clear()
        self._thread = threading.Thread(target=beat, name=f"job-lock-{self.job_dir.name}", daemon=True)
        self._thread.start()

    def check(self) -> None:
        """Raise ``JobLockLost`` if another process took this lock over (call before each write)."""
        if self.lost:
            raise JobLockLost(f"{self.job_dir.name}: the lock was taken over by {describe(self.read_holder())}; "
                              "this process stops without writing")

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        if self.read_holder().get("token") == self.token:
            self.holder_path.unlink(missing_ok=True)
        self._release_os_lock()

    def __enter__(self) -> JobLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
