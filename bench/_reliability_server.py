"""The tool server against hostile clients, for real: `omne tools serve` as a subprocess on 127.0.0.1,
serving a small generated KG built in a temporary folder (imported by bench/reliability.py).

Three phases, one server:

1. **hostile**: at least ``hostile`` requests from a catalogue of malformed, oversized and injection
   requests (bad tokens incl. non-ASCII bytes, broken/deep/huge JSON, wrong-typed or surrogate
   request fields, oversized scopes and batches, code-injection call texts, raw malformed HTTP).
2. **load**: ``threads`` client threads for ``seconds`` (single calls, 64-call batches, scoped
   episodes that are ended, search episodes, and a tenth hostile requests) while a separate process
   polls ``/health`` every 50 ms (a separate process, so that its latency is the server's, not the
   GIL contention of 32 client threads).
3. **large scope**: ``large_scope`` requests, each a new episode scoped to 60 real entity names of the
   graph (2 hops), then every one of those episodes ended (DELETE), measuring the server's RSS before,
   during, after the requests and after the deletes (oversized scopes, refused, are in the hostile
   catalogue).

Targets: 0 responses >= 500 in all phases, /health p99 < 1 s under load, RSS growth over the
large-scope requests within +-50 MB, and within +-50 MB of the start once their episodes are ended. Every
reply body is also checked for the server's absolute paths.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # `_common` whether run from bench/ or imported
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402
import yaml  # noqa: E402
from _common import MB, ROOT, make_synthetic  # noqa: E402 - sets the offline environment first

from pipelines.config import load_params  # noqa: E402
from pipelines.domains import Domain, Registry, SourceSpec, load_registry, save_registry  # noqa: E402
from pipelines.kg.build import build_entity_index, build_knowledge_graph  # noqa: E402
from pipelines.kg.store import read_kg  # noqa: E402
from pipelines.layout import kg_dir  # noqa: E402

log = logging.getLogger(__name__)

DOMAIN, UNBUILT, TOKEN = "probe", "probe_unbuilt", "probe-token"
BATCH_CALLS = 64
HEALTH_INTERVAL_S = 0.05
# the /health poller, run as its own process: one JSON list of latencies (None: failed) on stdout
POLLER = """
import json, sys, time, httpx
url, stop_file, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
import os
out = []
with httpx.Client(timeout=30) as client:
    while not os.path.exists(stop_file):
        t0 = time.perf_counter()
        try:
            ok = client.get(url).status_code == 200
        except httpx.HTTPError:
            ok = False
        out.append(time.perf_counter() - t0 if ok else None)
        time.sleep(interval)
print(json.dumps(out))
"""

Request = tuple[str, str, dict[str, Any], bytes | None]  # method, path, headers, body


# --------------------------------------------------------------------------------------------
# The project and the server
# --------------------------------------------------------------------------------------------

def build_project(work: Path, entities: int, relations: int, seed: int, encoder: str | None = None) -> list[str]:
    """A project in ``work``: a generated KG (built, indexed) and a second registered domain left
    unbuilt (so /v1/domains must list one); returns the built KG's entity names. ``encoder``: params
    ``index.encoder`` (default: params.yaml's)."""
    source = make_synthetic(work / "source", entities, relations, seed, extra_syllables=False)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8")) or {}
    raw["paths"] = {**(raw.get("paths") or {}), "registry": "domains.yaml", "artifacts": "artifacts"}
    if encoder:
        raw["index"] = {**(raw.get("index") or {}), "encoder": encoder}
    (work / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    spec = SourceSpec(kind="triples", path="source/" + source.path, entities="source/" + str(source.entities))
    save_registry(work / "domains.yaml", Registry(domains=[
        Domain(name=DOMAIN, description="Generated graph for the server probe.", source=spec),
        Domain(name=UNBUILT, description="Registered, never built.", source=spec)]))
    params = load_params(work / "params.yaml")
    build_knowledge_graph(load_registry(params.registry_path).get(DOMAIN), params)
    build_entity_index(DOMAIN, params)
    return read_kg(kg_dir(params.artifacts_dir, DOMAIN)).entities["name"].to_list()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(work: Path, port: int) -> subprocess.Popen:
    """`omne tools serve` in ``work`` (its output to server.log), once /health answers."""
    out = (work / "server.log").open("w", encoding="utf-8")
    process = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "--params", str(work / "params.yaml"), "tools",
                                "serve", "--port", str(port), "--token", TOKEN], cwd=work, stdout=out,
                               stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}: {(work / 'server.log').read_text()}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the server did not answer /health within 120 s")


