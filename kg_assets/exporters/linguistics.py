"""Export the "linguistics" knowledge graph (languages, scripts, territories) from the CLDR data babel ships.

Why this exists: kg_assets/linguistics/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the Unicode CLDR data inside the installed
PyPI package ``babel`` (``babel/global.dat`` and ``babel/locale-data/*.dat``; see SOURCE.md for
versions, licences and checksums).

Graph: languages (CLDR English names), the scripts they are written in (ISO 15924 names), the
territories they are used in, and the regional/script varieties CLDR names in English.  A language
links to its likely script and its likely territory (CLDR likely subtags, e.g. ``hi -> hi_Deva_IN``),
to the other scripts CLDR lists for it, and to every territory whose CLDR language data lists it,
labelled by official status, with the population share in the sentence; a territory links to its
most likely language (``und_IN -> hi``), a script to its most likely language and territory
(``und_Deva -> hi_Deva_IN``), a variety to its language, territory or script (``de_AT``).  The Latin
script, the likely script of most languages, is not linked by `written in` (a hub; see SOURCE.md).
Nothing is invented: names, links and sentences are all built from the CLDR records; the editorial
rules are listed in SOURCE.md.

Run from the project root:  python kg_assets/exporters/linguistics.py
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import babel
import networkx as nx
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    check_names_and_endpoints,
    count_tables,
    eligible,
    files_sha256,
    normalize_name,
    package_dir,
    seed_balls,
    tally,
    write_jsonl,
)
from _shared import join_list as join_all
from babel import localedata
from babel.core import get_global

OUT_DIR = Path(__file__).resolve().parents[1] / "linguistics"
PACKAGE = "babel"
# A script that is the likely script of more languages than this is not linked by `written in`:
# it would be one hub next to most of the graph (in CLDR 47 only Latin, with 433 languages).
MAX_WRITTEN_IN = 100
# CLDR's English script names for Hans/Hant are the short forms used inside "Chinese (Simplified)";
# babel ships no alternative forms, so these two take CLDR's stand-alone forms (en.xml, alt="stand-alone").
STAND_ALONE_SCRIPT_NAMES = {"Hans": "Simplified Han", "Hant": "Traditional Han"}
# Language codes that name no language ("undetermined", "multiple", "no linguistic content", ...).
NOT_LANGUAGES = {"und", "mul", "zxx", "mis"}
# Territory codes that are groupings or placeholders rather than territories.
NOT_TERRITORIES = {"ZZ", "EU", "EZ", "UN", "QO"}
# CLDR official status -> (relation, how a sentence says it); None: listed without a status.
STATUS_RELATIONS: dict[str | None, tuple[str, str]] = {
    "official": ("official in", "is an official language of"),
    "de_facto_official": ("de facto official in", "is a de facto official language of"),
    "official_regional": ("regionally official in", "is official in a region of"),
    None: ("spoken in", "is spoken, without official status, in"),
}
STATUS_RANK = {"official": 0, "de_facto_official": 1, "official_regional": 2, None: 3}
# How many names a description lists before "and N more".
MAX_LISTED = 5
join_list = partial(join_all, limit=MAX_LISTED)


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def percent(value: float) -> str:
    """A CLDR population share as written in the data (41.0 -> '41%', 0.0029 -> '0.0029%')."""
    return f"{value:g}%"


def split_tag(tag: str) -> tuple[str, str | None, str | None]:
    """'sr_Latn_RS' -> ('sr', 'Latn', 'RS'); 'sr_Latn' -> ('sr', 'Latn', None); 'sr_RS' -> ('sr', None, 'RS')."""
    parts = tag.split("_")
    script = next((p for p in parts[1:] if len(p) == 4 and p.isalpha()), None)
    region = next((p for p in parts[1:] if p.isupper() and len(p) == 2 or p.isdigit()), None)
    return parts[0], script, region


# ---------------------------------------------------------------------------------------------
# Reading the package
# ---------------------------------------------------------------------------------------------


@dataclass
class Cldr:
    """The CLDR records the graph is built from, as babel ships them."""

    version: str
    language_names: dict[str, str]  # English names (en locale), by language code
    script_names: dict[str, str]  # English names (en locale), by ISO 15924 code
    territory_names: dict[str, str]  # English names (en locale), by region code
    likely: dict[str, str]  # likely subtags: 'hi' -> 'hi_Deva_IN', 'und_IN' -> 'hi_Deva_IN'
    territory_languages: dict[str, dict[str, dict[str, Any]]]  # region -> language tag -> status, share
    locale_ids: list[str]  # the locales babel ships data for
    own_names: dict[str, tuple[str, str]] = field(default_factory=dict)  # code -> (autonym, character order)


def load_cldr() -> Cldr:
    """Read the English display names, the supplemental data and every language's own locale."""
    en = localedata.load("en")
    ids = sorted(localedata.locale_identifiers())
    cldr = Cldr(
        version=get_global("cldr")["version"],
        language_names=dict(en["languages"]), script_names={**en["scripts"], **STAND_ALONE_SCRIPT_NAMES},
        territory_names=dict(en["territories"]), likely=dict(get_global("likely_subtags")),
        territory_languages={t: dict(v) for t, v in get_global("territory_languages").items()},
        locale_ids=ids,
    )
    for code in ids:
        if "_" in code or code == "root":
            continue
        data = localedata.load(code)
        own = data["languages"].get(code)
        if own:
            cldr.own_names[code] = (own, data["character_order"])
    return cldr


