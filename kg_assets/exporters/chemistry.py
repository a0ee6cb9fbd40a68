"""Export the "chemistry" knowledge graph from the SQLite database shipped by the mendeleev package.

Why this exists: kg_assets/chemistry/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from ``elements.db`` inside the PyPI package
``mendeleev`` (see SOURCE.md for versions, licence and upstream data sources).

Graph: chemical elements, their isotopes, radioactive decay between isotopes, the people and
institutions credited with discovering each element, the countries where the discovery was made
or where the element is mainly produced / held in reserve, and the periodic-table group, period,
block and series of every element.  Nothing is invented: names, links and descriptions come from the
database rows; the only editorial steps (spelling variants of the same discoverer merged, decay
daughters derived by nuclear arithmetic, implausible branching intensities left unstated) are
listed in SOURCE.md.

Run from the project root:  python kg_assets/exporters/chemistry.py
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import mendeleev
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    check_names_and_endpoints,
    clean,
    eligible,
    join_list,
    normalize_name,
    seed_balls,
    tally,
    write_jsonl,
)

OUT_DIR = Path(__file__).resolve().parents[1] / "chemistry"
PACKAGE = "mendeleev"
# Branching intensities of the top-level decay modes of one isotope may exceed 100 % by rounding;
# above this the smaller ones are treated as values whose exponent was lost (see SOURCE.md).
INTENSITY_SUM_TOLERANCE = 100.5

# ---------------------------------------------------------------------------------------------
# Editorial tables (documented in SOURCE.md)
# ---------------------------------------------------------------------------------------------

# Discoverer strings that are not persons or institutions.
NOT_DISCOVERERS = {"known to the ancients", "known to the ancients.", "et al"}
# Discoverer strings naming two people with one shared surname.
SPLIT_DISCOVERERS: dict[str, tuple[str, ...]] = {
    "Pierre and Marie Curie": ("Pierre Curie", "Marie Curie"),
    "Fausto and Juan José de Elhuyar": ("Fausto de Elhuyar", "Juan José de Elhuyar"),
}
# Spelling variants of one discoverer (after initials are spaced "G. T. Seaborg") -> one name.
# Variants that occur in the data are merged under their fullest form; obvious misspellings of a
# well-known name are corrected.  The spellings found in the source are kept in the description.
DISCOVERER_CANONICAL: dict[str, str] = {
    "Sir William Ramsey": "William Ramsay",
    "Sir William Ramsay": "William Ramsay",
    "Sir Humphrey Davy": "Humphry Davy",
    "Sir H. Davy": "Humphry Davy",
    "Sir William Crookes": "William Crookes",
    "J. Berzelius": "Jöns Berzelius",
    "M. Klaproth": "Martin Klaproth",
    "R. Bunsen": "Robert Bunsen",
    "G. Kirchoff": "Gustav Kirchhoff",
    "Gustov Kirchoff": "Gustav Kirchhoff",
    "E. Segré": "Emilio Segrè",
    "Émillo Segrè": "Emilio Segrè",
    "S. Tenant": "Smithson Tennant",
    "Smithson Tenant": "Smithson Tennant",
    "L. N. Vauquelin": "Louis Vauquelin",
    "P. T. Cleve": "Per Teodor Cleve",
    "Per Theodor Cleve": "Per Teodor Cleve",
    "Nils Langet": "Nils Langlet",
    "Joseph Priestly": "Joseph Priestley",
    "Fredrich Wöhler": "Friedrich Wöhler",
    "Fredrich Ernst Dorn": "Friedrich Ernst Dorn",
    "Fredrich Stromeyer": "Friedrich Stromeyer",
    "Fredrich Soddy": "Frederick Soddy",
    "C. F. Aver von Welsbach": "Carl Auer von Welsbach",
    "A. F. Fourcory": "A. F. Fourcroy",
    "H. V. Collet-Descoltils": "H. V. Collet-Descotils",
    "S. G. Tompson": "S. G. Thompson",
    "A. C. Wohl": "A. C. Wahl",
    "Marguerite Derey": "Marguerite Perey",
}
# Discoverers that are institutions, with abbreviations spelled out.
ORGANIZATIONS: dict[str, str] = {
    "Argonne": "Argonne National Laboratory",
    "Los Alamos": "Los Alamos National Laboratory",
    "U of Calif": "University of California",
    "U. of Cal at Berkeley": "University of California, Berkeley",
    "Soviet Nuclear Research": "Soviet Nuclear Research",
    "Heavy Ion Research Laboratory (HIRL)": "Heavy Ion Research Laboratory (HIRL)",
    "GSI Helmholtz Centre for Heavy Ion Research": "GSI Helmholtz Centre for Heavy Ion Research",
    "RIKEN": "RIKEN",
    "Joint Institute for Nuclear Research": "Joint Institute for Nuclear Research",
    "Oak Ridge National Laboratory": "Oak Ridge National Laboratory",
    "Lawrence Livermore National Laboratory": "Lawrence Livermore National Laboratory",
    "Nobel Institute for Physics": "Nobel Institute for Physics",
}
# Country spellings / abbreviations in the location and producer fields -> one name.
PLACE_CANONICAL: dict[str, str] = {
    "USA": "United States",
    "DRC": "Democratic Republic of the Congo",
    "Austrailia": "Australia",
    "Kyrgzstan": "Kyrgyzstan",
    "CIS Countries (inc. Russia)": "CIS countries",
}
PLACE_TYPES: dict[str, str] = {"CIS countries": "region", "New Caledonia": "region"}

# Decay modes (NUBASE ASCII codes as stored in isotopedecaymodes.mode):
# mode -> (change of Z, change of A, English phrase).  Modes not listed (SF, B+SF, B-SF, B+pA) are
# not mapped to a daughter.  Cluster modes such as "14C" are handled in cluster_mode().
DECAY_MODES: dict[str, tuple[int, int, str]] = {
    "B-": (1, 0, "beta-minus decay"),
    "B+": (-1, 0, "beta-plus decay or electron capture"),
    "EC": (-1, 0, "electron capture"),
    "e+": (-1, 0, "positron emission"),
    "EC+B+": (-1, 0, "electron capture and positron emission"),
    "A": (-2, -4, "alpha decay"),
    "n": (0, -1, "neutron emission"),
    "2n": (0, -2, "two-neutron emission"),
    "3n": (0, -3, "three-neutron emission"),
    "4n": (0, -4, "four-neutron emission"),
    "p": (-1, -1, "proton emission"),
    "2p": (-2, -2, "two-proton emission"),
    "3p": (-3, -3, "three-proton emission"),
    "2B-": (2, 0, "double beta-minus decay"),
    "2B+": (-2, 0, "double beta-plus decay"),
    "B-n": (1, -1, "beta-delayed neutron emission"),
    "B-2n": (1, -2, "beta-delayed two-neutron emission"),
    "B-3n": (1, -3, "beta-delayed three-neutron emission"),
    "B-4n": (1, -4, "beta-delayed four-neutron emission"),
    "B-p": (0, -1, "beta-delayed proton emission"),
    "B-d": (0, -2, "beta-delayed deuteron emission"),
    "B-t": (0, -3, "beta-delayed triton emission"),
    "B-A": (-1, -4, "beta-delayed alpha emission"),
    "B+p": (-2, -1, "beta-plus-delayed proton emission"),
    "B+2p": (-3, -2, "beta-plus-delayed two-proton emission"),
    "B+3p": (-4, -3, "beta-plus-delayed three-proton emission"),
    "B+A": (-3, -4, "beta-plus-delayed alpha emission"),
}
# Observed modes that get no daughter (fission products are not one isotope) -> English phrase.
UNMAPPED_MODES: dict[str, str] = {
    "SF": "spontaneous fission",
    "B-SF": "beta-delayed fission",
    "B+SF": "beta-plus-delayed fission",
    "B+pA": "beta-plus-delayed proton and alpha emission",
}
# Sub-branches of beta decay: their intensity is a share of all decays but they are not counted
# again when checking that the top-level branches add up to about 100 %.
BETA_SUB_BRANCHES = {
    "B-n", "B-2n", "B-3n", "B-4n", "B-p", "B-d", "B-t", "B-A", "B-SF",
    "B+p", "B+2p", "B+3p", "B+A", "B+pA", "B+SF",
}
# In this database the NUBASE codes B-2n/B-3n/B-4n and B+2p/B+3p lost their "B-"/"B+" prefix;
# a multi-nucleon mode listed next to beta decay (and not stronger than it) is read as delayed.
LOST_BETA_PREFIX = {"2n": "B-", "3n": "B-", "4n": "B-", "2p": "B+", "3p": "B+"}
_CLUSTER = re.compile(r"^(\d+)([A-Z][a-z]?)$")
# Ranked country columns of the elements table: column -> relation, role, role plural.
PLACE_RANKINGS = (
    ("top_3_producers", "produced mainly in", "producer", "producers"),
    ("top_3_reserve_holders", "reserves mainly in", "reserve holder", "reserve holders"),
)
INTENSITY_WORDS = {"=": "", "~": "about ", "<": "below ", ">": "above "}

# Database columns the graph is built from (their citations go into SOURCE.md).
USED_COLUMNS = {
    f"elements.{c}" for c in (
        "atomic_number", "name", "symbol", "block", "period", "group_id", "series_id", "atomic_weight",
        "description", "name_origin", "discoverers", "discovery_year", "discovery_location",
        "top_3_producers", "top_3_reserve_holders",
    )
} | {
    f"isotopes.{c}" for c in (
        "mass_number", "mass", "abundance", "is_radioactive", "half_life", "half_life_unit", "spin",
        "parity", "discovery_year", "decay_modes",
    )
} | {
    f"isotopedecaymodes.{c}" for c in (
        "mode", "relation", "intensity", "is_allowed_not_observed", "is_observed_intensity_unknown",
    )
}
# Citation keys of the package's propertymetadata table -> reference.
CITATIONS: dict[str, str] = {
    "Kondev2021": "F. G. Kondev, M. Wang, W. J. Huang, S. Naimi, G. Audi, \"The NUBASE2020 evaluation of "
                  "nuclear physics properties\", Chinese Physics C 45, 030001 (2021)",
    "iupac-masses": "IUPAC Commission on Isotopic Abundances and Atomic Weights (CIAAW), atomic masses, "
                    "http://ciaaw.org/atomic-masses.htm",
    "iupac-weights": "IUPAC CIAAW, standard atomic weights, http://ciaaw.org/atomic-weights.htm",
    "Meija2016": "J. Meija et al., \"Atomic weights of the elements 2013 (IUPAC Technical Report)\", "
                 "Pure and Applied Chemistry 88, 265-291 (2016)",
    "RSC_periodic_table": "Royal Society of Chemistry, Periodic Table, https://www.rsc.org/periodic-table/",
}

HALF_LIFE_UNITS: dict[str, str] = {
    "ysec": "yoctoseconds", "zsec": "zeptoseconds", "asec": "attoseconds", "psec": "picoseconds",
    "nsec": "nanoseconds", "usec": "microseconds", "msec": "milliseconds", "sec": "seconds",
    "minute": "minutes", "hour": "hours", "day": "days", "year": "years",
    "kyear": "thousand years", "Myear": "million years", "Gyear": "billion years",
    "Tyear": "trillion years", "Pyear": "× 10^15 years", "Eyear": "× 10^18 years",
    "Zyear": "× 10^21 years", "Yyear": "× 10^24 years",
}
ORDINALS = {1: "1st", 2: "2nd", 3: "3rd"}


# ---------------------------------------------------------------------------------------------
# Graph container
# ---------------------------------------------------------------------------------------------


@dataclass
class KnowledgeGraph:
    """Entities keyed by name and triples keyed by (head, relation, tail)."""

    entities: dict[str, tuple[str, str]] = field(default_factory=dict)
    triples: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    _keys: dict[str, str] = field(default_factory=dict)

    def add_entity(self, name: str, etype: str, description: str) -> None:
        key = normalize_name(name)
        if key in self._keys and self._keys[key] != name:
            raise ValueError(f"entity names collide after normalisation: {name!r} / {self._keys[key]!r}")
        if name in self.entities:
            raise ValueError(f"duplicate entity {name!r}")
        self._keys[key] = name
        self.entities[name] = (etype, clean(description))

    def add_triple(self, head: str, relation: str, tail: str, description: str) -> None:
        """Add a triple; a repeated (head, relation, tail) keeps the first sentence only."""
        self.triples.setdefault((head, relation, tail), []).append(clean(description))


# ---------------------------------------------------------------------------------------------
# Reading the database
# ---------------------------------------------------------------------------------------------


def database_path() -> Path:
    """The elements.db file shipped inside the installed mendeleev package."""
    return Path(os.path.dirname(mendeleev.__file__)) / "elements.db"


def read_table(conn: sqlite3.Connection, sql: str) -> list[dict]:
    """Run a query and return its rows as dicts."""
    cur = conn.execute(sql)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, row, strict=False)) for row in cur.fetchall()]


def fmt_number(value: float | int) -> str:
    """Shortest faithful text for a stored number (100.0 -> '100', 0.7204 -> '0.7204')."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def isotope_name(element_name: str, mass_number: int) -> str:
    return f"{element_name}-{mass_number}"


