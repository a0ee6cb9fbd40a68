"""One stage in its own process, and the peak resident memory of a process.

A long-lived process that has trained a model keeps what it freed (glibc arenas, fragmented heap) and the thread
pools an earlier stage set up, so the next heavy stage in it peaks higher and runs slower than the same command run
alone. `omne run` therefore runs each heavy stage (evaluations, SFT, RL) like DVC and Dagster do: in a child
process of its own (``multiprocessing``, "spawn": a fresh interpreter), which returns the stage's result and its
own peak RSS and hands all its memory back to the OS when it ends.

The child prints to the same terminal (it inherits stdout and stderr) and logs at the parent's level; an exception
in it is raised again in the parent with the same type and message (the child's traceback as its cause); Ctrl-C
or the parent's death ends it (the parent stops it on the way out; on Linux the kernel kills it when the parent
dies, elsewhere a watcher thread exits when the parent is gone). ``OMNE_STAGES_INLINE=1`` runs every stage in the
calling process instead, e.g. under a debugger.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import pickle
import re
import resource
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INLINE_ENV = "OMNE_STAGES_INLINE"
STOP_GRACE_S = 3.0  # after Ctrl-C, how long the child may take to clean up (it got the SIGINT too)


def stages_inline() -> bool:
    """True when ``$OMNE_STAGES_INLINE`` asks for every stage to run in the calling process."""
    return os.environ.get(INLINE_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def read_status_kib(field: str) -> int | None:
    """A ``kB`` field of /proc/self/status (``VmHWM``: peak RSS, ``VmRSS``: RSS now); None off Linux."""
    try:
        match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark of this process's RSS (Linux `clear_refs` 5), so that the next read
    of VmHWM is the peak of what follows only; False where the kernel does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def peak_rss_kib() -> int:
    """This process's peak resident memory so far, in KiB (VmHWM; getrusage where there is no /proc)."""
    peak = read_status_kib("VmHWM")
    if peak is not None:
        return peak
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return maxrss // 1024 if sys.platform == "darwin" else maxrss  # bytes on macOS, KiB elsewhere


class ChildTraceback(Exception):
    """The traceback of an exception raised in a stage's child process (set as the re-raised exception's cause)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\"\"\"\n{self.text}\"\"\""


class StageProcessDied(RuntimeError):
    """A stage's child process ended without a result: killed (e.g. out of memory) or crashed in native code."""


@dataclass
class ChildRun:
    """What a stage's child process gave back: its pid and peak RSS, and its result or its exception."""

    pid: int
    peak_rss_kib: int | None
    result: Any = None
    error: BaseException | None = None

    def value(self) -> Any:
        """The stage's result, or its exception raised again here."""
        if self.error is not None:
            raise self.error
        return self.result


def run_in_child(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> ChildRun:
    """``fn(*args, **kwargs)`` in a fresh child process; ``fn`` must be importable by name (a module-level
    function) and its arguments and result picklable. Blocks until the child ends."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_main, name=f"omne-{getattr(fn, '__name__', 'stage')}",
                              args=(sender, os.getpid(), _logging_setup(), fn, args, kwargs))
    for stream in (sys.stdout, sys.stderr):  # what the parent printed comes before what the child prints
        with contextlib.suppress(Exception):
            stream.flush()
    process.start()
    sender.close()
    try:
        try:
            message = receiver.recv()
        except EOFError:  # the child ended without sending
            process.join()
            return ChildRun(pid=process.pid or 0, peak_rss_kib=None, error=StageProcessDied(
                f"the process of stage {getattr(fn, '__name__', fn)!r} ended without a result "
                f"(exit code {process.exitcode}{_signal_name(process.exitcode)})"))
        process.join()
    finally:
        receiver.close()
        _stop(process)
    status, payload, child_traceback, peak = message
    if status == "ok":
        return ChildRun(pid=process.pid or 0, peak_rss_kib=peak, result=payload)
    payload.__cause__ = ChildTraceback(child_traceback)
    return ChildRun(pid=process.pid or 0, peak_rss_kib=peak, error=payload)


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return ""
    with contextlib.suppress(ValueError):
        return f", killed by {signal.Signals(-exitcode).name}"
    return ""


def _stop(process: multiprocessing.process.BaseProcess) -> None:
    """End the child if it still runs (the parent is leaving early: Ctrl-C, an error): a moment to clean up
    after the SIGINT it got too, then SIGTERM, then SIGKILL."""
    if process.is_alive():
        process.join(STOP_GRACE_S)
    if process.is_alive():
        process.terminate()
        process.join(STOP_GRACE_S)
    if process.is_alive():
        process.kill()
        process.join()


def _logging_setup() -> tuple[int, str | None]:
    root = logging.getLogger()
    formats = [getattr(h.formatter, "_fmt", None) for h in root.handlers if h.formatter is not None]
    return root.level, formats[0] if formats else None


def _child_main(sender: Any, parent_pid: int, logging_setup: tuple[int, str | None], fn: Callable[..., Any],
                args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    _die_with_parent(parent_pid)
    level, fmt = logging_setup
    if fmt is not None:
        logging.basicConfig(level=level, format=fmt)
    else:
        logging.getLogger().setLevel(level)
    try:
        message: tuple[Any, ...] = ("ok", fn(*args, **kwargs), "")
    except BaseException as exc:  # noqa: BLE001 - every exception, Ctrl-C included, goes back to the parent
        message = ("error", _picklable(exc), traceback.format_exc())
    try:
        sender.send((*message, peak_rss_kib()))
    except Exception as exc:  # noqa: BLE001 - a result that does not pickle is the stage's bug, reported as such
        sender.send(("error", RuntimeError(f"the result of {getattr(fn, '__name__', fn)!r} could not be sent "
                                           f"back from its process: {type(exc).__name__}: {exc}"),
                     traceback.format_exc(), peak_rss_kib()))
    finally:
        sender.close()


def _picklable(exc: BaseException) -> BaseException:
    """``exc`` itself when it survives pickling (same type and message in the parent), else a RuntimeError
    that names its type and message."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:  # noqa: BLE001 - any exception that does not round-trip
        return RuntimeError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}")
    return exc


def _die_with_parent(parent_pid: int) -> None:
    """The child never outlives the parent, even one killed with SIGKILL (no ``finally`` runs there)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            pr_set_pdeathsig = 1
            ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)

    def watch() -> None:  # where prctl is missing, and for a parent that died before prctl ran
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="omne-parent-watch", daemon=True).start()
