"""Export the "aviation" knowledge graph (airports, their cities, regions, countries and time zones) from airportsdata.

Why this exists: kg_assets/aviation/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the airport table that the PyPI package
``airportsdata`` ships (``airports.csv``, plus ``iata_macs.csv``, IATA's multi-airport cities),
with country names from ``pycountry`` (ISO 3166-1).  See SOURCE.md for versions and licences.

Graph: the airports with an IATA code that call themselves international (or that IATA groups
under a multi-airport city); the city each serves; the subdivision (state, province, region: the
record's ``subd``) of airport and city; the country; the IANA time zone of each airport (and of a
subdivision whose airports all keep one zone); and the tz database area (continent or ocean) that
begins each zone name.  Every relation is functional (one tail per head), so a chain of relations
has a single answer; relations share labels across entity types ("in country" for cities and
subdivisions alike), so that walking one backwards from a sparse part of the graph does not look
unique when it is not.  Nothing is invented: names, links and sentences are built from fields of
the package records; the editorial rules (which records are kept, how clashing names are
qualified) are in SOURCE.md.

Run from the project root:  python kg_assets/exporters/aviation.py
"""

from __future__ import annotations

import csv
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import airportsdata
import pycountry
from _shared import (
    SEED_HOPS,
    SEED_MAX,
    SEED_MIN,
    Graph,
    Node,
    check_names_and_endpoints,
    clean,
    count_tables,
    eligible,
    file_sha256,
    join_list,
    licence,
    normalize_name,
    package_dir,
    seed_balls,
    tally,
    write_jsonl,
)

OUT_DIR = Path(__file__).resolve().parents[1] / "aviation"
PACKAGES = ("airportsdata", "pycountry")
DATA_FILES = ("airports.csv", "iata_macs.csv")
# An airport is kept when it has an IATA code and its name says it is international (any of
# these words), or when IATA lists it under a multi-airport city (iata_macs.csv).
INTERNATIONAL = re.compile(r"\b(?:International|Intercontinental|Internacional|Intl)\b", re.IGNORECASE)
# Words that only say where a subdivision lies ("North West", "Central Region"); a subdivision
# named with these alone is always qualified with its country.
POSITIONAL_WORDS = frozenset("""north south east west northern southern eastern western central centre center
middle region province district capital national federal oriental occidental""".split())
# airportsdata's country code for Kosovo, which ISO 3166-1 has not assigned.
KOSOVO = "XK"
# Name of the entity type -> rank when plain names clash (lower rank keeps the plain name).
TYPE_RANK = {"country": 0, "time zone area": 1, "time zone": 2, "city": 3, "subdivision": 4, "airport": 5}


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def feet(value: float) -> str:
    """An elevation in feet with thousands separators, without a useless '.0'."""
    return f"{int(value):,} ft" if float(value).is_integer() else f"{value:,} ft"


def coordinates(lat: float, lon: float) -> str:
    """Latitude/longitude as written in the record, with hemispheres."""
    return f"{abs(lat)}° {'N' if lat >= 0 else 'S'}, {abs(lon)}° {'E' if lon >= 0 else 'W'}"


def plural(count: int, noun: str, many: str | None = None) -> str:
    """'1 airport' / '3 airports' ('1 city' / '3 cities' with many='cities')."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {many or noun + 's'}"


# ---------------------------------------------------------------------------------------------
# Nodes before naming: every entity has a stable key; names are assigned once all are known.
# ---------------------------------------------------------------------------------------------




# ---------------------------------------------------------------------------------------------
# Reading the package
# ---------------------------------------------------------------------------------------------


@dataclass
class Sources:
    """The records read from airportsdata: every airport row, and IATA's multi-airport cities."""

    airports: list[dict[str, Any]]  # every row of airports.csv, in file order
    macs: dict[str, tuple[str, str, str]]  # airport IATA code -> (MAC code, MAC city name, country)
    blanked: list[str]  # countries whose only recorded subdivision is the territory itself


def read_csv(name: str) -> list[dict[str, Any]]:
    """Rows of one of the package's CSV files, parsed as the package itself parses them."""
    with open(package_dir(airportsdata) / name, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, quoting=csv.QUOTE_NONNUMERIC))


