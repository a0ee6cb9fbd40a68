"""The KG of an external KGQA set: the triple file built into a domain of its own workspace, ``artifacts/kgqa/``
(its own ``domains.yaml``, KGs and indexes), with the ordinary import/build steps, skipped when unchanged.

Apart from the file formats (:mod:`pipelines.eval.kgqa_formats`) and the scoped evaluation
(:mod:`pipelines.eval.kgqa`): the one part that writes artifacts, and what keeps an evaluation KG out of the
training pipeline (``omne run``, DVC and Dagster read only ``kg_assets/domains.yaml``).
"""

from __future__ import annotations

import logging
import re
import unicodedata
from pathlib import Path

from pipelines.config import Params
from pipelines.domains import Domain, Registry, SourceSpec, add_domain, check_domain_name, load_registry
from pipelines.errors import ArtifactMissingError, KGSourceError, RegistryError
from pipelines.kg.build import build_entity_index, build_knowledge_graph
from pipelines.kg.embed import Encoder
from pipelines.layout import embeddings_cache_dir, kg_dir, kgqa_workspace
from pipelines.manifest import read_manifest, relative_path

log = logging.getLogger(__name__)


def slug(text: str) -> str:
    """A domain name from a file name: ASCII, lower case, runs of anything else as one '_'."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[^a-z0-9]+", "_", ascii_text.lower()).strip("_") or "kgqa"


def kgqa_params(params: Params) -> Params:
    """``params`` pointed at the KGQA workspace: artifacts/kgqa/ with its own domains.yaml, kg/ and index/."""
    base = kgqa_workspace(Path(params.paths.artifacts))
    paths = params.paths.model_copy(update={"artifacts": base.as_posix(),
                                            "registry": (base / "domains.yaml").as_posix()})
    return params.model_copy(update={"paths": paths})


def build_kgqa_domain(params: Params, triples: str | Path | None, name: str | None = None) -> tuple[Params, str]:
    """Build (or reuse, when unchanged) the KG and entity index of a KGQA set's triple file.

    The domain is ``name`` or a slug of the triple file's name, registered in the KGQA workspace
    (:func:`kgqa_params`) with the same import/build steps as ``omne kg import``. Without ``triples``,
    ``name`` must be a domain built before: one of the workspace, or a built domain of the main
    registry. Returns the params to load the domain with, and its name.
    """

    workspace = kgqa_params(params)
    if triples is None:
        if name is None:
            raise KGSourceError("a KGQA evaluation needs the triple file of its KG (--triples), or a built domain "
                                "(--kgqa-domain)")
        check_domain_name(name)
        for candidate in (workspace, params):
            if candidate.registry_path.is_file() and name in load_registry(candidate.registry_path).names:
                if read_manifest(kg_dir(candidate.artifacts_dir, name)) is None:
                    raise ArtifactMissingError(f"domain {name!r} is registered but its KG is not built "
                                               "(give --triples, or run `omne kg build`)")
                return candidate, name
        raise RegistryError(f"unknown KGQA domain {name!r}: give the triple file of its KG (--triples)")
    path = Path(triples)
    if not path.is_file():
        raise KGSourceError(f"{path}: triples file not found")
    name = check_domain_name(name or slug(path.stem))
    domain = Domain(name=name, description=f"External KGQA knowledge graph ({path.name}); evaluation only.",
                    source=SourceSpec(kind="triples", path=relative_path(path, params.root)))
    registry = load_registry(workspace.registry_path) if workspace.registry_path.is_file() else Registry()
    if domain not in registry.domains:
        if name in registry.names:
            log.warning("KGQA domain %s now comes from %s (was %s)", name, domain.source.path,
                        registry.get(name).source.path)
        workspace.registry_path.parent.mkdir(parents=True, exist_ok=True)
        add_domain(workspace.registry_path, domain, replace=True)
    result = build_knowledge_graph(domain, workspace)
    encoder = Encoder(params.index, cache_dir=embeddings_cache_dir(params.artifacts_dir))  # the shared cache
    build_entity_index(name, workspace, encoder=encoder)
    log.info("KGQA domain %s: %s (%d entities)", name, "reused" if result.skipped else "built",
             result.manifest.rows["entities"])
    return workspace, name
