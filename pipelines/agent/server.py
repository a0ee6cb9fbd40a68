"""The tool server: the KG tools over HTTP (FastAPI) for trainers and evaluators in other processes.

Endpoints: POST /v1/tools/call, POST /v1/tools/batch, GET /v1/tools, GET /v1/domains, GET /health
(OpenAPI at /docs and /openapi.json). KGs are loaded once and reloaded when a domain's manifests
change. Optional bearer token; request bodies above a size limit are refused with 413.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from pipelines.agent.tools import EpisodeState, KGToolbox, Scope, ToolResult

MAX_BATCH = 4096


class CallRequest(BaseModel):
    call: str | dict[str, Any] = Field(description='Written call, e.g. node_info(node_name="X", graph_type="d"), '
                                       'or {"name": ..., "arguments": {...}}')
    graph_type: str | None = Field(None, description="The episode's graph, for tools without a graph_type argument.")
    episode_id: str | None = Field(None, max_length=200,
                                   description="Keeps per-episode tool state (search backtracking) across calls.")
    scope: Scope | None = Field(None, description="Restrict the episode's tools to the entities within `hops` of "
                                "`seeds` (external KGQA sets); kept by the episode for its later calls.")


class BatchRequest(BaseModel):
    calls: list[CallRequest] = Field(max_length=MAX_BATCH)


class BatchResponse(BaseModel):
    results: list[ToolResult]


class EpisodeStore:
    """Per-episode tool state, least recently used dropped first (bounded memory)."""

    def __init__(self, capacity: int = 100_000) -> None:
        self.capacity = capacity
        self._states: OrderedDict[str, EpisodeState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, episode_id: str | None, graph_type: str | None, scope: Scope | None = None) -> EpisodeState:
        """The episode's state (a fresh one without an id); a ``scope`` given replaces the episode's."""
        if episode_id is None:
            return EpisodeState(graph_type=graph_type, scope=scope)
        with self._lock:
            state = self._states.pop(episode_id, None) or EpisodeState(graph_type=graph_type)
            if scope is not None:
                state.scope = scope
            self._states[episode_id] = state
            while len(self._states) > self.capacity:
                self._states.popitem(last=False)
            return state

    def drop(self, episode_id: str) -> bool:
        with self._lock:
            return self._states.pop(episode_id, None) is not None


class BodySizeLimit:
    """ASGI middleware: refuse request bodies larger than ``max_bytes`` with 413, whether the size is
    declared (Content-Length) or only known while streaming (chunked): the body is read first."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        messages, size = [], 0
        while True:
            message = await receive()
            messages.append(message)
            size += len(message.get("body", b""))
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            if message["type"] != "http.request" or not message.get("more_body", False):
                break

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope: dict, receive: Any, send: Any) -> None:
        response = JSONResponse({"detail": f"request body larger than {self.max_bytes} bytes"}, status_code=413)
        await response(scope, receive, send)


def create_app(toolbox: KGToolbox, *, token: str | None = None, max_body_bytes: int = 2_000_000) -> FastAPI:
    app = FastAPI(title="omne KG tool server", version="1", description=__doc__)
    episodes = EpisodeStore()
    bearer = HTTPBearer(auto_error=False)

    def authorised(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if token and (credentials is None or not secrets.compare_digest(credentials.credentials, token)):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    def run(request: CallRequest) -> ToolResult:
        episode = episodes.get(request.episode_id, request.graph_type, request.scope)
        return toolbox.call(request.call, graph_type=request.graph_type, episode=episode)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness, the domains that can answer now (built), and every registered one."""
        return {"status": "ok", "domains": toolbox.built_domains(), "registered": toolbox.domain_names}

    @app.get("/v1/domains", dependencies=[Depends(authorised)])
    def domains() -> list[dict[str, Any]]:
        listed = []
        for name in toolbox.domain_names:
            graph = toolbox.graph(name)
            listed.append({"name": name, "entities": graph.num_entities, "relations": int(graph.rel_src.size),
                           "directed": graph.directed, "indexed": graph.vectors is not None})
        return listed

    @app.get("/v1/tools", dependencies=[Depends(authorised)])
    def tools() -> list[dict[str, Any]]:
        return [spec.json_schema() for spec in toolbox.specs.values()]

    @app.post("/v1/tools/call", dependencies=[Depends(authorised)])
    def call(request: CallRequest) -> ToolResult:
        return run(request)

    @app.post("/v1/tools/batch", dependencies=[Depends(authorised)])
    def batch(request: BatchRequest) -> BatchResponse:
        return BatchResponse(results=[run(item) for item in request.calls])

    @app.delete("/v1/episodes/{episode_id}", dependencies=[Depends(authorised)])
    def end_episode(episode_id: str) -> dict[str, bool]:
        return {"dropped": episodes.drop(episode_id)}

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=400)

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    return app