def load_sources() -> Sources:
    """Read airports.csv and iata_macs.csv; the ICAO (or pseudo-ICAO) identifier must be unique."""
    airports = [{k: clean(v) if isinstance(v, str) else v for k, v in row.items()} for row in read_csv("airports.csv")]
    repeated = [k for k, c in Counter(r["icao"] for r in airports).items() if c > 1]
    if repeated:
        raise ValueError(f"repeated ICAO identifiers in airports.csv: {repeated[:5]}")
    blanked = territory_only(airports)
    macs = {clean(r["Airport Code"]): (clean(r["City Code"]), clean(r["City Name"]), clean(r["Country"]))
            for r in read_csv("iata_macs.csv")}
    return Sources(airports, macs, blanked)


def territory_only(airports: list[dict[str, Any]]) -> list[str]:
    """Blank the ``subd`` of countries whose only recorded subdivision is the territory itself (e.g.
    Martinique in Martinique): it names no subdivision.  Returns the countries concerned."""
    subdivisions: dict[str, set[str]] = defaultdict(set)
    for row in airports:
        if row["subd"]:
            subdivisions[row["country"]].add(row["subd"])
    blanked = sorted(code for code, names in subdivisions.items()
                     if len(names) == 1 and normalize_name(next(iter(names))) == normalize_name(country_name(code)))
    for row in airports:
        if row["country"] in blanked:
            row["subd"] = ""
    return blanked


def selected(src: Sources) -> list[dict[str, Any]]:
    """The airports of the graph: IATA-coded and international by name, or in a multi-airport city."""
    return [r for r in src.airports
            if r["iata"] and (INTERNATIONAL.search(r["name"]) or r["iata"] in src.macs)]


def country_name(code: str) -> str:
    """The everyday English name of an ISO 3166-1 code: pycountry's common name, else its name with
    an inverted "Congo, The Democratic Republic of the" / "Virgin Islands, British" turned round."""
    if code == KOSOVO:
        return "Kosovo"
    record = pycountry.countries.get(alpha_2=code)
    if record is None:
        raise ValueError(f"country code {code!r} is not in ISO 3166-1")
    name = getattr(record, "common_name", None) or record.name
    if "," in name:
        head, tail = (part.strip() for part in name.split(",", 1))
        if re.search(r"\bof(?: the)?$", tail) or " " not in tail:
            name = re.sub(r"^The ", "", f"{tail} {head}")
    return name


# ---------------------------------------------------------------------------------------------
# Keys and one function per entity type
# ---------------------------------------------------------------------------------------------


def country_key(code: str) -> str:
    return f"country:{code}"


def subdivision_key(row: dict[str, Any]) -> str | None:
    return f"subdivision:{row['country']}:{row['subd']}" if row["subd"] else None


def city_key(row: dict[str, Any]) -> str | None:
    return f"city:{row['country']}:{row['subd']}:{row['city']}" if row["city"] else None


def airport_key(row: dict[str, Any]) -> str:
    return f"airport:{row['icao']}"


def zone_key(tz: str) -> str:
    return f"time zone:{tz}"


def where(row: dict[str, Any], countries: dict[str, str], city: bool = True) -> str:
    """'Denver, Colorado, United States' from a record's city, subdivision and country fields."""
    parts = ([row["city"]] if city and row["city"] else []) + ([row["subd"]] if row["subd"] else [])
    return ", ".join(parts + [countries[row["country"]]])


def add_countries(graph: Graph, rows: list[dict[str, Any]], src: Sources, countries: dict[str, str]) -> None:
    """One entity per country of a kept airport (ISO 3166-1 names from pycountry)."""
    kept = Counter(r["country"] for r in rows)
    listed = Counter(r["country"] for r in src.airports)
    with_iata = Counter(r["country"] for r in src.airports if r["iata"])
    for code in sorted(kept):
        name = countries[code]
        record = pycountry.countries.get(alpha_2=code)
        iso = (f"ISO 3166-1 codes {code} / {record.alpha_3} / {record.numeric}" if record else
               f"code {code}, which airportsdata uses although ISO 3166-1 has not assigned it")
        graph.add_node(Node(
            country_key(code), name, "country",
            f"{name} is a country or territory ({iso}). airportsdata lists {plural(listed[code], 'airport')} "
            f"there, {with_iata[code]:,} of them with an IATA code; {plural(kept[code], 'airport')} of this graph "
            f"{'is' if kept[code] == 1 else 'are'} in it.",
            [f"{name} (country)"]))