def stop_server(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MB


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------

AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON = {**AUTH, "content-type": "application/json"}


def body(value: Any) -> bytes:
    """JSON with every non-ASCII character escaped, so that lone surrogates go over the wire as \\udXXX."""
    return json.dumps(value).encode("ascii")


def call(text: Any, **fields: Any) -> Request:
    return "POST", "/v1/tools/call", JSON, body({"call": text, **fields})


def seeds(tag: str, count: int, chars: int) -> list[str]:
    return [f"{tag}-{i}-".ljust(chars, "x") for i in range(count)]


def hostile_catalogue(names: list[str]) -> list[Callable[[int], Request]]:
    """One builder per kind of hostile request (``i`` makes each instance distinct)."""
    name = names[0]
    good = f'get_tail_relations(entity="{name}")'
    deep = b'{"call": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    injections = ["__import__('os').system('id')", "node_info(node_name=open('/etc/passwd').read(), graph_type='x')",
                  "(lambda: 1)()", "node_info(**{'node_name': 'x'})", "node_info(*['x'])", "eval('1')",
                  "node_info(node_name=f'{1+1}', graph_type='probe')", "node_info.__globals__",
                  "node_info(node_name='x'); import os", "node_info(node_name='x' * 10**9)",
                  "node_info(node_name=\"' OR 1=1 --\", graph_type=\"probe\")",
                  "get_tail_relations(entity='../../../../etc/passwd')", "get_tail_relations(entity='\\x00\\x00')",
                  "get_tail_relations(entity='{0.__class__.__mro__}')", "get_tail_relations(entity='%s%s%n')",
                  "(" * 5000 + ")" * 5000, "get_tail_relations(entity='\u202eoi\u202c')", "x" * 5000,
                  '{"name": "node_info", "arguments": {"node_name": {"$gt": ""}, "graph_type": "probe"}}',
                  '{"name": "node_info", "arguments": "[1, 2]"}', '{"name": ["node_info"]}', "{" * 3000]
    return [
        # authentication
        lambda i: ("POST", "/v1/tools/call", {"content-type": "application/json"}, body({"call": good})),
        lambda i: ("POST", "/v1/tools/call", {"Authorization": b"Bearer \xc3\xa9t\xc3\xa9"}, body({"call": good})),
        lambda i: ("GET", "/v1/domains", {"Authorization": b"Bearer \xff\xfe" + str(i).encode()}, None),
        lambda i: ("GET", "/v1/tools", {"Authorization": f"Basic {TOKEN}"}, None),
        lambda i: ("POST", "/v1/tools/batch", {"Authorization": "Bearer " + "t" * 8000}, body({"calls": []})),
        lambda i: ("DELETE", f"/v1/episodes/e{i}", {"Authorization": "Bearer wrong"}, None),
        # bodies
        lambda i: ("POST", "/v1/tools/call", JSON, b"{not json" + str(i).encode()),
        lambda i: ("POST", "/v1/tools/call", JSON, b'{"call": "x"'),
        lambda i: ("POST", "/v1/tools/call", JSON, b"[]"),
        lambda i: ("POST", "/v1/tools/call", JSON, b""),
        lambda i: ("POST", "/v1/tools/call", JSON, deep),
        lambda i: ("POST", "/v1/tools/call", JSON, b'{"call": ' + b"9" * 100_000 + b"}"),
        lambda i: ("POST", "/v1/tools/call", JSON, b'{"call": 1e999999, "graph_type": NaN}'),
        lambda i: ("POST", "/v1/tools/call", JSON, b'{"call": "\xff\xfe\xc0\xaf"}'),
        lambda i: ("POST", "/v1/tools/call", JSON, b"\xef\xbb\xbf" + body({"call": good})),
        lambda i: ("POST", "/v1/tools/call", {**AUTH, "content-type": "text/plain"}, body({"call": good})),
        lambda i: ("POST", "/v1/tools/call", JSON, b'{"call": "' + b"x" * 2_100_000 + b'"}'),  # over the limit: 413
        lambda i: ("POST", "/v1/tools/batch", JSON, body({"calls": [{"call": good}] * 4097})),
        lambda i: ("POST", "/v1/tools/batch", JSON, body({"calls": "x"})),
        # request fields
        lambda i: call(good, graph_type=i),
        lambda i: call(good, graph_type=["probe"]),
        lambda i: call(good, graph_type="\ud800"),
        lambda i: call(good, graph_type="g" * 5000),
        lambda i: call(good, episode_id={"i": i}),
        lambda i: call(good, episode_id=f"\udfff{i}"),
        lambda i: call(good, episode_id="e" * 5000),
        lambda i: call(good, episode_id=f"h{i}", scope={"seeds": seeds(f"h{i}", 100, 18_000)}),
        lambda i: call(good, episode_id=f"h{i}", scope={"seeds": [f"\ud800{i}"]}),
        lambda i: call(good, scope={"seeds": ["x"] * 101}),
        lambda i: call(good, scope={"seeds": [name], "hops": 99}),
        lambda i: call(good, scope="everything"),
        lambda i: call(good, graph_type=UNBUILT),
        lambda i: ("POST", "/v1/tools/call", JSON, body({"call": good, "graph_type": DOMAIN, "extra": [1] * 1000})),
        # call texts
        lambda i: call(injections[i % len(injections)]),
        lambda i: call({"name": "node_info", "arguments": {"node_name": "\ud800", "graph_type": DOMAIN}}),
        lambda i: call({"name": "search", "arguments": {"entity": name, "question": "q" * 2000}}),
        lambda i: call({"name": i, "arguments": [i]}),
        lambda i: call(f'node_info(node_name="{name}", graph_type="{UNBUILT}")'),
        # routes and methods
        lambda i: ("DELETE", "/v1/episodes/%2e%2e%2f%2e%2e%2fetc", AUTH, None),
        lambda i: ("DELETE", "/v1/episodes/%ED%A0%80", AUTH, None),
        lambda i: ("GET", "/v1/tools/call", AUTH, None),
        lambda i: ("PUT", "/health", {}, b"x"),
        lambda i: ("GET", "/" + "a" * 6000, {}, None),
        lambda i: ("GET", "/v1/domains", AUTH, None),
    ]


