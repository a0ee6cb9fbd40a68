"""Export the "molecular_biology" knowledge graph (restriction enzymes) from Biopython's REBASE data.

Why this exists: kg_assets/molecular_biology/{entities,triples}.jsonl and SOURCE.md are committed
source files; this script regenerates them, byte for byte, from the restriction enzyme tables that
the PyPI package ``biopython`` ships in ``Bio/Restriction/Restriction_Dictionary.py`` (``rest_dict``,
``suppliers``, ``typedict``, compiled by Biopython from the REBASE EMBOSS files), using the IUPAC
nucleotide codes of ``Bio/Data/IUPACData.py`` to compare degenerate sequences.  See SOURCE.md for
versions, licences (Biopython's and REBASE's terms) and the editorial rules.

Graph: restriction enzymes; the DNA sequences they recognise; the sticky ends (overhangs) that are
the same wherever an enzyme cuts; the suppliers that alone sell an enzyme; each recognition sequence
linked to the most specific shorter one nested in it (the BamHI site GGATCC contains the AlwI site
GGATC) and to its closest degenerate form (GAATTC -> RAATTY); and the two enzymes of a sequence
that exactly two enzymes recognise, as isoschizomers (same cut) or neoschizomers (other cut).
Relations are chosen to be functional where the data allows, so that a chain of them names one
answer.  Nothing is invented: every name, link and sentence is built from the package's records.

Run from the project root:  python kg_assets/exporters/molecular_biology.py
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path
from typing import Any

import networkx as nx
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    Node,
    check_names_and_endpoints,
    eligible,
    file_sha256,
    join_list,
    licence,
    normalize_name,
    seed_balls,
    tally,
    write_jsonl,
)
from _shared import Graph as SharedGraph
from Bio.Data import IUPACData
from Bio.Restriction import Restriction_Dictionary as rebase

OUT_DIR = Path(__file__).resolve().parents[1] / "molecular_biology"
PACKAGE = "biopython"
# The data files read, relative to the site-packages folder of the installed package.
DATA_FILES = ("Bio/Restriction/Restriction_Dictionary.py", "Bio/Data/IUPACData.py")
LICENCE_FILE = "licenses/LICENSE.rst"  # inside the package's .dist-info folder
# Nested sequences and degenerate forms are linked only when at least as specific as a four-base
# site: Biopython's `freq` (one site expected per so many bases of random DNA) >= 4**4.  Very
# degenerate sequences (YSCNS: one site per 32 bases) would otherwise be nested in hundreds.
MIN_LINK_FREQ = 4.0 ** 4
# Names shorter than this cannot be named in a question; such sequences get words around them.
MIN_NAME_CHARS = 3
# Enzymes listed by name in a description, at most.
MAX_LISTED = 15
listed = partial(join_list, limit=MAX_LISTED)

RELATION_MEANING = {
    "recognises": "enzyme -> recognition sequence (`site`; every enzyme has one)",
    "leaves": "enzyme -> overhang (`ovhg`, `ovhgseq`; only enzymes whose sticky end is the same at every "
              "site: class `Defined`, not blunt)",
    "sold only by": "enzyme -> supplier (`suppl` when it names a single supplier)",
    "contains": "recognition sequence -> the most specific shorter recognition sequence nested in every copy "
                "of it (IUPAC matching on either strand; largest `freq`; ties give several edges)",
    "special case of": "recognition sequence -> its closest degenerate form: the one same-length recognition "
                       "sequence matching every copy of it that every other such sequence also matches",
    "isoschizomer of": "enzyme -> enzyme: the only two enzymes of a recognition sequence, cutting it at the "
                       "same positions (`charac`; Biopython's equischizomers)",
    "neoschizomer of": "enzyme -> enzyme: the only two enzymes of a recognition sequence, cutting it at "
                       "different positions (Biopython's neoschizomers)",
}
TYPE_MEANING = {
    "enzyme": "a restriction enzyme record of `rest_dict`, named as Biopython names it",
    "recognition sequence": "a distinct `site` (IUPAC codes; one node shared by all its enzymes)",
    "overhang": "a sticky end: 5' or 3', and its sequence, e.g. `5'-AATT overhangs`",
    "supplier": "a commercial source of `suppliers` that is the only one selling at least one enzyme",
}


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun if count == 1 else noun + 's'}"


def sentence(text: str) -> str:
    """End with exactly one full stop (supplier names may end in "Co.")."""
    return text if text.endswith(".") else text + "."


def spacing(freq: float) -> str:
    """Biopython's `freq` (one site expected per so many bases of random DNA) in words."""
    return f"about once every {int(round(freq)):,} bases"


