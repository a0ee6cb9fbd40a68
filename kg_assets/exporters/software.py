"""Export the "software" knowledge graph: the Python 3.11 standard library's modules and classes.

Why this exists: kg_assets/software/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the standard library of the interpreter
that runs it (CPython 3.11; see SOURCE.md for the exact version, the licence and the choices).

Graph: the public standard-library modules and packages that import on this platform, and the
public classes and exceptions they export that carry a docstring (by ``__module__``, or, for a
class implemented in a private module such as ``_io``, the public module that exports it).  Three
functional relations make the multi-hop chains: a class is ``defined in`` its module, a class is a
``subclass of`` its first base class (or that base's nearest exported ancestor), and a module is a
``submodule of`` its package; further base classes give ``also inherits from``, and ``imports``
(every exported module a module's source imports, read with ``ast``) links the modules.
Descriptions are the first sentence of each docstring, or a sentence built from the object where
the docstring is generated or absent (named-tuple fields, enumeration members, an AST node's
grammar, the classes or submodules a module has).  Nothing is invented.

The output depends on the Python minor version (and a little on the platform: which extension
modules import); run it with the project's interpreter, CPython 3.11, from the project root:

    .venv/bin/python kg_assets/exporters/software.py

Modules are imported quietly (warnings, stdout and stderr swallowed); the two with import side
effects (``antigravity``, ``this``) are never imported.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import hashlib
import importlib
import inspect
import io
import pkgutil
import platform
import re
import sys
import sysconfig
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType

import networkx as nx
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    check_names_and_endpoints,
    file_sha256,
    normalize_name,
    seed_balls,
    write_jsonl,
)
from _shared import join_list as join_all

OUT_DIR = Path(__file__).resolve().parents[1] / "software"
EXPECTED_MINOR = (3, 11)
STDLIB = Path(sysconfig.get_paths()["stdlib"])
DYNLOAD = STDLIB / "lib-dynload"
# Top-level names left out, with the reason written to SOURCE.md.
EXCLUDED_TOP: dict[str, str] = {
    "antigravity": "opens a web browser when imported",
    "this": "prints the Zen of Python when imported",
    "idlelib": "the IDLE application, not a library",
    "tkinter": "GUI toolkit bindings (Tk); left out as the brief asks",
    "turtle": "built on tkinter",
    "turtledemo": "demo scripts for turtle",
    "lib2to3": "the deprecated 2to3 tool's library",
    "test": "CPython's regression tests",
    "distutils": "deprecated (removed in 3.12), and in a virtual environment setuptools shadows it "
                 "with its own copy",
    "sre_compile": "deprecated shim over the private re._compiler",
    "sre_constants": "deprecated shim over the private re._constants",
    "sre_parse": "deprecated shim over the private re._parser",
    "xxlimited": "example extension module used by CPython's tests",
    "xxlimited_35": "example extension module used by CPython's tests",
    "xxsubtype": "example extension module used by CPython's tests",
}
# Packages whose submodules are left out (the package itself is kept).
NO_SUBMODULES: dict[str, str] = {
    "encodings": "its ~120 codec modules each define the same Codec/IncrementalEncoder/... classes",
}
# Docstrings that the class machinery writes, not a person: described from the object instead.
GENERATED_DOCS = {"An enumeration."}
MAX_SENTENCE = 300
# Entity type nouns: a class named like one ("Class", "Module") is always qualified.
TYPE_NOUNS = {"class", "exception", "module", "package"}
MAX_LISTED = 8
join_list = partial(join_all, limit=MAX_LISTED)

# A call signature line: "int([x]) -> integer", "Windows: mmap(fileno, ...)", "uri [,options] -> ...",
# "server -> an object ...", "partial(func, *args, **keywords) - new function ..."; rest: the prose after it.
_SIGNATURE = re.compile(r"^(?:[A-Z]\w*:\s+)?[A-Za-z_][\w.]*\s*"
                        r"(?:(?:\(.*\)|\[.*\])\s*(?:(?:-+>|→| - )\s*(?P<rest>.*))?|-+>\s*(?P<rest2>.*))$")
_ATTRIBUTE_LINE = re.compile(r"^[\w.]+\s*:\s")  # "msg: ..." (a listing when repeated)
_TYPED_ATTRIBUTE = re.compile(r"^[\w.]+\s+:\s")  # "option_groups : [OptionGroup]"
_LIST_LINE = re.compile(r"^(?:[-*•]\s|>>>|\d+[.)]\s|\S+\s+-+>\s|\"\w+\"\s+-+>)")
_SENTENCE_END = re.compile(r"[.!?](?=\s+[A-Z(\"'`]|\s{2,}|\s*$)")
_ROLE = re.compile(r":[a-z:]+:`~?([^`]+)`")


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@dataclass
class Module:
    """One public standard-library module as imported."""

    name: str
    obj: ModuleType
    origin: str  # "Python source" | "C extension" | "built-in"
    is_package: bool
    path: Path | None  # the file read, None for built-in modules
    classes: list[str] = field(default_factory=list)  # qualified names of the classes it defines


@dataclass
class Class:
    """One public class, attributed to the public module that defines (or exports) it."""

    qualname: str  # "<module>.<name>", the name it is exported under
    cls: type
    module: str  # the exported module it is attributed to
    summary: str  # first docstring sentence, or a sentence built from the object
    from_docstring: bool


# ---------------------------------------------------------------------------------------------
# Reading the standard library
# ---------------------------------------------------------------------------------------------


def is_public(name: str) -> bool:
    """No private part (``_x``), no test package, nothing excluded."""
    parts = name.split(".")
    if any(p.startswith("_") or p in ("test", "tests") or p.startswith("test_") for p in parts):
        return False
    if parts[0] in EXCLUDED_TOP:
        return False
    return not any(name.startswith(pkg + ".") for pkg in NO_SUBMODULES)


def walk_names(path: Path, prefix: str = "") -> list[str]:
    """Module names found on disk under ``path`` (recursing into public packages), sorted."""
    found: list[str] = []
    for info in sorted(pkgutil.iter_modules([str(path)]), key=lambda m: m.name):
        name = prefix + info.name
        if not is_public(name):
            continue
        found.append(name)
        if info.ispkg:
            found += walk_names(path / info.name, name + ".")
    return found


def candidate_names() -> list[str]:
    """Public module names of the standard library: source tree, lib-dynload and built-ins."""
    names = set(walk_names(STDLIB)) | set(walk_names(DYNLOAD))
    names |= {n for n in sys.builtin_module_names if is_public(n)}
    return sorted(names)


def import_quietly(name: str) -> ModuleType | None:
    """Import a module with warnings, stdout and stderr swallowed; None when it does not import."""
    sink = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        try:
            return importlib.import_module(name)
        except Exception:  # platform-only modules (asyncio.windows_events, dbm.gnu, ...)
            return None


def module_record(name: str, obj: ModuleType) -> Module | None:
    """The module's origin and file; None for a module served from outside the stdlib tree."""
    file = getattr(obj, "__file__", None)
    is_package = hasattr(obj, "__path__")
    if file is None:
        return Module(name, obj, "built-in", is_package, None)
    path = Path(file).resolve()
    if STDLIB.resolve() not in path.parents:
        return None
    origin = "C extension" if path.suffix in (".so", ".pyd") else "Python source"
    return Module(name, obj, origin, is_package, path)