RAW_REQUESTS = [  # malformed HTTP, sent on a bare socket
    b"GARBAGE\r\n\r\n",
    b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nContent-Length: 20\r\n\r\n0123456789",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n",
    b"POST /v1/tools/call HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer " + TOKEN.encode() + b"\r\n\r\nzz\r\n",
]


def raw_status(port: int, payload: bytes) -> int | None:
    """The status line's code of a raw request (None: closed without an answer)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(payload)
            reply = sock.recv(64)
        except OSError:
            return None
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None


class Tally:
    """Status counts, 5xx, transport errors and path leaks, shared by client threads."""

    def __init__(self, secrets: list[str]) -> None:
        self.statuses: Counter[str] = Counter()
        self.server_5xx = self.transport_errors = self.path_leaks = self.requests = 0
        self.examples_5xx: list[str] = []
        self._secrets = secrets
        self._lock = threading.Lock()

    def send(self, client: httpx.Client, request: Request) -> httpx.Response | None:
        method, path, headers, content = request
        try:
            response = client.request(method, path, headers=headers, content=content)
        except httpx.HTTPError as exc:
            with self._lock:
                self.requests += 1
                self.transport_errors += 1
                self.statuses[type(exc).__name__] += 1
            return None
        leak = any(secret in response.text for secret in self._secrets)
        with self._lock:
            self.requests += 1
            self.statuses[str(response.status_code)] += 1
            self.path_leaks += leak
            if response.status_code >= 500:
                self.server_5xx += 1
                if len(self.examples_5xx) < 5:
                    self.examples_5xx.append(f"{method} {path} {content[:120] if content else b''!r}: "
                                             f"{response.status_code} {response.text[:200]}")
        return response


def in_threads(count: int, work: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


# --------------------------------------------------------------------------------------------
# The phases
# --------------------------------------------------------------------------------------------

def hostile_phase(url: str, port: int, names: list[str], count: int, tally: Tally, workers: int = 8) -> None:
    catalogue = hostile_catalogue(names)
    for payload in RAW_REQUESTS:
        status = raw_status(port, payload)
        tally.statuses[f"raw:{status}"] += 1
        tally.requests += 1
        tally.server_5xx += status is not None and status >= 500
    todo = max(count - len(RAW_REQUESTS), 0)

    def work(t: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for i in range(t, todo, workers):
                tally.send(client, catalogue[i % len(catalogue)](i))

    in_threads(workers, work)


def load_phase(url: str, names: list[str], seconds: float, threads: int, tally: Tally) -> dict[str, Any]:
    catalogue = hostile_catalogue(names)
    deadline = time.monotonic() + seconds
    calls = Counter[str]()
    lock = threading.Lock()

    def valid(rng: random.Random) -> str:
        a, b = rng.choice(names), rng.choice(names)
        return rng.choice([f'node_info(node_name="{a}", graph_type="{DOMAIN}")',
                           f'get_tail_relations(entity="{a}")', f'get_head_relations(entity="{b}")',
                           f'get_tail_entities(entity="{a}", relation="related to")',
                           f'entity_matcher(node_name="{a[:-2]}", graph_type="{DOMAIN}")'])

    def work(t: int) -> None:
        rng = random.Random(t)
        done = Counter[str]()
        with httpx.Client(base_url=url, timeout=120) as client:
            i = 0
            while time.monotonic() < deadline:
                i += 1
                kind = rng.random()
                if kind < 0.4:
                    tally.send(client, call(valid(rng), graph_type=DOMAIN))
                    done["single"] += 1
                elif kind < 0.6:
                    batch = [{"call": valid(rng), "graph_type": DOMAIN} for _ in range(BATCH_CALLS)]
                    tally.send(client, ("POST", "/v1/tools/batch", JSON, body({"calls": batch})))
                    done["batch"] += 1
                    done["batch_calls"] += BATCH_CALLS
                elif kind < 0.8:
                    episode = f"load-{t}-{i}"
                    scope = {"seeds": [rng.choice(names) for _ in range(3)], "hops": 2}
                    for _ in range(3):
                        tally.send(client, call(valid(rng), graph_type=DOMAIN, episode_id=episode, scope=scope))
                    tally.send(client, ("DELETE", f"/v1/episodes/{episode}", AUTH, None))
                    done["scoped"] += 4
                elif kind < 0.9:
                    episode, entity = f"search-{t}-{i}", rng.choice(names)
                    for step in range(3):
                        text = (f'search(entity="{entity}", question="What is {entity} related to?", '
                                f"backtrack={step == 2})")
                        tally.send(client, call(text, graph_type=DOMAIN, episode_id=episode))
                    done["search"] += 3
                else:
                    tally.send(client, catalogue[i % len(catalogue)](i))
                    done["hostile"] += 1
        with lock:
            calls.update(done)

    in_threads(threads, work)
    return dict(calls)


SCOPE_SEEDS = 60  # real entity names a scope of the large-scope phase holds (a KGQA question's topic neighbourhood)


def large_scope_phase(url: str, pid: int, names: list[str], count: int, tally: Tally, workers: int = 8,
                      seed: int = 0) -> dict[str, Any]:
    """``count`` requests, each a new episode whose scope is ``SCOPE_SEEDS`` real entity names of the graph drawn
    at random (2 hops: most of a small graph), none ended while they run; then every one of those episodes
    ended (DELETE). The server's RSS: before, after the requests, after the deletes, and sampled every 50 ms."""
    samples: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(rss_mb(pid))
            stop.wait(0.05)

    accepted = refused = deleted = 0
    lock = threading.Lock()
    rng = random.Random(seed)
    scopes = [rng.sample(names, min(SCOPE_SEEDS, len(names))) for _ in range(count)]

    def work(t: int) -> None:
        nonlocal refused, accepted
        with httpx.Client(base_url=url, timeout=120) as client:
            for i in range(t, count, workers):
                scope = {"seeds": scopes[i], "hops": 2}
                response = tally.send(client, call(f'get_tail_relations(entity="{scopes[i][0]}")',
                                                   graph_type=DOMAIN, episode_id=f"large-{i}", scope=scope))
                ok = (response is not None and response.status_code == 200
                      and response.json()["error_type"] != "invalid_argument")  # not refused (no_results is fine)
                with lock:
                    refused += not ok
                    accepted += ok

    def end(t: int) -> None:
        nonlocal deleted
        with httpx.Client(base_url=url, timeout=120) as client:
            for i in range(t, count, workers):
                response = tally.send(client, ("DELETE", f"/v1/episodes/large-{i}", AUTH, None))
                dropped = response is not None and response.status_code == 200 and response.json() == {"dropped": True}
                with lock:
                    deleted += dropped

    time.sleep(1.0)
    rss_start = rss_mb(pid)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    in_threads(workers, work)
    seconds = time.perf_counter() - t0
    time.sleep(1.0)
    rss_end = rss_mb(pid)
    in_threads(workers, end)
    time.sleep(1.0)
    rss_deleted = rss_mb(pid)
    stop.set()
    sampler.join()
    return {"large_scope_requests": count, "large_scope_seeds": SCOPE_SEEDS, "large_scope_refused": refused,
            "large_scope_accepted": accepted, "large_scope_deleted": deleted, "large_scope_s": round(seconds, 1),
            "rss_start_mb": round(rss_start, 1), "rss_end_mb": round(rss_end, 1),
            "rss_growth_mb": round(rss_end - rss_start, 1), "rss_after_delete_mb": round(rss_deleted, 1),
            "rss_freed_by_delete_mb": round(rss_end - rss_deleted, 1),
            "rss_after_delete_growth_mb": round(rss_deleted - rss_start, 1),
            "rss_peak_mb": round(max(samples, default=0.0), 1)}


