"""The Dagster UI as a person uses it: `dagster dev` on 127.0.0.1, headless Chromium (Debian's, driven
by Playwright), the asset graph, a materialization of one KG partition launched from the launch dialog,
the run's success, the asset's checks and its manifest metadata. Screenshots go to a temporary folder
whose path is printed (`pytest -s` shows it).

The server runs on a throw-away project (the tiny solar domain, OMNE_PARAMS) with its own DAGSTER_HOME,
so the repository's artifacts and .dagster_home are never touched; it is stopped as Ctrl-C stops it
(SIGINT to its process group), then SIGTERM, then SIGKILL, and the test checks that no process is left.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import VENV_BIN, cli_env, make_project

CHROMIUM = Path("/usr/bin/chromium")
SERVER_START_S = 180  # a cold start imports the code location twice (code server + webserver's first load)
RUN_TIMEOUT_S = 240  # enqueue, run worker, step process: each loads the code location on a busy machine

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f"{CHROMIUM} is missing: the browser test drives "
                                 "Debian's chromium (apt-get install chromium, or `make browser` as root)")]


@dataclass
class DagsterDev:
    url: str
    process: subprocess.Popen
    log: Path
    how_stopped: str = ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of the process group, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":  # fields after "(comm)": state, ppid, pgrp, ...
            members.append(int(stat.parent.name))
    return members


def _wait_gone(server: DagsterDev, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        server.process.poll()  # reap the leader, else it stays a zombie of this process
        if not _group_members(server.process.pid):
            server.process.wait(timeout=10)  # the leader may have exited (a zombie) after the poll above: reap it
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.25)


def _stop(server: DagsterDev) -> None:
    """Ctrl-C (SIGINT to the group: dagster dev shuts its webserver, daemon and code servers down), then
    SIGTERM, then SIGKILL to what is left; records which signal it took."""
    pgid = server.process.pid  # start_new_session: the leader's pid is the group id
    for sig, grace in ((signal.SIGINT, 90), (signal.SIGTERM, 30), (signal.SIGKILL, 5)):  # a busy CI machine is slow
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        if _wait_gone(server, grace):
            server.how_stopped = sig.name
            return


def _default_interrupt() -> None:
    """Ctrl-C must reach the server: a job started in the background of a non-interactive shell (`make test
    &`, some CI runners) inherits SIGINT as ignored, and dagster dev would then sit through it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextmanager
def dagster_dev(root: Path) -> Iterator[DagsterDev]:
    """`dagster dev -h 127.0.0.1 -p PORT` on a fresh project and DAGSTER_HOME under ``root``."""
    project = make_project(root / "project")
    home = root / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    workspace = root / "workspace.yaml"  # the code location as `make dagster` names it (pyproject [tool.dagster])
    workspace.write_text("load_from:\n  - python_module:\n      module_name: dagster_project.definitions\n"
                         "      location_name: omne\n", encoding="utf-8")
    port = _free_port()
    log = root / "dagster_dev.log"
    env = cli_env(OMNE_PARAMS=str(project / "params.yaml"), DAGSTER_HOME=str(home))
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(VENV_BIN / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(port), "-w", str(workspace)],
            cwd=project, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_default_interrupt)
    server = DagsterDev(url=f"http://127.0.0.1:{port}", process=process, log=log)
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert process.poll() is None, f"dagster dev exited with {process.returncode}:\n{server.log_tail()}"
            try:
                with urllib.request.urlopen(f"{server.url}/server_info", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"no /server_info after {SERVER_START_S} s:\n{server.log_tail()}"
            time.sleep(0.5)
        yield server
    finally:
        _stop(server)


def _wait_for_run_status(page, timeout_s: float) -> str:  # noqa: ANN001
    """The run page's status tag once the run ended: Success, Failure or Canceled."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for status in ("Success", "Failure", "Canceled"):
            if page.get_by_text(status, exact=True).count():
                return status
        time.sleep(1)
    return "timeout"


def _open_from_nav(page, link: re.Pattern[str], heading: str, attempts: int = 3) -> None:  # noqa: ANN001
    """Click a nav link until its page shows ``heading``.

    The UI's first load redirects "/" to the overview once its data arrives; a click made before that
    redirect is undone by it (seen on a slow CI machine), so a click that did not land is made again.
    """
    from playwright.sync_api import expect

    for attempt in range(attempts):
        page.get_by_role("link", name=link).click()
        try:
            expect(page.get_by_text(heading)).to_be_visible(timeout=15_000)
            return
        except AssertionError:
            if attempt == attempts - 1:
                raise


def test_materialize_a_kg_partition_from_the_ui(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    shots = tmp_path / "screenshots"
    shots.mkdir()
    print(f"\nDagster UI screenshots: {shots}")
    started = time.monotonic()
    with dagster_dev(tmp_path) as server, sync_playwright() as pw:
        print(f"dagster dev up after {time.monotonic() - started:.0f} s")
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(60_000)
        skip = page.get_by_role("button", name="Skip")  # the first visit's "Join the Dagster community" dialog
        page.add_locator_handler(skip, lambda: skip.click())
        try:
            # the asset graph: the four groups, then the kg group opened to its assets
            page.goto(server.url)
            # offline, the nav icons' ligature text joins the links' names ("lineage Lineage", and the Jobs
            # link's "column_lineage Jobs" also contains "Lineage" case-insensitively): match the label's end
            _open_from_nav(page, re.compile(r"Lineage$"), "Global asset lineage")
            for group in ("kg", "qa", "training", "evaluation"):
                expect(page.get_by_text(group, exact=True).last).to_be_visible()
            page.get_by_text("kg", exact=True).last.dblclick()
            node = page.get_by_text("knowledge_graph", exact=True).first
            expect(node).to_be_visible()
            expect(page.get_by_text("entity_index", exact=True).first).to_be_visible()
            page.screenshot(path=shots / "01-asset-graph.png")

            # select knowledge_graph, Materialize, pick the solar partition in the launch dialog, launch
            node.click()
            page.get_by_role("button", name="Materialize selected…").click()
            dialog = page.locator(".bp5-dialog")
            expect(dialog.get_by_text("Launch runs to materialize knowledge_graph")).to_be_visible()
            dialog.get_by_text("Select a partition or create one").click()
            page.locator("label").filter(has_text="solar").last.click()
            page.keyboard.press("Escape")  # closes the partition list, not the dialog
            expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible()
            page.screenshot(path=shots / "02-launch-dialog.png")
            dialog.get_by_role("button", name="Launch 1 run").click()

            # the toast links to the run; wait for its status
            expect(page.get_by_text("Launched run")).to_be_visible()
            page.get_by_role("link", name="View", exact=True).click()
            expect(page.get_by_text("partition: solar")).to_be_visible()
            launched = time.monotonic()
            status = _wait_for_run_status(page, RUN_TIMEOUT_S)
            print(f"run {status} after {time.monotonic() - launched:.0f} s")
            page.screenshot(path=shots / "03-run.png")
            assert status == "Success", f"run ended as {status}\n{server.log_tail()}"

            # the asset's checks, all passed for the partition, and its manifest as metadata
            page.get_by_title("knowledge_graph", exact=True).first.click()  # the run's asset tag
            page.get_by_role("link", name="View asset", exact=True).click()
            page.get_by_role("tab", name="Checks").first.click()
            checks = ("description_share", "isolated_share", "no_dangling_edges", "no_empty_names",
                      "unique_normalised_keys")
            for check in checks:
                expect(page.get_by_text(check, exact=True).first).to_be_visible()
            expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(checks))
            expect(page.get_by_text("Passed", exact=True).first).to_be_visible()
            page.screenshot(path=shots / "04-checks.png")
            page.get_by_role("tab", name="Overview").first.click()
            for key in ("code_version", "sha256_entities.parquet", "inputs", "manifest"):
                expect(page.get_by_text(key, exact=True).first).to_be_visible()
            page.screenshot(path=shots / "05-metadata.png", full_page=True)
        except Exception:
            page.screenshot(path=shots / "failure.png")
            print(server.log_tail())
            raise
        finally:
            browser.close()
        stopping = time.monotonic()
    print(f"dagster dev stopped by {server.how_stopped} in {time.monotonic() - stopping:.0f} s")

    assert server.how_stopped, "dagster dev survived SIGKILL"
    if server.how_stopped == "SIGKILL":  # seen only inside a detached full-suite run: reported, not failed
        warnings.warn(f"dagster dev ignored SIGINT and SIGTERM for 120 s and needed SIGKILL; log: {server.log}",
                      stacklevel=1)
    assert not _group_members(server.process.pid) and server.process.returncode is not None
    project = tmp_path / "project"
    assert (project / "artifacts" / "kg" / "solar" / "manifest.json").is_file()
    assert sorted(p.name for p in shots.iterdir()) == ["01-asset-graph.png", "02-launch-dialog.png", "03-run.png",
                                                       "04-checks.png", "05-metadata.png"]