# ---------------------------------------------------------------------------------------------
# IUPAC sequences (Bio/Data/IUPACData.py)
# ---------------------------------------------------------------------------------------------

BASES = {code: frozenset(values) for code, values in IUPACData.ambiguous_dna_values.items()}
COMPLEMENT = IUPACData.ambiguous_dna_complement


def reverse_complement(seq: str) -> str:
    return "".join(COMPLEMENT[c] for c in reversed(seq))


def match_offset(inner: str, outer: str) -> tuple[int, bool] | None:
    """The first place (0-based offset, on the other strand?) where every occurrence of ``outer`` is
    also an occurrence of ``inner``: each IUPAC code of ``inner`` there allows every base that the
    code of ``outer`` allows.  None when there is no such place."""
    strands = [(inner, False)]
    if reverse_complement(inner) != inner:
        strands.append((reverse_complement(inner), True))
    for offset in range(len(outer) - len(inner) + 1):
        for seq, other_strand in strands:
            if all(BASES[a] >= BASES[b] for a, b in zip(seq, outer[offset:offset + len(seq)], strict=True)):
                return offset, other_strand
    return None


# ---------------------------------------------------------------------------------------------
# Reading the package
# ---------------------------------------------------------------------------------------------


@dataclass
class Enzyme:
    """One record of ``rest_dict`` and the Biopython classes ``typedict`` gives it."""

    name: str
    record: dict[str, Any]
    classes: tuple[str, ...]

    @property
    def site(self) -> str:
        return self.record["site"]

    @property
    def palindromic(self) -> bool:
        return "Palindromic" in self.classes

    @property
    def suppliers(self) -> tuple[str, ...]:
        return tuple(self.record["suppl"])

    @property
    def cut_key(self) -> tuple[Any, ...] | None:
        """The cut positions (`charac` without the site); None when they are not characterised."""
        charac = self.record["charac"]
        return None if charac[0] is None else tuple(charac[:4])

    @property
    def fixed_overhang(self) -> tuple[str, str] | None:
        """("5'" or "3'", sequence) of a sticky end that is the same at every site (class Defined)."""
        ovhg, seq = self.record["ovhg"], self.record["ovhgseq"]
        if "Defined" not in self.classes or not seq or not ovhg:
            return None
        return ("5'" if ovhg < 0 else "3'"), seq

    @property
    def rebase_ref(self) -> str:
        rec = self.record
        return f"REBASE record {rec['id']}" if rec["id"] is not None else "no REBASE record number in the data"


def load_enzymes() -> dict[str, Enzyme]:
    """Every enzyme of ``rest_dict``, with its ``typedict`` classes, by name."""
    classes: dict[str, tuple[str, ...]] = {}
    for bases, members in rebase.typedict.values():
        for member in members:
            classes[member] = tuple(bases)
    return {name: Enzyme(name, record, classes[name]) for name, record in sorted(rebase.rest_dict.items())}


def rebase_release() -> str:
    """The REBASE release that Biopython's module says it was compiled from (its docstring)."""
    match = re.search(r"REBASE emboss files version (\d+)(?: \((\d{4})\))?", rebase.__doc__ or "")
    if not match:
        return "unknown"
    return f"{match.group(1)} ({match.group(2)})" if match.group(2) else match.group(1)


# ---------------------------------------------------------------------------------------------
# Records in words
# ---------------------------------------------------------------------------------------------


def cut_notation(enzyme: Enzyme) -> str | None:
    """Where the enzyme cuts, in REBASE's notation: "G^AATTC" (^ the top-strand cut of a palindromic
    site cut inside), "GGTCTC(1/5)" (bases from the site's end to the top/bottom-strand cut) or
    "(7/12)GAACNNNNNNTCC(12/7)" (cuts on both sides).  Biopython's `charac` holds (fst5, fst3, scd5,
    scd3): the top-strand cut counted from the site's first base, the bottom-strand cut counted from
    its last base, for the first and the second cut.  None when the cut is not characterised."""
    fst5, fst3, scd5, scd3, site = enzyme.record["charac"]
    if fst5 is None:
        return None
    size = len(site)
    top, bottom = fst5, size + fst3
    if scd5 is not None:
        return f"({-top}/{-bottom}){site}({scd5 - size}/{scd3})"
    if enzyme.palindromic and 0 <= top <= size and top + bottom == size:
        return f"{site[:top]}^{site[top:]}"
    return f"{site}({top - size}/{fst3})"


