"""Cleaning killed runs' leftovers: replayed import journals and dead writers' temporary folders.

Every step on a domain holds that domain's lock (``artifacts/.locks/<name>.lock``), so a leftover found under the
lock belongs to a dead process and can be removed without guessing. Every KG build and import cleans its domain
first (pipelines.kg.domain_build, pipelines.kg.domain_import).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from pipelines.config import Params
from pipelines.crashsafe import read_owner
from pipelines.domains import check_domain_name
from pipelines.errors import RegistryError
from pipelines.kg.journal import (
    JOURNAL_SUFFIX,
    Leftovers,
    _read_registry,
    _recover_journal,
    _rel,
    _remove,
    assets_dir,
    domain_lock,
    journal_path,
    marker_path,
)

STALE_AFTER_S = 600.0  # a temporary folder with no owner marker, untouched this long, is a leftover
LEFTOVER = re.compile(r"^\.(?P<name>[a-z0-9_]+)\.(?P<kind>tmp|old|bak)-[0-9a-f-]+$")


def _scan(folder: Path, name: str, depth: int) -> list[Path]:
    """``.<name>.{tmp,old,bak}-*`` entries in ``folder`` and its subfolders down to ``depth`` levels."""
    found = []
    for level in range(depth + 1):
        pattern = "/".join(["*"] * level + [f".{name}.*-*"])
        found.extend(p for p in folder.glob(pattern) if (m := LEFTOVER.match(p.name)) and m["name"] == name)
    return sorted(found)


def _clean_domain(params: Params, name: str) -> Leftovers:
    """Under ``name``'s lock: replay its journal, then remove temporary folders of dead writers."""
    found = _recover_journal(params, name)
    if not journal_path(params, name).exists():  # a swap marker outliving its journal
        marker_path(params.artifacts_dir, name).unlink(missing_ok=True)
    removed, restored, kept = [], [], []
    for path in _scan(assets_dir(params), name, 0):  # only imports write here, and they hold the lock
        _remove(path)
        removed.append(_rel(params, path))
    now = time.time()
    for path in _scan(params.artifacts_dir, name, 2):
        kind = LEFTOVER.match(path.name)["kind"]
        final = path.parent / name
        if kind == "old" and not final.exists():  # killed between the two renames of an atomic write
            os.rename(path, final)
            restored.append(_rel(params, final))
            continue
        if kind == "tmp":
            owner = read_owner(path)
            alive = owner.alive() if owner else None
            if alive:
                kept.append(f"{_rel(params, path)} (being written by pid {owner.pid})")
                continue
            try:
                age = now - path.stat().st_mtime
            except OSError:
                continue
            if alive is None and age < STALE_AFTER_S:
                kept.append(f"{_rel(params, path)} (no owner recorded, modified {age:.0f} s ago: may be in use; "
                            f"removed once older than {STALE_AFTER_S:.0f} s)")
                continue
        _remove(path)
        removed.append(_rel(params, path))
    return found.merge(Leftovers(removed=removed, restored=restored, kept=kept))


def find_leftovers(params: Params) -> list[Path]:
    """Every temporary folder, backup or journal of an import or build in kg_assets/ and artifacts/ (any
    domain, live or dead): what a finished, unkilled project has none of."""
    found: list[Path] = []
    for folder, depth in ((assets_dir(params), 0), (params.artifacts_dir, 2)):
        if folder.is_dir():
            for level in range(depth + 1):
                found.extend(p for p in folder.glob("/".join(["*"] * level + [".*"]))
                             if LEFTOVER.match(p.name) or p.name.endswith(JOURNAL_SUFFIX))
    return sorted(found)


def clean_leftovers(params: Params, names: list[str] | None = None, *, held: str | None = None) -> Leftovers:
    """Undo or finish killed imports and remove dead writers' temporary folders.

    ``names``: the domains to look at (default: the registry's); domains with an import journal are
    always included. A domain locked by a running omne process is skipped; ``held`` is the one whose
    lock this process already holds.
    """
    wanted = list(names) if names is not None else _read_registry(params).names
    assets = assets_dir(params)
    journals = [p.name[1:-len(JOURNAL_SUFFIX)] for p in assets.glob(f".*{JOURNAL_SUFFIX}")] if assets.is_dir() else []
    found = Leftovers()
    for name in dict.fromkeys([*wanted, *journals]):
        try:
            check_domain_name(name)
        except RegistryError:
            continue
        if name == held:
            found = found.merge(_clean_domain(params, name))
            continue
        try:
            with domain_lock(params, name, timeout_s=0):
                found = found.merge(_clean_domain(params, name))
        except RegistryError:  # busy: a live import or build owns what is there
            continue
    return found
