"""The tool server: the KG tools over HTTP (FastAPI) for trainers and evaluators in other processes.

Endpoints: POST /v1/tools/call, POST /v1/tools/batch, GET /v1/tools, GET /v1/domains, GET /health
(OpenAPI at /docs and /openapi.json). KGs are loaded once and reloaded when a domain's manifests
change. Optional bearer token; request bodies above a size limit are refused with 413.

Hostile clients: a bad request field (graph_type, episode_id, scope) is a typed tool error like a bad
call, never a 5xx; episode state and the toolbox's caches are bounded in bytes (tools.*_max_bytes);
tool work runs on its own thread pool (tools.server_threads), so /health answers while it is busy.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import sys
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field, WithJsonSchema

from pipelines.agent.calls import ErrorType, ToolError, printable
from pipelines.agent.tools import (
    QUESTION_MAX_CHARS,
    REQUEST_FIELD_MAX_CHARS,
    EpisodeState,
    KGToolbox,
    Scope,
    ToolResult,
    checked_scope,
    field_error,
)
from pipelines.config import ToolParams

log = logging.getLogger(__name__)

MAX_BATCH = 4096


def lenient_text(max_chars: int) -> Any:
    """A request field typed as text (at most ``max_chars``) in the schema but accepted as anything, so that a wrong
    value becomes a typed tool error for that call (as in-process) rather than a 422 for the whole request or batch."""
    return Annotated[Any, WithJsonSchema({"anyOf": [{"type": "string", "maxLength": max_chars}, {"type": "null"}]})]


NameField = lenient_text(REQUEST_FIELD_MAX_CHARS)
QuestionField = lenient_text(QUESTION_MAX_CHARS)


class CallRequest(BaseModel):
    call: str | dict[str, Any] = Field(description='Written call, e.g. node_info(node_name="X", graph_type="d"), '
                                       'or {"name": ..., "arguments": {...}}')
    graph_type: NameField = Field(None, description="The episode's graph, for tools without a graph_type argument.")
    episode_id: NameField = Field(None, description="Keeps per-episode tool state (search backtracking) across "
                                  "calls; end it with DELETE /v1/episodes/{episode_id} to free that state.")
    scope: Scope | None = Field(None, description="Restrict the episode's tools to the entities within `hops` of "
                                "`seeds` (external KGQA sets); kept by the episode for its later calls.")
    question: QuestionField = Field(
        None, description="The question the episode answers; kept by the episode for its later calls. With "
        "tools.node_info_order: question, node_info lists the relations closest to it first.")


class BatchRequest(BaseModel):
    calls: list[CallRequest] = Field(max_length=MAX_BATCH)


class BatchResponse(BaseModel):
    results: list[ToolResult]


class EpisodeStore:
    """Per-episode tool state, least recently used dropped first, bounded in count and in bytes.

    Bytes matter as much as the count: a client picks its scope's size and grows its search path, so
    100,000 episodes of a few KiB each would be gigabytes. An invalid id, graph_type or scope is never
    stored: the state returned carries the typed error (``refused``) that the toolbox answers with.
    """

    def __init__(self, capacity: int = 100_000, max_bytes: int | None = None,
                 scope_max_bytes: int | None = None) -> None:
        defaults = ToolParams()
        self.capacity = capacity
        self.max_bytes = defaults.episodes_max_bytes if max_bytes is None else max_bytes
        self.scope_max_bytes = defaults.scope_max_bytes if scope_max_bytes is None else scope_max_bytes
        self.nbytes = 0
        self._states: OrderedDict[str, tuple[EpisodeState, int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._states)

    def get(self, episode_id: object, graph_type: object, scope: object = None,
            question: object = None) -> EpisodeState:
        """The episode's state (a fresh one without an id); a ``scope`` or ``question`` given replaces the
        episode's."""
        refusal = (field_error("episode_id", episode_id) or field_error("graph_type", graph_type)
                   or field_error("question", question, QUESTION_MAX_CHARS))
        checked = None if refusal else checked_scope(scope, self.scope_max_bytes)
        if isinstance(checked, ToolError):
            refusal = checked
        if refusal is not None:
            return EpisodeState(refused=refusal)
        assert isinstance(graph_type, str | None) and isinstance(checked, Scope | None)
        assert isinstance(question, str | None)
        if episode_id is None:
            return EpisodeState(graph_type=graph_type, scope=checked, question=question)
        assert isinstance(episode_id, str)
        with self._lock:
            entry = self._states.pop(episode_id, None)
            if entry is None:
                state = EpisodeState(graph_type=graph_type)
            else:
                state = entry[0]
                self.nbytes -= entry[1]
            if checked is not None:
                state.scope = checked
            if question is not None:
                state.question = question
            # measured now, i.e. with the path its previous calls grew (a search adds one bounded frame)
            size = state.nbytes() + sys.getsizeof(episode_id)
            self._states[episode_id] = (state, size)
            self.nbytes += size
            while self._states and (len(self._states) > self.capacity or self.nbytes > self.max_bytes):
                _, (_, dropped) = self._states.popitem(last=False)
                self.nbytes -= dropped
            return state

    def drop(self, episode_id: str) -> bool:
        """Forget an episode (its scope and search path are freed)."""
        with self._lock:
            entry = self._states.pop(episode_id, None)
            if entry is not None:
                self.nbytes -= entry[1]
            return entry is not None