def end_phrase(enzyme: Enzyme) -> str:
    """The ends the enzyme leaves, from `ovhg`, `ovhgseq` and its Defined/Ambiguous class."""
    ovhg, seq = enzyme.record["ovhg"], enzyme.record["ovhgseq"]
    if ovhg is None:
        return "the ends it leaves are not characterised"
    if ovhg == 0:
        return "leaving blunt ends"
    kind = "5'" if ovhg < 0 else "3'"
    if enzyme.fixed_overhang:
        return f"leaving {abs(ovhg)}-base {kind} overhangs {seq}"
    return f"leaving {abs(ovhg)}-base {kind} overhangs that vary with the DNA cut ({seq})"


def site_key(site: str) -> str:
    return f"site:{site}"


def site_name(site: str) -> str:
    """The sequence itself; a one- or two-base "site" gets words around it, and the one record whose
    site lists two alternatives ("A|B") is written "A or B"."""
    if "|" in site:
        return " or ".join(site.split("|"))
    if len(site) < MIN_NAME_CHARS:
        return f"{site} ({'one' if len(site) == 1 else 'two'}-base site)"
    return site


def overhang_key(kind: str, seq: str) -> str:
    """One node for an overhang and its reverse complement (the same pair of sticky ends)."""
    return f"overhang:{kind}{min(seq, reverse_complement(seq))}"


# ---------------------------------------------------------------------------------------------
# The graph: nodes by stable key, names assigned at the end
# ---------------------------------------------------------------------------------------------


@dataclass
class Graph(SharedGraph):
    """The shared graph (nodes by stable key, edge templates), with counts of observations for SOURCE.md."""

    counts: Counter[str] = field(default_factory=Counter)
    other_components: list[int] = field(default_factory=list)  # sizes of the components left out


