"""Crash-safety helpers: file locks, owner markers on temporary folders, and named pause points.

Several ``omne`` processes may write the same project at once (parallel imports, a Dagster run beside
the CLI), and any of them may be killed. Locks make read-modify-write of shared files (the registry)
serial; an owner marker inside a temporary folder lets a later run tell a dead writer's leftover from
a live writer's work in progress; pause points let the tests kill a real process at a named step.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

from pipelines.errors import OmneError

OWNER_FILE = ".omne-owner.json"
PAUSE_ENV = "OMNE_PAUSE_AT"  # test hook: "<point>" or "<point>,<point>": sleep there (crash tests kill us)
PAUSE_SECONDS_ENV = "OMNE_PAUSE_S"


class LockBusyError(OmneError, RuntimeError):
    """Another process holds the lock longer than we may wait."""


def _lock_holder(handle: int) -> str:
    try:
        text = os.pread(handle, 64, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f" (pid {text})" if text.isdigit() else ""


@contextmanager
def file_lock(path: Path, *, timeout_s: float | None = 60.0, what: str = "") -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (a lock file, created if missing, or a directory).

    The kernel releases it when the process dies, so a killed holder never leaves a stale lock. A
    lock file records the holder's pid, which the busy error names; ``timeout_s=None`` waits forever.
    """
    is_dir = path.is_dir()
    if not is_dir:
        path.parent.mkdir(parents=True, exist_ok=True)
    handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY if is_dir else os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if deadline is not None and time.monotonic() >= deadline:
                    holder = "" if is_dir else _lock_holder(handle)
                    raise LockBusyError(f"{what or path} is locked by another omne process{holder}; "
                                        "try again when it has finished") from None
                time.sleep(0.02)
        if not is_dir:
            os.ftruncate(handle, 0)
            os.pwrite(handle, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(handle)  # closing the descriptor releases the lock


class Owner(BaseModel):
    """Who wrote a temporary folder: enough to tell later whether that process still runs."""

    pid: int
    host: str
    started: float  # the process's start time (pids are reused; start times are not)

    @classmethod
    def current(cls) -> Owner:
        return cls(pid=os.getpid(), host=socket.gethostname(), started=psutil.Process().create_time())

    def alive(self) -> bool | None:
        """True/False when this host can tell, None for another host's process."""
        if self.host != socket.gethostname():
            return None
        try:
            return abs(psutil.Process(self.pid).create_time() - self.started) < 1.0
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return False


def read_owner(folder: Path) -> Owner | None:
    try:
        return Owner.model_validate(json.loads((folder / OWNER_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None


@contextmanager
def owned_folder(folder: Path) -> Iterator[Path]:
    """Mark ``folder`` (a temporary folder being written) as ours while the block runs.

    The marker is removed when the block ends normally, so the finished artifact holds no trace of
    who wrote it (its content hashes stay reproducible); a killed writer leaves it behind.
    """
    marker = folder / OWNER_FILE
    marker.write_text(Owner.current().model_dump_json(), encoding="utf-8")
    yield folder
    marker.unlink(missing_ok=True)


def pause_point(point: str) -> None:
    """Test hook: sleep at ``point`` when $OMNE_PAUSE_AT names it, so a test can kill us right there."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or point not in wanted.split(","):
        return
    print(f"omne: paused at {point} (pid {os.getpid()})", file=sys.stderr, flush=True)
    time.sleep(float(os.environ.get(PAUSE_SECONDS_ENV, "60")))
