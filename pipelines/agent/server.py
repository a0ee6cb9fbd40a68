"""The tool server: the KG tools over HTTP (FastAPI) for trainers and evaluators in other processes.

Endpoints: POST /v1/tools/call, POST /v1/tools/batch, GET /v1/tools, GET /v1/domains, GET /health
(OpenAPI at /docs and /openapi.json). KGs are loaded once and reloaded when a domain's manifests
change. Optional bearer token; request bodies above a size limit are refused with 413.

Hostile clients: a bad field of a call (the call, graph_type, episode_id, scope, question: any JSON value of any
shape), or a batch item that is not an object, is that call's typed tool error like a bad call, never a 4xx or 5xx
for the request or the batch; only a body that is not JSON (400) or a batch body without a list of at most 4,096
calls (422) is refused whole. Episode state and the toolbox's caches are bounded in bytes (tools.*_max_bytes), and
an ended episode's state (its resolved scope included) is freed; tool work runs on its own thread pool
(tools.server_threads), so /health answers while it is busy.
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
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import (
    BaseModel,
    Field,
)

from pipelines.agent.calls import ErrorType, ToolError, printable
from pipelines.agent.fields import QUESTION_MAX_CHARS, checked_scope, field_error
from pipelines.agent.requests import CallRequest
from pipelines.agent.scope import Scope
from pipelines.agent.tools import EpisodeState, KGToolbox, ToolResult
from pipelines.config import ToolParams
from pipelines.errors import OmneError
from pipelines.heap import malloc_trim

log = logging.getLogger(__name__)

MAX_BATCH = 4096
TRIM_AFTER_BYTES = 4 * 1024 * 1024  # ended episodes' bytes after which the server trims its heap (trim_heap)
ENTRY_OVERHEAD = 150  # the store's own entry of an episode (its key's place, the (state, size) tuple)


class TokenError(OmneError, ValueError):
    """A bearer token that cannot travel in an HTTP header: refused at the server's start and by the client alike."""


def bearer_bytes(token: str) -> bytes:
    """The bytes of a bearer token, as both ends send and compare them: its UTF-8 encoding (so 'sécret-tøken' works;
    a token read from a command line or environment in another encoding keeps its bytes: surrogateescape). A token
    with a control character or leading/trailing whitespace can never arrive intact in a header: refused."""
    try:
        raw = token.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise TokenError("the bearer token is not valid Unicode (it contains a lone surrogate)") from None
    if any(byte < 0x20 or byte == 0x7F for byte in raw) or raw != raw.strip(b" \t"):
        raise TokenError("the bearer token must not contain control characters nor start or end with whitespace")
    return raw


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
        self.freed = 0  # bytes of the episodes dropped since take_freed() last said so
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
                state.set_scope(checked)
            if question is not None:
                state.question = question
            # measured now, with what its previous calls grew; settle() measures it again after this call
            self._put(episode_id, state)
            return state

    def settle(self, episode_id: object, state: EpisodeState) -> None:
        """Measure an episode again after a call of it: a call grows it (the scope resolved on its graph, a search
        frame, node_info's walk), and the store's bytes must count what it holds now."""
        if not isinstance(episode_id, str) or state.refused is not None:
            return
        with self._lock:
            entry = self._states.get(episode_id)
            if entry is not None and entry[0] is state:
                self.nbytes -= entry[1]
                self._put(episode_id, state)

    def _put(self, episode_id: str, state: EpisodeState) -> None:
        """Store (or re-measure) an episode as the most recently used, then drop the least recently used until the
        store fits its bounds (the lock held)."""
        size = state.nbytes() + sys.getsizeof(episode_id) + ENTRY_OVERHEAD
        self._states[episode_id] = (state, size)
        self._states.move_to_end(episode_id)
        self.nbytes += size
        while self._states and (len(self._states) > self.capacity or self.nbytes > self.max_bytes):
            _, (_, dropped) = self._states.popitem(last=False)
            self.nbytes -= dropped

    def drop(self, episode_id: str) -> bool:
        """Forget an episode: its scope, its resolved entities and its search path are freed with it."""
        with self._lock:
            entry = self._states.pop(episode_id, None)
            if entry is not None:
                self.nbytes -= entry[1]
                self.freed += entry[1]
            return entry is not None

    def take_freed(self, at_least: int) -> bool:
        """True (and the count starts again) once episodes of at least ``at_least`` bytes were dropped since the
        last time it was True: when handing the freed heap back to the OS is worth its cost."""
        with self._lock:
            if self.freed < at_least:
                return False
            self.freed = 0
            return True


def run_request(toolbox: KGToolbox, episodes: EpisodeStore, request: CallRequest) -> ToolResult:
    """One call of a request, with its episode's state (server and in-process client alike); never raises."""
    refusal = request.refusal()
    if refusal is not None:
        return ToolResult(name="", arguments={}, ok=False, error_type=refusal.type, content=refusal.render())
    episode = episodes.get(request.episode_id, request.graph_type, request.scope, request.question)
    result = toolbox.call(request.call, graph_type=request.graph_type, episode=episode)
    episodes.settle(request.episode_id, episode)
    return result


def trim_heap() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim; nothing elsewhere). An ended episode's
    memory is free at once, but glibc keeps freed pages mapped: without this the RSS of a server whose clients end
    their episodes never goes down (bench/reliability.py: 0 MB back after ending 1,000 episodes)."""

    malloc_trim()


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
    expected = bearer_bytes(token) if token else None  # a token the client could not send is refused here, at start

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
        return run_request(toolbox, episodes, request)

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
        dropped = episodes.drop(episode_id)
        if episodes.take_freed(TRIM_AFTER_BYTES):  # on the tool threads: never in the event loop's way
            asyncio.get_running_loop().run_in_executor(pool, trim_heap)
        return {"dropped": dropped}

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        """What is left to refuse whole: a body that is not JSON (400), a batch without a list of calls (422). The
        reply never echoes the input (a lone surrogate in it made the encoder's error text the reply)."""
        errors = exc.errors()
        for error in errors:
            if error.get("type") in ("json_invalid", "not_json") or (
                    error.get("type") == "missing" and tuple(error.get("loc", ())) == ("body",)):
                reason = {"json_invalid": "it is not valid JSON", "missing": "it is empty"}.get(
                    error["type"], "send it as JSON (content-type: application/json)")
                return JSONResponse({"detail": f"the request body is not JSON: {reason}"}, status_code=400)
        detail = [{"loc": [printable(str(part))[:100] for part in error.get("loc", ())],
                   "msg": printable(str(error.get("msg", "")))[:300], "type": str(error.get("type", ""))}
                  for error in errors[:10]]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(ValueError)
    async def value_error(_: Request, exc: ValueError) -> JSONResponse:
        return JSONResponse({"detail": toolbox.public(printable(str(exc)))}, status_code=400)

    app.add_middleware(BodySizeLimit, max_bytes=max_body_bytes)
    return app