def load_modules() -> tuple[dict[str, Module], list[str]]:
    """Every public module that imports here, and the names that did not."""
    modules: dict[str, Module] = {}
    failed: list[str] = []
    for name in candidate_names():
        obj = import_quietly(name)
        record = module_record(name, obj) if obj is not None else None
        if record is None:
            failed.append(name)
        else:
            modules[name] = record
    return modules, failed


def exported_names(module: ModuleType) -> list[str]:
    """A module's public names: ``__all__`` when it has one, else its names without a leading "_"."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    return sorted({n for n in names if isinstance(n, str)})


def own_doc(cls: type) -> str:
    """The class's own docstring (class docstrings are not inherited through ``__dict__``)."""
    doc = cls.__dict__.get("__doc__")
    return inspect.cleandoc(doc) if isinstance(doc, str) and doc.strip() else ""


def owner_rank(module: Module, cls: type, attr: str) -> tuple[int, int, int, str]:
    """How well a public module fits as the home of a class implemented in a private module:
    it lists the class in ``__all__``; its top-level name is a word of the private module's name
    (``io`` for ``_io``, ``importlib`` for ``_frozen_importlib``); the shorter name; the name."""
    words = set(re.split(r"[._]+", cls.__module__))
    listed = attr in (getattr(module.obj, "__all__", None) or ())
    return (0 if listed else 1, 0 if module.name.split(".")[0] in words else 1,
            module.name.count("."), module.name)


def find_classes(modules: dict[str, Module]) -> dict[int, tuple[str, str, type]]:
    """id(class) -> (module, exported name, class) for every public class with a docstring.

    A class belongs to the module named by its ``__module__`` when that module is exported here;
    a class whose ``__module__`` is private (``_io``, ``concurrent.futures._base``) belongs to the
    best-ranked public module that exports it under its own name (see owner_rank)."""
    found: dict[int, tuple[str, str, type]] = {}
    adopted: dict[int, list[tuple[tuple[int, int, int, str], str, str, type]]] = defaultdict(list)
    for name in sorted(modules):
        module = modules[name]
        for attr in exported_names(module.obj):
            obj = getattr(module.obj, attr, None)
            if not isinstance(obj, type) or obj.__name__ != attr or obj.__qualname__ != attr:
                continue
            if not own_doc(obj) or obj is object:
                continue
            if obj.__module__ == name:
                found[id(obj)] = (name, attr, obj)
            elif obj.__module__ not in modules and not is_public(obj.__module__):
                adopted[id(obj)].append((owner_rank(module, obj, attr), name, attr, obj))
    for key, options in adopted.items():
        if key not in found:
            _, name, attr, obj = min(options, key=lambda o: o[0])
            found[key] = (name, attr, obj)
    return found


# ---------------------------------------------------------------------------------------------
# Descriptions
# ---------------------------------------------------------------------------------------------


def signature(line: str) -> tuple[bool, str]:
    """Whether a docstring line is a call signature ("int([x]) -> integer", "Windows: mmap(...)",
    "server -> an object ..."), and the prose after its arrow ('' when none)."""
    match = _SIGNATURE.match(line)
    if not match:
        return False, ""
    return True, (match.group("rest") or match.group("rest2") or "").strip()