# ---------------------------------------------------------------------------------------------
# Periodic-table structure: groups, periods, blocks, series
# ---------------------------------------------------------------------------------------------


def group_label(group: dict) -> str:
    """'IVA, Carbon group' from a row of the groups table."""
    return ", ".join(x for x in (group["symbol"], group["name"]) if x)


def group_entities(kg: KnowledgeGraph, groups: list[dict], elements: list[dict]) -> dict[int, tuple[str, str]]:
    """One entity per periodic-table group; returns group_id -> (entity name, 'IVA, Carbon group')."""
    members = Counter(e["group_id"] for e in elements if e["group_id"] is not None)
    names: dict[int, tuple[str, str]] = {}
    for g in groups:
        gid = g["group_id"]
        name = f"Group {gid}"
        called = f", called {g['name']} in the source" if g["name"] else ""
        kg.add_entity(
            name, "group",
            f"Group {gid} of the periodic table (label {g['symbol']}{called}); "
            f"{members[gid]} elements of the mendeleev database are in it.",
        )
        names[gid] = (name, group_label(g))
    return names


def period_entities(kg: KnowledgeGraph, elements: list[dict]) -> dict[int, str]:
    """One entity per period (row) of the periodic table."""
    counts = Counter(e["period"] for e in elements)
    names = {}
    for period in sorted(counts):
        names[period] = f"Period {period}"
        kg.add_entity(
            names[period], "period",
            f"Period {period} of the periodic table, with {counts[period]} elements in the mendeleev database.",
        )
    return names


