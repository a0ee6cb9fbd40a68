"""Manifest -> Dagster metadata, so that run history shows each artifact's manifest.json: the sha256 of
its files and of its inputs, the params that shaped it, the code version, row counts and created_at.

Every asset returns `artifact_result(...)` (or `manifest_metadata(...)` in its MaterializeResult), which
also sets the materialization's data version to the hash of the artifact's files, so that Dagster's
lineage view knows when a rebuild produced the same data.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Protocol

import dagster as dg

from pipelines.manifest import Manifest


class Artifact(Protocol):
    """What the library's build functions return (BuildResult; EvalResult for reports)."""

    folder: Path
    manifest: Manifest
    skipped: bool


def manifest_metadata(result: Artifact | None = None, *, folder: Path | None = None,
                      manifest: Manifest | None = None, reused: bool = False) -> dict[str, Any]:
    """The manifest as metadata: flat keys for the run's table, plus the whole manifest as JSON."""
    if result is not None:
        folder, manifest, reused = result.folder, result.manifest, result.skipped
    if manifest is None:
        return {"path": dg.MetadataValue.path(str(folder))} if folder is not None else {}
    metadata: dict[str, Any] = {
        "path": dg.MetadataValue.path(str(folder)),
        "reused_existing": reused,
        "code_version": manifest.code_version,
        "created_at": manifest.created_at.isoformat(),
        "input_fingerprint": manifest.input_fingerprint[:16],
        "inputs": dg.MetadataValue.json(manifest.inputs),
        "params": dg.MetadataValue.json(manifest.params),
        "manifest": dg.MetadataValue.json(manifest.model_dump(mode="json")),
    }
    metadata.update({f"rows_{name}": count for name, count in manifest.rows.items()})
    metadata.update({f"sha256_{name}": digest[:16] for name, digest in manifest.files.items()})
    return metadata


def data_version(manifest: Manifest | None) -> dg.DataVersion | None:
    """The artifact's content hash (over its files' sha256) as Dagster data version; for an artifact whose
    manifest lists no files (an RL policy folder), its inputs, params and creation time, which change exactly
    when it is rebuilt."""
    if manifest is None:
        return None
    identity = manifest.files or {"inputs": manifest.input_fingerprint, "created_at": manifest.created_at.isoformat()}
    blob = json.dumps(identity, sort_keys=True)
    return dg.DataVersion(hashlib.sha256(blob.encode()).hexdigest()[:24])


def artifact_result(result: Artifact, metadata: dict[str, Any] | None = None,
                    check_results: list[dg.AssetCheckResult] | None = None) -> dg.MaterializeResult:
    """MaterializeResult of a built artifact: its manifest metadata, extra metadata, checks, data version."""
    return dg.MaterializeResult(metadata={**manifest_metadata(result), **(metadata or {})},
                                check_results=check_results or [], data_version=data_version(result.manifest))