def _encodable(result: ToolResult) -> bool:
    try:
        result.model_dump_json()
    except ValueError:
        return False
    return True


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


def _json(model: BaseModel, fallback: BaseModel) -> bytes:
    """``model`` as JSON bytes, or ``fallback``'s if it cannot be encoded (never a 500 for one bad string)."""
    try:
        return model.model_dump_json().encode("utf-8")
    except ValueError:  # pydantic_core's PydanticSerializationError, UnicodeEncodeError
        log.exception("could not encode a tool result")
        return fallback.model_dump_json().encode("utf-8")


def _unencodable() -> ToolResult:
    error = ToolError(type=ErrorType.SERVER_ERROR, message="the tool result could not be encoded as JSON")
    return ToolResult(name="", arguments={}, ok=False, error_type=error.type, content=error.render())


def create_app(toolbox: KGToolbox, *, token: str | None = None, max_body_bytes: int = 2_000_000) -> FastAPI:
    limits = toolbox.tool_params
    episodes = EpisodeStore(max_bytes=limits.episodes_max_bytes, scope_max_bytes=limits.scope_max_bytes)
    # tool calls run here, never on the event loop nor on the shared threadpool that sync endpoints use:
    # /health and the request plumbing stay responsive however many batches are queued
    pool = ThreadPoolExecutor(max_workers=limits.server_threads, thread_name_prefix="omne-tools")

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        pool.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="omne KG tool server", version="1", description=__doc__, lifespan=lifespan)
    app.state.episodes, app.state.pool = episodes, pool
    bearer = HTTPBearer(auto_error=False)
    expected = token.encode("utf-8") if token else None

    async def authorised(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if expected is None:
            return
        try:  # header values arrive decoded as latin-1: encoding back gives the bytes sent, whatever they are
            given = credentials.credentials.encode("latin-1") if credentials is not None else None
        except UnicodeEncodeError:
            given = None
        if given is None or not secrets.compare_digest(given, expected):
            raise HTTPException(status_code=401, detail="missing or wrong bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    def run(request: CallRequest) -> ToolResult:
        episode = episodes.get(request.episode_id, request.graph_type, request.scope, request.question)
        return toolbox.call(request.call, graph_type=request.graph_type, episode=episode)

    def run_one(request: CallRequest) -> bytes:
        return _json(run(request), _unencodable())

    def run_batch(request: BatchRequest) -> bytes:
        results = [run(item) for item in request.calls]
        return _json(BatchResponse(results=results),
                     BatchResponse(results=[r if _encodable(r) else _unencodable() for r in results]))

    async def on_pool(fn: Any, request: BaseModel) -> Response:
        body = await asyncio.get_running_loop().run_in_executor(pool, fn, request)
        return Response(content=body, media_type="application/json")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness, the domains that can answer now (built), and every registered one; never waits for tool work."""
        return {"status": "ok", "domains": toolbox.built_domains(), "registered": toolbox.domain_names}

    @app.get("/v1/domains", dependencies=[Depends(authorised)])
    def domains() -> list[dict[str, Any]]:
        """Every registered domain; one that cannot answer yet (not built) is listed with ``built: false``."""
        listed: list[dict[str, Any]] = []
        for name in toolbox.domain_names:
            try:
                graph = toolbox.graph(name)
            except (FileNotFoundError, ValueError) as exc:  # not built yet (ArtifactMissingError), a bad entry
                listed.append({"name": name, "built": False, "detail": toolbox.public(printable(str(exc)))})
                continue
            except Exception as exc:  # noqa: BLE001 - an unreadable artifact must not make the listing a 500
                log.exception("domain %s could not be loaded", name)
                listed.append({"name": name, "built": False, "detail": f"could not be loaded: {type(exc).__name__}"})
                continue
            listed.append({"name": name, "built": True, "entities": graph.num_entities,
                           "relations": int(graph.rel_src.size), "directed": graph.directed,
                           "indexed": graph.vectors is not None})
        return listed

    @app.get("/v1/tools", dependencies=[Depends(authorised)])
    async def tools() -> list[dict[str, Any]]:
        return [spec.json_schema() for spec in toolbox.specs.values()]

    @app.post("/v1/tools/call", dependencies=[Depends(authorised)], response_model=ToolResult)
    async def call(request: CallRequest) -> Response:
        return await on_pool(run_one, request)

    @app.post("/v1/tools/batch", dependencies=[Depends(authorised)], response_model=BatchResponse)
    async def batch(request: BatchRequest) -> Response:
        return await on_pool(run_batch, request)

    @app.delete("/v1/episodes/{episode_id}", dependencies=[Depends(authorised)])
    async def end_episode(episode_id: str) -> dict[str, bool]:
        return {"dropped": episodes.drop(episode_id)}

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": toolbox.public(printable(str(exc)))}, status_code=400)

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    return app