# ---------------------------------------------------------------------------------------------
# The graph before naming: stable keys; names are assigned once every node is known.
# ---------------------------------------------------------------------------------------------


@dataclass
class Node:
    """One entity: a stable key, its CLDR name, type and description, and a qualified name for clashes."""

    key: str
    name: str
    etype: str
    description: str = ""
    qualified: list[str] = field(default_factory=list)


@dataclass
class Graph:
    """Nodes by key; edges (head key, relation, tail key) -> sentence template with {head}/{tail}."""

    nodes: dict[str, Node] = field(default_factory=dict)
    edges: dict[tuple[str, str, str], str] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    held_back: list[tuple[str, str, str]] = field(default_factory=list)  # hub edges left out

    def add_node(self, node: Node) -> None:
        if node.key in self.nodes:
            raise ValueError(f"duplicate node key {node.key!r}")
        self.nodes[node.key] = node

    def add_edge(self, head: str, relation: str, tail: str, template: str) -> None:
        if head == tail:
            raise ValueError(f"self loop on {head!r}")
        self.edges.setdefault((head, relation, tail), template)


def is_territory(region: str | None) -> bool:
    """Whether a region code names a territory (not a UN M.49 grouping such as 001 or 419, nor EU, ZZ, ...)."""
    return region is not None and region.isalpha() and region not in NOT_TERRITORIES


def lang_key(code: str) -> str:
    return f"language:{code}"


def script_key(code: str) -> str:
    return f"script:{code}"


def territory_key(code: str) -> str:
    return f"territory:{code}"


# ---------------------------------------------------------------------------------------------
# What is kept
# ---------------------------------------------------------------------------------------------


@dataclass
class Language:
    """A kept language: its code, likely script and territory, other scripts and territory entries."""

    code: str
    likely: str  # e.g. 'hi_Deva_IN'
    script: str
    territory: str
    other_scripts: dict[str, list[str]] = field(default_factory=dict)  # script -> CLDR tags naming it
    # territory -> [(tag as listed, official status, population share)]
    entries: dict[str, list[tuple[str, str | None, float]]] = field(default_factory=dict)


def select_languages(cldr: Cldr, graph: Graph) -> dict[str, Language]:
    """Base languages (no script/region suffix) with an English name and a full likely-subtags tag."""
    kept: dict[str, Language] = {}
    for code in sorted(cldr.language_names):
        if "_" in code or code in NOT_LANGUAGES:
            continue
        tag = cldr.likely.get(code)
        lang, script, region = split_tag(tag) if tag else (code, None, None)
        if not tag or lang != code or script is None or region is None:
            graph.notes["languages"].append(
                f"{cldr.language_names[code]} ('{code}'): no likely script and territory in CLDR; left out")
            continue
        kept[code] = Language(code, tag, script, region)
    return kept


def add_other_scripts(cldr: Cldr, languages: dict[str, Language]) -> None:
    """Scripts other than the likely one that CLDR names for a language: script-specific likely
    subtags ('uz_Arab', 'uz_AF' -> 'uz_Arab_AF'), territory language entries ('sr_Latn') and locales."""
    tags = set(cldr.likely) | set(cldr.likely.values()) | set(cldr.locale_ids)
    tags |= {tag for entries in cldr.territory_languages.values() for tag in entries}
    for tag in sorted(tags):
        lang, script, _ = split_tag(tag)
        if lang in languages and script and script != languages[lang].script:
            found = languages[lang].other_scripts.setdefault(script, [])
            if f"{lang}_{script}" not in found:
                found.append(f"{lang}_{script}")


