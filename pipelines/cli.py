"""`omne` command line: parse arguments, call one library function, print the result."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import httpx

from pipelines.config import Params, find_params_file, load_params, with_overrides
from pipelines.domains import Domain, check_domain_name, load_registry
from pipelines.errors import ArtifactMissingError, ConfigError, OmneError
from pipelines.llm.base import LLMError
from pipelines.params_doc import first_difference, params_doc_path, render_params_doc
from pipelines.tables import print_eval_table, print_qa_stats, print_sweep_table

FORMATS = {"triples": "triples", "graphml": "lightrag_graphml", "lightrag-dir": "lightrag_workdir", "text": "text"}
USER_ERRORS = (OmneError, LLMError, httpx.HTTPError)  # one line and exit code 2, not a traceback


class OmneGroup(click.Group):
    """Turns the library's input errors into one clear line and exit code 2, not a traceback."""

    def invoke(self, ctx: click.Context):  # noqa: ANN201
        try:
            return super().invoke(ctx)
        except USER_ERRORS as exc:
            click.secho(f"error: {exc}", fg="red", err=True)
            sys.exit(2)


@click.group(cls=OmneGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--params", "params_path", type=click.Path(dir_okay=False), envvar="OMNE_PARAMS",
              help="params.yaml to use (default: the nearest params.yaml upwards from here).")
@click.option("--profile", envvar="OMNE_PROFILE",
              help="Profile of params.yaml to apply: quick (default, CPU minutes) or paper (Omne-R1 paper sizes, GPU).")
@click.option("-v", "--verbose", is_flag=True, help="Log what each step does.")
@click.pass_context
def cli(ctx: click.Context, params_path: str | None, profile: str | None, verbose: bool) -> None:
    """omne: knowledge graphs -> multi-hop QA data -> small tool-using LLM agents.

    Every command reads params.yaml (one source of truth, shared with Dagster and DVC) and writes
    artifacts under artifacts/ with a manifest.json that records hashes, params and code version.
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s")
    ctx.obj = {"params_path": params_path, "profile": profile}


def _params(ctx: click.Context) -> Params:
    return load_params(ctx.obj["params_path"], ctx.obj["profile"])


def _selected(params: Params, domains: tuple[str, ...], default: list[str] | None = None) -> list[Domain]:
    """The domains named on the command line, else ``default`` (else every registered one)."""
    registry = load_registry(params.registry_path)
    return [registry.get(name) for name in domains or default or registry.names]


def domain_filter_options(section: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--domain / --exclude-domain (repeatable): the command's domain filter, set as params ``section``.domains /
    exclude_domains for this run (docs/evaluation.md, "Domain filters")."""
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        command = click.option("--exclude-domain", "exclude_domains", multiple=True, metavar="NAME",
                               help=f"Leave out this domain (repeatable; sets {section}.exclude_domains for this "
                                    "run).")(command)
        return click.option("--domain", "domains", multiple=True, metavar="NAME",
                            help=f"Only this domain (repeatable; sets {section}.domains for this run; default: "
                                 "params.yaml's, where null is every registered domain).")(command)
    return decorate


def _with_domain_filter(params: Params, section: str, domains: tuple[str, ...],
                        exclude_domains: tuple[str, ...]) -> Params:
    """``params`` with --domain / --exclude-domain set as ``section``.domains / exclude_domains (the ones given),
    validated as params.yaml is, and checked against the registry at once."""
    chosen: dict[str, Any] = {key: list(names) for key, names in (("domains", domains),
                                                                  ("exclude_domains", exclude_domains)) if names}
    if not chosen:
        return params
    for key in reversed(section.split(".")):
        chosen = {key: chosen}
    params = with_overrides(params, chosen, source="--domain / --exclude-domain")
    params.selected_domains(section)
    return params


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the registry as JSON.")
@click.pass_context
def domains(ctx: click.Context, as_json: bool) -> None:
    """List the domains of the registry (kg_assets/domains.yaml)."""
    registry = load_registry(_params(ctx).registry_path)
    if as_json:
        click.echo(json.dumps([d.model_dump(mode="json", exclude_none=True) for d in registry.domains], indent=2))
        return
    for domain in registry.domains:
        click.echo(f"{domain.name:<18} {domain.source.kind:<17} {domain.source.path}  {domain.description}")
        if domain.origin or domain.licence:
            click.echo(f"{'':<18} {domain.field or '':<17} {domain.origin or ''}; licence: {domain.licence or '?'}")


@cli.group("params", invoke_without_command=True)
@click.pass_context
def show_params(ctx: click.Context) -> None:
    """Print the resolved parameters of the selected profile as JSON (`omne params`), or generate their reference
    page (`omne params docs`). What each setting means: docs/params.md."""
    if ctx.invoked_subcommand is None:
        click.echo(_params(ctx).model_dump_json(indent=2))


@show_params.command("docs")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when docs/params.md differs from what would be written (for CI and tests).")
@click.pass_context
def params_docs(ctx: click.Context, check: bool) -> None:
    """Write docs/params.md (next to params.yaml): a table per params.yaml section with each setting's quick value,
    its paper-profile value where it differs, and its description, the Field(description=...) in
    pipelines/config.py. Run it after adding or changing a setting."""
    found = Path(ctx.obj["params_path"]) if ctx.obj["params_path"] else find_params_file()
    if found is None or not found.is_file():
        raise ConfigError(f"{found or 'params.yaml'}: params file not found (run in the project, or give --params)")
    text, target = render_params_doc(found), params_doc_path(found)
    current = target.read_text(encoding="utf-8") if target.is_file() else ""
    if check:
        if current != text:
            click.echo(f"{target} is out of date ({first_difference(text, current)}): run `omne params docs`", err=True)
            ctx.exit(1)
        click.echo(f"{target} is up to date")
        return
    if current != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    click.echo(f"wrote {target} ({len(text.splitlines())} lines)")


@cli.group()
def kg() -> None:
    """Build, import, inspect and search knowledge graphs."""


