"""Helpers shared by the KG tool tests: a built solar project, free ports, an in-thread uvicorn server (as
`omne tools serve` runs it, or with a token), and a measure of the memory an action keeps."""

from __future__ import annotations

import gc
import signal
import subprocess
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from pipelines.config import Params, load_params
from pipelines.domains import load_registry
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.llm.scripted import UvicornThread, free_port  # noqa: F401 - free_port is used by the tool tests
from tests.conftest import make_project

if TYPE_CHECKING:
    from pipelines.agent.tools import KGToolbox


def build_solar_project(root: Path, profile: str | None = None) -> Params:
    """A throw-away project with the solar domain's KG and entity index built."""
    make_project(root)
    params = load_params(root / "params.yaml", profile)
    build_knowledge_graph(load_registry(params.registry_path).get("solar"), params)
    build_entity_index("solar", params)
    return params


def with_tools(params: Params, **changes: Any) -> Params:
    """``params`` with some ToolParams changed (the sections are frozen: copy, never mutate)."""
    return params.model_copy(update={"tools": params.tools.model_copy(update=changes)})


def wait_for_health(url: str, timeout: float = 60.0, process: subprocess.Popen | None = None,
                    headers: dict[str, str] | None = None) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"server exited with {process.returncode}:\n{out}\n{err}")
        try:
            response = httpx.get(f"{url}/health", headers=headers, timeout=2.0)
            if response.status_code == 200:
                return response
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"{url}/health did not answer within {timeout}s: {last}")


class ServerThread(UvicornThread):
    """uvicorn serving ``app`` on 127.0.0.1:<free port> in a background thread, answering /health."""

    def __enter__(self) -> ServerThread:
        super().__enter__()
        wait_for_health(self.url)
        return self


def stop_served(process: subprocess.Popen) -> None:
    """End an `omne tools serve` subprocess as a user would (SIGTERM), killed if it has not ended within 20 s."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()


def served_app(toolbox: KGToolbox, **options: Any) -> Any:
    """The tool server's app as `omne tools serve` runs it: ``create_app`` (``options``: token, max_body_bytes)."""
    from pipelines.agent.server import create_app

    return create_app(toolbox, **options)


def token_server_fixture(name: str, token: str) -> Any:
    """A module fixture called ``name``: the module's ``toolbox`` served on 127.0.0.1 requiring ``token``; its URL."""

    @pytest.fixture(scope="module", name=name)
    def running(toolbox: KGToolbox) -> Iterator[str]:
        with ServerThread(served_app(toolbox, token=token)) as server:
            yield server.url

    return running


def traced_growth(action: Callable[[], Any]) -> int:
    """Bytes still allocated by Python (every thread, an in-thread server's included) after ``action``, garbage
    collected (tracemalloc's measure)."""
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
