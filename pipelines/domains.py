"""The domain registry (kg_assets/domains.yaml): which knowledge graphs exist and where their sources are.

A domain's name is also the agent tools' ``graph_type`` and a folder name under artifacts/, so it
must be a slug: anything else (``../x``, spaces, capitals) is refused before it reaches a path.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from pipelines.atomic import atomic_write_text
from pipelines.crashsafe import LockBusyError, file_lock
from pipelines.errors import RegistryError

SLUG_PATTERN = re.compile(r"^[a-z0-9_]+$")
MAX_NAME_LENGTH = 64  # a folder name, a graph_type in every prompt and tool call: longer is a mistake
REGISTRY_LOCK_TIMEOUT_S = 60.0
STALE_TEMP_S = 60.0  # a registry temp file this old, found under the lock, is a killed writer's
SourceKind = Literal["triples", "lightrag_graphml", "lightrag_workdir", "lightrag_rendering", "text"]
ExtractFormat = Literal["lightrag", "triples"]
# the kinds whose graphs an extractor built from text (LightRAG's or omne's): generic types, relations carried by
# sentences; sft_data.text_graph_share sets their share of the SFT conversations
TEXT_BUILT_KINDS: frozenset[str] = frozenset({"lightrag_graphml", "lightrag_workdir", "lightrag_rendering", "text"})
TEXT_SUFFIXES = (".txt", ".md")  # what a `text` source folder contributes (other files are ignored)
TEXT_ONLY_OPTIONS = ("extract_format", "chunk_tokens", "chunk_overlap")


def check_domain_name(name: str) -> str:
    """Return ``name`` if it is a slug ``[a-z0-9_]+``; raise a clear error otherwise."""
    if not isinstance(name, str) or not SLUG_PATTERN.fullmatch(name):
        raise RegistryError(
            f"invalid domain name {name!r}: use lower-case letters, digits and '_' only "
            "(it becomes a folder name and the tools' graph_type)")
    if len(name) > MAX_NAME_LENGTH:
        raise RegistryError(f"invalid domain name '{name[:20]}...': {len(name)} characters, at most "
                            f"{MAX_NAME_LENGTH} (it becomes a folder name and the tools' graph_type)")
    return name


def select_domains(names: Sequence[str], include: Sequence[str] | None = None, exclude: Sequence[str] | None = None,
                   *, what: str = "domains") -> list[str]:
    """The names a stage's domain selection keeps, in ``names``' (the registry's) order: ``include`` (None: every
    one) without ``exclude``. Every stage applies its selection with this one function (docs/evaluation.md,
    "Domain filters"), so that a misspelt name is an error everywhere instead of an empty stage somewhere.

    ``what`` is the params key of the selection (``eval``, ``rl.stage1``), named in the errors."""
    include, exclude = list(include or []), list(exclude or [])
    unknown = [n for n in [*include, *exclude] if n not in names]
    if unknown:
        raise RegistryError(f"{what}.domains/exclude_domains: unknown domain(s) {', '.join(map(repr, unknown))}; "
                            f"registered domains: {', '.join(names) or '(none)'}")
    both = sorted(set(include) & set(exclude))
    if both:
        raise RegistryError(f"{what}: {', '.join(both)} both in domains and in exclude_domains")
    kept = [n for n in names if (not include or n in include) and n not in exclude]
    if not kept:
        raise RegistryError(f"{what}.domains/exclude_domains select no domain (domains: {include or 'all'}, "
                            f"exclude_domains: {exclude}; registered: {', '.join(names) or '(none)'})")
    return kept


class SourceSpec(BaseModel):
    """Where a domain's KG comes from; paths are relative to the project root.

    ``lightrag_rendering`` sources name the folder of a triples domain (triples.jsonl, entities.jsonl,
    phrases.yaml) and give the graph LightRAG would have written for its facts (pipelines.kg.lightrag_render).
    ``text`` sources (a .txt/.md file or a folder of them) are turned into a KG by an LLM
    (pipelines.kg.extract); their options are refused on the other kinds, and left out of their
    dumps, so that existing registries and manifests stay as they were.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: SourceKind
    path: str
    entities: str | None = None  # optional entity table for triple sources (name, type, description)
    directed: bool | None = None  # default: triples directed, LightRAG graphs and text undirected
    extract_format: ExtractFormat = "lightrag"  # text: LightRAG entity/relation records, or EoG `head | rel | tail`
    chunk_tokens: int = Field(1200, ge=1, strict=True)  # text: chunk size in tokens (LightRAG's default)
    chunk_overlap: int = Field(100, ge=0, strict=True)  # text: tokens shared by consecutive chunks

    @model_validator(mode="after")
    def _options_fit_kind(self) -> SourceSpec:
        if self.kind == "lightrag_rendering" and self.entities is not None:
            raise ValueError("entities: not used by source kind 'lightrag_rendering' (its folder's entities.jsonl "
                             "is read)")
        if self.kind != "text":
            misplaced = [name for name in TEXT_ONLY_OPTIONS if name in self.model_fields_set]
            if misplaced:
                raise ValueError(f"{', '.join(misplaced)}: only for source kind 'text', not {self.kind!r}")
            return self
        if self.entities is not None:
            raise ValueError("entities: not used by source kind 'text' (entities come from the extraction)")
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError(f"chunk_overlap ({self.chunk_overlap}) must be smaller than "
                             f"chunk_tokens ({self.chunk_tokens})")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict:
        data = handler(self)
        if self.kind != "text":
            for name in TEXT_ONLY_OPTIONS:
                data.pop(name, None)
        return data

    @property
    def is_directed(self) -> bool:
        return self.directed if self.directed is not None else self.kind == "triples"

    def files(self, root: Path) -> list[Path]:
        """The source files whose content defines the KG (what DVC and the KG sensor watch).

        A ``text`` folder contributes its .txt/.md files only (a stray README.pdf is not text).
        """
        paths = [root / self.path] + ([root / self.entities] if self.entities else [])
        found: list[Path] = []
        for path in paths:
            if path.is_dir():
                found.extend(sorted(p for p in path.rglob("*") if p.is_file() and (
                    self.kind != "text" or p.suffix.lower() in TEXT_SUFFIXES)))
            else:
                found.append(path)
        return found


