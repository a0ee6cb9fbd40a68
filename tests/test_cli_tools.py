"""`omne tools list / call / serve`, run as a user runs them (subprocesses in a project folder)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import jsonschema
import yaml

from pipelines.agent.output import cap_text, truncation_marker
from pipelines.agent.tools import TOOL_SPECS, KGToolbox
from pipelines.config import Params
from tests.conftest import cli_env, make_project
from tests.test_tools import JUPITER
from tests.tool_support import free_port, stop_served, token_server_fixture, wait_for_health

TOKEN = "cli-token"


def omne(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["omne", *args], cwd=cwd, env=cli_env(**env), capture_output=True, text=True, timeout=300)


token_server = token_server_fixture("token_server", TOKEN)


def test_tools_list(solar: Params) -> None:
    result = omne(solar.root, "tools", "list")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines == [f"{spec.name}({', '.join(p.name for p in spec.params)})  {spec.description}"
                     for spec in TOOL_SPECS.values()]
    assert lines[0].startswith("entity_matcher(node_name, graph_type)  ")
    assert lines[-1].startswith("search(entity, question, backtrack)  ")


def test_tools_list_json_prints_valid_function_schemas(solar: Params) -> None:
    result = omne(solar.root, "tools", "list", "--json")
    assert result.returncode == 0, result.stderr
    schemas = json.loads(result.stdout)
    assert schemas == [spec.json_schema() for spec in TOOL_SPECS.values()]
    for schema in schemas:
        assert schema["type"] == "function" and set(schema["function"]) == {"name", "description", "parameters"}
        parameters = schema["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(parameters)
        assert parameters["type"] == "object" and set(parameters["required"]) <= set(parameters["properties"])
        spec = TOOL_SPECS[schema["function"]["name"]]
        assert parameters["required"] == [p.name for p in spec.params if p.required]
    node_info = jsonschema.Draft202012Validator(schemas[1]["function"]["parameters"])
    assert node_info.is_valid({"node_name": "Io", "graph_type": "solar"})
    assert not node_info.is_valid({"node_name": 3, "graph_type": "solar"})
    assert not node_info.is_valid({"node_name": "Io"})
    search = jsonschema.Draft202012Validator(schemas[-1]["function"]["parameters"])
    assert search.is_valid({"entity": "Io", "question": "q"}) and not search.is_valid({"entity": "Io", "question": "q",
                                                                                       "backtrack": "yes"})


def test_tools_call_prints_the_tool_output(solar: Params) -> None:
    result = omne(solar.root, "tools", "call", 'get_tail_entities(entity="Jupiter", relation="orbits")')
    assert (result.returncode, result.stdout) == (0, 'Tail entities for entity "Jupiter" with relation "orbits": Sun\n')
    result = omne(solar.root, "tools", "call", 'node_info(node_name="Jupiter", graph_type="solar")')
    assert (result.returncode, result.stdout) == (0, JUPITER + "\n")
    result = omne(solar.root, "tools", "call", "-g", "solar", '{"name": "get_tail_relations", "arguments": {"entity": "Io"}}')
    assert (result.returncode, result.stdout) == (0, 'Tail relations for entity "Io": discovered by, orbits\n')


def test_a_failing_call_prints_the_error_and_exits_1(solar: Params) -> None:
    # (a call that needs no embedding: a subprocess that loads the encoder costs seconds)
    result = omne(solar.root, "tools", "call", 'get_tail_relations(entity="Vulcan")')
    assert (result.returncode, result.stdout) == (1, '<error>Entity "Vulcan" not found in KG</error>\n')
    assert "Traceback" not in result.stderr
    result = omne(solar.root, "tools", "call", "--graph-type", "mars", 'get_tail_relations(entity="Io")')
    assert (result.returncode, result.stdout) == (1, '<error>unknown graph_type "mars"; known graphs: solar</error>\n')
    result = omne(solar.root, "tools", "call", "__import__('os').system('touch pwned')")
    assert result.returncode == 1 and result.stdout.startswith("<error>") and result.stdout.endswith("</error>\n")
    assert not (solar.root / "pwned").exists()


def test_tools_call_against_a_running_server(solar: Params, server: str, token_server: str,
                                            toolbox: KGToolbox) -> None:
    for call in ('get_tail_entities(entity="Jupiter", relation="orbits")',
                 'node_info(node_name="Vulcan", graph_type="solar")'):
        expected = toolbox.call(call)
        remote = omne(solar.root, "tools", "call", "--server", server, call)
        assert (remote.returncode, remote.stdout) == (0 if expected.ok else 1, expected.content + "\n"), remote.stderr
    with_flag = omne(solar.root, "tools", "call", "--server", token_server, "--token", TOKEN, 'get_tail_relations("Io")')
    assert (with_flag.returncode, with_flag.stdout) == (0, 'Tail relations for entity "Io": discovered by, orbits\n')
    with_env = omne(solar.root, "tools", "call", "--server", f"{token_server}/", 'get_head_relations("Jupiter")',
                    OMNE_TOOLS_TOKEN=TOKEN)
    assert (with_env.returncode, with_env.stdout) == (0, 'Head relations for entity "Jupiter": orbits\n')


# ----- regressions of bugs found by these tests ---------------------------------------------------
def test_tools_call_reports_server_problems_in_one_line(solar: Params, token_server: str) -> None:
    """Regression (was a bug): `omne tools call --server URL` lets httpx errors escape (HttpToolClient.call's raise_for_status,
    a refused connection): a wrong/missing token or a server that is not running prints a Python traceback
    (exit 1), where the CLI otherwise reports user errors as one 'error: ...' line (OmneGroup, exit 2)."""
    dead = f"http://127.0.0.1:{free_port()}"
    for args in (("--server", token_server), ("--server", token_server, "--token", "wrong"), ("--server", dead)):
        result = omne(solar.root, "tools", "call", *args, 'get_tail_relations("Io")')
        assert result.returncode != 0
        assert "Traceback" not in result.stderr, result.stderr[-400:]
        assert result.stderr.startswith("error:"), result.stderr[-400:]


def test_serve_serves_the_built_domains_by_default(solar: Params, tmp_path: Path) -> None:
    """Regression (was a bug): `omne tools serve --help` says '-d/--domain: Domains to serve (default: all built ones)', but
    KGToolbox(params, None) takes every registered domain and load_all() raises ArtifactMissingError for
    one that is not built, so the server exits 2 instead of serving the built ones."""
    project = tmp_path / "project"
    shutil.copytree(solar.root, project)
    registry = project / "kg_assets" / "domains.yaml"
    registry.write_text(registry.read_text() + """  moons:
    description: Registered, not built yet.
    source:
      kind: triples
      path: kg_assets/solar/triples.csv