@kg.command("build")
@click.option("--domain", "-d", "names", multiple=True, help="Domain to build (repeatable; default: all).")
@click.option("--force", is_flag=True, help="Rebuild even when sources and params are unchanged.")
@click.option("--strict", is_flag=True, help="Treat the KG checks' warnings (params `checks`) as errors.")
@click.pass_context
def kg_build(ctx: click.Context, names: tuple[str, ...], force: bool, strict: bool) -> None:
    """Import each domain's source and write artifacts/kg/<domain>/ (parquet + manifest).

    A broken domain is reported (one line) and the others are built; the exit code is 2 if any failed.
    """
    from pipelines.kg.domain_build import DomainBuild, build_domains

    failed: list[str] = []
    for item in build_domains(_params(ctx), list(names) or None, force=force, strict=strict):
        if not isinstance(item, DomainBuild):  # leftovers of killed runs, cleaned first
            for line in item.lines():
                click.echo(f"note: {line}", err=True)
            continue
        if item.rows:
            state = "up to date" if item.skipped else "built"
            click.echo(f"{item.domain}: {state}: {item.rows['entities']} entities, {item.rows['relations']} "
                       f"relations -> {item.folder}")
        for warning in item.warnings:
            click.secho(f"warning: {item.domain}: {warning}", fg="yellow", err=True)
        if not item.ok:
            failed.append(item.domain)
            click.secho(f"error: {item.domain}: {item.error}", fg="red", err=True)
    if failed:
        click.secho(f"error: {len(failed)} domain(s) failed: {', '.join(failed)}", fg="red", err=True)
        sys.exit(2)


@kg.command("index")
@click.option("--domain", "-d", "names", multiple=True, help="Domain to index (repeatable; default: all).")
@click.option("--force", is_flag=True, help="Rebuild even when the KG and params are unchanged.")
@click.pass_context
def kg_index(ctx: click.Context, names: tuple[str, ...], force: bool) -> None:
    """Embed each built KG's entities into artifacts/index/<domain>/ (LanceDB)."""
    from pipelines.kg.build import build_entity_index

    params = _params(ctx)
    for domain in _selected(params, names):
        result = build_entity_index(domain.name, params, force=force)
        recall = result.manifest.metadata["self_retrieval"]["recall_at_1"]
        state = "up to date" if result.skipped else "built"
        click.echo(f"{domain.name}: {state}: {result.manifest.rows['entities']} vectors, "
                   f"self-retrieval recall@1 {recall:.3f} -> {result.folder}")


@kg.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--name", required=True, help="Domain name: lower-case letters, digits, '_' (also the graph_type).")
@click.option("--format", "fmt", type=click.Choice(sorted(FORMATS)),
              help="Source format (default: graphml for *.graphml, lightrag-dir for folders, text for *.txt/*.md, "
                   "else triples).")
