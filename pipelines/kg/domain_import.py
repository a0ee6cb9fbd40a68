"""`omne kg import`: importing a user's graph or text as a domain, as one transaction.

An import validates the user's file, copies it into a staging folder, builds the KG and its index into
staging folders too, then swaps them all into place (``kg_assets/<name>/``, ``artifacts/{kg,index}/<name>/``)
and registers the domain last: until that commit readers see the previous domain whole, and the registry
never names a domain whose files or artifacts are half there. Any failure, Ctrl-C or SIGTERM rolls
everything back; a SIGKILL leaves a journal (``kg_assets/.<name>.import.json``) that the next import or
build replays; one killed during the swap also leaves a marker by which the next read of that KG replays it
(pipelines.kg.journal). Every step on a domain holds that domain's lock (``artifacts/.locks/<name>.lock``), so
a leftover found under the lock belongs to a dead process and can be removed without guessing
(pipelines.kg.leftovers). The staged KG passes the quality gate (pipelines.kg.quality) before the swap.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from pipelines.atomic import atomic_write_text
from pipelines.config import Params
from pipelines.crashsafe import pause_point
from pipelines.domains import Domain, Registry, SourceSpec, add_domain, check_domain_name
from pipelines.errors import KGSourceError, RegistryError
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.extract import read_chunks
from pipelines.kg.importers import LIGHTRAG_GRAPHML, import_source
from pipelines.kg.journal import (
    ASSETS_DIR,
    Journal,
    Leftovers,
    Places,
    _committed,
    _finish,
    _Move,
    _read_registry,
    _rel,
    _remove,
    _undo,
    assets_dir,
    domain_lock,
    journal_path,
    marker_path,
)
from pipelines.kg.leftovers import clean_leftovers
from pipelines.kg.quality import index_quality, kg_quality, quality_error
from pipelines.layout import index_dir, kg_dir

if TYPE_CHECKING:
    from pipelines.kg.embed import Encoder
    from pipelines.llm.base import ChatClient

log = logging.getLogger(__name__)

RESERVED_NAMES = frozenset({"exporters"})  # kg_assets/exporters/ holds the scripts that write the shipped domains
FORMATS: dict[str, str] = {"triples": "triples", "graphml": "lightrag_graphml", "lightrag-dir": "lightrag_workdir",
                           "text": "text"}
ImportFormat = Literal["triples", "graphml", "lightrag-dir", "text"]
COPY_CHUNK = 1 << 20


class ImportRequest(BaseModel):
    """What `omne kg import` asks for, validated before anything is read or written."""

    model_config = ConfigDict(frozen=True)
    path: Path
    name: str
    format: ImportFormat | None = None  # default: from the path (see ``source_format``)
    entities: Path | None = None
    description: str = ""
    replace: bool = False
    build: bool = True
    strict: bool = False

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return check_domain_name(value)


class ImportResult(BaseModel):
    domain: Domain
    rows: dict[str, int] = {}  # of the built KG (empty without a build)
    vectors: int | None = None
    warnings: list[str] = []
    leftovers: Leftovers = Leftovers()


def source_format(path: Path, fmt: str | None) -> str:
    if fmt:
        return fmt
    if path.is_dir():
        return "lightrag-dir"
    suffix = path.suffix.lower()
    return "graphml" if suffix == ".graphml" else "text" if suffix in (".txt", ".md") else "triples"


def validate_source(request: ImportRequest) -> tuple[str, list[Path], list[str]]:
    """Read the user's files with the importer of their kind (errors name the file and record).

    Returns the source kind, the files to copy (the source first, then the entity table) and the importer's
    notes (over-long descriptions, types or labels it truncated: warnings).
    """

    path, fmt = request.path, source_format(request.path, request.format)
    if not path.exists():
        raise KGSourceError(f"{path}: not found")
    if fmt == "lightrag-dir":  # the working directory's graph is all the KG needs
        path, fmt = path / LIGHTRAG_GRAPHML, "graphml"
    if request.entities and fmt != "triples":
        raise KGSourceError(f"{request.entities}: --entities only applies to --format triples")
    if fmt == "text":  # extraction needs the LLM: check the files are readable text, extract when building

        read_chunks(SourceSpec(kind="text", path=str(path.resolve())), Path("/"))
        notes: list[str] = []
    else:
        raw = import_source(SourceSpec(kind=FORMATS[fmt], path=str(path.resolve()),
                                       entities=str(request.entities.resolve()) if request.entities else None),
                            Path("/"))
        notes = list(raw.notes)
    return FORMATS[fmt], [path, *([request.entities] if request.entities else [])], notes


def check_name_free(params: Params, name: str, registry: Registry, *, replace: bool) -> None:
    """Refuse a name whose folder in kg_assets/ is not that domain's (code, another domain's data)."""
    target = assets_dir(params) / name
    if name in RESERVED_NAMES:
        raise RegistryError(f"domain name {name!r} is reserved: {_rel(params, target)}/ holds omne's own files; "
                            "choose another name")
    registered = name in registry.names
    if registered and not replace:
        raise RegistryError(f"domain {name!r} already exists (use --replace to overwrite it)")
    if target.exists() or target.is_symlink():
        owns = registered and (params.root / registry.get(name).source.path).resolve().is_relative_to(
            target.resolve())
        if not owns:
            raise RegistryError(f"{_rel(params, target)} already exists and is not the folder of a registered "
                                f"domain {name!r}: choose another name, or move it away first")


def _copy_file(src: str | Path, dst: str | Path) -> None:
    """Copy in chunks and fsync: the staged copy is complete on disk before it is renamed into place."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        first = True
        while chunk := fin.read(COPY_CHUNK):
            if first:  # the crash tests kill us here, with half of the file written
                fout.write(chunk[:len(chunk) // 2])
                fout.flush()
                pause_point("copying")
                chunk, first = chunk[len(chunk) // 2:], False
            fout.write(chunk)
        fout.flush()
        os.fsync(fout.fileno())
    shutil.copystat(src, dst)


@contextmanager
def _signals_roll_back() -> Iterator[None]:
    """SIGTERM (and SIGHUP) raise like Ctrl-C inside the transaction, so that it rolls back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def import_domain(request: ImportRequest, params: Params, *, client: ChatClient | None = None,
                  encoder: Encoder | None = None) -> ImportResult:
    """Validate, copy, build and register a domain, or leave everything as it was.

    The commit point is the registry entry: until it is written the domain does not exist for any
    other command, and an error, Ctrl-C or SIGTERM undoes the copy and the artifacts (a note on the
    exception says so). A SIGKILL is undone by the next import or build (see ``clean_leftovers``).
    """
    kind, files, notes = validate_source(request)
    name, root = request.name, params.root
    pause_point("validated")
    with domain_lock(params, name):
        leftovers = clean_leftovers(params, [name], held=name)
        registry = _read_registry(params)
        check_name_free(params, name, registry, replace=request.replace)
        target = assets_dir(params) / name
        token = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging = assets_dir(params) / f".{name}.tmp-{token}"  # the project root as the build sees it
        staged_artifacts = params.artifacts_dir / f".{name}.tmp-{token}" if request.build else None
        names = [p.name for p in files]
        if len(names) == 2 and names[0] == names[1]:  # a triples file and an entity table of the same name
            names[1] = f"entities_{names[1]}"
        source = SourceSpec(kind=kind, path=_rel(params, target / names[0]),
                            entities=_rel(params, target / names[1]) if len(names) == 2 else None)
        domain = Domain(name=name, description=request.description, source=source)
        moved = [target] + ([kg_dir(params.artifacts_dir, name), index_dir(params.artifacts_dir, name)]
                            if request.build else [])
        # staged copies, swapped into ``moved`` at the commit: the source under staging/kg_assets/<name>/ (so the
        # build reads it under the same relative path), the artifacts under artifacts/.<name>.tmp-<token>/
        swaps = [staging / ASSETS_DIR / name] + ([kg_dir(staged_artifacts, name), index_dir(staged_artifacts, name)]
                                                 if staged_artifacts is not None else [])
        marker = marker_path(params.artifacts_dir, name)
        journal = Journal(
            name=name, pid=os.getpid(), started=time.time(), staging=_rel(params, staging),
            moves=[_Move(target=_rel(params, p), backup=_rel(params, p.parent / f".{name}.bak-{token}"),
                         existed=p.exists()) for p in moved],
            old_entry=registry.get(name).model_dump(mode="json") if name in registry.names else None,
            new_entry=domain.model_dump(mode="json"),
            staged=[_rel(params, staged_artifacts)] if staged_artifacts is not None else [],
            marker=_rel(params, marker))
        result = ImportResult(domain=domain, leftovers=leftovers, warnings=notes)
        try:
            with _signals_roll_back():
                atomic_write_text(journal_path(params, name), journal.model_dump_json(indent=2))
                _stage(files, names, swaps[0], _kept_beside(params, registry, name, target))
                pause_point("copied")
                if staged_artifacts is not None:  # readers still see the previous domain, whole
                    _build(domain, params, request.strict, result, client=client, encoder=encoder,
                           source_root=staging, artifacts=staged_artifacts)
                atomic_write_text(marker, Places(root=root, registry_path=params.registry_path,
                                                 artifacts_dir=params.artifacts_dir).model_dump_json())
                for move in journal.moves:  # the previous content waits beside its place until the commit
                    if move.existed:
                        os.replace(root / move.target, root / move.backup)
                for staged, move in zip(swaps, journal.moves, strict=True):
                    (root / move.target).parent.mkdir(parents=True, exist_ok=True)
                    os.rename(staged, root / move.target)
                for emptied in [staging, *([staged_artifacts] if staged_artifacts is not None else [])]:
                    _remove(emptied)  # only the folders that held the swapped ones are left in them
                pause_point("swapped")
                pause_point("registering")
                add_domain(params.registry_path, domain, replace=request.replace)
        except BaseException as exc:
            if _committed(params, journal):  # interrupted right after the registry write: that counts
                _finish(params, journal)
            else:
                _undo(params, journal)
                if isinstance(exc, Exception):
                    exc.add_note(f"rolled back: the registry, {_rel(params, target)} and the artifacts of {name!r} "
                                 "are as before")
            journal_path(params, name).unlink(missing_ok=True)
            raise
        # committed: from here on a kill only leaves backups, which the journal says to delete
        pause_point("registered")
        atomic_write_text(journal_path(params, name), journal.model_copy(update={"committed": True}).model_dump_json())
        _finish(params, journal)
        journal_path(params, name).unlink(missing_ok=True)
    return result


def _stage(files: list[Path], names: list[str], staging: Path, keep: list[Path]) -> None:
    """Copy the new source, and the replaced folder's other files (``keep``), into ``staging``."""
    staging.mkdir(parents=True)
    for path, name in [*zip(files, names, strict=True), *((p, p.name) for p in keep if p.name not in names)]:
        if path.is_dir():  # a text source folder, or a folder the user keeps beside the source
            shutil.copytree(path, staging / name, copy_function=_copy_file)
        else:
            _copy_file(path, staging / name)


def _kept_beside(params: Params, registry: Registry, name: str, target: Path) -> list[Path]:
    """What a replaced domain's folder holds besides its source (SOURCE.md, notes): carried over."""
    if name not in registry.names or not target.is_dir():
        return []
    spec = registry.get(name).source
    sources = {(params.root / p).resolve() for p in [spec.path, *([spec.entities] if spec.entities else [])]}
    return [p for p in sorted(target.iterdir())
            if not any(p.resolve() == s or p.resolve() in s.parents or s in p.resolve().parents for s in sources)]


def _build(domain: Domain, params: Params, strict: bool, result: ImportResult, *, client: ChatClient | None,
           encoder: Encoder | None, source_root: Path, artifacts: Path) -> None:
    """Build the KG and its index from the staged source (``source_root``: the project root as the build sees
    it) into the staged ``artifacts`` folder, with manifests that name the places they are swapped into."""

    staged_kg = kg_dir(artifacts, domain.name)
    built = build_knowledge_graph(domain, params, force=True, client=client, source_root=source_root,
                                  folder=staged_kg)
    result.rows = dict(built.manifest.rows)
    quality = kg_quality(params, domain.name, strict=strict, folder=staged_kg)
    if quality.errors:
        raise quality_error(domain.name, quality, strict)
    index = build_entity_index(domain.name, params, force=True, encoder=encoder, source=staged_kg,
                               folder=index_dir(artifacts, domain.name))
    result.vectors = index.manifest.rows.get("entities")
    indexed = index_quality(params, index.manifest.metadata, strict=strict)
    if indexed.errors:
        raise quality_error(domain.name, indexed, strict)
    result.warnings = [*result.warnings, *quality.warnings, *indexed.warnings]
    pause_point("built")