class Domain(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    source: SourceSpec
    # provenance shown by `omne domains` and `omne run` (the embedded domains set them; SOURCE.md has the rest)
    field: str | None = None  # the field of knowledge, e.g. "chemistry", "air transport"
    origin: str | None = None  # where the data comes from, e.g. "mendeleev 1.3.0 (NUBASE2020, IUPAC)"
    licence: str | None = None  # the data's licence(s), e.g. "MIT; CC BY 4.0"

    @field_validator("name")
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_domain_name(value)


class Registry(BaseModel):
    """The domains, in file order. On disk a mapping name -> {description, source}, which keeps names
    unique by construction and gives DVC's foreach readable stage names (knowledge_graph@chemistry)."""

    model_config = ConfigDict(extra="forbid")
    domains: list[Domain] = []

    @model_validator(mode="before")
    @classmethod
    def _from_mapping(cls, raw: object) -> object:
        if isinstance(raw, dict) and isinstance(raw.get("domains"), dict):
            entries = raw["domains"]
            bad = [name for name, body in entries.items() if not isinstance(body, dict)]
            if bad:
                raise ValueError(f"domains.{bad[0]}: expected a mapping with 'source' (and 'description')")
            return {**raw, "domains": [{"name": name, **body} for name, body in entries.items()]}
        return raw

    @property
    def names(self) -> list[str]:
        return [d.name for d in self.domains]

    @property
    def text_built(self) -> frozenset[str]:
        """The domains whose graphs were built from text (``TEXT_BUILT_KINDS``)."""
        return frozenset(d.name for d in self.domains if d.source.kind in TEXT_BUILT_KINDS)

    def get(self, name: str) -> Domain:
        check_domain_name(name)
        for domain in self.domains:
            if domain.name == name:
                return domain
        raise RegistryError(f"unknown domain {name!r}; known domains: {', '.join(self.names) or '(none)'}")

    def to_yaml_data(self) -> dict:
        return {"domains": {d.name: d.model_dump(mode="json", exclude={"name"}, exclude_none=True)
                            for d in self.domains}}


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice (plain YAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_registry(path: Path) -> Registry:
    if not path.is_file():
        raise RegistryError(f"{path}: domain registry not found")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader) or {}
        return Registry.model_validate(raw)
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: not valid YAML: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise RegistryError(f"{path}: invalid registry: {problems}") from None


def save_registry(path: Path, registry: Registry) -> None:
    header = "# The domain registry: one entry per knowledge graph. `omne kg import` adds entries.\n"
    body = yaml.safe_dump(registry.to_yaml_data(), sort_keys=False, allow_unicode=True, width=100)
    atomic_write_text(path, header + body)


@contextmanager
def registry_lock(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of the registry file across processes.

    The lock is on the registry's folder, not on the file: the file itself is replaced by every
    write (atomic rename), so a lock on it would guard an inode nobody reads any more.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with file_lock(path.parent, timeout_s=REGISTRY_LOCK_TIMEOUT_S, what=f"{path} (domain registry)"):
            for stale in path.parent.glob(f".{path.name}.*.tmp"):  # a writer killed mid-write (atomic_write_text)
                try:
                    if time.time() - stale.stat().st_mtime > STALE_TEMP_S:
                        stale.unlink(missing_ok=True)
                except FileNotFoundError:  # an unlocked writer's, renamed meanwhile
                    pass
            yield
    except LockBusyError as exc:
        raise RegistryError(str(exc)) from None


def add_domain(path: Path, domain: Domain, *, replace: bool = False) -> Registry:
    """Add (or with ``replace`` update) a domain in the registry file, under the registry lock
    (concurrent imports each land instead of overwriting one another's entry)."""
    with registry_lock(path):
        registry = load_registry(path) if path.exists() else Registry()
        if domain.name in registry.names and not replace:
            raise RegistryError(f"{path}: domain {domain.name!r} already exists (use --replace to overwrite it)")
        if domain.name in registry.names:  # replace in place, keeping the file's order
            updated = Registry(domains=[domain if d.name == domain.name else d for d in registry.domains])
        else:
            updated = Registry(domains=[*registry.domains, domain])
        save_registry(path, updated)
    return updated