def skip_paragraph(lines: list[str]) -> bool:
    """Paragraphs that are no prose: a heading ("Instance attributes:"), an attribute listing
    ("action : string"), a lone file or module name ("robotparser.py"), a copyright or licence note."""
    first = lines[0]
    text = " ".join(lines)
    words = [w for w in text.split() if re.search(r"[A-Za-z]", w)]
    listing = sum(bool(_ATTRIBUTE_LINE.match(line)) for line in lines) >= 2
    return ((first.endswith(":") and len(first.split()) <= 3) or listing or first.startswith(">>>")
            or bool(_TYPED_ATTRIBUTE.match(first))
            or len(words) < 2 or bool(re.search(r"\bcopyright\b|\blicen[cs]e", text, re.I)))


def prose_lines(lines: list[str]) -> tuple[list[str], bool]:
    """The leading prose lines of a paragraph, cut before a list, an example or a table; and
    whether the cut follows a line that introduces what comes next (ends with ":")."""
    kept: list[str] = []
    for line in lines:
        if kept and _LIST_LINE.match(line):
            break
        kept.append(line)
        if line.endswith(":"):
            return kept, True
    return kept, False


def finish(text: str, cut: bool = False) -> str:
    """Tidy one sentence: markup reduced, whitespace collapsed, length capped, capitalised, closed."""
    text = _ROLE.sub(r"\1", text).replace("``", "").replace("`", "")
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > MAX_SENTENCE:
        text, cut = text[:MAX_SENTENCE].rsplit(" ", 1)[0], True
    if cut:
        text = text.rstrip(":;, ") + " ..."
    elif not text.endswith((".", "!", "?")):
        text = text.rstrip(":;, ") + "."
    return text[:1].upper() + text[1:]


def first_sentence(doc: str) -> str:
    """The first sentence of the first prose paragraph of a docstring ('' when there is none).

    Leading call signatures are skipped with their continuation lines; when no paragraph has
    prose, the prose after a signature's arrow is used ("dict() -> new empty dictionary").
    Headings, attribute listings, copyright notes and lone names are no prose (skip_paragraph);
    a sentence that runs into a list ends with " ..." ("Construct ... bytes from ...")."""
    fallback = ""
    for paragraph in re.split(r"\n\s*\n", doc):
        lines = [line.strip() for line in paragraph.strip().splitlines() if line.strip()]
        while lines:
            is_signature, rest = signature(lines[0])
            if not is_signature:
                break
            lines.pop(0)
            while lines and (lines[0][:1].islower() or lines[0][:1] in "([{") and not signature(lines[0])[0]:
                rest += " " + lines.pop(0)
            if not fallback and len(rest.split()) >= 3:
                fallback = rest
        if not lines or skip_paragraph(lines):
            continue
        kept, introduces = prose_lines(lines)
        text = " ".join(kept)
        end = _SENTENCE_END.search(text)
        if end and end.end() < len(text.rstrip()):
            return finish(text[: end.end()])
        return finish(text, cut=introduces)
    return finish(fallback) if fallback else ""


def ast_summary(doc: str) -> str:
    """ast node classes document their ASDL grammar: one constructor, or a sum type's alternatives."""
    lines = [line.strip().lstrip("|").strip() for line in doc.splitlines() if line.strip()]
    first = lines[0]
    if "=" in first.split("(")[0]:  # "expr = BoolOp(boolop op, expr* values)"
        lines[0] = first.split("=", 1)[1].strip()
    alternatives = [line.split("(")[0].strip() for line in lines]
    if len(alternatives) > 1:
        return ("An abstract syntax tree node category (an ASDL sum type) whose alternatives are "
                f"{join_list(alternatives)}.")
    if "(" in lines[0]:
        return f"An abstract syntax tree node class with the ASDL signature {lines[0]}."
    return f"An abstract syntax tree node class without fields (ASDL constructor {lines[0]})."


def generated_summary(cls: type) -> str:
    """A sentence built from a class whose docstring namedtuple, dataclass or enum wrote."""
    fields = getattr(cls, "_fields", None)
    if issubclass(cls, tuple) and isinstance(fields, tuple):
        return f"A named tuple with the fields {join_list(list(fields))}."
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
        return f"A data class with the fields {join_list(names)}." if names else "A data class."
    members = getattr(cls, "__members__", None)
    if isinstance(members, Mapping) and members:
        return f"An enumeration with the members {join_list(list(members))}."
    return ""


def is_generated(cls: type, doc: str) -> bool:
    """Docstrings written by namedtuple/dataclass/enum, not by a person."""
    if doc in GENERATED_DOCS:
        return True
    return doc.startswith(cls.__name__ + "(") and (dataclasses.is_dataclass(cls) or (
        issubclass(cls, tuple) and hasattr(cls, "_fields")))


def is_ast_node(cls: type) -> bool:
    return cls.__module__ == "ast" and issubclass(cls, ast.AST) and cls is not ast.AST


