"""Manifests: what every artifact folder records about how it was made (hashes, params, code, time).

The lineage audit walks these files back to the KG sources; Dagster shows them as metadata; the
build functions compare a manifest's input fingerprint to skip work that is already done.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from pipelines import __version__
from pipelines.atomic import atomic_write_text

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