@click.option("--entities", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Optional entity table (name, type, description) for a triples file.")
@click.option("--description", default="", help="One line describing the domain.")
@click.option("--replace", is_flag=True, help="Replace an existing domain of the same name.")
@click.option("--no-build", is_flag=True, help="Only copy and register the domain; do not build its KG and index.")
@click.option("--strict", is_flag=True, help="Treat the KG checks' warnings (params `checks`) as errors: roll back.")
@click.pass_context
def kg_import(ctx: click.Context, path: Path, name: str, fmt: str | None, entities: Path | None,
              description: str, replace: bool, no_build: bool, strict: bool) -> None:
    """Add a domain from a user's file: validate it, copy it to kg_assets/<name>/, build, register.

    All or nothing: the domain is registered only once its files are copied and its KG and index are
    built; an error, a failed check under --strict, or Ctrl-C leaves the project as it was.
    --format text takes a .txt/.md file or a folder of them; building extracts the KG with the LLM of
    params.yaml (llm:), as LightRAG does.
    """
    from pipelines.kg.domain_import import ImportRequest, import_domain

    if entities and (fmt or "triples") != "triples":
        raise click.UsageError("--entities only applies to --format triples")
    params = _params(ctx)
    request = ImportRequest(path=path, name=check_domain_name(name), format=fmt, entities=entities,
                            description=description, replace=replace, build=not no_build, strict=strict)
    try:
        result = import_domain(request, params)
    except USER_ERRORS as exc:
        notes = "; ".join(getattr(exc, "__notes__", []))
        click.secho(f"error: {exc}" + (f" ({notes})" if notes else ""), fg="red", err=True)
        sys.exit(2)
    for line in result.leftovers.lines():
        click.echo(f"note: {line}", err=True)
    domain = result.domain
    if result.rows:
        click.echo(f"built {name}: {result.rows['entities']} entities, {result.rows['relations']} relations, "
                   f"{result.vectors} vectors")
    for warning in result.warnings:
        click.secho(f"warning: {name}: {warning}", fg="yellow", err=True)
    click.echo(f"registered domain {name!r}: {domain.source.kind} {domain.source.path}")


@kg.command("render-lightrag")
@click.option("--domain", "name", required=True, help="A registered triples domain (e.g. chemistry).")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The GraphML file to write (LightRAG's graph_chunk_entity_relation.graphml layout).")
@click.pass_context
def kg_render_lightrag(ctx: click.Context, name: str, out: Path) -> None:
    """Write the graph LightRAG would have built for a triples domain's facts: upper-case names, generic types,
    unlabelled relations carried by description sentences (docs/kg.md, "LightRAG renderings"). A registry entry
    of source kind lightrag_rendering builds the same graph as a domain of its own."""
    from pipelines.kg.lightrag_render import render_lightrag, write_lightrag_graphml

    params = _params(ctx)
    domain = load_registry(params.registry_path).get(name)
    if domain.source.kind != "triples":
        raise OmneError(f"{name}: a LightRAG rendering needs a triples domain, this one is {domain.source.kind!r}")
    folder = (params.root / domain.source.path).parent
    graph = render_lightrag(folder)
    write_lightrag_graphml(graph, out)
    click.echo(f"wrote {out}: {graph.number_of_nodes()} entities, {graph.number_of_edges()} relations "
               f"(a LightRAG rendering of {name})")


@kg.command("stats")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.pass_context
def kg_stats(ctx: click.Context, name: str, as_json: bool) -> None:
    """Statistics of a built KG: size, components, degree, seeds eligible for QA subgraphs, and what its import
    truncated (the manifest's import_notes)."""
    from pipelines.kg.build import knowledge_graph_stats
    from pipelines.kg.leftovers import clean_leftovers
    from pipelines.layout import kg_dir
    from pipelines.manifest import read_manifest

    params = _params(ctx)
    load_registry(params.registry_path).get(name)
    clean_leftovers(params, [name])  # a killed import of this domain: undone (or finished) before reading
    stats = knowledge_graph_stats(name, params)
    manifest = read_manifest(kg_dir(params.artifacts_dir, name))
    notes = list(manifest.metadata.get("import_notes", [])) if manifest else []
    if as_json:
        click.echo(json.dumps({**stats.model_dump(mode="json"), "import_notes": notes}, indent=2))
    else:
        for key, value in stats.model_dump().items():
            click.echo(f"{key:<20} {value}")
        for note in notes:
            click.echo(f"{'import_note':<20} {note}")


@kg.command("search")
@click.argument("name")
@click.argument("query")
@click.option("-k", default=5, show_default=True, help="How many entities to return.")
@click.pass_context
def kg_search(ctx: click.Context, name: str, query: str, k: int) -> None:
    """Find the entities of a domain whose names are most similar to QUERY (the entity index)."""
    from pipelines.kg.index import EntityIndex
    from pipelines.layout import index_dir

    params = _params(ctx)
    load_registry(params.registry_path).get(name)
    for hit in EntityIndex(index_dir(params.artifacts_dir, name), params.index).search(query, k):
        click.echo(f"{hit.score:.3f}  {hit.name}  |  {hit.description[:100]}")


@cli.group()
def tools() -> None:
    """The agent's KG tools: call one by hand, list them, or serve them over HTTP."""


@tools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the OpenAI-style JSON schemas.")
def tools_list(as_json: bool) -> None:
    """List the tools and their arguments."""
    from pipelines.agent.tools import TOOL_SPECS

    if as_json:
        click.echo(json.dumps([spec.json_schema() for spec in TOOL_SPECS.values()], indent=2))
        return
    for spec in TOOL_SPECS.values():
        click.echo(f"{spec.name}({', '.join(p.name for p in spec.params)})  {spec.description}")


@tools.command("call")
@click.argument("call_text")
@click.option("--graph-type", "-g", help="The episode's graph, for tools without a graph_type argument.")
@click.option("--server", help="Call a running tool server (e.g. http://127.0.0.1:8765) instead of in-process.")
@click.option("--token", envvar="OMNE_TOOLS_TOKEN", help="Bearer token of the server.")
@click.option("--question", "-q", help="The question the call helps answer: with tools.node_info_order: question, "
              "node_info lists the relations closest to it first.")
@click.pass_context
def tools_call(ctx: click.Context, call_text: str, graph_type: str | None, server: str | None,
               token: str | None, question: str | None) -> None:
    """Run one tool call as the model would write it, e.g. 'node_info(node_name="Iron", graph_type="chemistry")'."""
    from pipelines.agent.client import HttpToolClient, InProcessToolClient
    from pipelines.agent.output import cap_text
    from pipelines.agent.tools import KGToolbox

    params = _params(ctx)
    client = HttpToolClient(server, token) if server else InProcessToolClient(KGToolbox(params))
    result = client.call(call_text, graph_type=graph_type, question=question)
    click.echo(cap_text(result.content, params.tools.max_result_bytes))
    if not result.ok:
        sys.exit(1)


@tools.command("serve")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to bind (loopback by default).")
@click.option("--port", default=8765, show_default=True, type=int)
@click.option("--token", envvar="OMNE_TOOLS_TOKEN", help="Require this bearer token (or $OMNE_TOOLS_TOKEN).")
@click.option("--domain", "-d", "names", multiple=True,
              help="Domains to serve (default: every registered one; unbuilt ones load once built).")
@click.option("--max-body-bytes", default=2_000_000, show_default=True, type=int, help="Largest request body.")
@click.pass_context
def tools_serve(ctx: click.Context, host: str, port: int, token: str | None, names: tuple[str, ...],
                max_body_bytes: int) -> None:
    """Serve the tools over HTTP (FastAPI): POST /v1/tools/call and /v1/tools/batch, GET /health, /docs."""
    import torch
    import uvicorn
    from threadpoolctl import threadpool_limits

    from pipelines.agent.server import create_app

    # one thread each for query encoding (torch) and vector search (BLAS): with more, the two pools
    # busy-wait against each other on a small machine and a cold entity_matcher gets ~10x slower
    torch.set_num_threads(1)
    threadpool_limits(1)
    from pipelines.agent.tools import KGToolbox

    toolbox = KGToolbox(_params(ctx), list(names) or None)
    loaded = toolbox.load_all()
    click.echo(f"serving {', '.join(loaded) or 'no built domain yet'} on http://{host}:{port} "
               f"({'token required' if token else 'no token'})")
    app = create_app(toolbox, token=token, max_body_bytes=max_body_bytes)  # results within tools.max_result_bytes
    uvicorn.run(app, host=host, port=port, log_level="warning")


@cli.group()
def qa() -> None:
    """Synthesise multi-hop QA pairs: seed subgraphs, generation with validation, gold paths, dataset."""


@qa.command("seeds")
@click.option("--domain", "-d", "names", multiple=True,
              help="Domain (repeatable; default: those qa.domains / qa.exclude_domains select, all by default).")
@click.option("--force", is_flag=True, help="Resample even when the KG and params are unchanged.")
@click.pass_context
def qa_seeds(ctx: click.Context, names: tuple[str, ...], force: bool) -> None:
    """Sample seed entities whose depth-3 subgraph has 20-400 nodes (params: seeds, qa.seeds_per_domain)."""
    from pipelines.qa.build import build_seed_subgraphs

    params = _params(ctx)
    for domain in _selected(params, names, params.selected_domains("qa")):
        result = build_seed_subgraphs(domain.name, params, force=force)
        meta = result.manifest.metadata
        click.echo(f"{domain.name}: {'up to date' if result.skipped else 'built'}: {result.manifest.rows['seeds']} "
                   f"seed subgraphs, {meta['size_min']}-{meta['size_max']} nodes -> {result.folder}")


@qa.command("phrases")
@click.option("--domain", "-d", "names", multiple=True, help="Domain (repeatable; default: all).")
@click.option("--write", is_flag=True, help="Write kg_assets/<domain>/phrases.yaml (entries already there are kept).")
@click.pass_context
def qa_phrases(ctx: click.Context, names: tuple[str, ...], write: bool) -> None:
    """Draft the relation phrases the offline question writer uses (docs/qa.md, "Relation phrases").

    Prints, per relation label of the built KG, the statement, the two questions and the two noun phrases the
    rules derive from the label and the relations' descriptions; with --write saves them beside the domain's
    sources, where a fix to one phrase changes every question that uses it (the QA pairs are rebuilt).
    """
    from pipelines.qa.build import draft_phrases, phrases_file
    from pipelines.text.phrases import write_lexicon

    params = _params(ctx)
    for domain in _selected(params, names):
        lexicon = draft_phrases(domain.name, params)
        path = phrases_file(params, domain.name)
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_lexicon(path, lexicon, domain.name)
            click.echo(f"{domain.name}: {len(lexicon.relations)} relation labels -> {path}")
        else:
            click.echo(f"# {domain.name} ({path})")
            import yaml

            click.echo(yaml.safe_dump(lexicon.model_dump(exclude_none=True), sort_keys=False, allow_unicode=True,
                                      width=120))


@qa.command("generate")
@click.option("--domain", "-d", "names", multiple=True,
              help="Domain (repeatable; default: those qa.domains / qa.exclude_domains select, all by default).")
@click.option("--generator", type=click.Choice(["template", "llm"]),
              help="template: offline, deterministic; llm: the Omne-R1 paper's prompts (default: qa.generator).")
@click.option("--limit", type=click.IntRange(min=1), help="At most N pairs per bucket (1/2-hop, 3+) per domain.")
@click.option("--force", is_flag=True, help="Regenerate even when inputs and params are unchanged.")
@click.pass_context
def qa_generate(ctx: click.Context, names: tuple[str, ...], generator: str | None, limit: int | None,
                force: bool) -> None:
    """Generate validated QA pairs per domain into artifacts/qa/pairs/<domain>/ (seeds first if needed).

    With --generator llm the OpenAI-compatible endpoint of params.yaml (llm:) is called; replies are
    cached under artifacts/cache/llm, so an interrupted run resumes without paying twice.
    """
    from pipelines.qa.build import build_qa_pairs, build_seed_subgraphs

    params = _params(ctx)
    for domain in _selected(params, names, params.selected_domains("qa")):
        build_seed_subgraphs(domain.name, params)
        result = build_qa_pairs(domain.name, params, generator=generator, limit=limit, force=force)
        stats, usage = result.manifest.metadata["stats"], result.manifest.metadata.get("llm_usage") or {}
        cost = (f", {usage.get('requests', 0)} LLM requests ({usage.get('cached', 0)} cached), "
                f"{usage.get('prompt_tokens', 0) + usage.get('completion_tokens', 0)} tokens, "
                f"${usage.get('cost_usd', 0.0):.4f}") if usage else ""
        rewritten = result.manifest.metadata.get("paraphrase")
        if rewritten:
            cost += f", {rewritten['paraphrased']} paraphrased by {rewritten['model']} ({rewritten['kept']} kept)"
        click.echo(f"{domain.name}: {'up to date' if result.skipped else 'generated'}: {stats['pairs_1_2']} 1/2-hop + "
                   f"{stats['pairs_3_plus']} 3+ pairs, acceptance {stats['acceptance_rate']:.0%}{cost} "
                   f"-> {result.folder}")
        for bucket, why in stats.get("short", {}).items():  # the seeds ran out before the bucket was full
            click.secho(f"{domain.name}: bucket {bucket} short: {why}", fg="yellow", err=True)


@qa.command("gold")
@click.option("--domain", "-d", "names", multiple=True,
              help="Domain (repeatable; default: those qa.domains / qa.exclude_domains select, all by default).")
@click.option("--force", is_flag=True, help="Recompute even when inputs and params are unchanged.")
@click.pass_context
def qa_gold(ctx: click.Context, names: tuple[str, ...], force: bool) -> None:
    """Find every simple start->answer path of each QA pair and verify it (rules or LLM: qa.gold_verify)."""
    from pipelines.qa.build import build_gold_paths

    params = _params(ctx)
    for domain in _selected(params, names, params.selected_domains("qa")):
        result = build_gold_paths(domain.name, params, force=force)
        rows = result.manifest.rows
        click.echo(f"{domain.name}: {'up to date' if result.skipped else 'built'}: {rows['valid_paths']} valid of "
                   f"{rows['paths']} paths for {rows['qa_pairs']} pairs -> {result.folder}")


@qa.command("build")
@domain_filter_options("qa")
@click.option("--force", is_flag=True, help="Rebuild even when inputs and params are unchanged.")
@click.option("--no-checks", is_flag=True, help="Skip the Great Expectations suite and the split-leakage check.")
@click.pass_context
def qa_build(ctx: click.Context, domains: tuple[str, ...], exclude_domains: tuple[str, ...], force: bool,
             no_checks: bool) -> None:
    """Merge the domains' QA pairs (gold paths first if needed), dedupe, split, check: artifacts/qa/dataset/.

    The domains merged are those qa.domains / qa.exclude_domains (or --domain / --exclude-domain) select that have
    QA pairs; a domain --domain names must have them."""
    from pipelines.qa.build import build_gold_paths, build_qa_dataset, built_qa_domains

    params = _with_domain_filter(_params(ctx), "qa", domains, exclude_domains)
    with_pairs = built_qa_domains(params, "pairs")
    for domain in with_pairs:
        build_gold_paths(domain, params)
    result = build_qa_dataset(params, with_pairs, force=force)
    print_qa_stats(result.stats)
    state = "up to date" if result.skipped else "built"
    click.echo(f"{state}: {result.manifest.rows['pairs']} pairs -> {result.folder}")
    if not no_checks:
        from pipelines.run import print_check_outcomes, qa_dataset_checks

        if not print_check_outcomes(qa_dataset_checks(params)):
            sys.exit(1)


@qa.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
@click.pass_context
def qa_stats(ctx: click.Context, as_json: bool) -> None:
    """Per-domain statistics of the built QA dataset (like the Omne-R1 paper's Table 1)."""
    from pipelines.layout import qa_dir
    from pipelines.manifest import read_manifest

    params = _params(ctx)
    manifest = read_manifest(qa_dir(params.artifacts_dir, "dataset"))
    if manifest is None:
        raise ArtifactMissingError("the QA dataset is not built yet (run `omne qa build`)")
    stats = manifest.metadata["stats"]
    if as_json:
        click.echo(json.dumps(stats, indent=2))
    else:
        print_qa_stats(stats)


@qa.command("report")
@click.option("--domain", "-d", "names", multiple=True, help="Domain (repeatable; default: all of the dataset's).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--samples", type=click.IntRange(min=0), default=10, show_default=True,
              help="Sampled questions per domain and bucket (1/2-hop, 3+).")
@click.pass_context
def qa_report(ctx: click.Context, names: tuple[str, ...], as_json: bool, samples: int) -> None:
    """How the built dataset's questions read (docs/qa.md, "Quality report"): per domain and hop count, words per
    question, clause depth, leaks, form problems, the share guessable from the question alone, and samples."""
    from pipelines.qa.report import qa_quality_report
    from pipelines.tables import print_qa_report

    report = qa_quality_report(_params(ctx), list(names) or None, samples=samples)
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        print_qa_report(report)


@cli.group()
def sft() -> None:
    """Stage 2: multi-turn SFT conversations and training with the weighted think-loss."""


@sft.command("data")
@domain_filter_options("sft_data")
@click.option("--force", is_flag=True, help="Rebuild even when the QA dataset and params are unchanged.")
@click.option("--teacher-endpoint", help="OpenAI-compatible server of the teacher (source 'teacher'; model: "
                                         "sft_data.teacher_model).")
@click.pass_context
def sft_data_command(ctx: click.Context, domains: tuple[str, ...], exclude_domains: tuple[str, ...], force: bool,
                     teacher_endpoint: str | None) -> None:
    """Build artifacts/sft/conversations/ (ShareGPT) from the train split: gold paths walked with the real
    tools (template), RL stage 1's correct rollouts (agent: run `omne rl --stage 1` first) and/or teacher rollouts
    kept when fully correct; only the train pairs of the domains sft_data.domains / exclude_domains (or --domain /
    --exclude-domain) select."""
    from pipelines.train.sft_data import build_sft_conversations

    params = _with_domain_filter(_params(ctx), "sft_data", domains, exclude_domains)
    teacher = None
    if teacher_endpoint:
        from pipelines.llm.openai_client import OpenAIChatClient

        teacher = OpenAIChatClient(params.llm, base_url=teacher_endpoint, model=params.sft_data.teacher_model or None)
    result = build_sft_conversations(params, force=force, teacher=teacher)
    stats = result.manifest.metadata["stats"]
    click.echo(f"{'up to date' if result.skipped else 'built'}: {stats['conversations']} conversations "
               f"{stats['by_source']} {stats['by_bucket']}, {result.manifest.rows['skipped_pairs']} pairs skipped, "
               f"{result.manifest.metadata['format_problems']} with format problems"
               f"{_agent_summary(result.manifest.metadata.get('agent'))} -> {result.folder}")


def _agent_summary(agent: dict | None) -> str:
    """The agent source's line part: stage-1 rollouts read, kept, dropped by reason (empty without that source)."""
    if not agent:
        return ""
    return f", agent: {agent['kept']} of {agent['rollouts']} stage-1 rollouts kept (dropped {agent['dropped']})"


@sft.command("train")
@click.option("--name", default="sft", show_default=True, help="Model folder under artifacts/models/.")
@click.option("--think-weight", type=click.FloatRange(0.0, 1.0), help="Override sft.think_weight (loss weight of "
                                                                      "<think> spans).")
@click.option("--force", is_flag=True, help="Retrain even when data, base model and params are unchanged.")
@click.pass_context
def sft_train_command(ctx: click.Context, name: str, think_weight: float | None, force: bool) -> None:
    """Train the stage-2 model on artifacts/sft/conversations (LoRA or full, weighted think-loss); writes
    artifacts/models/<name>/ with the adapter, tokenizer, trainer_state.json, loss_curve.png and manifest."""
    from pipelines.train.sft import training_summary
    from pipelines.train.stage2 import build_sft_model

    result = build_sft_model(_params(ctx), name=name, think_weight=think_weight, force=force)
    click.echo(f"{'up to date' if result.skipped else 'trained'}: {training_summary(result.manifest)} "
               f"-> {result.folder}")


@sft.command("sweep")
@click.option("--weight", "weights", type=click.FloatRange(0.0, 1.0), multiple=True,
              help="Think weight to train (repeatable; default: sft.sweep_weights, the paper's Table 5 grid).")
@click.option("--force", is_flag=True, help="Retrain and re-evaluate even when up to date.")
@click.pass_context
def sft_sweep_command(ctx: click.Context, weights: tuple[float, ...], force: bool) -> None:
    """The think-weight sweep: one SFT model per weight (sft.sweep_max_steps steps each), each evaluated on
    the same sample; writes artifacts/reports/think_sweep/ (sweep.json, sweep.png). A killed sweep resumes:
    finished models and reports are reused."""
    from pipelines.train.sweep import run_think_sweep

    result = run_think_sweep(_params(ctx), weights=list(weights) or None, force=force)
    print_sweep_table(result.points)
    click.echo(f"report: {result.folder / 'sweep.png'}")


@cli.command("rl")
@click.option("--stage", type=click.Choice(["1", "3"]), required=True,
              help="1: from the base model on QA pairs (rl.stage1); 3: from the SFT model (rl.stage3).")
@click.option("--start", help="Model to start from instead (a transformers folder or an SFT/RL adapter folder).")
@click.option("--name", help="Model folder under artifacts/models/ (default: rl-stage<N>).")
@click.option("--force", is_flag=True, help="Retrain even when the start model, data and params are unchanged.")
@domain_filter_options("rl.stage<N>")
@click.pass_context
def rl_command(ctx: click.Context, stage: str, start: str | None, name: str | None, force: bool,
               domains: tuple[str, ...], exclude_domains: tuple[str, ...]) -> None:
    """Reinforcement learning with multi-turn tool rollouts (TRL GRPOTrainer; rl.<stage>.algorithm ppo adds a
    value model and GAE): rewards by name from rl.<stage>.rewards; writes artifacts/models/<name>/ (merged
    model, trainer_state.json with the log history, training_curves.png, correct_rollouts.jsonl: the exactly-correct
    training rollouts, stage 1's being the SFT data's agent source, manifest.json). The training and validation
    questions are those of the domains rl.<stage>.domains / exclude_domains select."""
    from pipelines.train.rl import train_rl

    params = _with_domain_filter(_params(ctx), f"rl.stage{stage}", domains, exclude_domains)
    result = train_rl(params, int(stage), start=start, name=name, force=force)
    from pipelines.run import rl_summary_line

    click.echo(f"{'up to date' if result.skipped else 'trained'}: stage {stage}, {rl_summary_line(result.manifest)} -> "
               f"{result.folder}")


@cli.group("eval", invoke_without_command=True, subcommand_metavar="[compare RUN_A RUN_B]")
@click.option("--model", "model", default="base", show_default=True,
              help="base (params agent.base_model), a local transformers folder, a PEFT adapter folder, or the "
                   "model name at --endpoint.")
@click.option("--split", type=click.Choice(["train", "val", "test"]), help="QA split (default: eval.split).")
@click.option("--limit", type=click.IntRange(min=1),
              help="Questions per bucket (with --kgqa: questions), a stable sample (default: eval.limit).")
@click.option("--protocol", type=click.Choice(["omne", "kg_r1", "search"]),
              help="Agent protocol (default: agent.protocol).")
@click.option("--baseline", type=click.Choice(["direct", "cot", "tools", "retrieval", "graph", "lightrag"]),
              help="Evaluate a baseline instead: no tools (direct, cot), the base model with tools (tools), "
                   "retrieved facts (retrieval), the question's subgraph (graph) or the context the lightrag-hku "
                   "library retrieves with the model's keywords (lightrag) in the prompt.")
@click.option("--endpoint",
              help="An OpenAI-compatible server to generate with (e.g. a `vllm serve` URL ending in /v1).")
@click.option("--tools-server", help="Call a running `omne tools serve` instead of in-process tools.")
@click.option("--name", help="Report name under artifacts/reports/ (default: <model>-<protocol|baseline>-<split>).")
@click.option("--kgqa", "kgqa", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Evaluate on an external KGQA file instead of a split (WebQSP/CWQ/GrailQA/QALD style, or JSON "
                   "lines of {question, topic_entities, answers}); each question is answered on the 2-hop "
                   "subgraph around its topic entities. Hit@1 and F1 are the headline numbers.")
@click.option("--triples", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --kgqa: the KG of the questions, a triples file (CSV/TSV/parquet/JSON lines with head, "
                   "relation, tail); built into artifacts/kgqa/ (reused when unchanged), never into the training data.")
@click.option("--kgqa-domain", help="With --kgqa: the domain name of that KG (default: from the triples file's name); "
                                    "without --triples, a domain built before.")
@click.option("--kgqa-hops", type=click.IntRange(0, 4), default=2, show_default=True,
              help="With --kgqa: the radius of each question's subgraph around its topic entities.")
@click.option("--force", is_flag=True,
              help="With --name: evaluate again even when that report was made from the same model, test data and "
                   "params (by default it is reused, as `omne run`, Dagster and DVC reuse it).")
@domain_filter_options("eval")
@click.pass_context
def eval_command(ctx: click.Context, model: str, split: str | None, limit: int | None, protocol: str | None,
                 baseline: str | None, endpoint: str | None, tools_server: str | None, name: str | None,
                 kgqa: Path | None, triples: Path | None, kgqa_domain: str | None, kgqa_hops: int,
                 force: bool, domains: tuple[str, ...], exclude_domains: tuple[str, ...]) -> None:
    """Evaluate a model (or a baseline) on a QA split: EM (with its Wilson 95% interval), F1, Hit@1 per bucket,
    hop and domain, efficiency and behaviour metrics; writes artifacts/reports/<run>/ (metrics.json,
    predictions.jsonl, report.html). Only the questions of the domains eval.domains / exclude_domains (or
    --domain / --exclude-domain) select, e.g. a domain held out of training.

    With --kgqa FILE --triples FILE it evaluates on an external question set instead (--limit is then
    a number of questions): the topic entities are named in the prompt and the tools see only the
    2-hop subgraph around them.

    `omne eval compare RUN_A RUN_B` compares two reports question by question instead (exact McNemar test;
    `omne eval compare --help`).
    """
    if ctx.invoked_subcommand is not None:
        given = [f"--{name.replace('_', '-')}" for name in ctx.params
                 if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT]
        if given:
            raise click.UsageError(f"{', '.join(given)}: options of the evaluation itself, not of "
                                   f"`omne eval {ctx.invoked_subcommand}`")
        return
    from pipelines.agent.client import HttpToolClient
    from pipelines.eval.runner import evaluate, evaluate_cached, question_source

    if kgqa is None and (triples or kgqa_domain):
        raise click.UsageError("--triples and --kgqa-domain only apply with --kgqa")
    if kgqa is not None and split:
        raise click.UsageError("--split does not apply with --kgqa (the questions come from the KGQA file)")
    if kgqa is not None and tools_server:
        raise click.UsageError("--tools-server does not apply with --kgqa (its KG lives in artifacts/kgqa/, which a "
                               "tool server does not load)")
    if kgqa is not None and triples is None and kgqa_domain is None:
        raise click.UsageError("--kgqa needs --triples (the KG of the questions), or --kgqa-domain naming a built one")
    if kgqa is not None and (domains or exclude_domains):
        raise click.UsageError("--domain and --exclude-domain select the split's questions; with --kgqa the questions "
                               "are the KGQA file's")
    params = _with_domain_filter(_params(ctx), "eval", domains, exclude_domains)
    tools = HttpToolClient(tools_server, os.environ.get("OMNE_TOOLS_TOKEN")) if tools_server else None
    source = question_source(params, split=split, limit=limit, kgqa=kgqa, triples=triples, kgqa_domain=kgqa_domain,
                             kgqa_hops=kgqa_hops)
    if name and kgqa is None and tools is None:  # a named report of a split: reused while current
        result = evaluate_cached(params, model, name=name, force=force, source=source, protocol=protocol,
                                 baseline=baseline, endpoint=endpoint)
    else:
        result = evaluate(params, model, source, protocol=protocol, baseline=baseline, endpoint=endpoint, tools=tools,
                          name=name)
    print_eval_table([result.metrics])
    if result.kgqa:
        summary = result.kgqa
        click.echo(f"kgqa {summary['file']}: {summary['questions']} questions on {summary['domain']} "
                   f"({summary['skipped']} skipped); topic entity in the KG {summary['topic_found']:.0%}, "
                   f"an answer in the {summary['hops']}-hop subgraph {summary['answer_in_subgraph']:.0%} "
                   "(the most Hit@1 can reach)")
    if result.lightrag:
        told = ", ".join(f"{k} {v}" for k, v in result.lightrag["outcomes"].items() if v)
        click.echo(f"lightrag ({result.lightrag['mode']}): {result.lightrag['questions']} questions: {told}; "
                   f"no keyword from the model for {result.lightrag['empty_keyword_share']:.0%}")
    click.echo(f"report: {result.folder / 'report.html'}")


@eval_command.command("compare", short_help="Compare two reports question by question (exact McNemar test).")
@click.argument("run_a")
@click.argument("run_b")
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=0.05, show_default=True,
              help="Significance level of the verdict.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.pass_context
def eval_compare(ctx: click.Context, run_a: str, run_b: str, alpha: float, as_json: bool) -> None:
    """Compare two evaluation reports on the questions both answered: how many both got right, only A, only B,
    neither; each one's EM on those questions; McNemar's exact test (two-sided binomial test on the questions
    only one got right) and a verdict, overall and per bucket.

    RUN_A and RUN_B are report names under artifacts/reports/ or paths to report folders. A question is right
    when any of its samples is (as the report scores it).
    """
    from pipelines.eval.compare import compare_reports, report_folder
    from pipelines.layout import reports_dir
    from pipelines.tables import print_comparison

    reports = None if all(Path(r).is_dir() for r in (run_a, run_b)) else reports_dir(_params(ctx).artifacts_dir)
    comparison = compare_reports(report_folder(run_a, reports), report_folder(run_b, reports), alpha=alpha)
    if as_json:
        click.echo(comparison.model_dump_json(indent=2))
        return
    print_comparison(comparison)


@cli.command()
@click.option("--domain", "-d", "names", multiple=True, help="Domain to run (repeatable; default: all).")
@click.option("--force", is_flag=True, help="Rebuild everything even when up to date.")
@click.option("--skip-eval", is_flag=True, help="Stop after the QA dataset (no training, no evaluation).")
@click.option("--skip-train", is_flag=True, help="Evaluate the base model only (no SFT, no RL stages).")
@click.option("--no-record", is_flag=True,
              help="Do not record what was built in the Dagster instance ($DAGSTER_HOME, else .dagster_home) and "
                   "in dvc.lock (by default both learn it, so the UI shows it and `dvc repro` reuses it).")
@click.pass_context
def run(ctx: click.Context, names: tuple[str, ...], force: bool, skip_eval: bool, skip_train: bool,
        no_record: bool) -> None:
    """The main job: every domain's KG, entity index, seed subgraphs, QA pairs and gold paths, the merged
    QA dataset, the base model with tools evaluated on a sample of the test split, stage 2 (SFT
    conversations, the SFT model) evaluated on the same sample, then short RL stages 1 (from the base
    model) and 3 (from the SFT model), stage 3 evaluated too; prints a table per stage. Each step is
    reused when its inputs are unchanged, so a rerun (or a resumed run) only does what is missing.
    What it built or found current is then recorded as Dagster materializations and in dvc.lock."""
    from pipelines.config import find_params_file
    from pipelines.run import QAChecksFailed, run_main_job

    params = _params(ctx)
    domains = _selected(params, names)
    params_file = Path(ctx.obj["params_path"]) if ctx.obj["params_path"] else find_params_file()
    try:
        run_main_job(params, domains, all_domains=not names, force=force, skip_eval=skip_eval,
                     skip_train=skip_train, params_file=params_file, record=not no_record)
    except QAChecksFailed as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(1)


@cli.group("paper")
def paper() -> None:
    """The Omne-R1 paper's tables and figures, rebuilt from this project's runs (docs/paper.md)."""


@paper.command("tables")
@click.option("--table", "tables", type=click.IntRange(1, 8), multiple=True,
              help="Table to build (repeatable; default: every table and figure).")
@click.option("--figure", "figures", type=click.IntRange(2, 4), multiple=True,
              help="Figure to draw (repeatable; default: every figure when no --table is given).")
@click.option("--profile", type=click.Choice(["quick", "paper"]), help="Profile (default: omne's --profile).")
@click.option("--force", is_flag=True, help="Retrain and re-evaluate even what is up to date.")
@click.pass_context
def paper_tables(ctx: click.Context, tables: tuple[int, ...], figures: tuple[int, ...], profile: str | None,
                 force: bool) -> None:
    """Build the models and reports each table needs (the run's own reused, variants under paper-* names) and write
    artifacts/reports/paper/table<N>.md/.json and figure<N>.png/.json in the paper's layout, accuracies with their
    Wilson 95% intervals."""
    from pipelines.paper import FIGURES, TABLES, build_paper_tables
    from pipelines.run import QAChecksFailed

    params = load_params(ctx.obj["params_path"], profile or ctx.obj["profile"])
    chosen = (tables, figures) if tables or figures else (TABLES, FIGURES)
    try:
        result = build_paper_tables(params, *chosen, force=force)
    except QAChecksFailed as exc:
        click.secho(f"error: {exc}", fg="red", err=True)
        sys.exit(1)
    for table in result.tables:
        click.echo(table.markdown())
    for path in result.files:
        click.echo(f"wrote {path}")


@cli.command("memory")
@click.option("--model", "model", default="base", show_default=True,
              help="Model whose config.json sizes the estimate: 'base' (agent.base_model) or a transformers folder.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]),
              help="Device to estimate for (default: cuda when one is visible, else cpu).")
@click.option("--json", "as_json", is_flag=True, help="Print the estimates as JSON (bytes per part).")
@click.pass_context
def memory_command(ctx: click.Context, model: str, device: str | None, as_json: bool) -> None:
    """Estimate each training and evaluation stage's peak memory on one device for the selected profile (e.g.
    `omne --profile paper memory --device cuda`): weights, optimizer, activations, LM head tile, KV caches."""
    import torch
    from transformers import AutoConfig

    from pipelines.agent.models import resolve_model_folder
    from pipelines.tables import print_memory_estimates
    from pipelines.train.memory import ModelShape, estimate_stages

    params = _params(ctx)
    folder = resolve_model_folder(model, params)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    shape = ModelShape.from_config(AutoConfig.from_pretrained(folder))
    estimates = estimate_stages(shape, params, cuda=device == "cuda")
    if as_json:
        click.echo(json.dumps([e.model_dump() | {"total_bytes": e.total} for e in estimates], indent=2))
        return
    print_memory_estimates(estimates, model=folder.name, device=device, profile=params.profile)


@cli.group("stages")
def stages_group() -> None:
    """The stage registry (pipelines/stages.py): every stage declared once, read by `omne run`, the Dagster assets
    and the generated dvc.yaml."""


@stages_group.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print every stage's declaration as JSON.")
def stages_list(as_json: bool) -> None:
    """One line per stage, in `omne run`'s order: name, upstream stages, output folder, command."""
    from pipelines.stages import STAGES

    if as_json:
        click.echo(json.dumps([s.model_dump(mode="json") for s in STAGES], indent=2))
        return
    for stage in STAGES:
        where = " (per domain)" if stage.per_domain else ""
        extra = "" if stage.in_run else f" [not in `omne run`; {stage.dvc_file}: {stage.dvc_stage}]"
        click.echo(f"{stage.name}{where} <- {', '.join(stage.upstream) or '-'}: artifacts/{stage.output}, "
                   f"`{stage.cmd}`{extra}")


@stages_group.command("dvc-yaml")
@click.option("--check", is_flag=True,
              help="Write nothing; exit 1 when dvc.yaml or sweeps/dvc.yaml differs from what the registry generates.")
@click.option("--root", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Project folder that holds dvc.yaml (default: the folder of the nearest params.yaml upwards).")
@click.pass_context
def stages_dvc_yaml(ctx: click.Context, check: bool, root: Path | None) -> None:
    """Generate dvc.yaml (and sweeps/dvc.yaml) from the stage registry, pipelines/stages.py.

    The DVC files are not edited by hand: change a stage's deps, params, outs or command in the registry, then
    run this command. With --check it writes nothing and exits 1 when a file differs (what the tests check).
    """
    from pipelines.stages import write_dvc_yaml

    root = root or _params(ctx).root
    changed = write_dvc_yaml(root, check=check)
    if check:
        if changed:
            click.secho(f"out of date: {', '.join(changed)} (run `omne stages dvc-yaml`)", fg="red", err=True)
            sys.exit(1)
        click.echo("dvc.yaml files match the stage registry")
        return
    click.echo(f"wrote {', '.join(changed)}" if changed else "dvc.yaml files already match the stage registry")


@cli.command("lineage")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the audit as JSON (every artifact of the chain, flat).")
@click.option("--root", type=click.Path(file_okay=False, exists=True, path_type=Path),
              help="Folder that recorded input paths are relative to (default: the nearest params.yaml upwards).")
def lineage_command(path: Path, as_json: bool, root: Path | None) -> None:
    """Trace an artifact (a model, report or dataset; a file or its folder) back to the KG sources: hashes,
    params, code version, creation time. Exits 1 when anything in the chain is stale (an input changed since)."""
    from rich.console import Console

    from pipelines.errors import LineageError
    from pipelines.lineage import audit_lineage, lineage_tree

    try:
        report = audit_lineage(path, root)
    except LineageError as exc:
        raise click.BadParameter(str(exc), param_hint="PATH") from None
    if as_json:
        click.echo(report.model_dump_json(indent=2))
    else:
        Console(highlight=False).print(lineage_tree(report))
        if report.stale:
            click.secho(f"stale: {', '.join(report.stale_artifacts)}", fg="red", err=True)
    if report.stale:
        sys.exit(1)


def main() -> None:
    cli(prog_name="omne")


if __name__ == "__main__":
    main()