def class_record(module: str, attr: str, cls: type) -> Class | None:
    """The class with its summary sentence; None when neither the docstring nor the object gives one.

    Struct sequences repeat their name before the sentence ("stat_result: Result from stat, ...");
    that prefix is dropped."""
    qualname = f"{module}.{attr}"
    doc = own_doc(cls)
    if is_generated(cls, doc):
        summary, from_docstring = generated_summary(cls), False
    elif is_ast_node(cls) and not doc.startswith("Deprecated"):
        summary, from_docstring = ast_summary(doc), True
    else:
        prefix = re.match(rf"^[\w.]*\b{re.escape(cls.__name__)}:\s+", doc)
        summary = first_sentence(doc[prefix.end():] if prefix else doc)
        first_line = doc.splitlines()[0].strip() if doc else ""
        if not summary and signature(first_line)[0]:  # "date(year, month, day) --> date object"
            summary = f"Its docstring gives only the call signature {first_line}."
        from_docstring = bool(summary)
    if not summary or summary.startswith("XXX"):
        return None
    return Class(qualname, cls, module, summary, from_docstring)


def module_summary(module: Module, classes: dict[str, Class], modules: dict[str, Module]) -> tuple[str, bool]:
    """First docstring sentence of a module, or a sentence listing the classes or submodules it has
    ('' when it has none of these: such a module is not exported)."""
    doc = module.obj.__doc__
    sentence = first_sentence(inspect.cleandoc(doc)) if isinstance(doc, str) else ""
    if sentence:
        return sentence, True
    names = [classes[q].cls.__name__ for q in module.classes]
    if names:
        noun = "class" if len(names) == 1 else "classes"
        return f"It has no docstring; it defines the {noun} {join_list(names)}.", False
    children = submodules(module.name, modules)
    if children:
        noun = "submodule" if len(children) == 1 else "submodules"
        return f"It has no docstring; its {noun}: {join_list(children)}.", False
    return "", False


def submodules(name: str, modules: dict[str, Module]) -> list[str]:
    return [m for m in sorted(modules) if m.rpartition(".")[0] == name]


# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------


def assign_names(modules: dict[str, Module], classes: dict[str, Class]) -> dict[str, str]:
    """Entity name per key ("module:<name>" / "class:<qualname>").

    Modules keep their dotted name. A class is named by its bare class name when that is unique
    (after normalisation) among all entities and at least 3 characters long; otherwise by its
    qualified name ``module.Name``. In a clash a built-in class (``set``) keeps the bare name. A class
    named like an entity type ("Class", "Module") is qualified too: questions say "which class"."""
    names = {f"module:{m}": m for m in modules}
    taken = Counter(normalize_name(m) for m in modules)
    bare = Counter(normalize_name(c.cls.__name__) for c in classes.values())
    for qualname, record in classes.items():
        plain = record.cls.__name__
        key = normalize_name(plain)
        clash = taken[key] > 0 or bare[key] > 1
        keeps = record.module == "builtins" and taken[key] == 0
        type_noun = key in TYPE_NOUNS and record.module != "builtins"  # "Class" (pyclbr), "Module" (ast)
        if len(plain) < 3 or type_noun or (clash and not keeps):
            names[f"class:{qualname}"] = qualname
        else:
            names[f"class:{qualname}"] = plain
    # ast's abstract node categories differ from concrete nodes by case only (ast.expr / ast.Expr).
    counts = Counter(normalize_name(n) for n in names.values())
    for key, name in names.items():
        if counts[normalize_name(name)] > 1 and key.startswith("class:") and name.split(".")[-1].islower():
            names[key] = f"{name} (abstract)"
    counts = Counter(normalize_name(n) for n in names.values())
    clashes = sorted(n for n, c in counts.items() if c > 1)
    assert not clashes, f"names not unique: {clashes[:5]}"
    return names


# ---------------------------------------------------------------------------------------------
# Triples
# ---------------------------------------------------------------------------------------------


def kind_word(cls: type) -> str:
    return "Exception" if issubclass(cls, BaseException) else "Class"


def dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def nearest_exported_base(cls: type, by_id: dict[int, Class]) -> tuple[Class | None, list[type]]:
    """Walk first bases up from ``cls`` to the first exported class (never ``object``); also the
    unexported classes passed on the way."""
    skipped: list[type] = []
    current = cls.__bases__[0] if cls.__bases__ else object
    while current is not object:
        if id(current) in by_id:
            return by_id[id(current)], skipped
        skipped.append(current)
        current = current.__bases__[0] if current.__bases__ else object
    return None, skipped


def class_triples(classes: dict[str, Class], names: dict[str, str]) -> list[dict[str, str]]:
    """``defined in`` for every class, ``subclass of`` its first base (or that base's nearest exported
    ancestor) and ``also inherits from`` for every further exported base."""
    by_id = {id(c.cls): c for c in classes.values()}
    triples = []
    for qualname, record in sorted(classes.items()):
        cls, head = record.cls, names[f"class:{qualname}"]
        where = (f"{kind_word(cls)} {qualname} is defined in module {record.module}."
                 if cls.__module__ == record.module else
                 f"{kind_word(cls)} {qualname} is implemented in the private module {cls.__module__} and "
                 f"exported by module {record.module}.")
        triples.append({"head": head, "relation": "defined in", "tail": names[f"module:{record.module}"],
                        "description": where})
        base, skipped = nearest_exported_base(cls, by_id)
        if base is not None:
            if not skipped:
                text = f"The first base class of {qualname} is {base.qualname}."
            else:
                text = (f"The first base class of {qualname} is {dotted(skipped[0])}, which is not exported; "
                        f"its nearest exported ancestor along first bases is {base.qualname}.")
            triples.append({"head": head, "relation": "subclass of", "tail": names[f"class:{base.qualname}"],
                            "description": text})
        for position, other in enumerate(cls.__bases__[1:], start=2):
            if id(other) in by_id and by_id[id(other)] is not base:
                triples.append({
                    "head": head, "relation": "also inherits from", "tail": names[f"class:{by_id[id(other)].qualname}"],
                    "description": f"{qualname} lists {by_id[id(other)].qualname} as base class {position} of "
                                   f"{len(cls.__bases__)}."})
    return triples


