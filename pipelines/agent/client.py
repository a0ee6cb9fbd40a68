"""One interface to the tools, in-process or over HTTP, so rollouts do not care where the KG lives."""

from __future__ import annotations

import os
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from pipelines.agent.requests import CallRequest
from pipelines.agent.scope import Scope
from pipelines.agent.server import EpisodeStore, bearer_bytes, run_request
from pipelines.agent.tools import KGToolbox, ToolCall, ToolResult

TOKEN_ENV = "OMNE_TOOLS_TOKEN"


class ToolClient(Protocol):
    def call(self, call: str | dict[str, Any] | ToolCall, *, graph_type: str | None = None,
             episode_id: str | None = None, question: str | None = None) -> ToolResult: ...

    def batch(self, requests: list[CallRequest]) -> list[ToolResult]: ...


class InProcessToolClient:
    """Calls the toolbox directly (same process): no serialisation, the fastest path."""

    def __init__(self, toolbox: KGToolbox) -> None:
        self.toolbox = toolbox
        limits = toolbox.tool_params
        self.episodes = EpisodeStore(max_bytes=limits.episodes_max_bytes, scope_max_bytes=limits.scope_max_bytes)

    def call(self, call: str | dict[str, Any] | ToolCall, *, graph_type: str | None = None,
             episode_id: str | None = None, scope: Scope | None = None, question: str | None = None) -> ToolResult:
        episode = self.episodes.get(episode_id, graph_type, scope, question)
        result = self.toolbox.call(call, graph_type=graph_type, episode=episode)
        self.episodes.settle(episode_id, episode)
        return result

    def batch(self, requests: list[CallRequest]) -> list[ToolResult]:
        return [run_request(self.toolbox, self.episodes, r) for r in requests]

    def end_episode(self, episode_id: str) -> bool:
        """Free an episode's state now (its scope and resolved entities, its search path); False if not kept."""
        return self.episodes.drop(episode_id)


class HttpToolClient:
    """Calls a running `omne tools serve` (keep-alive connection, optional bearer token)."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0) -> None:
        token = token or os.environ.get(TOKEN_ENV)
        # the token's UTF-8 bytes, as the server compares them (a str header must be ASCII for httpx); a token that
        # cannot travel in a header is a TokenError here, as it is at the server's start
        headers = {"Authorization": b"Bearer " + bearer_bytes(token)} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout)

    def call(self, call: str | dict[str, Any] | ToolCall, *, graph_type: str | None = None,
             episode_id: str | None = None, scope: Scope | None = None, question: str | None = None) -> ToolResult:
        if isinstance(call, ToolCall):
            call = call.model_dump()
        body = {"call": call, "graph_type": graph_type, "episode_id": episode_id}
        if scope is not None:  # sent only when set: servers without scopes keep working
            body["scope"] = scope.model_dump()
        if question is not None:  # likewise
            body["question"] = question
        response = self.http.post("/v1/tools/call", json=body)
        response.raise_for_status()
        return ToolResult.model_validate(response.json())

    def batch(self, requests: list[CallRequest]) -> list[ToolResult]:
        calls = [r.model_dump(exclude_none=True) for r in requests]
        response = self.http.post("/v1/tools/batch", json={"calls": calls})
        response.raise_for_status()
        return [ToolResult.model_validate(r) for r in response.json()["results"]]

    def end_episode(self, episode_id: str) -> bool:
        """Free an episode's state on the server now (DELETE /v1/episodes/{id}); False if it kept none."""
        response = self.http.delete(f"/v1/episodes/{quote(episode_id, safe='')}")
        response.raise_for_status()
        return bool(response.json().get("dropped"))

    def close(self) -> None:
        self.http.close()