def block_entities(kg: KnowledgeGraph, elements: list[dict]) -> dict[str, str]:
    """One entity per block (s, p, d, f) of the periodic table."""
    counts = Counter(e["block"] for e in elements)
    names = {}
    for block in sorted(counts):
        names[block] = f"{block}-block"
        kg.add_entity(
            names[block], "block",
            f"The {block}-block of the periodic table, with {counts[block]} elements in the mendeleev database.",
        )
    return names


def series_entities(kg: KnowledgeGraph, series: list[dict], elements: list[dict]) -> dict[int, str]:
    """One entity per element series (Nonmetals, Lanthanides, ...) of the series table."""
    counts = Counter(e["series_id"] for e in elements)
    names = {}
    for s in series:
        names[s["id"]] = s["name"]
        kg.add_entity(
            s["name"], "series",
            f"{s['name']} is an element series of the mendeleev database with {counts[s['id']]} elements.",
        )
    return names


def element_structure_triples(
    kg: KnowledgeGraph, elements: list[dict], groups: dict[int, tuple[str, str]], periods: dict[int, str],
    series: dict[int, str], blocks: dict[str, str],
) -> None:
    """element -in group / in period / in series / in block-> structure entity."""
    for e in elements:
        name = e["name"]
        if e["group_id"] is not None:
            group, label = groups[e["group_id"]]
            kg.add_triple(name, "in group", group,
                          f"{name} is in group {e['group_id']} ({label}) of the periodic table.")
        kg.add_triple(name, "in period", periods[e["period"]],
                      f"{name} is in period {e['period']} of the periodic table.")
        if e["series_id"] is not None:
            kg.add_triple(name, "in series", series[e["series_id"]],
                          f"{name} belongs to the {series[e['series_id']]} series.")
        kg.add_triple(name, "in block", blocks[e["block"]],
                      f"{name} is in the {e['block']}-block of the periodic table.")