""", encoding="utf-8")
    port = free_port()
    process = subprocess.Popen(["omne", "tools", "serve", "--port", str(port)], cwd=project, env=cli_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = wait_for_health(f"http://127.0.0.1:{port}", timeout=60, process=process)
        assert health.json()["domains"] == ["solar"]
    finally:
        stop_served(process)


# ----- tool results bounded in bytes (issue 50) -----------------------------------------------------
def test_cap_text_cuts_on_a_character_boundary_with_a_marker() -> None:
    text = "Entity: Ünïcødé 🚀 " * 500  # multi-byte characters all along
    for limit in (256, 1000, 4097):
        cut = cap_text(text, limit)
        data = cut.encode("utf-8")
        assert len(data) <= limit and cut.endswith(truncation_marker(len(text.encode("utf-8"))))
        assert text.startswith(cut[: -len(truncation_marker(len(text.encode("utf-8"))))])
    assert cap_text("short", 256) == "short"


def test_serve_caps_each_tool_result_at_max_result_bytes(tmp_path: Path) -> None:
    """A node with a 10,000-character description and 300 relations, every description shown: `omne tools serve`
    returns each result's text within tools.max_result_bytes, ending with the marker; small results are whole."""
    project = make_project(tmp_path / "project")
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["tools"].update(max_result_bytes=2048, description_max_chars=None, node_info_max_neighbors=None)
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")
    triples = tmp_path / "hub.csv"
    triples.write_text("head,relation,tail\n" + "".join(f"Hub,links,Spoke {i}\n" for i in range(300)), encoding="utf-8")
    entities = tmp_path / "hub_entities.csv"
    entities.write_text("name,type,description\nHub,node,\"" + "very long description " * 450 + "\"\n", encoding="utf-8")
    imported = omne(project, "kg", "import", str(triples), "--name", "hub", "--entities", str(entities))
    assert imported.returncode == 0, imported.stderr
    big, small = 'node_info(node_name="Hub", graph_type="hub")', 'get_tail_relations(entity="Hub")'
    local = omne(project, "tools", "call", big)
    assert local.returncode == 0 and len(local.stdout.encode()) <= 2049 and "[truncated: the result has" in local.stdout
    port = free_port()
    process = subprocess.Popen(["omne", "tools", "serve", "--port", str(port)], cwd=project, env=cli_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, timeout=120, process=process)
        one = httpx.post(f"{url}/v1/tools/call", json={"call": big}, timeout=60)
        assert one.status_code == 200 and int(one.headers["content-length"]) == len(one.content)
        result = one.json()
        assert result["ok"] and result["content"].startswith("Entity: Hub")
        assert len(result["content"].encode()) <= 2048 and "[truncated: the result has" in result["content"]
        batch = httpx.post(f"{url}/v1/tools/batch", json={"calls": [{"call": big}, {"call": small, "graph_type": "hub"}]}, timeout=60)
        first, second = batch.json()["results"]
        assert first["content"] == result["content"]
        assert second == {**second, "ok": True, "content": 'Tail relations for entity "Hub": links'}
    finally:
        stop_served(process)