def module_triples(modules: dict[str, Module], names: dict[str, str]) -> list[dict[str, str]]:
    """``submodule of``: every submodule to its direct parent package."""
    triples = []
    for name in sorted(modules):
        parent = name.rpartition(".")[0]
        if parent in modules:
            triples.append({"head": names[f"module:{name}"], "relation": "submodule of",
                            "tail": names[f"module:{parent}"],
                            "description": f"{name} is a submodule of the package {parent}."})
    return triples


def nearest_module(name: str, modules: dict[str, Module]) -> str:
    """The exported module ``name`` or its nearest exported ancestor ('' when none)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def absolute_base(node: ast.ImportFrom, module: Module) -> str:
    """The absolute module a ``from ... import`` reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def import_statements(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement of a module, function bodies included, in source order."""
    found = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def read_imports(module: Module, owner: str, modules: dict[str, Module]) -> dict[str, str]:
    """Imported exported module -> the first statement importing it, for a Python source module
    whose imports are credited to the exported module ``owner`` (itself, or for an unexported
    submodule its nearest exported package).

    ``import a.b`` and ``from a import b`` name the module ``a.b`` when it is exported, else its
    nearest exported ancestor (a submodule importing its own package counts too)."""
    if module.origin != "Python source" or module.path is None:
        return {}
    tree = ast.parse(module.path.read_bytes(), filename=str(module.path))
    found: dict[str, str] = {}
    for node in import_statements(tree):
        if isinstance(node, ast.Import):
            targets = [nearest_module(alias.name, modules) for alias in node.names]
        else:
            base = absolute_base(node, module)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else nearest_module(base, modules)
                       for a in node.names]
        for target in targets:
            if target and target != owner:
                found.setdefault(target, f"`{ast.unparse(node)}` (line {node.lineno})")
    return found


def import_triples(modules: dict[str, Module], undescribed: dict[str, Module],
                   names: dict[str, str]) -> list[dict[str, str]]:
    """``imports`` triples: every exported module a module's source imports (anywhere in the file, so
    that a module shown importing one module imports no other exported module at all).

    The imports of an ``undescribed`` (not exported) submodule count as its nearest exported
    package's (``sqlite3`` imports through ``sqlite3.dbapi2``)."""
    imports: dict[str, dict[str, tuple[str, str]]] = {}  # module -> target -> (file's module, statement)
    for name, module in sorted(modules.items()):
        imports[name] = {t: (name, text) for t, text in read_imports(module, name, modules).items()}
    for name, module in sorted(undescribed.items()):
        owner = nearest_module(name.rpartition(".")[0], modules)
        if owner:
            for target, text in read_imports(module, owner, modules).items():
                imports[owner].setdefault(target, (name, text))
    triples = []
    for name, found in imports.items():
        for target, (where, text) in sorted(found.items()):
            source = name if where == name else f"its submodule {where}"
            triples.append({"head": names[f"module:{name}"], "relation": "imports",
                            "tail": names[f"module:{target}"],
                            "description": f"{name} imports {target}: {source} has the statement {text}."})
    return triples


# ---------------------------------------------------------------------------------------------
# Entities, connectivity, files
# ---------------------------------------------------------------------------------------------


def module_type(module: Module) -> str:
    return "package" if module.is_package else "module"


def describable_modules(modules: dict[str, Module], classes: dict[str, Class]
                        ) -> tuple[dict[str, tuple[str, bool]], dict[str, Module]]:
    """Summary per module, dropping (until none is left) the modules with nothing to describe:
    no docstring, no exported class and no exported submodule."""
    dropped: dict[str, Module] = {}
    while True:
        summaries = {name: module_summary(m, classes, modules) for name, m in sorted(modules.items())}
        empty = [name for name, (text, _) in summaries.items() if not text]
        if not empty:
            return summaries, dict(sorted(dropped.items()))
        for name in empty:
            dropped[name] = modules.pop(name)


def entity_records(modules: dict[str, Module], classes: dict[str, Class], names: dict[str, str],
                   summaries: dict[str, tuple[str, bool]]) -> list[dict[str, str]]:
    """One record per module and class: type and a description that starts with what it is."""
    records = []
    for name, module in modules.items():
        origin = {"Python source": "", "C extension": "C extension ", "built-in": "built-in "}[module.origin]
        label = f"{origin}{module_type(module)}".capitalize()
        records.append({"name": names[f"module:{name}"], "type": module_type(module),
                        "description": f"{label} {name} of the Python standard library: {summaries[name][0]}"})
    for qualname, record in classes.items():
        where = ("" if record.cls.__module__ == record.module
                 else f" (implemented in {record.cls.__module__})")
        records.append({"name": names[f"class:{qualname}"], "type": class_type(record.cls),
                        "description": f"{kind_word(record.cls)} {qualname}{where}: {record.summary}"})
    records.sort(key=lambda r: (r["name"], r["type"]))
    return records