def positional(name: str) -> bool:
    """Whether a subdivision name says only where it lies in its country ("North West", "Central
    Region"): such a name is always qualified with its country."""
    return all(word in POSITIONAL_WORDS for word in re.findall(r"[^\W_]+", name.casefold()))


def only_zone(found: Counter) -> tuple[str, int] | None:
    """(zone, airports) when every airport counted keeps the same zone, else None."""
    return next(iter(found.items())) if len(found) == 1 else None


def all_keep(count: int, place: str) -> str:
    """'All 8 airports that airportsdata lists in X keep' / 'The one airport ... keeps'."""
    if count == 1:
        return f"The one airport that airportsdata lists {place} keeps"
    return f"All {count:,} airports that airportsdata lists {place} keep"


def place_zones(src: Sources, key_of: Any) -> dict[str, Counter]:
    """Per place key (``key_of(row)``), the time zones of all airports airportsdata lists there."""
    zones: dict[str, Counter] = defaultdict(Counter)
    for row in src.airports:
        key = key_of(row)
        if key and row["tz"]:
            zones[key][row["tz"]] += 1
    return zones


def add_subdivisions(graph: Graph, rows: list[dict[str, Any]], src: Sources, countries: dict[str, str]) -> None:
    """The records' ``subd`` values (state, province, region ...) of kept airports: each is in its
    country, and in a time zone when every airport airportsdata lists in it keeps that zone's time."""
    cities: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        if row["subd"] and row["city"]:
            cities[subdivision_key(row)].add(row["city"])  # type: ignore[index]
    zones = place_zones(src, subdivision_key)
    for key in sorted(cities):
        code, name = key.split(":", 2)[1:]
        country, listed = countries[code], sorted(cities[key])
        qualified = f"{name} (subdivision of {country})"
        graph.add_node(Node(
            key, qualified if positional(name) else name, "subdivision",
            f"{name} is a subdivision (state, province or region) of {country} in the airportsdata records; "
            f"the airports of this graph in it serve {plural(len(listed), 'city', 'cities')}: {join_list(listed)}.",
            [] if positional(name) else [qualified]))
        graph.add_edge(key, "in country", country_key(code),
                       "The airportsdata records place the subdivision {head} in " + code + " ({tail}).")
        if found := only_zone(zones[key]):
            graph.add_edge(key, "in time zone", zone_key(found[0]),
                           all_keep(found[1], "in {head}") + " the time of the IANA zone {tail}.")


def add_cities(graph: Graph, rows: list[dict[str, Any]], src: Sources, countries: dict[str, str]) -> None:
    """The ``city`` values of kept airports; a city links to its country and to its subdivision, and
    to a time zone when every airport airportsdata lists for it keeps that zone's time."""
    zones = place_zones(src, city_key)
    served: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["city"]:
            served[city_key(row)].append(row)  # type: ignore[index]
    for key in sorted(served):
        first = served[key][0]
        name, region = first["city"], where(first, countries, city=False)
        airports = sorted(r["name"] for r in served[key])
        graph.add_node(Node(
            key, name, "city",
            f"{name} is a city in {region}, served by {plural(len(airports), 'airport')} of this graph "
            f"({join_list(airports)}), according to the airportsdata records.",
            [f"{name} (city)", f"{name}, {first['subd'] or countries[first['country']]}",
             f"{name}, {region}"]))
        graph.add_edge(key, "in country", country_key(first["country"]),
                       "{head} is a city in {tail}, according to the airportsdata records of its airports.")
        if first["subd"]:
            graph.add_edge(key, "in subdivision", subdivision_key(first),  # type: ignore[arg-type]
                           "{head} is a city in {tail}, according to the airportsdata records of its airports.")
        if found := only_zone(zones[key]):
            graph.add_edge(key, "in time zone", zone_key(found[0]),
                           all_keep(found[1], "for the city {head}") + " the time of the IANA zone {tail}.")


