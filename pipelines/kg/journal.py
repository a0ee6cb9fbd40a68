"""The journal of an import: what a killed `omne kg import` leaves, and how a later run undoes or finishes it.

An import writes its plan (``kg_assets/.<name>.import.json``) before its first change, and a marker
(``artifacts/.<name>.import.json``, naming the project) just before it swaps its staged folders into place.
The next import or build of the domain replays the journal (pipelines.kg.leftovers), and so does the next read
of its KG while the marker exists (``settle_killed_import``, called by ``pipelines.kg.store.read_kg``): a
reader never sees a half-swapped or uncommitted domain. This module imports no KG reader, so that
``read_kg`` can call it.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from pipelines.crashsafe import LockBusyError, file_lock
from pipelines.domains import Registry, check_domain_name, load_registry
from pipelines.errors import RegistryError
from pipelines.layout import lock_file

if TYPE_CHECKING:
    from pipelines.config import Params

log = logging.getLogger(__name__)

ASSETS_DIR = "kg_assets"  # where imported sources live, one folder per domain
DOMAIN_LOCK_WAIT_S = 10.0  # another import/build of the same domain: wait this long, then say who holds it
JOURNAL_SUFFIX = ".import.json"


class Leftovers(BaseModel):
    """What a run found of killed runs: removed, put back, or left alone (with why)."""

    removed: list[str] = []
    restored: list[str] = []
    kept: list[str] = []

    def merge(self, other: Leftovers) -> Leftovers:
        return Leftovers(removed=self.removed + other.removed, restored=self.restored + other.restored,
                         kept=self.kept + other.kept)

    def lines(self) -> list[str]:
        return ([f"removed leftover of a killed run: {p}" for p in self.removed]
                + [f"put back after a killed run: {p}" for p in self.restored]
                + [f"left alone: {p}" for p in self.kept])


class _Move(BaseModel):
    """A path the transaction replaces, and where its previous content waits until the commit."""

    target: str  # relative to the project root
    backup: str
    existed: bool


class Journal(BaseModel):
    """The plan of an import, written before its first change: what a later run needs to undo or finish it."""

    model_config = ConfigDict(extra="forbid")
    name: str
    pid: int
    started: float
    staging: str
    moves: list[_Move]
    old_entry: dict[str, Any] | None
    new_entry: dict[str, Any]
    committed: bool = False
    staged: list[str] = []  # more staging folders (the built artifacts), removed with ``staging``
    marker: str | None = None  # artifacts/.<name>.import.json: readers replay this journal while it exists


class Places(BaseModel):
    """Where a project keeps its registry, sources and artifacts: all the journal replay needs (a swap
    marker records them, so that a reader that has only an artifact folder can replay a killed import)."""

    root: Path
    registry_path: Path
    artifacts_dir: Path


def assets_dir(params: Params) -> Path:
    return params.root / ASSETS_DIR


def journal_path(params: Params, name: str) -> Path:
    return assets_dir(params) / f".{name}{JOURNAL_SUFFIX}"


def marker_path(artifacts: Path, name: str) -> Path:
    """Written just before an import swaps its staged folders into place, removed with its journal."""
    return artifacts / f".{name}{JOURNAL_SUFFIX}"


def _rel(params: Params, path: Path) -> str:
    try:
        return path.relative_to(params.root).as_posix()
    except ValueError:
        return str(path)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def domain_lock(params: Params, name: str, *, timeout_s: float | None = DOMAIN_LOCK_WAIT_S) -> Iterator[None]:
    """One import or build of a domain at a time, across processes (a killed holder releases it)."""
    path = lock_file(params.artifacts_dir, check_domain_name(name))
    try:
        with file_lock(path, timeout_s=timeout_s, what=f"domain {name!r}"):
            yield
    except LockBusyError as exc:
        raise RegistryError(str(exc)) from None


def _read_registry(params: Params) -> Registry:
    return load_registry(params.registry_path) if params.registry_path.exists() else Registry()


def _undo(params: Params, journal: Journal) -> Leftovers:
    """Put every moved path back (newest first) and drop what the transaction created."""
    restored, removed = [], []
    for move in reversed(journal.moves):
        target, backup = params.root / move.target, params.root / move.backup
        if move.existed and backup.exists():
            _remove(target)
            os.rename(backup, target)
            restored.append(move.target)
        elif not move.existed and (target.exists() or target.is_symlink()):
            _remove(target)
            removed.append(move.target)
    for staged in [journal.staging, *journal.staged]:
        if (params.root / staged).exists():
            _remove(params.root / staged)
            removed.append(staged)
    if journal.marker:
        (params.root / journal.marker).unlink(missing_ok=True)
    return Leftovers(removed=removed, restored=restored)


def _finish(params: Params, journal: Journal) -> None:
    """After the commit: the previous content is no longer needed."""
    for move in journal.moves:
        _remove(params.root / move.backup)
    for staged in [journal.staging, *journal.staged]:
        _remove(params.root / staged)
    if journal.marker:
        (params.root / journal.marker).unlink(missing_ok=True)


def _committed(params: Params, journal: Journal) -> bool:
    """Whether a killed import got as far as registering (the registry is the commit point)."""
    if journal.committed:
        return True
    try:
        entry = _read_registry(params).get(journal.name).model_dump(mode="json")
    except RegistryError:
        return False
    return entry == journal.new_entry and entry != journal.old_entry


def _recover_journal(params: Params, name: str) -> Leftovers:
    path = journal_path(params, name)
    if not path.is_file():
        return Leftovers()
    try:
        journal = Journal.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValidationError) as exc:
        return Leftovers(kept=[f"{_rel(params, path)} (unreadable import journal: {exc.__class__.__name__}; "
                               "check kg_assets/ by hand, then delete it)"])
    if _committed(params, journal):
        found = Leftovers(removed=[m.backup for m in journal.moves if (params.root / m.backup).exists()])
        _finish(params, journal)
    else:
        found = _undo(params, journal)
    path.unlink(missing_ok=True)
    log.info("replayed the import journal of %r (committed: %s)", name, journal.committed)
    return found.merge(Leftovers(removed=[_rel(params, path)]))


def settle_killed_import(artifacts: Path, name: str, *, wait_s: float = 5.0) -> Leftovers:
    """Before reading the KG of ``name`` in ``artifacts``: replay the journal of an import killed while it
    swapped its folders into place (its marker names the project), so that no reader sees a half-swapped or
    uncommitted domain. A live import's swap (milliseconds) is waited for; nothing to do costs one ``stat``."""
    marker = marker_path(artifacts, name)
    if not marker.is_file():
        return Leftovers()
    try:
        places = Places.model_validate_json(marker.read_text(encoding="utf-8"))
        with domain_lock(places, name, timeout_s=wait_s):  # type: ignore[arg-type] - Places has what it needs
            found = _recover_journal(places, name)  # type: ignore[arg-type]
            if not journal_path(places, name).exists():  # type: ignore[arg-type]
                marker.unlink(missing_ok=True)  # a marker whose journal is gone: the import ended
    except (OSError, ValidationError, RegistryError) as exc:
        log.warning("could not replay the killed import of %r named by %s: %s", name, marker, exc)
        return Leftovers()
    for line in found.lines():
        log.warning("%s", line)
    return found