# ---------------------------------------------------------------------------------------------
# Elements
# ---------------------------------------------------------------------------------------------


def element_entities(kg: KnowledgeGraph, elements: list[dict], series: dict[int, str]) -> None:
    """One entity per element: key facts, then the database's own description and name origin."""
    for e in elements:
        where = f"period {e['period']}"
        if e["group_id"] is not None:
            where += f", group {e['group_id']}"
        facts = (
            f"{e['name']} (symbol {e['symbol']}, atomic number {e['atomic_number']}) is a chemical element "
            f"in the {e['block']}-block, {where} of the periodic table"
        )
        if e["series_id"] is not None:
            facts += f", in the {series[e['series_id']]} series"
        if e["atomic_weight"] is not None:
            facts += f"; atomic weight {fmt_number(e['atomic_weight'])}"
        parts = [facts + "."]
        if clean(e["description"]):
            parts.append(clean(e["description"]))
        if clean(e["discoverers"]).lower().startswith("known to the ancients"):
            parts.append("The source lists it as known to the ancients.")
        if clean(e["name_origin"]):
            origin = clean(e["name_origin"])
            parts.append(f"Name origin: {origin}" + ("" if origin.endswith(".") else "."))
        kg.add_entity(e["name"], "element", " ".join(parts))


# ---------------------------------------------------------------------------------------------
# Discoverers and discovery places
# ---------------------------------------------------------------------------------------------


def split_discoverers(raw: str | None) -> list[tuple[str, str]]:
    """Split a discoverers field into (source spelling, canonical name) pairs, dropping non-persons."""
    result: list[tuple[str, str]] = []
    for part in re.split(r"[;,/]", raw or ""):
        spelled = part.strip()
        if not spelled or spelled.lower() in NOT_DISCOVERERS:
            continue
        spaced = re.sub(r"\.(?=[^\s.])", ". ", spelled)
        for name in SPLIT_DISCOVERERS.get(spaced, (spaced,)):
            result.append((spelled, DISCOVERER_CANONICAL.get(name, ORGANIZATIONS.get(name, name))))
    return result


def discoverer_entities_and_triples(kg: KnowledgeGraph, elements: list[dict]) -> None:
    """Persons and institutions credited with discoveries; element -discovered by-> discoverer."""
    credited: dict[str, list[tuple[int, str]]] = defaultdict(list)
    spellings: dict[str, set[str]] = defaultdict(set)
    for e in elements:
        pairs = split_discoverers(e["discoverers"])
        names = list(dict.fromkeys(name for _, name in pairs))
        for spelled, name in pairs:
            spellings[name].add(spelled)
        for name in names:
            credited[name].append((e["atomic_number"], e["name"]))
            others = [n for n in names if n != name]
            year = f" in {e['discovery_year']}" if e["discovery_year"] else ""
            together = f" together with {join_list(others)}" if others else ""
            kg.add_triple(e["name"], "discovered by", name,
                          f"{e['name']} was discovered by {name}{together}{year}.")
    years = {e["name"]: e["discovery_year"] for e in elements}
    for name, items in credited.items():
        is_org = name in ORGANIZATIONS.values()
        found = join_list([f"{el} ({years[el]})" if years[el] else el for _, el in sorted(items)])
        kind = "an institution" if is_org else "a person"
        desc = f"{kind} credited in the mendeleev database with the discovery of {found}."
        if spellings[name] != {name}:
            desc += " Spelled in the source as " + join_list([f"\"{s}\"" for s in sorted(spellings[name])]) + "."
        kg.add_entity(name, "organization" if is_org else "person", f"{name} is {desc}")


def place_name(raw: str) -> str:
    return PLACE_CANONICAL.get(raw, raw)


def ranked_places(raw: str | None) -> list[tuple[int, str, str]]:
    """Parse '1) USA  2) Algeria  3) Russia' into (rank, source text, place); skip uncertain entries."""
    out = []
    for rank, text in re.findall(r"(\d)\)\s*(.*?)\s*(?=\d\)|$)", raw or ""):
        text = text.strip()
        # "Unknown (likely USA)", "Germany (likely)" are hedged; "Poland: Chile" is garbled.
        if not text or "likely" in text.lower() or ":" in text:
            continue
        out.append((int(rank), text, place_name(text)))
    return out