def airport_text(row: dict[str, Any], countries: dict[str, str], macs: dict[str, tuple[str, str, str]]) -> str:
    """Description of an airport: codes, place, elevation, reference point and time zone."""
    codes = [f"ICAO code {row['icao']}", f"IATA code {row['iata']}"]
    if row["lid"]:
        codes.append(f"FAA location identifier {row['lid']}")
    text = (f"{row['name']} is an airport serving {where(row, countries)}, with {join_list(codes)}. "
            f"Its recorded elevation is {feet(row['elevation'])}, its reference point lies at "
            f"{coordinates(row['lat'], row['lon'])} and its time zone is {row['tz']}.")
    if row["iata"] in macs:
        code, city, _ = macs[row["iata"]]
        text += f" IATA groups it with the other airports of the multi-airport city {city} ({code})."
    return text


def add_airports(graph: Graph, rows: list[dict[str, Any]], src: Sources, countries: dict[str, str]) -> None:
    """Kept airports: each serves its city, lies in its subdivision (else, with neither, in its
    country) and keeps the time of one IANA zone."""
    for row in rows:
        key, code = airport_key(row), row["icao"]
        graph.add_node(Node(key, row["name"], "airport", airport_text(row, countries, src.macs),
                            [f"{row['name']} ({row['iata']})"]))
        if row["city"]:
            graph.add_edge(key, "serves", city_key(row),  # type: ignore[arg-type]
                           "{head} serves {tail}, according to its airportsdata record (ICAO " + code + ").")
        if row["subd"] and row["city"]:
            graph.add_edge(key, "in subdivision", subdivision_key(row),  # type: ignore[arg-type]
                           "{head} lies in {tail}, according to its airportsdata record (ICAO " + code + ").")
        else:
            graph.add_edge(key, "in country", country_key(row["country"]),
                           "{head} lies in {tail}, according to its airportsdata record (ICAO " + code + "), which "
                           "gives no " + ("city" if row["subd"] else "subdivision") + ".")
        graph.add_edge(key, "in time zone", zone_key(row["tz"]),
                       "{head} keeps the time of the IANA zone {tail}, according to its airportsdata record "
                       "(ICAO " + code + ").")


def zone_countries(src: Sources) -> dict[str, Counter]:
    """Per IANA time zone, the countries of all airports airportsdata lists in it (kept or not)."""
    found: dict[str, Counter] = defaultdict(Counter)
    for row in src.airports:
        if row["tz"]:
            found[row["tz"]][row["country"]] += 1
    return found


def area_key(tz: str) -> str:
    return f"time zone area:{tz.split('/')[0]}"


def add_time_zones(graph: Graph, rows: list[dict[str, Any]], src: Sources, countries: dict[str, str]) -> None:
    """The IANA zones of kept airports, each in the area (continent or ocean) its name begins with."""
    kept = Counter(r["tz"] for r in rows)
    found = zone_countries(src)
    for tz in sorted(kept):
        in_zone = found[tz]
        ranked = sorted(in_zone.items(), key=lambda item: (-item[1], item[0]))
        by_country = join_list([f"{countries[c]} {n:,}" for c, n in ranked])
        where_listed = f"all in {countries[ranked[0][0]]}" if len(ranked) == 1 else f"by country: {by_country}"
        graph.add_node(Node(
            zone_key(tz), tz, "time zone",
            f"{tz} is an IANA time zone (tz database name). airportsdata gives it as the time zone of "
            f"{plural(sum(in_zone.values()), 'airport')} ({where_listed}); {plural(kept[tz], 'airport')} of this "
            f"graph {'uses' if kept[tz] == 1 else 'use'} it."))
        graph.add_edge(zone_key(tz), "in area", area_key(tz),
                       "The tz database name {head} puts the zone in the area {tail}.")


# ---------------------------------------------------------------------------------------------
# Names, output and checks
# ---------------------------------------------------------------------------------------------