def add_territory_entries(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> None:
    """CLDR's territory language data, by kept language (script variants fold into their language)."""
    unnamed: set[str] = set()
    for territory in sorted(cldr.territory_languages):
        if not is_territory(territory):
            continue
        for tag, info in sorted(cldr.territory_languages[territory].items()):
            lang = split_tag(tag)[0]
            if lang not in languages:
                unnamed.add(lang)
                continue
            languages[lang].entries.setdefault(territory, []).append(
                (tag, info.get("official_status"), float(info["population_percent"])))
    graph.notes["territory data"].append(
        f"{len(unnamed)} language codes in CLDR's territory language data have no English name in "
        f"CLDR (or no likely subtags) and are left out, e.g. {', '.join(sorted(unnamed)[:8])}")


# ---------------------------------------------------------------------------------------------
# Entities and relations
# ---------------------------------------------------------------------------------------------


def script_phrase(cldr: Cldr, code: str) -> str:
    """'the Devanagari script' as a description says it."""
    name = cldr.script_names.get(code, code)
    return f"the {name} script" if not name.lower().endswith("script") else f"the {name}"


def best_entry(entries: list[tuple[str, str | None, float]]) -> tuple[str | None, float]:
    """The strongest official status and the largest share among one territory's entries."""
    status = min((e[1] for e in entries), key=lambda s: STATUS_RANK[s])
    return status, max(e[2] for e in entries)


def describe_language(cldr: Cldr, lang: Language) -> str:
    """A sentence set from the CLDR record: likely script and territory, own name, statuses, shares."""
    name = cldr.language_names[lang.code]
    where = cldr.territory_names[lang.territory]
    text = (f"{name} is a language (code '{lang.code}') written in {script_phrase(cldr, lang.script)} and "
            + (f"chiefly used in {where}" if is_territory(lang.territory) else f"with the likely region '{where}'")
            + f", according to CLDR's likely subtags ({lang.likely}).")
    if lang.code in cldr.own_names:
        own, order = cldr.own_names[lang.code]
        text += f" Its CLDR locale names it '{own}'" + (", written right to left." if order == "right-to-left" else ".")
    if lang.other_scripts:
        text += (" CLDR also lists it in " + join_list([script_phrase(cldr, s) for s in sorted(lang.other_scripts)])
                 + ".")
    by_status: dict[str | None, list[str]] = defaultdict(list)
    shares = []
    for territory, entries in sorted(lang.entries.items(), key=lambda kv: cldr.territory_names[kv[0]]):
        status, share = best_entry(entries)
        by_status[status].append(cldr.territory_names[territory])
        shares.append((share, cldr.territory_names[territory]))
    for status, label in (("official", "Official in"), ("de_facto_official", "De facto official in"),
                          ("official_regional", "Official in a region of")):
        if by_status.get(status):
            text += f" {label} {join_list(by_status[status])}."
    if shares:
        share, where = max(shares, key=lambda s: (s[0], s[1]))
        count = len(shares)
        text += (f" CLDR lists it for {count} {'territory' if count == 1 else 'territories'}, with its largest "
                 f"share in {where} ({percent(share)} of the population).")
    return text


def add_languages(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> None:
    """Language entities; `written in`, `also written in` and `chiefly used in` triples."""
    for code, lang in sorted(languages.items()):
        name = cldr.language_names[code]
        graph.add_node(Node(lang_key(code), name, "language", describe_language(cldr, lang),
                            [f"{name} (language)", f"{name} ({code})"]))
        if is_territory(lang.territory):
            graph.add_edge(lang_key(code), "chiefly used in", territory_key(lang.territory),
                           "{head} is chiefly used in {tail}, according to CLDR's likely subtags (" + code + " -> "
                           + lang.likely + ").")
        else:
            graph.notes["languages"].append(
                f"{name} ('{code}'): likely region {lang.territory} ({cldr.territory_names[lang.territory]}) is a "
                "grouping, not linked")
        graph.add_edge(lang_key(code), "written in", script_key(lang.script),
                       "{head} is written in {tail}, according to CLDR's likely subtags (" + code + " -> "
                       + lang.likely + ").")
        for script, tags in sorted(lang.other_scripts.items()):
            graph.add_edge(lang_key(code), "also written in", script_key(script),
                           "{head} is also written in {tail}: CLDR lists " + join_list(tags) + ".")


def add_territory_relations(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> None:
    """One triple per (language, territory) in CLDR's territory language data, labelled by the strongest
    official status of its entries (`spoken in` when none has one), with every entry's share."""
    for code, lang in sorted(languages.items()):
        for territory, entries in sorted(lang.entries.items()):
            status, _ = best_entry(entries)
            relation, says = STATUS_RELATIONS[status]
            parts = []
            for tag, tag_status, share in sorted(entries, key=lambda e: (STATUS_RANK[e[1]], -e[2], e[0])):
                written = "" if tag == code else f" ({script_phrase(cldr, split_tag(tag)[1] or '')})"
                status_text = "" if tag_status is None else f" ({tag_status.replace('_', ' ')})"
                parts.append(f"{tag}{written} for {percent(share)} of the population{status_text}")
            graph.add_edge(lang_key(code), relation, territory_key(territory),
                           "{head} " + says + " {tail}: CLDR's territory language data lists "
                           + join_list(parts) + ".")


def add_likely_languages(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> None:
    """`main language` (territory -> language, und_XX); `likely language` (script -> language) and
    `likely territory` (script -> territory) from und_Xxxx."""
    for tag, target in sorted(cldr.likely.items()):
        if not tag.startswith("und_") or tag.count("_") != 1:
            continue
        sub = tag[4:]
        lang = split_tag(target)[0]
        if lang not in languages:
            graph.notes["likely subtags"].append(f"{tag} -> {target}: the language has no English name; not linked")
            continue
        if len(sub) == 2 and is_territory(sub):
            graph.add_edge(territory_key(sub), "main language", lang_key(lang),
                           "{tail} is the most likely language of {head}, according to CLDR's likely subtags ("
                           + tag + " -> " + target + ").")
        elif len(sub) == 4:
            graph.add_edge(script_key(sub), "likely language", lang_key(lang),
                           "{tail} is the most likely language of text in {head}, according to CLDR's likely "
                           "subtags (" + tag + " -> " + target + ").")
            region = split_tag(target)[2]
            if is_territory(region):
                graph.add_edge(script_key(sub), "likely territory", territory_key(region),
                               "{tail} is the most likely origin of text in {head}, according to CLDR's "
                               "likely subtags (" + tag + " -> " + target + ").")


def add_varieties(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> None:
    """Regional and script varieties CLDR names in English ('de_AT' Austrian German, 'zh_Hant'
    Traditional Chinese): `variety of` their language, `chiefly used in` their territory (when the
    suffix is a territory) and `written in` their script (when the suffix is a script)."""
    for tag, name in sorted(cldr.language_names.items()):
        lang, script, region = split_tag(tag)
        if "_" not in tag or lang not in languages:
            continue
        base = cldr.language_names[lang]
        where = cldr.territory_names.get(region or "", region)
        if script:
            text = (f"{name} is CLDR's English name for {tag}, {base} written in {script_phrase(cldr, script)}.")
        else:
            text = f"{name} is CLDR's English name for {tag}, the variety of {base} used in {where}."
        likely = cldr.likely.get(tag)
        if likely:
            text += f" Its likely subtags are {likely}."
        key = f"variety:{tag}"
        graph.add_node(Node(key, name, "variety", text, [f"{name} ({tag})"]))
        graph.add_edge(key, "variety of", lang_key(lang), "{head} is a variety of {tail}: CLDR's code " + tag + ".")
        if is_territory(region):
            graph.add_edge(key, "chiefly used in", territory_key(region),
                           "{head} is the variety of " + base + " used in {tail}: CLDR's code " + tag + ".")
        elif region:
            graph.notes["varieties"].append(f"{name} ({tag}): region {region} ({where}) is a grouping, not linked")
        if script:
            graph.add_edge(key, "written in", script_key(script),
                           "{head} is written in {tail}: CLDR's code " + tag + ".")


def drop_hub_scripts(cldr: Cldr, languages: dict[str, Language], graph: Graph) -> set[str]:
    """Remove `written in` edges to scripts with more than MAX_WRITTEN_IN languages (kept in descriptions)."""
    counts = Counter(lang.script for lang in languages.values())
    hubs = {s for s, c in counts.items() if c > MAX_WRITTEN_IN}
    for key in [k for k in graph.edges if k[1] == "written in" and k[2] in {script_key(s) for s in hubs}]:
        del graph.edges[key]
        graph.held_back.append(key)
    for script in sorted(hubs):
        graph.notes["scripts"].append(
            f"{cldr.script_names[script]} ('{script}') is the likely script of {counts[script]} of the "
            f"{len(languages)} languages selected; these `written in` links are left out (see editorial rules)")
    return hubs


def describe_script(cldr: Cldr, code: str, languages: dict[str, Language], hubs: set[str]) -> str:
    """Which kept languages CLDR writes in this script by default, and its own likely subtags."""
    name = cldr.script_names[code]
    users = sorted(cldr.language_names[c] for c, lang in languages.items() if lang.script == code)
    others = sorted(cldr.language_names[c] for c, lang in languages.items() if code in lang.other_scripts)
    text = f"{name} is a script (ISO 15924 code '{code}')."
    if users:
        text += (f" It is the likely script of {len(users)} {'language' if len(users) == 1 else 'languages'} "
                 f"in CLDR: {join_list(users)}.")
    if others:
        text += f" CLDR also lists {join_list(others)} in it."
    likely = cldr.likely.get(f"und_{code}")
    if likely:
        lang, _, region = split_tag(likely)
        text += (f" Its likely subtags (und_{code} -> {likely}) give "
                 f"{cldr.language_names.get(lang, lang)} in {cldr.territory_names.get(region or '', region)}.")
    if code in hubs:
        text += " These languages are not linked to it in this graph (one node next to most languages)."
    return text


def describe_territory(cldr: Cldr, code: str, languages: dict[str, Language]) -> str:
    """The territory's languages in CLDR by status, with shares, and its most likely language."""
    name = cldr.territory_names[code]
    text = f"{name} is a territory (CLDR region code '{code}')."
    rows = []
    for lang_code, lang in languages.items():
        if code in lang.entries:
            status, share = best_entry(lang.entries[code])
            rows.append((STATUS_RANK[status], -share, cldr.language_names[lang_code], status, share))
    rows.sort()
    official = [f"{n} ({percent(s)})" for _, _, n, st, s in rows if st in ("official", "de_facto_official")]
    regional = [f"{n} ({percent(s)})" for _, _, n, st, s in rows if st == "official_regional"]
    if rows:
        text += f" CLDR lists {len(rows)} {'language' if len(rows) == 1 else 'languages'} used there"
        if official:
            text += "; official: " + join_list(official)
        if regional:
            text += "; official in a region: " + join_list(regional)
        text += "."
        biggest = sorted(rows, key=lambda r: (r[1], r[2]))[0]
        text += f" The largest share is {biggest[2]}'s ({percent(biggest[4])} of the population)."
    likely = cldr.likely.get(f"und_{code}")
    if likely:
        lang, script, _ = split_tag(likely)
        text += (f" Its most likely language is {cldr.language_names.get(lang, lang)} in "
                 f"{script_phrase(cldr, script or '')} (und_{code} -> {likely}).")
    return text


def add_scripts_and_territories(cldr: Cldr, languages: dict[str, Language], graph: Graph, hubs: set[str]) -> None:
    """Script and territory entities for every code an edge points to."""
    used = {k for edge in graph.edges for k in (edge[0], edge[2])}
    for key in sorted(used):
        kind, code = key.split(":", 1)
        if kind == "script":
            name = cldr.script_names[code]
            graph.add_node(Node(key, name, "script", describe_script(cldr, code, languages, hubs),
                                [f"{name} script" if not name.lower().endswith("script") else f"{name} ({code})"]))
        elif kind == "territory":
            name = cldr.territory_names[code]
            graph.add_node(Node(key, name, "territory", describe_territory(cldr, code, languages),
                                [f"{name} (territory)"]))


def eligible_with_hubs(graph: Graph) -> int:
    """Eligible seeds the graph would have with the held-back hub edges: why they are left out."""
    g = nx.Graph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from((h, t) for h, _, t in [*graph.edges, *graph.held_back] if h in graph.nodes and t in graph.nodes)
    sizes = [len(nx.single_source_shortest_path_length(g, n, cutoff=SEED_HOPS)) for n in sorted(g)]
    return sum(SEED_MIN <= size <= SEED_MAX for size in sizes)


def keep_largest_component(graph: Graph) -> list[str]:
    """Drop everything outside the largest connected component; return the dropped names."""
    g = nx.Graph()
    g.add_nodes_from(graph.nodes)
    g.add_edges_from((h, t) for h, _, t in graph.edges)
    largest = max(nx.connected_components(g), key=lambda c: (len(c), sorted(c)))
    dropped = sorted(k for k in graph.nodes if k not in largest)
    for key in dropped:
        del graph.nodes[key]
    graph.edges = {k: v for k, v in graph.edges.items() if k[0] in largest and k[2] in largest}
    return dropped


# ---------------------------------------------------------------------------------------------
# Names, output and checks
# ---------------------------------------------------------------------------------------------

TYPE_RANK = {"territory": 0, "language": 1, "variety": 2, "script": 3}


def assign_names(graph: Graph) -> dict[str, str]:
    """Unique, readable names: a clash (or a name of one or two characters) moves the lower-ranked
    nodes (territory > language > script) to their next qualified name, until nothing clashes."""
    level = {key: 0 for key in graph.nodes}

    def candidates(key: str) -> list[str]:
        node = graph.nodes[key]
        return [node.name, *node.qualified]

    # A script named like a territory whose name adds a parenthetical ("Myanmar" / "Myanmar (Burma)") reads
    # as that territory: it is qualified too.
    territories = {normalize_name(re.sub(r" \([^()]*\)$", "", n.name)) for n in graph.nodes.values()
                   if n.etype == "territory"}
    for key, node in graph.nodes.items():
        if len(node.name.strip()) <= 2 or (node.etype == "script" and normalize_name(node.name) in territories):
            level[key] = 1
    for _ in range(10):
        groups: dict[str, list[str]] = defaultdict(list)
        for key in sorted(graph.nodes):
            groups[normalize_name(candidates(key)[level[key]])].append(key)
        clashes = [keys for keys in groups.values() if len(keys) > 1]
        if not clashes:
            return {key: candidates(key)[level[key]] for key in graph.nodes}
        for keys in clashes:
            ranked = sorted(keys, key=lambda k: (TYPE_RANK[graph.nodes[k].etype], k))
            same = TYPE_RANK[graph.nodes[ranked[0]].etype] == TYPE_RANK[graph.nodes[ranked[1]].etype]
            for key in ranked[0 if same else 1:]:
                level[key] += 1
                if level[key] >= len(candidates(key)):
                    raise ValueError(f"cannot disambiguate {graph.nodes[key].name!r} ({key})")
    raise ValueError("names still clash after disambiguation")


def finalize(graph: Graph) -> tuple[list[dict[str, str]], list[dict[str, str]], list[tuple[str, str]]]:
    """Entity and triple records with final names, sorted; and the (plain, qualified) renamings."""
    names = assign_names(graph)
    renamed = sorted((n.name, names[k]) for k, n in graph.nodes.items() if names[k] != n.name)
    entities = sorted(({"name": names[k], "type": n.etype, "description": n.description}
                       for k, n in graph.nodes.items()), key=lambda e: (e["name"], e["type"]))
    triples = [{"head": names[h], "relation": r, "tail": names[t],
                "description": template.replace("{head}", names[h]).replace("{tail}", names[t])}
               for (h, r, t), template in graph.edges.items()]
    triples.sort(key=lambda t: (t["head"], t["relation"], t["tail"]))
    return entities, triples, renamed


def check_graph(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, Any]:
    """Validate names and endpoints; print size, connectivity and seed-ball numbers."""
    names = [e["name"] for e in entities]
    check_names_and_endpoints(entities, triples)
    assert all(len(n.strip()) > 2 and not n.strip().isdigit() for n in names), "short or numeric names"
    graph, ball, components = seed_balls(entities, triples)
    etype = {e["name"]: e["type"] for e in entities}
    seeds = eligible(ball)
    described = sum(1 for e in entities if e["description"].strip())
    numbers: dict[str, Any] = {
        "entities": len(entities), "triples": len(triples), "described": described,
        "eligible_seeds": len(seeds), "components": len(components), "largest_component": components[0],
        "entities_by_type": tally(e["type"] for e in entities),
        "triples_by_relation": tally(t["relation"] for t in triples),
        "eligible_by_type": tally(etype[n] for n in seeds),
        "above_by_type": tally(etype[n] for n, s in ball.items() if s > SEED_MAX),
        "below_by_type": tally(etype[n] for n, s in ball.items() if s < SEED_MIN),
        "max_degree": sorted(((d, n) for n, d in graph.degree()), key=lambda x: (-x[0], x[1]))[:5],
    }
    print("entities by type:", numbers["entities_by_type"])
    print("triples by relation:", numbers["triples_by_relation"])
    print(f"eligible seeds ({SEED_HOPS}-hop ball of {SEED_MIN}..{SEED_MAX} nodes) by type:",
          numbers["eligible_by_type"])
    print("balls above the window by type:", numbers["above_by_type"], "below:", numbers["below_by_type"])
    print("highest degrees:", numbers["max_degree"])
    print("component sizes:", components[:10])
    print({k: v for k, v in numbers.items() if not isinstance(v, (dict, list))})
    return numbers


def build() -> tuple[Graph, Cldr, dict[str, Language], set[str], list[str]]:
    cldr = load_cldr()
    graph = Graph()
    languages = select_languages(cldr, graph)
    add_other_scripts(cldr, languages)
    add_territory_entries(cldr, languages, graph)
    add_languages(cldr, languages, graph)
    add_territory_relations(cldr, languages, graph)
    add_likely_languages(cldr, languages, graph)
    add_varieties(cldr, languages, graph)
    hubs = drop_hub_scripts(cldr, languages, graph)
    add_scripts_and_territories(cldr, languages, graph, hubs)
    dropped = keep_largest_component(graph)
    return graph, cldr, languages, hubs, dropped


# ---------------------------------------------------------------------------------------------
# Provenance and SOURCE.md
# ---------------------------------------------------------------------------------------------


def data_files(cldr: Cldr) -> list[tuple[str, str]]:
    """(file(s), sha256) of every data file read."""
    root = package_dir(babel)
    data = root / "locale-data"
    own = [data / f"{code}.dat" for code in sorted(cldr.own_names)]
    return [
        ("babel/global.dat", files_sha256([root / "global.dat"])),
        ("babel/locale-data/root.dat", files_sha256([data / "root.dat"])),
        ("babel/locale-data/en.dat", files_sha256([data / "en.dat"])),
        (f"babel/locale-data/<language>.dat ({len(own)} files, one per language locale, sorted by code)",
         files_sha256(own)),
        ("babel/locale-data/LICENSE.unicode", files_sha256([data / "LICENSE.unicode"])),
    ]


RELATION_MEANING = {
    "written in": "language -> script: the script of the language's likely subtags (`hi` -> `hi_Deva_IN`); "
                  "variety -> script: the script of the variety's code (`zh_Hant`)",
    "also written in": "language -> script: another script CLDR lists for the language (script-specific likely "
                       "subtags, territory language entries, locales: `sr_Latn`, `uz_Arab`)",
    "chiefly used in": "language -> territory: the region of the language's likely subtags; variety -> "
                       "territory: the region of the variety's code (`de_AT`)",
    "likely territory": "script -> territory: the region of the script's likely subtags (`und_Deva` -> `hi_Deva_IN`)",
    "variety of": "variety -> language: the language of the variety's code",
    "main language": "territory -> language: likely subtags of the territory (`und_IN` -> `hi_Deva_IN`)",
    "likely language": "script -> language: likely subtags of the script (`und_Deva` -> `hi_Deva_IN`)",
    "official in": "language -> territory: territory language data, status `official`",
    "de facto official in": "language -> territory: territory language data, status `de_facto_official`",
    "regionally official in": "language -> territory: territory language data, status `official_regional`",
    "spoken in": "language -> territory: territory language data, no entry with an official status",
}
TYPE_MEANING = {
    "language": "CLDR languages with an English name and likely subtags",
    "variety": "regional and script varieties that CLDR names in English (`de_AT`, `zh_Hant`)",
    "script": "ISO 15924 scripts (CLDR English names) that a relation reaches",
    "territory": "CLDR regions (ISO 3166 territories and a few others) that a relation reaches",
}


def write_source_md(path: Path, graph: Graph, cldr: Cldr, numbers: dict[str, Any],
                    renamed: list[tuple[str, str]], dropped: list[str]) -> None:
    version = metadata.version(PACKAGE)
    meta = metadata.metadata(PACKAGE)
    unicode_licence = (package_dir(babel) / "locale-data" / "LICENSE.unicode").read_text(
        encoding="utf-8").strip()
    lines = [
        "# linguistics — languages, their scripts and the territories they are used in (Unicode CLDR)",
        "",
        "Generated by `kg_assets/exporters/linguistics.py`; do not edit by hand.",
        "",
        "## Source",
        "",
        f"- Data: the Unicode CLDR (Common Locale Data Repository) release {cldr.version} as shipped inside",
        f"  the PyPI package `{PACKAGE}` {version} (https://babel.pocoo.org/, "
        "https://github.com/python-babel/babel):",
        "  English display names of languages, scripts and territories (`en` locale), likely subtags",
        "  and territory language information (`global.dat`), and each language's own name and",
        "  character order from its locale file. Upstream: https://cldr.unicode.org/.",
        f"- Licences: the package is {meta.get('License-Expression') or meta.get('License')} (Copyright (c) "
        "2013-2026 by the Babel Team, `LICENSE` in",
        "  its dist-info). The CLDR data files it ships are under the Unicode License v3",
        "  (`babel/locale-data/LICENSE.unicode`, SPDX `Unicode-3.0`), which permits use, copying,",
        "  modification and redistribution of the data provided the copyright and permission notice",
        "  appears with the copies or in associated documentation; it is reproduced at the end of this",
        "  file. Attribution: *Contains data from the Unicode CLDR, Copyright © 2004-2025 Unicode, Inc.,",
        "  via the babel package.* The package is only read; nothing of it is redistributed except the",
        "  facts in this graph.",
        "",
        "Data files read (SHA-256 over file name, a NUL byte and content):",
        "",
        "| file(s) | sha256 |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | `{digest}` |" for name, digest in data_files(cldr)]
    lines += [
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/linguistics.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8 without escaping, `\\n` line endings); the script ends",
        "with a networkx check of names, endpoints, components and seed ball sizes, printed to stdout.",
        "",
        "## What is in the graph",
        "",
        f"{numbers['entities']:,} entities, {numbers['triples']:,} triples; {numbers['described']:,} entities "
        f"({numbers['described'] / numbers['entities']:.1%}) have a description built from their CLDR records.",
        "",
    ]
    lines += count_tables(numbers, TYPE_MEANING, RELATION_MEANING, "CLDR source")
    lines += [
        "",
        "`written in`, `chiefly used in`, `main language`, `likely language`, `likely territory` and",
        "`variety of` are functional (one tail per head), which is what makes multi-hop questions",
        "have a single answer. Every entity description and triple sentence is built from the CLDR",
        "fields named above (codes, likely subtags, official status, population share as CLDR gives",
        "it, own names); counts such as \"the likely script of 21 languages\" are counted over the",
        "languages selected.",
        "",
        "## Editorial rules",
        "",
        "- Languages: every language code of the `en` locale's language names without a script or",
        "  region suffix whose likely subtags give a script and a territory, except the codes",
        "  `und`, `mul`, `zxx` and `mis`. Names are CLDR's English names.",
        "- Varieties: the `en` locale's language names with a region or script suffix (`de_AT` Austrian",
        "  German, `nl_BE` Flemish, `zh_Hant` Traditional Chinese) are `variety` entities, linked to their",
        "  language (`variety of`), their territory (`chiefly used in`) and their script (`written in`).",
        "- Scripts and territories: CLDR's English names; only those a relation reaches are kept.",
        f"  Territory codes that are groupings or placeholders ({', '.join(sorted(NOT_TERRITORIES))}) are not used.",
        "  CLDR's territory containment (UN M.49 regions) is not part of babel's data, so regions are",
        "  not in the graph.",
        "- Territory language data: one triple per language and territory, labelled by the strongest",
        "  official status of its entries (`official in` > `de facto official in` > `regionally official",
        "  in`), or `spoken in` when no entry has a status, so `spoken in` means spoken but not official.",
        "  The sentence gives every entry's population share as CLDR writes it.",
        "- Script entries of the territory language data (`sr_Latn`, `zh_Hant`, `sd_Deva`) fold into",
        "  their language: the triple keeps the strongest official status of the entries and its",
        "  sentence gives each entry's share and script.",
        "- Territory language data of a language without an English name in CLDR is left out (see",
        "  observations).",
        f"- `written in` is left out for a script that is the likely script of more than {MAX_WRITTEN_IN}",
        "  languages: in this release only the Latin script. Linking its languages would put one",
        f"  node next to most of the graph and cut the eligible seeds from {numbers['eligible_seeds']:,} to "
        f"{numbers['eligible_with_hubs']:,}",
        f"  (depth-{SEED_HOPS} balls over {SEED_MAX} entities); the languages' descriptions still say "
        "that they are written",
        "  in the Latin script, and the Latin script keeps its `also written in` links.",
        "- Only the largest connected component is kept"
        + (f"; left out: {', '.join(graph_name(k, cldr) for k in dropped)}." if dropped
           else " (it is the whole graph)."),
        "- Names are unique after normalisation (NFKC, casefold, collapsed whitespace, quotes removed).",
        "  When names clash, territory > language > variety > script keeps the plain name and the others are",
        "  qualified (a script as `... script`, a language as `... (language)`); a name of one or two",
        "  characters, or a script named like a territory (`Myanmar`, `Myanmar (Burma)`), is qualified too.",
        "  Qualified names: "
        + ", ".join(f"`{new}`" for _, new in renamed) + ".",
        "",
        "## Observations in the data",
        "",
    ]
    for topic in sorted(graph.notes):
        items = sorted(set(graph.notes[topic]))
        lines.append(f"- {topic} ({len(items)}):")
        lines += [f"  - {item}" for item in items]
    lines += [
        "",
        "## Graph check",
        "",
        f"- Undirected graph: {numbers['components']} connected component(s), the largest with "
        f"{numbers['largest_component']:,} entities.",
        f"- Eligible seeds (entities whose {SEED_HOPS}-hop ball holds {SEED_MIN}..{SEED_MAX} entities): "
        f"{numbers['eligible_seeds']:,}; by type: "
        + ", ".join(f"{t} {c:,}" for t, c in numbers["eligible_by_type"].items()) + ".",
        "- Balls above the window, by type: " + ", ".join(f"{t} {c:,}" for t, c in numbers["above_by_type"].items())
        + "; below it: " + ", ".join(f"{t} {c:,}" for t, c in numbers["below_by_type"].items()) + ".",
        "- Highest degrees: " + ", ".join(f"{n} {d}" for d, n in numbers["max_degree"]) + ".",
        "",
        "## Unicode License v3 (the CLDR data's licence, as shipped in babel)",
        "",
        "```",
        unicode_licence,
        "```",
        "",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines))


def graph_name(key: str, cldr: Cldr) -> str:
    """A dropped node as SOURCE.md names it: 'Blissymbols (script Blis)'."""
    kind, code = key.split(":", 1)
    names = {"language": cldr.language_names, "script": cldr.script_names, "territory": cldr.territory_names}
    return f"{names[kind].get(code, code)} ({kind} {code})"


def main() -> None:
    graph, cldr, _, _, dropped = build()
    print(f"{PACKAGE} {metadata.version(PACKAGE)}, CLDR {cldr.version}")
    for topic in sorted(graph.notes):
        print(f"{topic}: {len(graph.notes[topic])} observation(s)")
    entities, triples, renamed = finalize(graph)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    numbers = check_graph(entities, triples)
    numbers["eligible_with_hubs"] = eligible_with_hubs(graph)
    print("eligible seeds with the held-back `written in` hub links:", numbers["eligible_with_hubs"])
    write_source_md(OUT_DIR / "SOURCE.md", graph, cldr, numbers, renamed, dropped)
    print("renamed:", renamed)
    for name in ("entities.jsonl", "triples.jsonl", "SOURCE.md"):
        print(f"wrote {OUT_DIR / name} ({(OUT_DIR / name).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