def place_entities_and_triples(kg: KnowledgeGraph, elements: list[dict]) -> None:
    """Countries: element -discovered in-> / -produced mainly in-> / -reserves mainly in-> country."""
    roles: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    spellings: dict[str, set[str]] = defaultdict(set)
    for e in elements:
        name = e["name"]
        locations = [p.strip() for p in (e["discovery_location"] or "").split("/") if p.strip()]
        places = [place_name(p) for p in locations]
        for spelled, place in zip(locations, places, strict=True):
            spellings[place].add(spelled)
            roles[place]["discovery location"].append(name)
            year = f" in {e['discovery_year']}" if e["discovery_year"] else ""
            if len(places) == 1:
                text = f"{name} was discovered in {place}{year}."
            else:
                text = f"{name} was discovered{year}; the source lists {join_list(places)} as discovery locations."
            kg.add_triple(name, "discovered in", place, text)
        for column, relation, role, plural in PLACE_RANKINGS:
            for rank, spelled, place in ranked_places(e[column]):
                spellings[place].add(spelled)
                roles[place][f"top-3 {role}"].append(name)
                kg.add_triple(name, relation, place,
                              f"{place} is ranked {ORDINALS[rank]} among the top 3 {plural} of {name}.")
    for place, by_role in roles.items():
        parts = [f"{role} for {len(els)} element{'s' if len(els) > 1 else ''}" for role, els in sorted(by_role.items())]
        etype = PLACE_TYPES.get(place, "country")
        desc = f"{place} is a {etype} named in the mendeleev element data as {join_list(parts)}."
        if spellings[place] != {place}:
            desc += " Spelled in the source as " + join_list([f"\"{s}\"" for s in sorted(spellings[place])]) + "."
        kg.add_entity(place, etype, desc)


# ---------------------------------------------------------------------------------------------
# Isotopes and decay
# ---------------------------------------------------------------------------------------------


def half_life_text(iso: dict) -> str:
    if iso["half_life"] is None or not iso["half_life_unit"]:
        return ""
    unit = HALF_LIFE_UNITS.get(iso["half_life_unit"], iso["half_life_unit"])
    return f"{fmt_number(iso['half_life'])} {unit}"


def isotope_entities_and_triples(
    kg: KnowledgeGraph, isotopes: list[dict], element_names: dict[int, str],
    mode_phrases: dict[int, list[str]],
) -> None:
    """One entity per isotope and isotope -isotope of-> element."""
    for iso in isotopes:
        element = element_names[iso["atomic_number"]]
        name = isotope_name(element, iso["mass_number"])
        text = (f"{name} is an isotope of {element} "
                f"(atomic number {iso['atomic_number']}, mass number {iso['mass_number']})")
        if iso["mass"] is not None:
            text += f" with atomic mass {fmt_number(iso['mass'])} Da"
        text += "."
        hl = half_life_text(iso)
        if iso["is_radioactive"]:
            text += f" It is radioactive with a half-life of {hl}." if hl else " It is radioactive."
        elif iso["abundance"] is not None and not mode_phrases.get(iso["id"]):
            text += " It is stable."
        if iso["abundance"] is not None:
            text += f" Natural abundance: {fmt_number(iso['abundance'])}%."
        if iso["spin"] or iso["parity"]:
            text += f" Ground-state spin and parity: {iso['spin'] or ''}{iso['parity'] or ''}."
        if iso["discovery_year"]:
            text += f" Discovered in {iso['discovery_year']}."
        phrases = mode_phrases.get(iso["id"])
        if phrases:
            text += f" Observed decay modes: {join_list(phrases)}."
        kg.add_entity(name, "isotope", text)
        abundance = f", natural abundance {fmt_number(iso['abundance'])}%" if iso["abundance"] is not None else ""
        kg.add_triple(name, "isotope of", element,
                      f"{name} is an isotope of {element} with mass number {iso['mass_number']}{abundance}.")


def cluster_mode(mode: str, z_by_symbol: dict[str, int], element_names: dict[int, str]) -> tuple[int, int, str] | None:
    """'14C' -> (-6, -14, 'cluster decay emitting Carbon-14'); None if not a cluster code."""
    m = _CLUSTER.match(mode)
    if not m or m.group(2) not in z_by_symbol:
        return None
    z, a = z_by_symbol[m.group(2)], int(m.group(1))
    return -z, -a, f"cluster decay emitting {isotope_name(element_names[z], a)}"


def resolve_modes(rows: list[dict]) -> list[tuple[dict, str]]:
    """Pair each decay-mode row of one isotope with its effective NUBASE code (lost prefix restored).

    A "2n"/"3n"/"4n" ("2p"/"3p") row is read as beta-delayed emission when the same isotope has an
    observed B- (B+) branch with a known intensity and the row is not stronger than that branch,
    or has no intensity of its own.
    """
    out = []
    for r in rows:
        mode = r["mode"]
        beta = LOST_BETA_PREFIX.get(mode)
        if beta is not None:
            beta_rows = [o for o in rows if o["mode"] == beta and not o["is_allowed_not_observed"] and o["intensity"]]
            if beta_rows and (not r["intensity"] or r["intensity"] <= beta_rows[0]["intensity"]):
                mode = beta + mode
        out.append((r, mode))
    return out