def assign_names(graph: Graph) -> dict[str, str]:
    """Unique entity names.  Every node has a list of candidate names: its plain name, then its
    qualified names.  In a clash the node of the strictly best type rank keeps its current name and
    the others move on to their next candidate; repeated until nothing clashes."""
    level = {key: 0 for key in graph.nodes}

    def candidates(key: str) -> list[str]:
        node = graph.nodes[key]
        return [node.name] + node.qualified

    for _ in range(10):
        groups: dict[str, list[str]] = defaultdict(list)
        for key in sorted(graph.nodes):
            groups[normalize_name(candidates(key)[level[key]])].append(key)
        clashes = [keys for keys in groups.values() if len(keys) > 1]
        if not clashes:
            return {key: candidates(key)[level[key]] for key in graph.nodes}
        for keys in clashes:
            ranked = sorted(keys, key=lambda k: (TYPE_RANK[graph.nodes[k].etype], k))
            first, second = (TYPE_RANK[graph.nodes[k].etype] for k in ranked[:2])
            winner = ranked[0] if first != second else None
            for key in ranked:
                if key != winner:
                    level[key] += 1
                    if level[key] >= len(candidates(key)):
                        raise ValueError(f"cannot disambiguate {graph.nodes[key].name!r} ({key})")
    raise ValueError("names still clash after disambiguation")


def finalize(graph: Graph) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, list[str]]]:
    """Entity and triple records with final names, sorted; and the qualified names by type."""
    names = assign_names(graph)
    renamed: dict[str, list[str]] = defaultdict(list)
    for key, name in sorted(names.items(), key=lambda kv: kv[1]):
        if name != graph.nodes[key].name:
            renamed[graph.nodes[key].etype].append(name)
    entities = sorted(({"name": names[k], "type": n.etype, "description": n.description}
                       for k, n in graph.nodes.items()), key=lambda e: (e["name"], e["type"]))
    triples = []
    for (head, relation, tail), template in graph.edges.items():
        if head not in graph.nodes or tail not in graph.nodes:
            raise ValueError(f"edge endpoint missing: {(head, relation, tail)}")
        triples.append({"head": names[head], "relation": relation, "tail": names[tail],
                        "description": template.replace("{head}", names[head]).replace("{tail}", names[tail])})
    triples.sort(key=lambda t: (t["head"], t["relation"], t["tail"]))
    return entities, triples, dict(sorted(renamed.items()))


def check_graph(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, Any]:
    """Validate names and endpoints; print size, connectivity and seed-ball numbers."""
    names = [e["name"] for e in entities]
    check_names_and_endpoints(entities, triples)
    assert all(len(n) > 2 and not n.isdigit() for n in names), "a name is too short or a bare number"
    tails = Counter((t["head"], t["relation"]) for t in triples)
    assert all(c == 1 for c in tails.values()), "a relation has two tails for one head"
    graph, ball, components = seed_balls(entities, triples)
    etype = {e["name"]: e["type"] for e in entities}
    seeds = eligible(ball)
    described = sum(1 for e in entities if e["description"].strip())
    numbers: dict[str, Any] = {
        "entities": len(entities), "triples": len(triples), "described": described,
        "eligible_seeds": len(seeds), "components": len(components), "largest_component": components[0],
        "max_degree": max(d for _, d in graph.degree()), "component_sizes": components,
        "max_degree_entity": max(graph.degree(), key=lambda nd: (nd[1], nd[0]))[0],
        "entities_by_type": tally(e["type"] for e in entities),
        "triples_by_relation": tally(t["relation"] for t in triples),
        "eligible_by_type": tally(etype[n] for n in seeds),
        "above_by_type": tally(etype[n] for n, s in ball.items() if s > SEED_MAX),
        "below_by_type": tally(etype[n] for n, s in ball.items() if s < SEED_MIN),
    }
    inside = sorted(ball[n] for n in seeds)
    print("entities by type:", numbers["entities_by_type"])
    print("triples by relation:", numbers["triples_by_relation"])
    print(f"eligible seeds ({SEED_HOPS}-hop ball of {SEED_MIN}..{SEED_MAX} nodes) by type:",
          numbers["eligible_by_type"])
    print(f"balls above {SEED_MAX} by type:", numbers["above_by_type"])
    print(f"balls below {SEED_MIN} by type:", numbers["below_by_type"])
    if inside:
        print(f"eligible balls min/median/max: {inside[0]}/{inside[len(inside) // 2]}/{inside[-1]}")
    print("max degree:", sorted(((d, n) for n, d in graph.degree()), reverse=True)[:6])
    print("component sizes:", components[:10])
    print({k: v for k, v in numbers.items() if not isinstance(v, (dict, list))})
    return numbers


