"""The KG build of a domain as every entry point runs it (`omne kg build`, `omne run`, Dagster, `dvc repro`).

The build owns its domain's lock, the clean-up of killed runs' leftovers before it, and the quality gate after
it, so that no entry point can skip them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from pipelines.config import Params
from pipelines.domains import Domain, load_registry
from pipelines.kg.build import build_knowledge_graph
from pipelines.kg.journal import Leftovers, domain_lock
from pipelines.kg.leftovers import clean_leftovers
from pipelines.kg.quality import Quality, kg_quality, quality_error
from pipelines.manifest import BuildResult

if TYPE_CHECKING:
    from pipelines.llm.base import ChatClient

log = logging.getLogger(__name__)


class DomainBuild(BaseModel):
    """One domain's line in `omne kg build`: built, up to date, or what is wrong with it."""

    domain: str
    ok: bool
    skipped: bool = False
    rows: dict[str, int] = {}
    folder: Path | None = None
    warnings: list[str] = []
    error: str | None = None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or exc.__class__.__name__
    return text if isinstance(exc, (ValueError, LookupError, OSError, RuntimeError)) else \
        f"{exc.__class__.__name__}: {text}"


def gated_build(domain: Domain, params: Params, *, force: bool = False, strict: bool = False,
                client: ChatClient | None = None) -> tuple[BuildResult, Quality]:
    """Under the domain's lock (one import or build of it at a time): the KG build, then the KG checks on what it
    wrote."""
    with domain_lock(params, domain.name):
        result = build_knowledge_graph(domain, params, force=force, client=client)
        return result, kg_quality(params, domain.name, strict=strict)


def build_domain_kg(domain: Domain, params: Params, *, force: bool = False, strict: bool = False,
                    client: ChatClient | None = None) -> BuildResult:
    """The domain's KG as `omne run`, Dagster and the stage registry build it: the domain's killed runs cleaned up
    first, the build under its lock, a failed blocking check (any failed check under ``strict``) a ``QualityError``,
    the other failed checks logged as warnings."""
    for line in clean_leftovers(params, [domain.name]).lines():
        log.info(line)
    registry = load_registry(params.registry_path)  # a replayed journal may have put the entry back as it was
    domain = registry.get(domain.name) if domain.name in registry.names else domain
    result, quality = gated_build(domain, params, force=force, strict=strict, client=client)
    for warning in quality.warnings:
        log.warning("domain %r: %s", domain.name, warning)
    if quality.errors:
        raise quality_error(domain.name, quality, strict)
    return result


def build_domains(params: Params, names: list[str] | None = None, *, force: bool = False, strict: bool = False,
                  client: ChatClient | None = None) -> Iterator[DomainBuild | Leftovers]:
    """Build each domain's KG in turn (as ``build_domain_kg``); a broken domain is reported and the next one built
    regardless.

    Yields the leftovers cleaned first (killed imports and builds), then one ``DomainBuild`` per domain.
    """
    registry = load_registry(params.registry_path)
    domains = [registry.get(name) for name in names] if names else registry.domains
    yield clean_leftovers(params, [d.name for d in domains])  # and killed imports of any name
    registry = load_registry(params.registry_path)  # a replayed journal may have put an entry back
    for domain in domains:
        domain = registry.get(domain.name) if domain.name in registry.names else domain
        try:
            result, quality = gated_build(domain, params, force=force, strict=strict, client=client)
        except Exception as exc:  # noqa: BLE001 - one broken domain must not hide the others
            log.debug("building %s failed", domain.name, exc_info=True)
            yield DomainBuild(domain=domain.name, ok=False, error=_one_line(exc))
            continue
        error = str(quality_error(domain.name, quality, strict)) if quality.errors else None
        yield DomainBuild(domain=domain.name, ok=error is None, skipped=result.skipped,
                          rows=dict(result.manifest.rows), folder=result.folder, warnings=quality.warnings,
                          error=error)