def class_type(cls: type) -> str:
    return "exception" if issubclass(cls, BaseException) else "class"


def largest_component(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> set[str]:
    graph = nx.Graph()
    graph.add_nodes_from(e["name"] for e in entities)
    graph.add_edges_from((t["head"], t["tail"]) for t in triples)
    return max(nx.connected_components(graph), key=lambda c: (len(c), min(c)))


def graph_report(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, object]:
    """Check integrity and print size/connectivity numbers of the undirected graph."""
    check_names_and_endpoints(entities, triples)
    graph, ball, components = seed_balls(entities, triples)
    etype = {e["name"]: e["type"] for e in entities}
    degree = sorted(((d, n) for n, d in graph.degree()), key=lambda x: (-x[0], x[1]))
    report: dict[str, object] = {
        "entities": len(entities), "triples": len(triples), "undirected edges": graph.number_of_edges(),
        "components": len(components), "largest component": components[0] if components else 0,
        "eligible seeds": sum(SEED_MIN <= s <= SEED_MAX for s in ball.values()),
        f"balls < {SEED_MIN}": sum(s < SEED_MIN for s in ball.values()),
        f"balls > {SEED_MAX}": sum(s > SEED_MAX for s in ball.values()),
        "max degree": ", ".join(f"{n} {d}" for d, n in degree[:5]),
        "eligible seeds by type": ", ".join(f"{t} {c}" for t, c in sorted(Counter(
            etype[n] for n, s in ball.items() if SEED_MIN <= s <= SEED_MAX).items())),
    }
    for name, value in report.items():
        print(f"{name}: {value}")
    return report


# ---------------------------------------------------------------------------------------------
# Assembly, provenance and SOURCE.md
# ---------------------------------------------------------------------------------------------


@dataclass
class Export:
    """Everything SOURCE.md reports, besides the records themselves."""

    modules: dict[str, Module]
    classes: dict[str, Class]
    entities: list[dict[str, str]]
    triples: list[dict[str, str]]
    failed: list[str]  # module names that do not import here
    dropped_classes: list[str]  # docstring without a prose sentence
    dropped_modules: dict[str, Module]  # nothing to describe
    outside: list[str]  # entities outside the largest component
    documented: Counter[str]  # entities (by type) whose description quotes a docstring


def build() -> Export:
    """Read the standard library and assemble the graph (largest component only)."""
    modules, failed = load_modules()
    classes: dict[str, Class] = {}
    dropped_classes: list[str] = []
    for module, attr, cls in sorted(find_classes(modules).values(), key=lambda x: (x[0], x[1])):
        record = class_record(module, attr, cls)
        if record is None:
            dropped_classes.append(f"{module}.{attr}")
            continue
        classes[record.qualname] = record
        modules[module].classes.append(record.qualname)
    summaries, dropped_modules = describable_modules(modules, classes)
    names = assign_names(modules, classes)
    imports = import_triples(modules, dropped_modules, names)
    triples = class_triples(classes, names) + module_triples(modules, names) + imports
    entities = entity_records(modules, classes, names, summaries)
    keep = largest_component(entities, triples)
    outside = sorted(e["name"] for e in entities if e["name"] not in keep)
    entities = [e for e in entities if e["name"] in keep]
    triples = sorted((t for t in triples if t["head"] in keep),
                     key=lambda t: (t["head"], t["relation"], t["tail"], t["description"]))
    documented: Counter[str] = Counter()
    for name, module in modules.items():
        documented[module_type(module)] += names[f"module:{name}"] in keep and summaries[name][1]
    for qualname, record in classes.items():
        documented[class_type(record.cls)] += names[f"class:{qualname}"] in keep and record.from_docstring
    return Export(modules, classes, entities, triples, failed, dropped_classes, dropped_modules,
                  outside, documented)


def file_digests(modules: list[Module]) -> list[tuple[str, str]]:
    """(path relative to the stdlib directory, SHA-256) of every module file imported or parsed."""
    paths = sorted(m.path for m in modules if m.path is not None)
    return [(p.relative_to(STDLIB.resolve()).as_posix(), file_sha256(p))
            for p in paths]


def psf_licence() -> tuple[list[str], str, str]:
    """The PSF License Agreement (version 2) as LICENSE.txt gives it, its copyright notice, the file's SHA-256."""
    raw = (STDLIB / "LICENSE.txt").read_bytes()
    text = raw.decode("utf-8")
    start = text.index("PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2")
    end = text.index("BEOPEN.COM LICENSE AGREEMENT", start)
    agreement = [line.rstrip() for line in text[start:end].strip().splitlines()]
    notice = re.search(r'"(Copyright \(c\) [^"]+)"', text[start:end], re.S)
    assert notice, "PSF copyright notice not found in LICENSE.txt"
    return agreement, re.sub(r"\s+", " ", notice.group(1)), hashlib.sha256(raw).hexdigest()


def table(header: tuple[str, str], rows: dict[str, int]) -> list[str]:
    lines = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in sorted(rows.items())]
    return lines + [f"| **total** | {sum(rows.values())} |"]


