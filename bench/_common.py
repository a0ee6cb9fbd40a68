"""What the benchmarks of bench/ share: the offline environment, measurement (wall, CPU, peak extra
RSS; ours and the baseline alternated, best of N), ratios and percentiles, the synthetic graph
generator, the shared command line (``BenchParser``: --out, --toy, --repeat, --seed, --params, --profile,
-v), machine facts and the results file.

Importing this module sets the offline environment variables (before torch, transformers or lancedb
are imported by the benchmark) and puts the project root on ``sys.path``; a benchmark script, run as
``python bench/NAME.py``, imports it first.
"""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["LANCE_LOG"] = "error"
os.environ.setdefault("LANCEDB_LOG", "error")  # what lancedb 0.40 reads: its per-table WARN lines otherwise
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import functools  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterable  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import psutil  # noqa: E402

from pipelines.domains import SourceSpec  # noqa: E402

MB = 1024 * 1024
RESULTS_DIR = ROOT / "bench" / "results"
TOY_RESULTS_DIR = Path(tempfile.gettempdir()) / "omne-bench-toy"  # --toy without --out


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------

def rss() -> int:
    return psutil.Process().memory_info().rss


def settle() -> None:
    """Collect garbage and give freed heap back to the OS, so that RSS before a stage is a fair zero."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def cpu_seconds() -> float:
    times = psutil.Process().cpu_times()
    return times.user + times.system


class Stage:
    """Context manager: wall time, process CPU time (all threads) and peak extra RSS (sampled every
    ``interval`` s in a thread). CPU time moves less than wall time when other processes load the
    machine, so it is recorded beside it."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.wall_s = 0.0
        self.peak_extra = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        process = psutil.Process()
        while not self._stop.is_set():
            self.peak = max(self.peak, process.memory_info().rss)
            self._stop.wait(self.interval)

    def __enter__(self) -> Stage:
        settle()
        self.before = self.peak = rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self._c0 = cpu_seconds()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall_s = time.perf_counter() - self._t0
        self.cpu_s = cpu_seconds() - self._c0
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        self.peak_extra = self.peak - self.before


def measure(fn: Callable[[], Any], *, items: int, repeat: int = 1) -> tuple[Any, dict[str, Any]]:
    """Run ``fn`` ``repeat`` times; the best (minimum) wall time and the largest peak extra RSS."""
    walls, cpus, peaks, result = [], [], [], None
    for _ in range(repeat):
        result = None  # let the previous result go before measuring the next run
        with Stage() as stage:
            result = fn()
        walls.append(stage.wall_s)
        cpus.append(stage.cpu_s)
        peaks.append(stage.peak_extra)
    wall = min(walls)
    return result, {
        "wall_s": round(wall, 4),
        "walls_s": [round(w, 4) for w in walls],
        "cpu_s": round(min(cpus), 4),
        "items": items,
        "items_per_s": round(items / wall, 1) if wall > 0 else None,
        "peak_extra_rss_mb": round(max(peaks) / MB, 1),
    }


def merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several ``measure`` results of one function: best wall and CPU time, largest peak memory."""
    wall = min(m["wall_s"] for m in runs)
    return {"wall_s": wall, "walls_s": [m["wall_s"] for m in runs], "cpu_s": min(m["cpu_s"] for m in runs),
            "peak_extra_rss_mb": max(m["peak_extra_rss_mb"] for m in runs)}


def alternate(ours: Callable[[], Any], baseline: Callable[[], Any], *,
              repeat: int) -> tuple[Any, dict[str, Any], Any, dict[str, Any]]:
    """Baseline then ours, ``repeat`` times in turn, so that a burst of load on a shared machine hits
    both alike; best (minimum) wall time and largest peak extra RSS of each."""
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "baseline": []}
    results: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in (("baseline", baseline), ("ours", ours)):
            results[name] = None  # let the previous result go before measuring the next run
            results[name], m = measure(fn, items=0)
            runs[name].append(m)
    return results["ours"], merge_runs(runs["ours"]), results["baseline"], merge_runs(runs["baseline"])


def with_rate(m: dict[str, Any], items: int, wall: float | None = None) -> dict[str, Any]:
    wall = m["wall_s"] if wall is None else wall
    m.update(items=items, items_per_s=round(items / wall, 1) if wall > 0 else None)
    return m


def figure(value: float | None) -> str:
    """A table cell's ratio or time to three significant digits, never in exponent notation: 0.0137, 0.106, 2.45,
    13.4, 670, 12,239; "-" when it could not be measured."""
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{max(0, 2 - math.floor(math.log10(value)))}f}" if value > 0 else "0"


def ratio(ours: float | None, baseline: float | None) -> float | None:
    """ours / baseline to 4 significant digits (a tiny ratio never rounds to 0); None when either is 0 or None."""
    return float(f"{ours / baseline:.4g}") if ours and baseline else None


def percentiles(latencies_s: list[float]) -> dict[str, float]:
    ms = np.asarray(latencies_s) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p95_ms": round(float(np.percentile(ms, 95)), 3),
            "mean_ms": round(float(ms.mean()), 3)}


# --------------------------------------------------------------------------------------------
# Synthetic graph
# --------------------------------------------------------------------------------------------

ENTITY_TYPES = ["person", "place", "organisation", "concept", "event", "substance", "artifact", "disease"]
RELATIONS = ["related to", "part of", "located in", "member of", "causes", "treats", "derived from",
             "instance of", "founded by", "borders", "contains", "precedes", "influenced by", "uses",
             "produces", "named after", "subclass of", "owned by", "discovered by", "opposite of"]
DEGREE_LAW = "endpoint probability ~ rank^-0.6"


def make_synthetic(folder: Path, entities: int, relations: int, seed: int, alpha: float = 0.6, *,
                   extra_syllables: bool = True) -> SourceSpec:
    """A random (seeded) triples parquet + entities parquet with power-law-ish degrees, written to
    ``folder``; returns the ``triples`` source that imports them.

    Names are ``Entity 12345 <pseudo-word>``. Both endpoints of a relation are drawn with probability
    ~ rank^-alpha over a random permutation of the entities, so that a few hubs have thousands of
    relations and most entities a handful. ``extra_syllables`` adds five vowel-first syllables to the
    pseudo-words (bench/kg_build.py's graphs; bench/tools.py's are generated without them).
    """
    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvz" for v in "aeiou"]
    if extra_syllables:
        syllables += ["an", "el", "or", "is", "um"]
    words = np.array(sorted({"".join(rng.choice(syllables, size=int(rng.integers(2, 4))))
                             for _ in range(10_000)})[:5000])
    names = pl.Series("name", [f"Entity {i} {w}" for i, w in enumerate(rng.choice(words, entities).tolist())])
    frame = pl.DataFrame([names, pl.Series("type", rng.choice(ENTITY_TYPES, entities)),
                          pl.Series("topic", rng.choice(words, entities))]).select(
        "name", "type", description=pl.format("{} is a {} known for {}.", "name", "type", "topic"))
    weights = np.arange(1, entities + 1, dtype=np.float64) ** -alpha
    weights /= weights.sum()
    rank_to_id = rng.permutation(entities)
    heads = rank_to_id[rng.choice(entities, size=relations, p=weights)]
    tails = rank_to_id[rng.choice(entities, size=relations, p=weights)]
    loops = heads == tails
    tails[loops] = (tails[loops] + 1) % entities
    triples = pl.DataFrame({"head": names.gather(heads), "relation": rng.choice(RELATIONS, relations),
                            "tail": names.gather(tails)}).with_columns(
        description=pl.format("{} {} {}.", "head", "relation", "tail"))
    folder.mkdir(parents=True, exist_ok=True)
    triples.write_parquet(folder / "triples.parquet")
    frame.write_parquet(folder / "entities.parquet")
    return SourceSpec(kind="triples", path="triples.parquet", entities="entities.parquet")


# --------------------------------------------------------------------------------------------
# Command line, machine, results
# --------------------------------------------------------------------------------------------

class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """--help with each option's default, except where it is None or a flag."""

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or isinstance(action.default, bool):
            return action.help or ""
        return super()._get_help_string(action)


class RawHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The same, with the description and epilog printed as written (line breaks kept)."""


def results_file(out: Path | None, name: str, toy: bool) -> Path:
    """Where a benchmark writes its JSON: ``--out`` as a folder (``<out>/<name>.json``) or, ending in .json,
    as the file itself; by default bench/results/<name>.json, or with --toy a folder of the system's temp dir
    (a toy run never writes into bench/results/ unless told to)."""
    if out is None:
        return (TOY_RESULTS_DIR if toy else RESULTS_DIR) / f"{name}.json"
    return out if out.suffix.lower() == ".json" else out / f"{name}.json"


class BenchParser(argparse.ArgumentParser):
    """The command line every bench script shares, script-specific options added on top.

    Common options: ``--out`` (results folder, or the JSON file), ``--toy`` (toy sizes: seconds, a smoke
    test), ``--repeat`` (runs of ours and the baseline in turn, best kept; where a script repeats),
    ``--seed`` (where a script samples or generates), ``--params``/``--profile`` (where a script reads
    params.yaml) and ``-v``.

    ``--toy`` sets the script's ``toy`` values as the defaults (options given explicitly still win) and,
    where the script reads params.yaml, ``--params`` to None: the script then builds a throw-away project
    in a temporary folder (``_toy.toy_project``). After parsing, ``args.out`` is the JSON file to write.
    """

    def __init__(self, name: str, *, description: str, epilog: str | None = None,
                 toy: dict[str, Any] | None = None, toy_note: str = "",
                 repeat: int | None = None, repeat_help: str = "runs of ours and the baseline, in turn; the best kept",
                 repeat_aliases: tuple[str, ...] = (), seeded: bool = True, seed: int | None = 0,
                 seed_help: str = "seed of the generated data and of every sample", params: bool = True,
                 params_help: str = "params.yaml to read") -> None:
        super().__init__(prog=f"bench/{name}.py", description=description, epilog=epilog,
                         formatter_class=RawHelpFormatter)
        self.bench_name = name
        self.toy_note = toy_note
        self.toy_values: dict[str, Any] = {}
        common = self.add_argument_group("common options (every bench script)")
        common.add_argument("--out", type=Path, default=None, metavar="PATH",
                            help=f"results folder: the JSON goes to PATH/{name}.json (a PATH ending in .json is the "
                                 f"file itself); default: bench/results/ (committed from real runs), with --toy "
                                 f"{TOY_RESULTS_DIR}/")
        self._toy_action = common.add_argument("--toy", action="store_true", help="toy sizes")
        if repeat is not None:
            common.add_argument("--repeat", *repeat_aliases, dest="repeat", type=int, default=repeat, metavar="N",
                                help=repeat_help + (f" ({', '.join(repeat_aliases)}: the same, its former name)"
                                                    if repeat_aliases else ""))
        if seeded:
            common.add_argument("--seed", type=int, default=seed, metavar="N", help=seed_help)
        if params:
            common.add_argument("--params", type=Path, default=ROOT / "params.yaml", metavar="PATH",
                                help=params_help + "; with --toy: a throw-away project (the tests' solar domain, "
                                                   "tests/data/solar) in a temporary folder")
            common.add_argument("--profile", default=None, metavar="NAME", help="params profile (default: the file's)")
        common.add_argument("-v", "--verbose", action="store_true", help="debug logging")
        self.set_toy(**(toy or {}))

    def set_toy(self, **values: Any) -> None:
        """More defaults for --toy (added to the ones given before)."""
        self.toy_values.update(values)
        if any(a.dest == "params" for a in self._actions):
            self.toy_values.setdefault("params", None)

    def format_help(self) -> str:
        """--help, with the values --toy sets listed in its help (the script's options are known by now)."""
        shown = []
        for dest, value in self.toy_values.items():
            action = next((a for a in self._actions if a.dest == dest), None)
            if action is None or dest == "params":
                continue
            flag = max(action.option_strings, key=len)
            if isinstance(value, bool):
                shown.append(flag if value else f"no {flag}")
            elif isinstance(value, list | tuple):
                shown.append(f"{flag} {' '.join(map(str, value))}" if value else f"{flag} (none)")
            else:
                shown.append(f"{flag} {value}")
        self._toy_action.help = ("toy sizes, a smoke test that runs in seconds (the figures mean nothing): tiny "
                                 "data, tiny models built from a config, nothing written into artifacts/ or "
                                 "bench/results/" + (f"; {self.toy_note}" if self.toy_note else "")
                                 + (f"; sets {', '.join(shown)} (options given explicitly still win)" if shown
                                    else ""))
        return super().format_help()

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        parsed = super().parse_args(args, namespace)
        if parsed.toy and self.toy_values:
            self.set_defaults(**self.toy_values)
            parsed = super().parse_args(args, namespace)
        parsed.out = results_file(parsed.out, self.bench_name, parsed.toy)
        git_state()  # the commit at the start: a commit made during a long run must not be credited with it
        if parsed.toy:  # one thread per process: toy sizes gain nothing from more, and a busy machine loses
            os.environ.setdefault("OMP_NUM_THREADS", "1")
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(1)
        return parsed


def setup_logging(verbose: bool, quiet: Iterable[str] = ()) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    for noisy in quiet:
        logging.getLogger(noisy).setLevel(logging.WARNING)


def machine_info() -> dict[str, Any]:
    """The machine, and its load when called (a script calls it as it starts: the provenance's load at start)."""
    return {"cpu_cores": os.cpu_count(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
            "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1), "load_average_at_start": load_average()}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def verdict(passed: bool | None) -> str:
    """A target's verdict column: PASS, MISS, or n/a when it could not be measured here."""
    return "n/a " if passed is None else ("PASS" if passed else "MISS")


def load_line(machine: dict[str, Any]) -> str:
    """Cores and load average at start and end: how far the machine was from idle during the run."""
    return (f"{machine['cpu_cores']} CPU cores; load average at start {machine['load_average_at_start'][0]:.2f}, "
            f"at end {machine['load_average_at_end'][0]:.2f}")


def args_record(args: argparse.Namespace) -> dict[str, Any]:
    """The parsed options, JSON-ready (paths as strings)."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


@functools.cache
def git_state() -> dict[str, Any]:
    """The commit the run measured and the tracked files that differed from it: a committed figure names its code."""
    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    changed = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": head.strip() if head else None, "dirty": bool(changed) if status is not None else None,
            "changed": changed[:50]}


def provenance(results: dict[str, Any]) -> dict[str, Any]:
    """Where a results file comes from, in one place whatever the script: commit, UTC date, command line, toy or
    not, cores and load (scripts record the load at start as machine.load_average_at_start or load_average.start)."""
    args = results.get("args") or {}
    machine = results.get("machine") or {}
    start = machine.get("load_average_at_start") or (results.get("load_average") or {}).get("start")
    return {**git_state(), "date": datetime.now(UTC).isoformat(timespec="seconds"), "command": list(sys.argv),
            "toy": bool(args.get("toy")), "cpu_cores": os.cpu_count(),
            "load_average": {"start": start, "end": load_average()}}


def write_results(results: dict[str, Any], table: str, out: Path, started: float) -> None:
    """Total time, table and provenance into ``results``, the JSON to ``out``, the table to stdout.
    bench/tables.py renders the table into docs/benchmarks.md with the provenance's date, commit and load."""
    results["total_s"] = round(time.perf_counter() - started, 1)
    results["table"] = table.splitlines()
    results["provenance"] = provenance(results)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print("\n" + table)
    print(f"\nresults: {out} (total {results['total_s']:.0f} s)")