def run_server_probe(seconds: float = 60, threads: int = 32, hostile: int = 1000, large_scope: int = 1000, *,
                     entities: int = 2000, relations: int = 10_000, seed: int = 0,
                     work_dir: Path | None = None, encoder: str | None = None) -> dict[str, Any]:
    """Build a small KG, start `omne tools serve` on it and run the three phases; the figures."""
    started = time.perf_counter()
    for chatty in ("httpx", "httpcore"):  # one INFO line per request otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="omne-server-probe-", dir=work_dir) as tmp:
        work = Path(tmp)
        log.info("building a %d-entity / %d-relation KG in %s ...", entities, relations, work)
        names = build_project(work, entities, relations, seed, encoder)
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = start_server(work, port)
        tally = Tally([str(work), str(work.resolve()), str(ROOT)])
        try:
            with httpx.Client(base_url=url, timeout=120) as client:  # warm: graph, encoder, every tool
                for text in (f'entity_matcher(node_name="{names[0]}", graph_type="{DOMAIN}")',
                             f'search(entity="{names[0]}", question="what?")',
                             f'get_tail_relations(entity="{names[1]}")'):
                    tally.send(client, call(text, graph_type=DOMAIN))
                listing = tally.send(client, ("GET", "/v1/domains", AUTH, None))
                domains = (listing.json() if listing is not None and listing.status_code == 200
                           else f"HTTP {listing.status_code if listing is not None else 'error'}")
            rss_before_load = rss_mb(server.pid)

            log.info("hostile: %d requests ...", hostile)
            t0 = time.perf_counter()
            hostile_phase(url, port, names, hostile, tally)
            hostile_tally = {"hostile_requests": tally.requests, "hostile_5xx": tally.server_5xx,
                             "hostile_s": round(time.perf_counter() - t0, 1),
                             "hostile_statuses": dict(sorted(tally.statuses.items()))}

            log.info("load: %d threads for %.0f s, /health polled every %.0f ms ...", threads, seconds,
                     HEALTH_INTERVAL_S * 1000)
            stop_file = work / "stop-poller"
            poller = subprocess.Popen([sys.executable, "-c", POLLER, f"{url}/health", str(stop_file),
                                       str(HEALTH_INTERVAL_S)], stdout=subprocess.PIPE, text=True)
            before = tally.requests, tally.server_5xx
            t0 = time.perf_counter()
            calls = load_phase(url, names, seconds, threads, tally)
            load_s = time.perf_counter() - t0
            stop_file.touch()
            polled = json.loads(poller.communicate(timeout=120)[0] or "[]")
            health = np.array([p for p in polled if p is not None], dtype=np.float64)
            rss_after_load = rss_mb(server.pid)

            log.info("large scope: %d requests, %d real names a scope, then their episodes ended ...", large_scope,
                     SCOPE_SEEDS)
            large = large_scope_phase(url, server.pid, names, large_scope, tally, seed=seed)
        finally:
            stop_server(server)
        server_log = (work / "server.log").read_text(encoding="utf-8", errors="replace")

    return {
        **hostile_tally,
        "server_5xx": tally.server_5xx,
        "transport_errors": tally.transport_errors,
        "path_leaks": tally.path_leaks,
        "examples_5xx": tally.examples_5xx,
        "load_seconds": round(load_s, 1),
        "load_threads": threads,
        "load_requests": tally.requests - before[0],
        "load_5xx": tally.server_5xx - before[1],
        "load_requests_per_s": round((tally.requests - before[0]) / load_s, 1),
        "load_mix": calls,
        "health_polls": len(polled),
        "health_failures": sum(p is None for p in polled),
        "health_p50_s": round(float(np.percentile(health, 50)), 4) if health.size else None,
        "health_p99_s": round(float(np.percentile(health, 99)), 4) if health.size else None,
        "health_max_s": round(float(health.max()), 4) if health.size else None,
        **large,
        "rss_before_load_mb": round(rss_before_load, 1),
        "rss_after_load_mb": round(rss_after_load, 1),
        "domains_listed": [{"name": d["name"], "built": d["built"]} for d in domains] if isinstance(domains, list)
        else domains,
        "server_tracebacks": server_log.count("Traceback"),
        "kg": {"entities": entities, "relations": relations, "seed": seed},
        "targets": {"no_5xx": tally.server_5xx == 0,
                    "health_p99_under_1s": bool(health.size) and float(np.percentile(health, 99)) < 1.0,
                    "rss_growth_within_50mb": abs(large["rss_growth_mb"]) <= 50.0,
                    "rss_after_delete_within_50mb": abs(large["rss_after_delete_growth_mb"]) <= 50.0},
        "total_s": round(time.perf_counter() - started, 1),
    }


if __name__ == "__main__":  # a quick look: python bench/_reliability_server.py [seconds]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    figures = run_server_probe(seconds=float(sys.argv[1]) if len(sys.argv) > 1 else 10)
    print(json.dumps(figures, indent=2))
