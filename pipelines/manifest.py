"""Manifests: what every artifact folder records about how it was made (hashes, params, code, time).

Every build step (CLI, Dagster asset, DVC stage) goes through one :class:`ArtifactBuild`: it compares the
input fingerprint before building, so that work already done is reused, and writes the artifact and its
manifest atomically; the lineage audit (``pipelines.lineage``) walks them back to the KG sources; Dagster
shows them as metadata.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines import __version__
from pipelines.atomic import atomic_directory, atomic_write_text
from pipelines.crashsafe import owned_folder
from pipelines.errors import ArtifactMissingError

MANIFEST_NAME = "manifest.json"


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str
    domain: str | None = None
    files: dict[str, str] = Field(default_factory=dict, description="data file name -> sha256 of its content")
    inputs: dict[str, str] = Field(default_factory=dict, description="input path -> sha256")
    params: dict[str, Any] = Field(default_factory=dict)
    code_version: str
    rows: dict[str, int] = Field(default_factory=dict)
    created_at: datetime
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def input_fingerprint(self) -> str:
        """What decides whether a rebuild is needed: the inputs and the params, not the code or time."""
        return fingerprint(self.inputs, self.params)


def fingerprint(inputs: dict[str, str], params: dict[str, Any]) -> str:
    blob = json.dumps({"inputs": inputs, "params": params}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_files(paths: list[Path], root: Path) -> dict[str, str]:
    """Hashes keyed by path relative to ``root`` (stable across clones)."""
    return {relative_path(path, root): sha256_file(path) for path in paths}


def relative_path(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` when inside it (stable across clones), else absolute."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


@lru_cache(maxsize=1)
def code_version() -> str:
    """The git commit of the checkout (with '-dirty' when modified), else the package version."""
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                                text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return f"git:{commit}{'-dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return f"omne=={__version__}"


def new_manifest(kind: str, **fields: Any) -> Manifest:
    return Manifest(kind=kind, code_version=code_version(), created_at=datetime.now(UTC), **fields)


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    path = folder / MANIFEST_NAME
    atomic_write_text(path, manifest.model_dump_json(indent=2) + "\n")
    return path


def read_manifest(folder: Path) -> Manifest | None:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        return None
    return Manifest.model_validate_json(path.read_text(encoding="utf-8"))


def manifest_inputs(folder: Path, root: Path, what: str, only: set[str] | None = None) -> dict[str, str]:
    """The files of a built artifact's manifest as a consumer's inputs (path -> sha256), all or ``only`` those
    named; ``what`` names the artifact and how to build it in the error when it is not built."""
    manifest = read_manifest(folder)
    if manifest is None:
        raise ArtifactMissingError(f"{folder}: not built yet: {what}")
    return {relative_path(folder / name, root): sha for name, sha in manifest.files.items()
            if only is None or name in only}


def model_identity(folder: Path, name: str | None = None) -> str:
    """``<name>-<hash>``: the model part of cache keys, which changes when the weights change.

    Small files are hashed by content; weight files by the manifest's sha256 when it lists them
    (else by size), so that identity costs no pass over hundreds of MiB. manifest.json itself is
    left out: re-converting the same weights must not invalidate the cache.
    """
    manifest = read_manifest(folder)
    listed = manifest.files if manifest else {}
    digest = hashlib.sha256()
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"):
        rel = file.relative_to(folder).as_posix()
        size = file.stat().st_size
        if size < 1 << 20:
            digest.update(f"{rel}:".encode() + file.read_bytes())
        else:
            digest.update(f"{rel}:{listed.get(rel, size)}".encode())
    return f"{name or folder.name}-{digest.hexdigest()[:12]}"


class BuildResult(BaseModel):
    """What every build step returns: the artifact's folder and manifest, and whether it was reused as it was."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    folder: Path
    manifest: Manifest
    skipped: bool = False  # True: up to date, nothing was built
    domain: str | None = None  # the domain of a per-domain artifact; None for cross-domain ones (dataset, models)


@dataclass
class ArtifactDraft:
    """The temporary folder a build writes into, and what its manifest will say of it."""

    folder: Path
    files: list[Path] | dict[str, str] | None = None  # the data files (hashed), name -> hash, or None: every file
    rows: dict[str, int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)  # what does not decide a rebuild: stats, times, usage

    def record(self, *, files: list[Path] | dict[str, str] | None = None, rows: dict[str, int] | None = None,
               metadata: dict[str, Any] | None = None) -> None:
        """Set what the manifest records (only the fields given)."""
        if files is not None:
            self.files = files
        self.rows.update(rows or {})
        self.metadata.update(metadata or {})

    def hashes(self) -> dict[str, str]:
        if isinstance(self.files, dict):
            return dict(self.files)
        paths = self.files if self.files is not None else sorted(
            p for p in self.folder.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
        return sha256_files(paths, self.folder)


class ArtifactBuild:
    """One build step's artifact: the fingerprint of what shapes it, the reuse of a current one, and the write.

    Every build goes through one, so "up to date" means one thing everywhere (same kind, same fingerprint of
    ``inputs`` and ``params``), and an artifact appears whole with its manifest or not at all::

        build = ArtifactBuild(folder, "seed_subgraphs", inputs, params, domain=domain)
        if manifest := build.reusable(force):
            return build.result(manifest, skipped=True)
        with build.writing() as draft:
            write_the_files(draft.folder)
            draft.record(files=[...], rows={...}, metadata={...})
        return build.result(build.manifest)

    Time figures and other run-to-run noise go to ``metadata``, never ``params``: they would change the fingerprint.
    """

    def __init__(self, folder: Path, kind: str, inputs: Mapping[str, str], params: Mapping[str, Any], *,
                 domain: str | None = None, owned: bool = False) -> None:
        self.folder, self.kind, self.domain, self.owned = folder, kind, domain, owned
        self.inputs, self.params = dict(inputs), dict(params)
        self.fingerprint = fingerprint(self.inputs, self.params)
        self._manifest: Manifest | None = None

    def reusable(self, force: bool = False) -> Manifest | None:
        """The built artifact's manifest when it was made from these inputs and params (None: build it)."""
        if force:
            return None
        manifest = read_manifest(self.folder)
        if manifest is not None and manifest.kind == self.kind and manifest.input_fingerprint == self.fingerprint:
            return manifest
        return None

    @contextmanager
    def writing(self) -> Iterator[ArtifactDraft]:
        """Yield a draft whose empty temporary folder replaces ``folder`` when the block ends, with its manifest.

        On an error the temporary folder is removed and the previous artifact stays whole. ``owned``: the
        temporary folder names this process while the block runs (a killed build's leftover is recognised).
        """
        with atomic_directory(self.folder) as tmp:
            draft = ArtifactDraft(tmp)
            with owned_folder(tmp) if self.owned else nullcontext(tmp):
                yield draft
            self._manifest = new_manifest(self.kind, domain=self.domain, files=draft.hashes(), inputs=self.inputs,
                                          params=self.params, rows=draft.rows, metadata=draft.metadata)
            write_manifest(tmp, self._manifest)

    @property
    def manifest(self) -> Manifest:
        """The manifest ``writing`` wrote."""
        if self._manifest is None:
            raise RuntimeError(f"{self.folder}: not written yet (use ArtifactBuild.writing)")
        return self._manifest

    def result(self, manifest: Manifest | None = None, *, skipped: bool = False) -> BuildResult:
        """The step's :class:`BuildResult` (default: the manifest just written)."""
        return BuildResult(folder=self.folder, manifest=manifest or self.manifest, skipped=skipped,
                           domain=self.domain)