def decay_triples(
    kg: KnowledgeGraph, isotopes: list[dict], decay_rows: list[dict], element_names: dict[int, str],
    z_by_symbol: dict[str, int],
) -> tuple[dict[int, list[str]], Counter]:
    """isotope -decays to-> daughter isotope for every observed decay mode with a known daughter.

    Returns the English phrases of the observed modes per isotope id (for the isotope descriptions)
    and counters of what was mapped or skipped (printed by the check).
    """
    iso_by_id = {i["id"]: i for i in isotopes}
    iso_by_za = {(i["atomic_number"], i["mass_number"]): i for i in isotopes}
    rows_by_iso: dict[int, list[dict]] = defaultdict(list)
    for r in decay_rows:
        rows_by_iso[r["isotope_id"]].append(r)
    stats: Counter = Counter()
    phrases_by_iso: dict[int, list[str]] = {}
    for iso_id in sorted(rows_by_iso):
        parent = iso_by_id[iso_id]
        pname = isotope_name(element_names[parent["atomic_number"]], parent["mass_number"])
        resolved = resolve_modes(rows_by_iso[iso_id])
        observed = [(r, m) for r, m in resolved if not r["is_allowed_not_observed"]]
        stats["mode rows skipped (allowed, not observed)"] += len(resolved) - len(observed)
        # Do the top-level branching intensities add up to about 100 %?
        has_b_plus = any(m == "B+" for _, m in observed)
        top = [r["intensity"] for r, m in observed if r["intensity"] is not None and m not in BETA_SUB_BRANCHES
               and not (has_b_plus and m in ("EC", "e+", "EC+B+"))]
        doubtful = sum(top) > INTENSITY_SUM_TOLERANCE
        largest = max(top) if top else None
        by_daughter: dict[str, list[str]] = defaultdict(list)
        phrases: list[str] = []
        for r, mode in observed:
            info = DECAY_MODES.get(mode) or cluster_mode(mode, z_by_symbol, element_names)
            if info is None:
                phrases.append(UNMAPPED_MODES.get(mode, f"the mode coded {mode}"))
                stats[f"mode rows without daughter ({mode})"] += 1
                continue
            dz, da, phrase = info
            phrases.append(phrase)
            daughter = iso_by_za.get((parent["atomic_number"] + dz, parent["mass_number"] + da))
            if daughter is None:
                stats["mode rows whose daughter is not in the isotopes table"] += 1
                continue
            if r["intensity"] == 0:
                stats["intensities left unstated (stored as 0)"] += 1
                detail = phrase
            elif r["intensity"] is not None:
                if doubtful and mode not in BETA_SUB_BRANCHES and r["intensity"] != largest:
                    stats["intensities left unstated (branches add up to over 100%)"] += 1
                    detail = phrase
                else:
                    amount = f"{INTENSITY_WORDS.get(r['relation'], '')}{fmt_number(r['intensity'])}%"
                    detail = f"{phrase} (intensity {amount})"
            elif r["is_observed_intensity_unknown"]:
                detail = f"{phrase} (observed, intensity not measured)"
            else:
                detail = phrase
            dname = isotope_name(element_names[daughter["atomic_number"]], daughter["mass_number"])
            by_daughter[dname].append(detail)
            stats["mode rows mapped to a daughter"] += 1
        phrases_by_iso[iso_id] = list(dict.fromkeys(phrases))
        for dname in sorted(by_daughter):
            kg.add_triple(pname, "decays to", dname,
                          f"{pname} decays to {dname} by {join_list(by_daughter[dname])}.")
    return phrases_by_iso, stats


# ---------------------------------------------------------------------------------------------
# Output and checks
# ---------------------------------------------------------------------------------------------


def write_outputs(kg: KnowledgeGraph) -> tuple[list[dict], list[dict]]:
    entities = [{"name": n, "type": t, "description": d} for n, (t, d) in sorted(kg.entities.items())]
    triples = [
        {"head": h, "relation": r, "tail": t, "description": descs[0]}
        for (h, r, t), descs in sorted(kg.triples.items())
    ]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    return entities, triples