def write_source_md(path: Path, export: Export, report: dict[str, object]) -> None:
    version = platform.python_version()
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    agreement, notice, licence_sha = psf_licence()
    digests = file_digests([*export.modules.values(), *export.dropped_modules.values()])
    manifest = "".join(f"{sha}  {rel}\n" for rel, sha in digests)
    by_type = Counter(e["type"] for e in export.entities)
    by_relation = Counter(t["relation"] for t in export.triples)
    documented = sum(export.documented.values())
    adopted = sorted(q for q, c in export.classes.items() if c.cls.__module__ != c.module)
    qualified = sorted(e["name"] for e in export.entities if e["type"] in ("class", "exception") and "." in e["name"])
    lines = [
        f"# software — the Python {minor} standard library: modules, classes and exceptions",
        "",
        "## Source",
        "",
        f"- Data: the standard library of CPython {version} ({platform.python_implementation()},",
        f"  `sys.platform` {sys.platform}, {platform.machine()}), the interpreter of the project's virtual",
        "  environment (`.venv/bin/python`): its `sysconfig` \"stdlib\" directory (`lib/python"
        f"{minor}`,",
        "  with `lib-dynload`) and its built-in modules. Modules are imported, their classes inspected",
        "  (`__module__`, `__bases__`, `__doc__`), and the Python source files parsed with `ast` for",
        "  their import statements. The export depends on the Python minor version (the modules,",
        f"  classes and docstrings of {minor}; the exporter refuses to run under another) and a little",
        "  on the platform (which extension modules exist and import).",
        "- Licence: the Python Software Foundation License Agreement, version 2 (the PSF licence of",
        "  CPython; LICENSE.txt of the standard library, SHA-256",
        f"  `{licence_sha}`). It grants the right to",
        "  reproduce, prepare derivative works and distribute Python or any derivative version,",
        "  provided PSF's License Agreement and copyright notice are retained and a derivative work",
        "  carries a brief summary of its changes. Docstrings are part of the source code and under",
        "  the same licence. Copyright notice:",
        f"  \"{notice}\".",
        "- Summary of changes (clause 3 of the agreement): this graph is derived from the CPython",
        "  standard library. It records the names of public modules and classes, their package,",
        "  module, base-class and import relations, and quotes the first sentence of docstrings",
        f"  (markup reduced, whitespace collapsed, at most {MAX_SENTENCE} characters); no part of Python",
        "  was modified. The agreement itself is reproduced at the end of this file.",
        "",
        "## Regenerate",
        "",
        "```",
        ".venv/bin/python kg_assets/exporters/software.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8, `\\n` line endings) for a given interpreter; the script",
        "ends with a networkx check of names, endpoints, components and seed ball sizes.",
        "",
        f"Files read: {len(digests)} module files (Python sources and C extensions of the exported",
        "modules; built-in modules have none). SHA-256 of the manifest below (`<sha256>  <path>` per",
        f"line, sorted by path): `{hashlib.sha256(manifest.encode()).hexdigest()}`.",
        "",
        "## What is in the graph",
        "",
        "- Modules (types `module`, `package`): the public standard-library modules that import here, found",
        "  on disk (recursively, packages included) and among the interpreter's built-in modules. Public",
        "  means no name part starting with `_`, no `test`/`tests`/`test_*` package, and not one of:",
        *[f"  `{name}` ({why})," for name, why in sorted(EXCLUDED_TOP.items())],
        *[f"  the submodules of `{name}` ({why})." for name, why in sorted(NO_SUBMODULES.items())],
        "  Not importable on this platform (left out): " + ", ".join(f"`{n}`" for n in export.failed) + ".",
        "  A module with no docstring, no exported class and no exported submodule is left out (nothing",
        "  to describe): " + (", ".join(f"`{n}`" for n in export.dropped_modules) or "none") + ".",
        "- Classes (types `class`, `exception` for subclasses of BaseException): every public class a",
        "  module exports under its own name (`__all__` where the module has one, else its public names)",
        "  that has its own docstring. It belongs to the module named by its `__module__`; a class whose",
        "  `__module__` is private (e.g. `_io`, `concurrent.futures._base`) is attributed to the public",
        "  module exporting it, preferring one that lists it in `__all__`, then one whose top-level name",
        "  is a word of the private module's name, then the shorter name "
        f"({len(adopted)} classes, e.g. " + ", ".join(adopted[:4]) + "). `object` is not exported.",
        "- Descriptions: modules \"<Kind> <name> of the Python standard library: <sentence>\", classes",
        "  \"<Class|Exception> <module>.<name>: <sentence>\". The sentence is the first sentence of the",
        "  first prose paragraph of the docstring (leading call signatures such as `int([x]) -> integer`,",
        "  headings, attribute listings, copyright notes skipped; a sentence running into a list ends",
        "  with \" ...\"). Built from the object instead: docstrings written by the machinery (named",
        "  tuples' `Name(a, b)`, enumerations' \"An enumeration.\": the fields or members are listed),",
        "  `ast` node classes (their docstring is the ASDL grammar: signature or sum-type alternatives),",
        "  and modules without a docstring (the classes, else submodules, they have). Classes whose",
        "  docstring has no prose sentence are left out: " + (", ".join(export.dropped_classes) or "none") + ".",
        f"  Descriptions quoting a docstring sentence: {documented} of {len(export.entities)} entities "
        f"({100 * documented / len(export.entities):.1f}%; by type: "
        + ", ".join(f"{t} {c}/{by_type[t]}" for t, c in sorted(export.documented.items())) + "); all others",
        "  are sentences built from the object's own fields as described.",
        "- Names: a module's dotted name; a class's bare name (`JSONDecoder`) when it is unique after",
        "  normalisation (NFKC, casefold, collapsed whitespace, quotes removed) among all entity names and",
        "  at least 3 characters long, else its qualified name `<module>.<name>` (a built-in class keeps",
        "  the bare name in a clash with other classes, e.g. `set` vs `ast.Set`; a class named like an",
        "  entity type is qualified too: `pyclbr.Class`, `ast.Module`). `ast`'s abstract node",
        "  categories that differ from a concrete node by case only get \" (abstract)\" (`ast.expr",
        f"  (abstract)` vs `ast.Expr`). Qualified class names: {len(qualified)}, e.g. "
        + ", ".join(qualified[:6]) + ".",
        "- `defined in`: class -> the module it belongs to (one per class).",
        "- `subclass of`: class -> its first base class; when that base is not exported (private, no",
        "  docstring), the nearest exported class along first bases, said so in the triple description;",
        "  nothing for classes whose first-base chain reaches `object` without an exported class.",
        "- `also inherits from`: class -> each further exported base class (multiple inheritance).",
        "- `submodule of`: module -> its direct parent package.",
        "- `imports`: module -> every exported module that the module's Python source imports, anywhere",
        "  in the file (function bodies and `if TYPE_CHECKING:` blocks included), so that the graph lists",
        "  all of a module's imports of exported modules. `import a.b` and `from a import b` name `a.b`",
        "  when that is an exported module, else its nearest exported ancestor; relative imports are",
        "  resolved; a module's own package and submodules count too; imports of private modules (`_io`)",
        "  and of left-out ones do not. The imports of a submodule left out for having nothing to describe",
        "  count as its package's (`sqlite3` through `sqlite3.dbapi2`). C extension and built-in modules",
        "  have no source, hence no `imports`. The triple description quotes the first statement",
        "  importing the target, with its line number.",
        "- Questions: `phrases.yaml` asks every relation forwards only (no `ask_head`/`head_noun`): a",
        "  class has one module and one first base, but the classes a module defines or a class has as",
        "  subclasses, and the modules importing one, are more than this graph keeps (classes without a",
        "  docstring are not in it).",
        "- Only the largest connected component is kept; left out as unconnected: "
        + (", ".join(f"`{n}`" for n in export.outside) or "none") + ".",
        "",
        "## Counts",
        "",
        *table(("entity type", "count"), dict(by_type)),
        "",
        *table(("relation", "count"), dict(by_relation)),
        "",
        "## Graph check",
        "",
        f"- Undirected graph: {report['components']} connected component(s), the largest with "
        f"{report['largest component']} entities; max degree: {report['max degree']}.",
        f"- Eligible seeds (entities whose {SEED_HOPS}-hop ball holds {SEED_MIN}..{SEED_MAX} entities): "
        f"{report['eligible seeds']}; by type: {report['eligible seeds by type']}. Balls below the window: "
        f"{report[f'balls < {SEED_MIN}']}, above: {report[f'balls > {SEED_MAX}']}.",
        "",
        "## Files read (SHA-256)",
        "",
        "<details><summary>" + f"{len(digests)} files" + "</summary>",
        "",
        "```",
        *manifest.splitlines(),
        "```",
        "",
        "</details>",
        "",
        "## PSF License Agreement (as in LICENSE.txt)",
        "",
        "```",
        *agreement,
        "```",
        "",
    ]
    path.write_bytes("\n".join(lines).encode("utf-8"))


def main() -> None:
    if sys.version_info[:2] != EXPECTED_MINOR:
        raise SystemExit(f"run with CPython {EXPECTED_MINOR[0]}.{EXPECTED_MINOR[1]}: the export depends "
                         f"on the standard library of the interpreter (this is {platform.python_version()})")
    export = build()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", export.entities)
    write_jsonl(OUT_DIR / "triples.jsonl", export.triples)
    print(f"CPython {platform.python_version()}: {len(export.modules)} modules, {len(export.classes)} classes read; "
          f"not importable: {len(export.failed)}, classes without prose: {len(export.dropped_classes)}, "
          f"modules without anything to describe: {len(export.dropped_modules)}, "
          f"outside the largest component: {len(export.outside)}")
    print("entities by type:", dict(sorted(Counter(e["type"] for e in export.entities).items())))
    print("triples by relation:", dict(sorted(Counter(t["relation"] for t in export.triples).items())))
    report = graph_report(export.entities, export.triples)
    write_source_md(OUT_DIR / "SOURCE.md", export, report)


if __name__ == "__main__":
    main()