def add_areas(graph: Graph, rows: list[dict[str, Any]]) -> None:
    """The areas (continent or ocean) that begin the tz database names of the kept time zones."""
    zones: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        zones[area_key(row["tz"])].add(row["tz"])
    for key in sorted(zones):
        area = key.split(":", 1)[1]
        examples = sorted(zones[key])
        graph.add_node(Node(
            key, area, "time zone area",
            f"{area} is an area of the IANA tz database, the first part of zone names such as "
            f"{join_list(examples[:3])}; {plural(len(examples), 'time zone')} of this graph are in it.",
            [f"{area} (time zone area)"]))


def build() -> tuple[Graph, Sources, list[dict[str, Any]]]:
    src = load_sources()
    rows = selected(src)
    countries = {code: country_name(code) for code in sorted({r["country"] for r in src.airports})}
    graph = Graph()
    add_countries(graph, rows, src, countries)
    add_areas(graph, rows)
    add_time_zones(graph, rows, src, countries)
    add_subdivisions(graph, rows, src, countries)
    add_cities(graph, rows, src, countries)
    add_airports(graph, rows, src, countries)
    return graph, src, rows


# ---------------------------------------------------------------------------------------------
# Provenance and SOURCE.md
# ---------------------------------------------------------------------------------------------


def data_files() -> list[tuple[str, str, str]]:
    """(package, data file, sha256) of every file the graph is read from."""
    rows = [("airportsdata", f"airportsdata/{n}", file_sha256(package_dir(airportsdata) / n)) for n in DATA_FILES]
    iso = package_dir(pycountry) / "databases" / "iso3166-1.json"
    rows.append(("pycountry", "pycountry/databases/iso3166-1.json", file_sha256(iso)))
    return rows


RELATION_MEANING = {
    "serves": "airport -> city (the record's `city`)",
    "in subdivision": "airport -> subdivision (when its record gives a city), city -> subdivision "
                      "(the record's `subd`)",
    "in country": "city -> country, subdivision -> country, and airport -> country for a record without city "
                  "or subdivision (the record's `country`, ISO 3166-1 alpha-2)",
    "in time zone": "airport -> time zone (the record's `tz`); city -> time zone and subdivision -> time zone "
                    "when every airport airportsdata lists there has that `tz`",
    "in area": "time zone -> tz database area (the part of the zone name before the first `/`)",
}
TYPE_MEANING = {
    "airport": "IATA-coded airports named International (or Intercontinental, Internacional, Intl), "
               "and the airports of IATA's multi-airport cities",
    "city": "the `city` of a kept airport, per (country, subdivision, city) as recorded",
    "subdivision": "the `subd` of a kept airport (state, province, region ...), per country",
    "country": "ISO 3166-1 countries and territories (plus Kosovo, XK), named by pycountry",
    "time zone": "IANA tz database zones (the `tz` of kept airports)",
    "time zone area": "tz database areas: the continent or ocean that begins a zone name",
}