def check_graph(entities: list[dict], triples: list[dict]) -> dict[str, int]:
    """Validate endpoints and names; print the size, connectivity and seed-ball numbers."""
    check_names_and_endpoints(entities, triples)
    graph, ball, components = seed_balls(entities, triples)
    ball_sizes = list(ball.values())
    seeds = len(eligible(ball))
    eligible_by_type = Counter(e["type"] for e in entities if SEED_MIN <= ball[e["name"]] <= SEED_MAX)
    inside = sorted(s for s in ball_sizes if SEED_MIN <= s <= SEED_MAX)
    numbers = {
        "entities": len(entities), "triples": len(triples), "eligible_seeds": seeds,
        "eligible_isotopes": eligible_by_type["isotope"], "balls_above_max": sum(s > SEED_MAX for s in ball_sizes),
        "median_eligible_ball": inside[len(inside) // 2],
        "components": len(components), "largest_component": components[0],
    }
    print("entities by type:", tally(e["type"] for e in entities))
    print("triples by relation:", tally(t["relation"] for t in triples))
    print(f"eligible seeds ({SEED_HOPS}-hop ball of {SEED_MIN}..{SEED_MAX} nodes) by type:",
          dict(sorted(eligible_by_type.items())))
    print(f"ball sizes: below {SEED_MIN}: {sum(s < SEED_MIN for s in ball_sizes)}, above {SEED_MAX}: "
          f"{sum(s > SEED_MAX for s in ball_sizes)}; eligible balls min/median/max: "
          f"{inside[0]}/{inside[len(inside) // 2]}/{inside[-1]}")
    print("max degree:", sorted(((d, n) for n, d in graph.degree()), reverse=True)[:5])
    print(numbers)
    return numbers


def count_table(title: str, counts: Counter) -> list[str]:
    lines = [f"| {title} | count |", "|---|---|"]
    lines += [f"| {key} | {value} |" for key, value in sorted(counts.items())]
    return lines + [f"| **total** | {sum(counts.values())} |", ""]


def write_source_md(
    path: Path, entities: list[dict], triples: list[dict], numbers: dict[str, int], prov: Provenance,
) -> None:
    """SOURCE.md: provenance, licence, how to regenerate, editorial choices and counts."""
    cited = [
        f"  - `{t}.{c}` ({d}): {', '.join(k.strip() for k in keys.split(',')) if keys else 'no citation given'}"
        for t, c, d, keys in prov.citations
    ]
    used_keys = sorted({k.strip() for *_, keys in prov.citations for k in keys.split(",") if k.strip()})
    refs = [f"  - {k}: {CITATIONS.get(k, '(key not resolved)')}" for k in used_keys]
    merges = [f"{src!r} -> {dst!r}" for src, dst in sorted(DISCOVERER_CANONICAL.items())]
    orgs = [f"{src!r} -> {dst!r}" for src, dst in sorted(ORGANIZATIONS.items()) if src != dst]
    places = [f"{src!r} -> {dst!r}" for src, dst in sorted(PLACE_CANONICAL.items())]
    st = prov.stats
    graph_check = (
        f"Undirected graph check: {numbers['components']} connected component(s), "
        f"largest {numbers['largest_component']} nodes;\n"
        f"{numbers['eligible_seeds']} eligible seeds (depth-{SEED_HOPS} ball of {SEED_MIN}-{SEED_MAX} nodes), "
        f"{numbers['eligible_isotopes']} of them\n"
        f"isotopes, median eligible ball {numbers['median_eligible_ball']} nodes; "
        f"{numbers['balls_above_max']} entities have larger balls."
    )
    missing_daughters = st["mode rows whose daughter is not in the isotopes table"]
    text = f"""# chemistry — elements, isotopes and radioactive decay

## Source

- Data: the SQLite database `elements.db` shipped inside the PyPI package `mendeleev` {prov.version}
  (database schema revision `{prov.db_revision}`, file sha256 `{prov.db_sha256}`);
  package: https://github.com/lmmentel/mendeleev, documentation: https://mendeleev.readthedocs.io.
  Read with `sqlite3` directly (tables `elements`, `isotopes`, `isotopedecaymodes`, `groups`, `series`,
  `propertymetadata`, `alembic_version`).
- Licence: the package metadata declares `License: {prov.licence}` (MIT License, Copyright (c) 2015
  Lukasz Mentel; see `mendeleev-{prov.version}.dist-info/licenses/LICENSE`). The upstream data sets
  below keep their own publishers' terms.
- Upstream sources, as cited by the package's own `propertymetadata` table for the columns used here:
{chr(10).join(cited)}
- References of those citation keys:
{chr(10).join(refs)}
- The descriptive element columns (description, name origin, discoverers, discovery year and
  location, block, period, group, series) carry no citation in the package.

## Regenerate

```
python kg_assets/exporters/chemistry.py
```

Needs `mendeleev` {prov.version} and `networkx`. Output is deterministic (sorted, UTF-8 with
`ensure_ascii=False`, `\\n` line endings); the script ends with a networkx check of names,
triple endpoints, connected components and seed ball sizes, and rewrites this file.

## What is in the graph

- `element` (one per row of `elements`): description = symbol, atomic number, block, period,
  group, series and atomic weight, then the database's own `description` text and `name_origin`.
- `isotope` (one per row of `isotopes`, named like "Carbon-14"): atomic mass, half-life (unit
  spelled out), natural abundance, spin/parity, discovery year and observed decay modes.
  `isotope of` links each isotope to its element.
- `decays to` (isotope -> isotope): one triple per parent/daughter pair, built from the observed
  rows of `isotopedecaymodes`. The daughter is derived from the mode by nuclear arithmetic
  (B-: Z+1; B+, EC, e+: Z-1; A: Z-2, A-4; n/2n/3n/4n: A-1..-4; p/2p/3p: Z and A -1..-3;
  2B-: Z+2; 2B+: Z-2; beta-delayed particle emission: the beta step then the particle; cluster
  decay such as `14C`: Z and A of the cluster) and kept only if it exists in `isotopes` ({missing_daughters} did not).
  Rows flagged "energetically allowed, not observed" ({st['mode rows skipped (allowed, not observed)']}) are skipped;
  spontaneous fission and beta-delayed fission have no single daughter and are only mentioned in
  the isotope description. Several modes leading to the same daughter share one triple.
  The sentence states the branching intensity with the row's relation (`=`, `~` about, `<` below,
  `>` above), "observed, intensity not measured" where flagged so, and no intensity where the value
  is implausible (see data issues).
- `discovered by` (element -> `person` / `organization`): the `discoverers` field split on `,` `;` `/`;
  "Known to the ancients" and "et al" dropped; "Pierre and Marie Curie" and "Fausto and Juan José
  de Elhuyar" split into two persons. Initials are spaced ("G.T.Seaborg" -> "G. T. Seaborg").
  Spelling variants of one person are merged and obvious misspellings corrected; every person's
  description quotes the spellings found in the source:
  {'; '.join(merges)}.
  Institutions (abbreviations spelled out): {'; '.join(orgs)}.
- `discovered in` (element -> `country`): `discovery_location` split on `/` ("England/France").
- `produced mainly in` / `reserves mainly in` (element -> `country` / `region`): the ranked
  `top_3_producers` / `top_3_reserve_holders` lists (Royal Society of Chemistry data); hedged
  entries ("Unknown (likely USA)", "Germany (likely)") and the garbled "Poland: Chile" are skipped.
  Country spellings unified: {'; '.join(places)}.
- `in group` / `in period` / `in block` / `in series` (element -> `group` / `period` / `block` /
  `series`); group entities are named "Group 1".."Group 18" and carry the table's label (IA,
  Alkali metals, ...); f-block elements have no group in the source.
- Hubs: elements, groups, periods, blocks, series and the largest countries have depth-3 balls of
  more than {SEED_MAX} nodes and are not seeds; isotopes (each linked to one element and a few decay
  neighbours) are the bulk of the eligible seeds. Multi-hop paths such as isotope -decays to->
  isotope -isotope of-> element -discovered in-> country stay inside the window.

## Counts

{chr(10).join(count_table("entity type", Counter(e["type"] for e in entities)))}
{chr(10).join(count_table("relation", Counter(t["relation"] for t in triples)))}
Decay-mode rows mapped to a daughter: {st['mode rows mapped to a daughter']}; intensities left unstated
because the branches add up to over 100%: {st['intensities left unstated (branches add up to over 100%)']};
stored as 0: {st['intensities left unstated (stored as 0)']}.

{graph_check}

## Data issues found in the source

- Small branching intensities lost their exponent: e.g. U-238 lists SF = 5.44 and 2B- = 2.2 next to
  A = 100 (NUBASE2020: 5.44e-5 % and 2.2e-10 %); cluster-decay intensities (14C, 24Ne, 28Mg, ...)
  are affected the same way, and a few are stored as 0. When an isotope's top-level branches add up
  to more than {INTENSITY_SUM_TOLERANCE}% only the largest branch keeps its intensity in the sentences.
  Small branches whose exponent was lost but that do not push the sum over 100 % cannot be detected.
- The NUBASE codes B-2n, B-3n, B-4n, B+2p and B+3p lost their beta prefix (Li-11 lists B-n 86.3,
  "2n" 4.1, "3n" 1.9 under B- 100). A multi-nucleon mode listed next to an observed beta branch
  of known intensity, and not stronger than it, is read as beta-delayed emission
  (so Fe-45 keeps its direct 2p = 70 % and gets B+2p = 7.8 %).
- `B+` is the combined beta-plus/electron-capture branch; `e+` and `EC` rows are its parts.
- Te-123 is marked not radioactive but has an observed EC row; some isotopes (e.g. Carbon-21) are
  marked not radioactive but have neither a half-life nor an abundance (no stability is claimed
  for them; only isotopes with a natural abundance and no observed decay are called stable).
- Discoverer names and years are as in the source, which has misspellings (handled above) and some
  doubtful attributions (e.g. platinum is credited to "Julius Scaliger" in 1735); the description text of hydrogen
  says 1776 while `discovery_year` is 1766. These are kept as stated, not corrected.
"""
    path.write_text(text, encoding="utf-8", newline="\n")


@dataclass
class Provenance:
    """What the graph was built from, for SOURCE.md."""

    version: str
    db_sha256: str
    db_revision: str
    licence: str
    citations: list[tuple[str, str, str, str]]  # (table, column, description, citation keys)
    stats: Counter


def read_provenance(conn: sqlite3.Connection, stats: Counter) -> Provenance:
    """Package version, database hash and revision, licence, and the cited sources of the used columns."""
    placeholders = ",".join("?" * len(USED_COLUMNS))
    rows = conn.execute(
        f"SELECT table_name, column_name, description, citation_keys FROM propertymetadata "
        f"WHERE table_name || '.' || column_name IN ({placeholders}) ORDER BY table_name, column_name",
        sorted(USED_COLUMNS),
    ).fetchall()
    dist = metadata.distribution(PACKAGE)
    return Provenance(
        version=dist.version,
        db_sha256=hashlib.sha256(database_path().read_bytes()).hexdigest(),
        db_revision=conn.execute("SELECT version_num FROM alembic_version").fetchone()[0],
        licence=dist.metadata.get("License", "unknown"),
        citations=[(t, c, d, k or "") for t, c, d, k in rows],
        stats=stats,
    )


def build() -> tuple[KnowledgeGraph, Provenance]:
    """Read elements.db and assemble the whole graph."""
    conn = sqlite3.connect(f"file:{database_path()}?mode=ro", uri=True)
    elements = read_table(conn, "SELECT * FROM elements ORDER BY atomic_number")
    isotopes = read_table(conn, "SELECT * FROM isotopes ORDER BY atomic_number, mass_number, id")
    decay_rows = read_table(conn, "SELECT * FROM isotopedecaymodes ORDER BY isotope_id, id")
    groups = read_table(conn, "SELECT * FROM groups ORDER BY group_id")
    series_rows = read_table(conn, "SELECT * FROM series ORDER BY id")

    element_names = {e["atomic_number"]: e["name"] for e in elements}
    z_by_symbol = {e["symbol"]: e["atomic_number"] for e in elements}
    kg = KnowledgeGraph()
    series = series_entities(kg, series_rows, elements)
    element_structure_triples(
        kg, elements, group_entities(kg, groups, elements), period_entities(kg, elements), series,
        block_entities(kg, elements),
    )
    element_entities(kg, elements, series)
    discoverer_entities_and_triples(kg, elements)
    place_entities_and_triples(kg, elements)
    mode_phrases, stats = decay_triples(kg, isotopes, decay_rows, element_names, z_by_symbol)
    isotope_entities_and_triples(kg, isotopes, element_names, mode_phrases)
    provenance = read_provenance(conn, stats)
    conn.close()
    return kg, provenance


def main() -> None:
    kg, provenance = build()
    print(f"{PACKAGE} {provenance.version}: {database_path()}")
    for key, value in sorted(provenance.stats.items()):
        print(f"  {key}: {value}")
    entities, triples = write_outputs(kg)
    numbers = check_graph(entities, triples)
    write_source_md(OUT_DIR / "SOURCE.md", entities, triples, numbers, provenance)


if __name__ == "__main__":
    main()