def add_enzymes(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """Enzyme nodes and their `recognises` edges."""
    for enzyme in enzymes.values():
        rec = enzyme.record
        ref = enzyme.rebase_ref + (f", {rec['uri']}" if rec["uri"] else "")
        shape = "palindromic" if enzyme.palindromic else "non-palindromic"
        text = (f"{enzyme.name} is a restriction enzyme ({ref}). It recognises the {len(enzyme.site)}-base "
                f"{shape} sequence {enzyme.site}, expected {spacing(rec['freq'])} of random DNA")
        notation = cut_notation(enzyme)
        if notation is None:
            text += "; where it cuts is not characterised in REBASE."
        else:
            cuts = "cuts on both sides of it" if rec["charac"][2] is not None else "cuts it"
            text += f", and {cuts} as {notation}, {end_phrase(enzyme)}."
        names = [rebase.suppliers[code][0] for code in enzyme.suppliers]
        text += (sentence(f" Sold by {plural(len(names), 'supplier')}: {join_list(names)}") if names
                 else " No commercial supplier is listed.")
        graph.add_node(Node(f"enzyme:{enzyme.name}", enzyme.name, "enzyme", text))
        how = f" and cuts it as {notation}" if notation else ""
        graph.add_edge(f"enzyme:{enzyme.name}", "recognises", site_key(enzyme.site),
                       f"{{head}} recognises {{tail}}{how} ({enzyme.rebase_ref}).")


def add_sites(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """One node per distinct recognition sequence (`site`), shared by all enzymes recognising it."""
    by_site: dict[str, list[Enzyme]] = defaultdict(list)
    for enzyme in enzymes.values():
        by_site[enzyme.site].append(enzyme)
    for site, members in sorted(by_site.items()):
        first = members[0]
        alternatives = site.split("|")  # one record lists two alternative sites
        other = " or ".join(reverse_complement(s) for s in alternatives)
        shape = ("palindromic: it reads the same on both strands" if first.palindromic
                 else f"non-palindromic: the other strand reads {other}")
        text = (f"{' or '.join(alternatives)} is a {len(alternatives[0])}-base DNA recognition sequence ({shape}), "
                f"expected "
                f"{spacing(first.record['freq'])} of random DNA. Recognised by {plural(len(members), 'enzyme')} "
                f"in Biopython's REBASE list: {listed([m.name for m in members])}.")
        graph.add_node(Node(site_key(site), site_name(site), "recognition sequence", text))


def add_overhangs(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """A node per sticky end that is the same wherever an enzyme cuts, and `leaves` edges to it.

    Blunt ends and overhangs that vary with the DNA cut (NNNN of BsaI) are not nodes: they would
    link unrelated enzymes (137 blunt cutters) and are said in the enzyme's description instead."""
    by_end: dict[str, list[Enzyme]] = defaultdict(list)
    for enzyme in enzymes.values():
        if enzyme.fixed_overhang:
            by_end[overhang_key(*enzyme.fixed_overhang)].append(enzyme)
    for key, members in sorted(by_end.items()):
        kind, seq = members[0].fixed_overhang  # type: ignore[misc]
        seq = min(seq, reverse_complement(seq))
        name = f"{kind}-{seq} overhangs"
        other = reverse_complement(seq)
        strands = "its own reverse complement" if other == seq else f"{other} on the other strand"
        text = (f"{name}: the {len(seq)}-base single-stranded {kind} ends {seq} ({strands}) that "
                f"{plural(len(members), 'enzyme')} in Biopython's REBASE list leave wherever they cut, so the "
                f"fragments they make have compatible sticky ends: {listed([m.name for m in members])}.")
        graph.add_node(Node(key, name, "overhang", text))
        for enzyme in members:
            graph.add_edge(f"enzyme:{enzyme.name}", "leaves", key,
                           f"{{head}} cuts {enzyme.site} as {cut_notation(enzyme)}, which leaves {{tail}}.")


def add_suppliers(graph: Graph, enzymes: dict[str, Enzyme]) -> list[str]:
    """A node per supplier that is the only one selling some enzyme, and a `sold only by` edge from
    each such enzyme.  Most enzymes have several suppliers (EcoRI 14); a link to every one would make
    suppliers hubs of up to 238 enzymes, through which no question has one answer, so the full list is
    in each enzyme's description.  Returns the suppliers left out (none of their enzymes is theirs alone)."""
    left_out = []
    for code, (name, members) in sorted(rebase.suppliers.items()):
        sold = sorted(m for m in members if m in enzymes)
        only = [m for m in sold if enzymes[m].suppliers == (code,)]
        if not only:
            left_out.append(f"{name} (code {code}, {plural(len(sold), 'enzyme')})")
            continue
        text = (f"{name} is a commercial supplier of restriction enzymes (REBASE supplier code {code}). "
                f"It sells {len(sold):,} of the {len(enzymes):,} enzymes in Biopython's REBASE list; "
                f"{len(only):,} of them {'is' if len(only) == 1 else 'are'} sold by no other supplier: "
                f"{listed(only)}.")
        graph.add_node(Node(f"supplier:{code}", name, "supplier", text))
        for enzyme in only:
            graph.add_edge(f"enzyme:{enzyme}", "sold only by", f"supplier:{code}",
                           f"{{head}} is sold only by {{tail}} (REBASE supplier code {code}).")
    return left_out


def linkable_sites(enzymes: dict[str, Enzyme]) -> tuple[list[str], dict[str, float]]:
    """The recognition sequences compared with each other, and their `freq`."""
    freq = {e.site: e.record["freq"] for e in enzymes.values()}
    return sorted(s for s in freq if "|" not in s), freq


def add_nested_sites(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """`contains` edges: each recognition sequence to the most specific shorter one nested in it.

    Nested: every occurrence of the outer sequence is an occurrence of the inner one, on either
    strand, with IUPAC codes (GAATTC contains AATT).  Most specific: the largest `freq` (the rarest
    site); ties give several edges.  No edge when even the most specific nested sequence is very
    degenerate (MIN_LINK_FREQ)."""
    sites, freq = linkable_sites(enzymes)
    for outer in sites:
        found = {inner: where for inner in sites
                 if len(inner) < len(outer) and (where := match_offset(inner, outer)) is not None}
        if not found:
            continue
        best = max(freq[s] for s in found)
        if best < MIN_LINK_FREQ:
            graph.counts["sequences whose nested sequences are all very degenerate, e.g. C (no `contains` edge)"] += 1
            continue
        chosen = sorted(s for s in found if freq[s] == best)
        if len(chosen) > 1:
            graph.counts["sequences with several equally specific nested sequences"] += 1
        for inner in chosen:
            offset, other_strand = found[inner]
            strand = "the other strand" if other_strand else "the same strand"
            graph.add_edge(site_key(outer), "contains", site_key(inner),
                           f"{{head}} contains {{tail}}: bases {offset + 1}-{offset + len(inner)} of every {outer} "
                           f"site match {inner} on {strand}, and no shorter recognition sequence nested in {outer} "
                           f"is more specific (one site per {int(best):,} bases).")


def add_degenerate_forms(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """`special case of` edges: a recognition sequence to its closest degenerate form, the one other
    sequence of the same length that matches every copy of it and is matched by every other such
    sequence (GAATTC -> RAATTY).  None when several incomparable ones match (GGATCC: RGATCY and
    GGNNCC) or the closest is very degenerate (MIN_LINK_FREQ)."""
    sites, freq = linkable_sites(enzymes)
    for site in sites:
        wider = [s for s in sites if s != site and len(s) == len(site) and match_offset(s, site) is not None]
        closest = [s for s in wider if not any(o != s and match_offset(s, o) is not None for o in wider)]
        if len(closest) > 1:
            graph.counts["sequences with several incomparable degenerate forms (no `special case of` edge)"] += 1
        if len(closest) != 1 or freq[closest[0]] < MIN_LINK_FREQ:
            continue
        form = closest[0]
        other_strand = match_offset(form, site)[1]  # type: ignore[index]
        strand = " read on the other strand" if other_strand else ""
        graph.add_edge(site_key(site), "special case of", site_key(form),
                       f"Every {{head}} site is also a {{tail}} site{strand}, and every other recognition sequence of "
                       f"{len(site)} bases that matches all {site} sites also matches all {form} sites.")


def add_schizomers(graph: Graph, enzymes: dict[str, Enzyme]) -> None:
    """`isoschizomer of` / `neoschizomer of` edges between the two enzymes of a recognition sequence
    that exactly two enzymes recognise, both with characterised cuts (head: the first by name).

    Isoschizomers cut the shared sequence at the same positions (Biopython's `equischizomers`),
    neoschizomers elsewhere.  A sequence with three or more enzymes gets no such edges ("the
    isoschizomer of X" would not name one enzyme); its enzymes stay linked through the sequence."""
    by_site: dict[str, list[Enzyme]] = defaultdict(list)
    for enzyme in enzymes.values():
        by_site[enzyme.site].append(enzyme)
    for site, members in sorted(by_site.items()):
        if len(members) != 2 or any(m.cut_key is None for m in members):
            continue
        a, b = members
        only = f"{{head}} and {{tail}} are the only enzymes in Biopython's REBASE list that recognise {site}"
        if a.cut_key == b.cut_key:
            graph.add_edge(f"enzyme:{a.name}", "isoschizomer of", f"enzyme:{b.name}",
                           f"{only}; both cut it as {cut_notation(a)}.")
        else:
            graph.add_edge(f"enzyme:{a.name}", "neoschizomer of", f"enzyme:{b.name}",
                           f"{only}; {{head}} cuts it as {cut_notation(a)}, {{tail}} as {cut_notation(b)}.")


# ---------------------------------------------------------------------------------------------
# Finishing: largest component, unique names, records
# ---------------------------------------------------------------------------------------------


def keep_largest_component(graph: Graph) -> list[str]:
    """Drop every node outside the largest connected component; return the dropped keys."""
    undirected = nx.Graph()
    undirected.add_nodes_from(sorted(graph.nodes))
    undirected.add_edges_from((h, t) for h, _, t in graph.edges)
    components = sorted(nx.connected_components(undirected), key=lambda c: (len(c), min(c)), reverse=True)
    largest = components[0]
    graph.other_components = [len(c) for c in components[1:]]
    dropped = sorted(key for key in graph.nodes if key not in largest)
    graph.nodes = {k: n for k, n in graph.nodes.items() if k in largest}
    graph.edges = {e: t for e, t in graph.edges.items() if e[0] in largest and e[2] in largest}
    return dropped


def assign_names(graph: Graph) -> list[str]:
    """Names unique after normalisation: clashing names get their type appended (none clash in
    release 404; the rule is here for later releases)."""
    groups: dict[str, list[str]] = defaultdict(list)
    for key, node in graph.nodes.items():
        groups[normalize_name(node.name)].append(key)
    renamed = []
    for keys in groups.values():
        if len(keys) > 1:
            for key in keys:
                graph.nodes[key].name = f"{graph.nodes[key].name} ({graph.nodes[key].etype})"
                renamed.append(graph.nodes[key].name)
    return sorted(renamed)


def records(graph: Graph) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """Sorted entity and triple records with the final names filled into the sentences."""
    entities = sorted(({"name": n.name, "type": n.etype, "description": n.description}
                       for n in graph.nodes.values()), key=lambda r: (r["name"], r["type"]))
    triples = []
    for (head, relation, tail), template in graph.edges.items():
        h, t = graph.nodes[head].name, graph.nodes[tail].name
        triples.append({"head": h, "relation": relation, "tail": t,
                        "description": template.replace("{head}", h).replace("{tail}", t)})
    triples.sort(key=lambda r: (r["head"], r["relation"], r["tail"]))
    return entities, triples


# ---------------------------------------------------------------------------------------------
# Checks and SOURCE.md
# ---------------------------------------------------------------------------------------------


def check_graph(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, Any]:
    """Validate names and endpoints; print size, connectivity and seed-ball numbers."""
    names = [e["name"] for e in entities]
    check_names_and_endpoints(entities, triples)
    unusable = [n for n in names if len(n.strip()) < MIN_NAME_CHARS or n.strip().isdigit()]
    assert not unusable, f"names a question cannot use: {unusable[:5]}"
    graph, ball, components = seed_balls(entities, triples)
    etype = {e["name"]: e["type"] for e in entities}
    seeds = eligible(ball)
    numbers: dict[str, Any] = {
        "entities": len(entities), "triples": len(triples),
        "described": sum(bool(e["description"].strip()) for e in entities),
        "components": len(components), "largest_component": components[0], "eligible_seeds": len(seeds),
        "entities_by_type": tally(e["type"] for e in entities),
        "triples_by_relation": tally(t["relation"] for t in triples),
        "eligible_by_type": tally(etype[n] for n in seeds),
        "above_by_type": tally(etype[n] for n, s in ball.items() if s > SEED_MAX),
        "below_by_type": tally(etype[n] for n, s in ball.items() if s < SEED_MIN),
        "max_degree": [(n, d) for d, n in sorted(((d, n) for n, d in graph.degree()), reverse=True)[:5]],
    }
    print("entities by type:", numbers["entities_by_type"])
    print("triples by relation:", numbers["triples_by_relation"])
    print(f"eligible seeds ({SEED_HOPS}-hop ball of {SEED_MIN}..{SEED_MAX} nodes) by type:",
          numbers["eligible_by_type"])
    print(f"balls above {SEED_MAX} by type:", numbers["above_by_type"])
    print(f"balls below {SEED_MIN} by type:", numbers["below_by_type"])
    print("max degree:", numbers["max_degree"])
    print({k: v for k, v in numbers.items() if not isinstance(v, (dict, list))})
    return numbers


def site_packages() -> Path:
    return Path(rebase.__file__).resolve().parents[2]


def data_files() -> list[tuple[str, str]]:
    """(file, sha256) of every data file the graph is read from."""
    root = site_packages()
    return [(name, file_sha256(root / name)) for name in DATA_FILES]


def counts_table(title: str, counts: dict[str, int], meaning: dict[str, str]) -> list[str]:
    return [f"| {title} | count | what |", "|---|---:|---|",
            *[f"| {k} | {v:,} | {meaning[k]} |" for k, v in counts.items()],
            f"| **total** | {sum(counts.values()):,} | |"]


def dropped_summary(graph: Graph, dropped: list[str], enzymes: dict[str, Enzyme]) -> str:
    """What the nodes outside the largest component are, in numbers."""
    kinds = Counter(key.split(":", 1)[0] for key in dropped)
    names = [key.split(":", 1)[1] for key in dropped if key.startswith("enzyme:")]
    uncut = sum(enzymes[n].cut_key is None for n in names)
    unsold = sum(not enzymes[n].suppliers for n in names)
    words = {"enzyme": "enzymes", "site": "recognition sequences", "overhang": "overhang", "supplier": "suppliers"}
    return (", ".join(f"{c:,} {words[k]}" for k, c in sorted(kinds.items())) +
            f", in {len(graph.other_components):,} components of {min(graph.other_components)} to "
            f"{max(graph.other_components)} entities that no relation of this graph joins to the rest. Of "
            f"these enzymes, {uncut:,} have no characterised cut positions and {unsold:,} have no supplier")


def write_source_md(path: Path, numbers: dict[str, Any], graph: Graph, dropped: list[str],
                    left_out: list[str], renamed: list[str], enzymes: dict[str, Enzyme]) -> None:
    version = metadata.version(PACKAGE)
    declared = licence(PACKAGE)
    lines = [
        "# molecular_biology — restriction enzymes (REBASE via Biopython)",
        "",
        "## Source",
        "",
        "- Data: the restriction enzyme tables `rest_dict`, `suppliers` and `typedict` of",
        f"  `Bio/Restriction/Restriction_Dictionary.py` in the PyPI package `{PACKAGE}` {version}",
        "  (https://biopython.org, https://github.com/biopython/biopython). The module says it was",
        "  generated by Biopython's `Scripts/Restriction/ranacompiler.py` from the REBASE EMBOSS files,",
        f"  \"version {rebase_release()}\" (REBASE release {rebase_release().split()[0]}: the files `emboss_e`,",
        "  `emboss_r`, `emboss_s` that REBASE publishes for EMBOSS: its enzymes with known recognition",
        "  sequences, their cut positions and commercial sources). Each record links to its REBASE entry",
        "  (`uri`, https://identifiers.org/rebase:NNN). The IUPAC nucleotide codes of `Bio/Data/IUPACData.py`",
        "  (`ambiguous_dna_values`, `ambiguous_dna_complement`) are used to compare degenerate sequences.",
        f"- Biopython licence: the package metadata declares `License-Expression: {declared}`; the",
        f"  licence text is `biopython-{version}.dist-info/{LICENCE_FILE}`: the \"Biopython License",
        "  Agreement\" (use, copy, modify and distribute for any purpose without fee, provided the",
        "  copyright notices and the permission notice appear in supporting documentation), with some",
        "  files dual-licensed under BSD 3-Clause. `Restriction_Dictionary.py` states \"Copyright (C) 2004.",
        "  Frederic Sohm ... part of the Biopython distribution and governed by its license\"; Biopython is",
        "  Copyright (c) 1999-2025 The Biopython Contributors. The package is only read; no Biopython file",
        "  is redistributed.",
        "- REBASE terms: the package ships no REBASE licence text (only the release number above and the",
        "  record links). REBASE (http://rebase.neb.com), the Restriction Enzyme Database, is copyright",
        "  Dr. Richard J. Roberts; the terms printed with its data files welcome redistribution \"providing",
        "  it is clear to your users that they are not being charged for the REBASE data\" and that REBASE",
        "  is a free and independent resource, cited as: Roberts, R.J., Vincze, T., Posfai, J., Macelis, D.",
        "  \"REBASE: a database for DNA restriction and modification: enzymes, genes and genomes\", Nucleic",
        "  Acids Res. 51: D629-D630 (2023). This graph holds facts from REBASE (names, sequences, cut",
        "  positions, suppliers), is free of charge, and REBASE is credited here: *Contains data from",
        f"  REBASE (rebase.neb.com, release {rebase_release().split()[0]}) as compiled by Biopython {version}.*",
        "",
        "Data files read (SHA-256):",
        "",
        "| file | sha256 |",
        "|---|---|",
        *[f"| `{name}` | `{digest}` |" for name, digest in data_files()],
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/molecular_biology.py",
        "```",
        "",
        "Needs `biopython` and `networkx`. Output is deterministic (sorted, UTF-8 with `ensure_ascii=False`,",
        "`\\n` line endings); the script ends with a networkx check of names, triple endpoints, connected",
        "components and seed ball sizes, and rewrites this file.",
        "",
        "## What is in the graph",
        "",
        *counts_table("entity type", numbers["entities_by_type"], TYPE_MEANING),
        "",
        *counts_table("relation", numbers["triples_by_relation"], RELATION_MEANING),
        "",
        "Every entity description and triple sentence is built from record fields: enzyme name, REBASE",
        "record number and link, `site`, `size`, `freq` (\"expected about once every N bases\"), the",
        "Palindromic/Defined/Ambiguous classes of `typedict`, `charac` (cut positions, written in REBASE's",
        "notation, e.g. `G^AATTC`, `GGTCTC(1/5)`, `(7/12)GAACNNNNNNTCC(12/7)`), `ovhg`/`ovhgseq` (blunt, 5' or",
        "3' overhangs) and `suppl` with the supplier names of `suppliers`. Counts (\"Recognised by 13",
        "enzymes\", \"sells 238 of the 1,088 enzymes\") are over Biopython's list of "
        f"{len(enzymes):,} enzymes.",
        "",
        "## Editorial rules",
        "",
        "- Enzymes keep their names as Biopython writes them (REBASE names; five carry a suffix such as",
        "  `CviKI_1` or `HpyAXVI_mut1`, and these five have no REBASE record number in the data).",
        "  Recognition sequences are named by the sequence (`GAATTC`); the two shorter than three bases",
        "  are `C (one-base site)` and `CC (two-base site)`, and the one record with two alternative",
        "  sites (`TNGGNAG|GTGGNAG`) is `TNGGNAG or GTGGNAG`. Overhangs are named `5'-AATT overhangs` /",
        "  `3'-TGCA overhangs`; an overhang and its reverse complement would share one node (no such",
        "  pair occurs). Names are unique after normalisation (NFKC, casefold, whitespace, quotes); a",
        "  clash would append the type in brackets. Renamed: " + (", ".join(renamed) or "none") + ".",
        "- Overhang nodes only for sticky ends that are the same at every site (Biopython class `Defined`,",
        "  not blunt): enzymes with the same one leave compatible ends. Blunt ends and overhangs that vary",
        "  with the DNA cut (`NNNN`) are stated in the enzyme description only.",
        "- Suppliers: `sold only by` links an enzyme to its supplier when `suppl` names just one. Enzymes",
        "  with several suppliers list them all in their description, not as edges: a link to each would",
        "  make every supplier a hub of up to 238 enzymes (New England Biolabs), through which hardly a",
        "  chain of relations has a single answer and most depth-3 balls would exceed 400 nodes.",
        "  Suppliers that are the only source of no enzyme are therefore not entities:",
        "  " + join_list(left_out) + ".",
        "- `contains` and `special case of` compare recognition sequences with IUPAC codes on both strands:",
        "  an inner sequence matches wherever the outer one does. `contains` links a sequence to the most",
        "  specific shorter sequence nested in it (largest `freq`, ties give several edges); `special case",
        "  of` links it to its closest degenerate form of the same length (the unique most specific one",
        "  that matches every copy). Neither links to a sequence less specific than a four-base site",
        f"  (`freq` < {int(MIN_LINK_FREQ)}: C, CC, CNNR, YSCNS, ...); a sequence whose best candidate is such",
        "  gets no edge. The one two-alternative site is not compared.",
        "- Isoschizomers and neoschizomers: REBASE calls enzymes recognising the same sequence",
        "  isoschizomers, and those among them cutting it at a different position neoschizomers. Only",
        "  the two enzymes of a sequence that exactly two enzymes recognise, both with known cuts, are",
        "  linked (`isoschizomer of` when they cut alike, else `neoschizomer of`), so that \"the",
        "  isoschizomer of X\" names one enzyme under either reading of the term; enzymes of larger groups",
        "  are linked through their shared recognition sequence. The REBASE prototype of a group is not",
        "  in the package's data and is not guessed.",
        "- Organisms: REBASE names encode the source organism (Eco = Escherichia coli), but the package",
        "  has no organism field, so no organism entities are made.",
        "- Other fields: `opt_temp` (37) and `inact_temp` (65) are the same for every record and",
        "  `substrat` is always DNA; they are not used.",
        "- Only the largest connected component is kept. Left out: " + dropped_summary(graph, dropped, enzymes) + ".",
        "",
        "## Observations in the data",
        "",
        f"Of the {len(linkable_sites(enzymes)[0]):,} recognition sequences compared (all but the two-alternative one),",
        "before the largest component is taken:",
        "",
        *[f"- {topic}: {count:,}" for topic, count in sorted(graph.counts.items())],
        "",
        "## Graph check",
        "",
        f"- {numbers['entities']:,} entities ({numbers['described'] / numbers['entities']:.0%} with a description "
        f"built from the record), {numbers['triples']:,} triples;",
        f"  {numbers['components']} connected component(s), the largest with "
        f"{numbers['largest_component']:,} entities.",
        f"- Eligible seeds (entities whose {SEED_HOPS}-hop ball holds {SEED_MIN}..{SEED_MAX} entities): "
        f"{numbers['eligible_seeds']:,}; by type: "
        + ", ".join(f"{t} {c:,}" for t, c in numbers["eligible_by_type"].items()) + ".",
        "- Balls above the window, by type: " + ", ".join(f"{t} {c:,}" for t, c in numbers["above_by_type"].items())
        + "; below it: " + ", ".join(f"{t} {c:,}" for t, c in numbers["below_by_type"].items()) + ".",
        "- Highest degrees: " + ", ".join(f"{n} {d}" for n, d in numbers["max_degree"]) + ".",
        "",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines))


def build(enzymes: dict[str, Enzyme]) -> tuple[Graph, list[str], list[str]]:
    graph = Graph()
    add_enzymes(graph, enzymes)
    add_sites(graph, enzymes)
    add_overhangs(graph, enzymes)
    left_out = add_suppliers(graph, enzymes)
    add_nested_sites(graph, enzymes)
    add_degenerate_forms(graph, enzymes)
    add_schizomers(graph, enzymes)
    dropped = keep_largest_component(graph)
    return graph, dropped, left_out


def main() -> None:
    enzymes = load_enzymes()
    print(f"{PACKAGE} {metadata.version(PACKAGE)}, REBASE {rebase_release()}: {len(enzymes):,} enzymes")
    graph, dropped, left_out = build(enzymes)
    renamed = assign_names(graph)
    entities, triples = records(graph)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    print("left out outside the largest component:", dropped_summary(graph, dropped, enzymes))
    print("suppliers left out:", left_out)
    for topic, count in sorted(graph.counts.items()):
        print(f"{topic}: {count}")
    numbers = check_graph(entities, triples)
    write_source_md(OUT_DIR / "SOURCE.md", numbers, graph, dropped, left_out, renamed, enzymes)
    for name in ("entities.jsonl", "triples.jsonl", "SOURCE.md"):
        print(f"wrote {OUT_DIR / name} ({(OUT_DIR / name).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