def area_bridges(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Countries whose kept airports keep zones of more than one tz area (they join the areas)."""
    areas: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        areas[row["country"]].add(row["tz"].split("/")[0])
    return {code: sorted(found) for code, found in sorted(areas.items()) if len(found) > 1}


def write_source_md(path: Path, src: Sources, rows: list[dict[str, Any]], numbers: dict[str, Any],
                    renamed: dict[str, list[str]], blanked: list[str]) -> None:
    """SOURCE.md: provenance, licences, editorial rules, counts and the graph check."""
    version = {pkg: metadata.version(pkg) for pkg in PACKAGES}
    international = sum(1 for r in rows if INTERNATIONAL.search(r["name"]))
    mac_only = len(rows) - international
    examples = {t: ", ".join(f"`{n}`" for n in names[:4]) for t, names in renamed.items()}
    countries = {r["country"]: country_name(r["country"]) for r in rows}
    bridges = area_bridges(rows)
    positional_names = sorted(f"{r['subd']} (subdivision of {countries[r['country']]})" for r in
                              {(r["country"], r["subd"]): r for r in rows if r["subd"] and r["city"]}.values()
                              if positional(r["subd"]))
    lines = [
        "# aviation — international airports, their cities, states/provinces, countries and time zones",
        "",
        "Generated by `kg_assets/exporters/aviation.py`; do not edit by hand.",
        "",
        "## Sources",
        "",
        f"- **`airportsdata` {version['airportsdata']}** (package licence: {licence('airportsdata')},",
        "  Copyright (c) 2020- Mike Borsetti; https://github.com/mborsetti/airportsdata). The airport table",
        "  `airports.csv` and IATA's multi-airport cities `iata_macs.csv` ship inside the package and are covered",
        "  by its MIT licence, whose LICENSE file states that the project includes data from",
        "  https://github.com/mwgg/Airports, Copyright (c) 2014 mwgg (MIT as well). The README says new data",
        "  is validated against national AIPs, the ARINC database, IATA and ch-aviation, that the time zones",
        "  were originally sourced from TimeZoneDB (the values are IANA tz database names) and that the",
        "  elevation \"is often wrong\" (it is given as recorded).",
        "  MIT permits redistribution; attribution: *Contains data from airportsdata (Mike Borsetti) and",
        "  mwgg/Airports, MIT licence.*",
        f"- **`pycountry` {version['pycountry']}** (package licence: {licence('pycountry')}; data: Debian `iso-codes`,",
        "  LGPL-2.1-or-later): only the English names of the ISO 3166-1 country codes that airportsdata uses.",
        "- The packages are only read; nothing of them is redistributed except the facts in this graph.",
        "",
        "Data files read (SHA-256 of the file):",
        "",
        "| package | file | sha256 |",
        "|---|---|---|",
    ]
    lines += [f"| {pkg} | `{name}` | `{digest}` |" for pkg, name, digest in data_files()]
    lines += [
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/aviation.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8 without escaping, `\\n` line endings); the script ends",
        "with a networkx check of names, endpoints, functional relations, components and seed ball sizes.",
        "",
        "## What is in the graph",
        "",
        f"{numbers['entities']:,} entities, {numbers['triples']:,} triples; {numbers['described']:,} entities "
        f"({numbers['described'] / numbers['entities']:.0%}) have a description built from their records.",
        "",
    ]
    lines += count_tables(numbers, TYPE_MEANING, RELATION_MEANING, "source field")
    lines += [
        "",
        "Every relation is functional: a head has one tail per relation label, so a chain of relations",
        "walked forwards has one answer. Labels are shared across entity types on purpose: a walk",
        "backwards along `in country` from a country reaches its cities and its subdivisions, along",
        "`in time zone` a zone's airports, cities and subdivisions, along `in subdivision` its airports",
        "and cities, so a backwards step rarely looks unique merely because the graph holds only some",
        "airports. Descriptions and triple sentences are built from the record fields (names, ICAO /",
        "IATA / FAA codes, elevation, coordinates, time zone); counts such as \"4 airports of this graph\"",
        "are counted over the exported records, counts over \"airportsdata\" over the whole table.",
        "",
        "## Editorial rules",
        "",
        f"- Airports: of the {len(src.airports):,} records of `airports.csv`, the "
        f"{sum(1 for r in src.airports if r['iata']):,} with an IATA code are candidates; kept are",
        "  those whose name holds the word International, Intercontinental, Internacional or Intl "
        f"({international:,}), and the",
        f"  other airports IATA lists under a multi-airport city in `iata_macs.csv` ({mac_only:,}, e.g. London",
        f"  Heathrow, Orly, LaGuardia): {len(rows):,} airports. The name is a proxy for scheduled international",
        "  service that the table itself does not record; it leaves out large airports whose official name",
        "  lacks the word (e.g. Lisbon, Nice, Amsterdam Schiphol).",
        "- Cities: one entity per (country, subdivision, city) as recorded. The record's `subd` is where the",
        "  airport lies, so a city served from a neighbouring subdivision is recorded with that subdivision",
        "  (Narita International Airport: city Tokyo, subdivision Chiba, next to Haneda's Tokyo in Tokyo);",
        "  the two then are separate, qualified city entities (`Tokyo, Chiba` and `Tokyo, Tokyo`). A city",
        "  links to its country, to its subdivision, and to a time zone when every airport airportsdata",
        "  lists for that (country, subdivision, city) keeps the same `tz`.",
        "- Airports link to the city they serve and to their subdivision; a record without a city or",
        f"  without a subdivision ({sum(1 for r in rows if not (r['city'] and r['subd'])):,} kept airports) "
        "links the airport to its country instead of the",
        "  subdivision. Every airport links to its time zone.",
        "- Subdivisions: the record's `subd` per country, as written there (local or English names, e.g.",
        "  `Ile-de-France`, `Lesser-Poland-Voivodeship`), for the cities of kept airports. A country whose",
        "  only recorded subdivision is the territory itself has none ("
        + ", ".join(blanked) + ": e.g. Martinique in Martinique). A",
        "  subdivision is in a time zone only when every airport airportsdata lists in it (kept or not)",
        "  has the same `tz`. A name made only of position words (`North West`, `Central Region`,",
        "  `Western`) says nothing without its country and is always qualified: "
        + ", ".join(f"`{n}`" for n in positional_names) + ".",
        "- Countries: named by pycountry's common name (e.g. `Iran`, `South Korea`, `Taiwan`), else its ISO name",
        "  with an inverted form turned round (`Congo, The Democratic Republic of the` -> `Democratic Republic",
        "  of the Congo`, `Virgin Islands, British` -> `British Virgin Islands`); Kosovo (XK) by that name.",
        "- Time zones: the `tz` value (IANA names such as `America/Argentina/Mendoza`); each is in the tz",
        "  database area its name begins with (`Europe`, `America`, `Asia`, `Africa`, `Pacific`, `Atlantic`,",
        "  `Indian`, `Australia`). Zones are not linked to countries: airportsdata places airports of one",
        "  country in another country's zone (border airfields, e.g. Querari Airport, Brazil, in",
        "  America/Bogota; a Gibraltar record in Europe/Madrid), so a zone-country link would be missing",
        "  for a country's main zone or wrong for others.",
        "- Names are unique after normalisation (NFKC, casefold, collapsed whitespace, quotes removed).",
        "  When plain names clash, the entity of the strictly best rank keeps the plain name (country >",
        "  time zone area > time zone > city > subdivision > airport) and the others are qualified: a",
        "  city named like its country gets `(city)`, other clashing cities `, <subdivision>` (else",
        "  `, <country>`), a subdivision `(subdivision of <country>)`, an airport its IATA code, the area",
        "  `Australia` `(time zone area)`. Qualified names by type: "
        + "; ".join(f"{t} {len(n)} (e.g. {examples[t]})" for t, n in renamed.items()) + ".",
        "- Many airports are named after the city they serve (`Denver International Airport` serves",
        "  `Denver`); the names are kept as they are, and the question validator rejects questions whose",
        "  start gives a hidden path entity away. Chains through the subdivision and the time zone",
        "  (airport -> subdivision -> time zone -> area) do not pass through the city.",
        "",
        "## Graph check",
        "",
        f"- Undirected graph: {numbers['components']} connected components of "
        + ", ".join(f"{c:,}" for c in numbers["component_sizes"]) + " entities. No record links places",
        "  across the tz database areas except a country whose airports keep zones of two areas ("
        + "; ".join(f"{countries[c]}: {', '.join(a)}" for c, a in bridges.items()) + "),",
        "  so the components are groups of areas, continental blocks that no relation of this table joins.",
        "  All are kept.",
        f"- Eligible seeds (entities whose {SEED_HOPS}-hop ball holds {SEED_MIN}..{SEED_MAX} entities): "
        f"{numbers['eligible_seeds']:,}; by type: "
        + ", ".join(f"{t} {c:,}" for t, c in numbers["eligible_by_type"].items()) + ".",
        "- Balls above the window, by type: " + ", ".join(f"{t} {c:,}" for t, c in numbers["above_by_type"].items())
        + "; below it: " + ", ".join(f"{t} {c:,}" for t, c in numbers["below_by_type"].items()) + ".",
        f"- Highest degree: {numbers['max_degree']} ({numbers['max_degree_entity']}).",
        "",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    graph, src, rows = build()
    for pkg in PACKAGES:
        print(f"{pkg} {metadata.version(pkg)}")
    print(f"airports: {len(src.airports):,} records, {len(rows):,} kept")
    entities, triples, renamed = finalize(graph)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    numbers = check_graph(entities, triples)
    write_source_md(OUT_DIR / "SOURCE.md", src, rows, numbers, renamed, src.blanked)
    for name in ("entities.jsonl", "triples.jsonl", "SOURCE.md"):
        print(f"wrote {OUT_DIR / name} ({(OUT_DIR / name).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
