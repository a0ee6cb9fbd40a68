"""A stage in its own process (``pipelines.stage_process``, what `omne run` runs its heavy stages with): the
result and the child's own peak RSS come back, an exception comes back with its type and message, the child's
output reaches the parent's terminal, and the child never outlives its parent (Ctrl-C, SIGKILL)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipelines.errors import ArtifactMissingError
from pipelines.stage_process import ChildTraceback, StageProcessDied, peak_rss_kib, run_in_child

ROOT = Path(__file__).resolve().parents[1]


def allocate(mib: int) -> tuple[int, int]:
    """Touch ``mib`` MiB, then give back this process's pid and the buffer's size."""
    buffer = bytearray(mib << 20)
    return os.getpid(), len(buffer)


def fail_like_a_user_error(path: str) -> None:
    raise ArtifactMissingError(f"{path}: the QA dataset is not built (run `omne qa build` or `make run`)")


class Unpicklable(Exception):
    def __init__(self, a: int, b: int) -> None:  # pickles with args=(text,) and cannot be rebuilt from them
        super().__init__(f"{a}+{b}")


def fail_unpicklably() -> None:
    raise Unpicklable(1, 2)


def die_hard() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def talk() -> None:
    print("printed by the child", flush=True)
    logging.getLogger("omne.child").warning("logged by the child")


def sleep_and_note(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(120)


def test_the_result_pid_and_own_peak_come_back() -> None:
    run = run_in_child(allocate, 300)
    pid, size = run.value()
    assert pid == run.pid != os.getpid() and size == 300 << 20
    assert run.peak_rss_kib is not None and run.peak_rss_kib > 300 * 1024  # the child's peak, with its buffer
    assert not psutil.pid_exists(run.pid) or psutil.Process(run.pid).status() == psutil.STATUS_ZOMBIE
    assert peak_rss_kib() > 0


def test_an_exception_comes_back_with_its_type_and_message() -> None:
    run = run_in_child(fail_like_a_user_error, "artifacts/qa/dataset/test.jsonl")
    with pytest.raises(ArtifactMissingError, match=r"^artifacts/qa/dataset/test.jsonl: the QA dataset is not built"):
        run.value()
    assert isinstance(run.error.__cause__, ChildTraceback) and "fail_like_a_user_error" in run.error.__cause__.text
    assert run.peak_rss_kib is not None and run.peak_rss_kib > 0
    unpicklable = run_in_child(fail_unpicklably)
    with pytest.raises(RuntimeError, match=r"Unpicklable: 1\+2"):
        unpicklable.value()


def test_a_child_killed_outright_is_an_error_not_a_hang() -> None:
    with pytest.raises(StageProcessDied, match="killed by SIGKILL"):
        run_in_child(die_hard).value()


def _parent(script: str) -> subprocess.Popen[str]:
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{script}"
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_the_childs_output_and_logs_reach_the_parents_terminal() -> None:
    parent = _parent("import logging\nlogging.basicConfig(level=logging.INFO, format='%(levelname)s %(message)s')\n"
                     "from pipelines.stage_process import run_in_child\nfrom tests.test_stage_process import talk\n"
                     "print('before', flush=True)\nrun_in_child(talk).value()\nprint('after')")
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 0, err
    assert out.split() == ["before", "printed", "by", "the", "child", "after"]
    assert "WARNING logged by the child" in err


def _wait_for(path: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.read_text()):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.2)
    return int(path.read_text())


def _gone(pid: int, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_the_child_never_outlives_its_parent(tmp_path: Path, how: signal.Signals) -> None:
    """Ctrl-C (here SIGINT to the parent alone: the child gets none) stops the child on the way out; SIGKILL of
    the parent, where no ``finally`` runs, kills it too."""
    note = tmp_path / "child.pid"
    # Ctrl-C as a terminal delivers it: a shell's background job (nohup, CI runners) starts with SIGINT ignored,
    # and Python then installs no KeyboardInterrupt handler, so the parent script restores it first
    parent = _parent(f"import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                     f"from pipelines.stage_process import run_in_child\nfrom tests.test_stage_process import "
                     f"sleep_and_note\nrun_in_child(sleep_and_note, {str(note)!r}).value()")
    child = None
    try:
        child = _wait_for(note)
        parent.send_signal(how)
        parent.communicate(timeout=120)  # a loaded 2-core CI machine is slow to unwind
        assert _gone(child), f"child {child} outlived its parent ({how.name})"
    finally:
        parent.kill()
        parent.communicate()
        if child is not None and not _gone(child, 0):
            os.kill(child, signal.SIGKILL)
