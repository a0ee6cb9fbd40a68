"""Bearer tokens beyond ASCII (issue 50): `omne tools call --server URL --token 'sécret-tøken'` crashed with
UnicodeEncodeError (httpx encodes str headers as ASCII) although the server accepted that token at its start. Both
ends now send and compare the token's UTF-8 bytes, and both refuse, in one line, a token no header can carry."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import httpx
import pytest

from pipelines.agent.client import HttpToolClient
from pipelines.agent.server import TokenError, bearer_bytes, create_app
from pipelines.agent.tools import KGToolbox
from pipelines.config import Params
from tests.conftest import cli_env
from tests.tool_support import ServerThread, free_port, token_server_fixture

TOKEN = "sécret-tøken"
CALL = 'get_tail_relations(entity="Io")'
IO = 'Tail relations for entity "Io": discovered by, orbits'
BAD_TOKENS = ["line\nbreak", "tab-at-end\t", " leading-space", "nul\x00", "lone-\ud800", "del\x7f", "bell\x07"]


def omne(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["omne", *args], cwd=cwd, env=cli_env(**env), capture_output=True, text=True, timeout=300)


guarded = token_server_fixture("guarded", TOKEN)


def test_the_http_client_sends_a_non_ascii_token(guarded: str) -> None:
    client = HttpToolClient(guarded, token=TOKEN)
    try:
        assert client.call(CALL).content == IO
        assert client.end_episode("never-opened") is False
    finally:
        client.close()
    wrong = HttpToolClient(guarded, token="sécret-token")
    try:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            wrong.call(CALL)
        assert refused.value.response.status_code == 401
    finally:
        wrong.close()


def test_tools_call_with_a_non_ascii_token(solar: Params, guarded: str) -> None:
    """Was: UnicodeEncodeError ('ascii' codec can't encode character '\\xe9'), a traceback."""
    with_flag = omne(solar.root, "tools", "call", "--server", guarded, "--token", TOKEN, CALL)
    assert (with_flag.returncode, with_flag.stdout) == (0, IO + "\n"), with_flag.stderr[-500:]
    with_env = omne(solar.root, "tools", "call", "--server", guarded, CALL, OMNE_TOOLS_TOKEN=TOKEN)
    assert (with_env.returncode, with_env.stdout) == (0, IO + "\n"), with_env.stderr[-500:]
    wrong = omne(solar.root, "tools", "call", "--server", guarded, "--token", "sécret-token", CALL)
    assert wrong.returncode == 2 and wrong.stderr.startswith("error:") and "401" in wrong.stderr
    assert "Traceback" not in wrong.stderr


def test_a_token_in_another_encoding_keeps_its_bytes(toolbox: KGToolbox) -> None:
    """A command line or environment that is not UTF-8 (Latin-1 'café') gives surrogate escapes: both ends send and
    compare the original bytes."""
    token = os.fsdecode(b"caf\xe9")
    assert bearer_bytes(token) == b"caf\xe9" and bearer_bytes(TOKEN) == TOKEN.encode("utf-8")
    with ServerThread(create_app(toolbox, token=token)) as running:
        client = HttpToolClient(running.url, token=token)
        try:
            assert client.call(CALL).ok
        finally:
            client.close()
        raw = httpx.post(f"{running.url}/v1/tools/call", json={"call": CALL}, headers={"Authorization": b"Bearer caf\xe9"})
        assert raw.status_code == 200
        assert httpx.post(f"{running.url}/v1/tools/call", json={"call": CALL},
                          headers={"Authorization": "Bearer café".encode()}).status_code == 401


@pytest.mark.parametrize("token", BAD_TOKENS, ids=[repr(t) for t in BAD_TOKENS])
def test_a_token_no_header_can_carry_is_refused_at_both_ends(toolbox: KGToolbox, token: str) -> None:
    with pytest.raises(TokenError):
        create_app(toolbox, token=token)
    with pytest.raises(TokenError):
        HttpToolClient("http://127.0.0.1:9", token=token)


def test_serve_and_call_refuse_such_a_token_in_one_line(solar: Params) -> None:
    expected = "error: the bearer token must not contain control characters nor start or end with whitespace\n"
    served = omne(solar.root, "tools", "serve", "--port", str(free_port()), "--token", "bad\x01token")
    assert (served.returncode, served.stderr) == (2, expected), served.stderr[-500:]
    called = omne(solar.root, "tools", "call", "--server", f"http://127.0.0.1:{free_port()}", "--token",
                  "bad\x01token", CALL)
    assert (called.returncode, called.stderr) == (2, expected), called.stderr[-500:]
