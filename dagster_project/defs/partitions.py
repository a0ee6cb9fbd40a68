"""One partition per domain of the registry (kg_assets/domains.yaml), read when the code loads.

Reloading the code location (UI: "Reload definitions") picks up domains added with `omne kg import`.
"""

from pathlib import Path

import dagster as dg

from pipelines.config import find_params_file, load_params
from pipelines.domains import load_registry


def registry_domains() -> list[str]:
    params = load_params(find_params_file(Path(__file__).resolve().parents[2]))
    return load_registry(params.registry_path).names


domain_partitions = dg.StaticPartitionsDefinition(registry_domains())
