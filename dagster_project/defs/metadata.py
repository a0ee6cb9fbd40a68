"""Manifest -> Dagster metadata, so that run history shows hashes, params and code version."""

from typing import Any

import dagster as dg

from pipelines.kg.build import BuildResult


def manifest_metadata(result: BuildResult) -> dict[str, Any]:
    manifest = result.manifest
    metadata: dict[str, Any] = {
        "path": dg.MetadataValue.path(str(result.folder)),
        "reused_existing": result.skipped,
        "code_version": manifest.code_version,
        "created_at": manifest.created_at.isoformat(),
        "manifest": dg.MetadataValue.json(manifest.model_dump(mode="json")),
    }
    metadata.update({f"rows_{name}": count for name, count in manifest.rows.items()})
    metadata.update({f"sha256_{name}": digest[:16] for name, digest in manifest.files.items()})
    return metadata
