"""A LightRAG-shaped graphml written by the tests: a small construction-specification graph with what real
LightRAG output has (upper-case entity names, `<SEP>`-joined descriptions from several chunks, comma-joined
keyword lists on edges, generic entity types, and junk entities such as "The" that extraction leaves behind).

networkx writes it with LightRAG's own attribute names (node: entity_id, entity_type, description, source_id;
edge: weight, description, keywords, source_id), as `lightrag.kg.networkx_impl` does.
"""

from __future__ import annotations

from pathlib import Path

import networkx as nx

# (name, type, description chunks)
ENTITIES = [
    ("ACME CONCRETE LTD", "organization", ["ACME Concrete Ltd is the ready-mix supplier named in the specification.",
                                           "A regional supplier of structural concrete."]),
    ("GRADE 10 CONCRETE", "material", ["A lean mix used for blinding and mass fill."]),
    ("GRADE 30 CONCRETE", "material", ["Structural concrete for foundations and slabs."]),
    ("STRIP FOUNDATIONS", "component", ["Continuous foundations under the load-bearing walls."]),
    ("GROUND FLOOR SLAB", "component", ["A suspended slab over the sub-base."]),
    ("BLINDING LAYER", "component", ["A 50 mm layer that seals the formation level."]),
    ("SITE ENGINEER", "person", ["The engineer who inspects the formation before concrete is placed."]),
    ("PRINCIPAL CONTRACTOR", "organization", ["The contractor responsible for the works."]),
    ("BS 8500", "standard", ["The British Standard for concrete specification."]),
    ("PORTLAND CEMENT", "material", ["The binder in every concrete mix of this specification."]),
    ("NORTHERN CEMENT WORKS", "organization", ["A cement plant that supplies Portland cement."]),
    ("STEEL REINFORCEMENT", "material", ["Ribbed bars to BS 4449 placed in foundations and slabs."]),
    ("BS 4449", "standard", ["The British Standard for steel bars for reinforcement."]),
    ("REBAR SUPPLIES PLC", "organization", ["A steel stockholder that cuts and bends reinforcement."]),
    ("DAMP PROOF MEMBRANE", "material", ["A polyethylene sheet laid under the slab."]),
    ("HARDCORE SUB-BASE", "material", ["Crushed rock compacted under the slab."]),
    ("QUARRY NORTH", "organization", ["A quarry that produces crushed rock."]),
    ("STRUCTURAL ENGINEER", "person", ["The engineer who designs the foundations and slabs."]),
    ("CLIENT", "organization", ["The owner of the building."]),
    ("CUBE TESTS", "event", ["Compression tests on concrete cubes at 7 and 28 days."]),
    ("TESTING LABORATORY", "organization", ["A UKAS-accredited laboratory that crushes the cubes."]),
    ("FORMWORK", "component", ["Temporary moulds that shape the concrete."]),
    ("TIMBER", "material", ["Softwood used for formwork."]),
    ("EXCAVATION", "event", ["Digging the trenches for the foundations."]),
    ("SPOIL", "material", ["Excavated soil removed from site."]),
    ("WASTE CARRIER", "organization", ["A licensed company that removes spoil."]),
    ("The", "UNKNOWN", ["The"]),  # junk left by extraction
    ("IT", "UNKNOWN", ["It"]),
    ("2024", "date", ["The year of the specification."]),
]

# (source, target, keywords, description chunks)
RELATIONS = [
    ("ACME CONCRETE LTD", "GRADE 30 CONCRETE", "supply,materials,ready-mix",
     ["ACME CONCRETE LTD supplies GRADE 30 CONCRETE to the site.", "Ready-mix deliveries."]),
    ("ACME CONCRETE LTD", "GRADE 10 CONCRETE", "supply,blinding",
     ["ACME CONCRETE LTD also delivers GRADE 10 CONCRETE for blinding."]),
    ("GRADE 30 CONCRETE", "STRIP FOUNDATIONS", "materials,build,foundations",
     ["STRIP FOUNDATIONS are cast in GRADE 30 CONCRETE.<SEP>Foundations use structural concrete."]),
    ("GRADE 30 CONCRETE", "GROUND FLOOR SLAB", "materials,build,slab",
     ["The GROUND FLOOR SLAB is cast in GRADE 30 CONCRETE."]),
    ("GRADE 10 CONCRETE", "BLINDING LAYER", "materials,build,spaces,rock,cuttings",
     ["The BLINDING LAYER is formed of GRADE 10 CONCRETE."]),
    ("BLINDING LAYER", "STRIP FOUNDATIONS", "sequence,base",
     ["The BLINDING LAYER is laid beneath the STRIP FOUNDATIONS."]),
    ("SITE ENGINEER", "BLINDING LAYER", "inspection,approval",
     ["The SITE ENGINEER inspects the BLINDING LAYER before concrete is placed."]),
    ("PRINCIPAL CONTRACTOR", "SITE ENGINEER", "employment,roles",
     ["The PRINCIPAL CONTRACTOR employs the SITE ENGINEER."]),
    ("GRADE 30 CONCRETE", "BS 8500", "compliance,standards",
     ["GRADE 30 CONCRETE is specified to BS 8500."]),
    ("PORTLAND CEMENT", "GRADE 30 CONCRETE", "binder,ingredients",
     ["GRADE 30 CONCRETE contains PORTLAND CEMENT as its binder."]),
    ("NORTHERN CEMENT WORKS", "PORTLAND CEMENT", "supply,manufacture",
     ["NORTHERN CEMENT WORKS manufactures the PORTLAND CEMENT."]),
    ("STEEL REINFORCEMENT", "STRIP FOUNDATIONS", "materials,reinforcing",
     ["STEEL REINFORCEMENT is placed in the STRIP FOUNDATIONS."]),
    ("STEEL REINFORCEMENT", "BS 4449", "compliance,standards",
     ["STEEL REINFORCEMENT conforms to BS 4449."]),
    ("REBAR SUPPLIES PLC", "STEEL REINFORCEMENT", "supply,fabrication",
     ["REBAR SUPPLIES PLC cuts and bends the STEEL REINFORCEMENT."]),
    ("DAMP PROOF MEMBRANE", "GROUND FLOOR SLAB", "protection,moisture",
     ["The DAMP PROOF MEMBRANE is laid under the GROUND FLOOR SLAB."]),
    ("HARDCORE SUB-BASE", "GROUND FLOOR SLAB", "support,base",
     ["The HARDCORE SUB-BASE supports the GROUND FLOOR SLAB."]),
    ("QUARRY NORTH", "HARDCORE SUB-BASE", "supply,aggregates",
     ["QUARRY NORTH produces the HARDCORE SUB-BASE."]),
    ("STRUCTURAL ENGINEER", "STRIP FOUNDATIONS", "design,responsibility",
     ["The STRUCTURAL ENGINEER designs the STRIP FOUNDATIONS."]),
    ("CLIENT", "STRUCTURAL ENGINEER", "appointment,roles",
     ["The CLIENT appoints the STRUCTURAL ENGINEER."]),
    ("CLIENT", "PRINCIPAL CONTRACTOR", "contract,roles",
     ["The CLIENT contracts the PRINCIPAL CONTRACTOR for the works."]),
    ("CUBE TESTS", "GRADE 30 CONCRETE", "testing,quality",
     ["CUBE TESTS check the strength of GRADE 30 CONCRETE."]),
    ("TESTING LABORATORY", "CUBE TESTS", "testing,services",
     ["The TESTING LABORATORY carries out the CUBE TESTS."]),
    ("FORMWORK", "GROUND FLOOR SLAB", "construction,temporary works",
     ["FORMWORK shapes the edges of the GROUND FLOOR SLAB."]),
    ("TIMBER", "FORMWORK", "materials,carpentry", ["The FORMWORK is made of TIMBER."]),
    ("EXCAVATION", "STRIP FOUNDATIONS", "sequence,groundworks",
     ["EXCAVATION of the trenches comes before the STRIP FOUNDATIONS."]),
    ("EXCAVATION", "SPOIL", "waste,groundworks", ["EXCAVATION produces SPOIL."]),
    ("WASTE CARRIER", "SPOIL", "waste,removal", ["The WASTE CARRIER removes the SPOIL from site."]),
    ("PRINCIPAL CONTRACTOR", "EXCAVATION", "works,groundworks",
     ["The PRINCIPAL CONTRACTOR carries out the EXCAVATION."]),
    ("The", "SPOIL", "owns,removes", ["The owns and removes the material."]),  # junk bridges
    ("The", "GRADE 10 CONCRETE", "material,owns", ["The material owns GRADE 10 CONCRETE."]),
    ("IT", "CLIENT", "refers", ["IT refers to the CLIENT."]),
    ("2024", "CLIENT", "date,issue", ["The CLIENT issued the specification in 2024."]),
    # an edge whose description never names both ends: it makes no question
    ("TIMBER", "WASTE CARRIER", "waste,offcuts", ["Offcuts are collected weekly.<SEP>Skips on site."]),
]


def write_lightrag_graphml(path: Path) -> Path:
    """Write the construction graph as LightRAG's `graph_chunk_entity_relation.graphml` would hold it."""
    graph = nx.Graph()
    for i, (name, kind, chunks) in enumerate(ENTITIES):
        graph.add_node(name, entity_id=name, entity_type=kind, description="<SEP>".join(chunks),
                       source_id="<SEP>".join(f"chunk-{i + j}" for j in range(len(chunks))), file_path="spec.md")
    for i, (src, dst, keywords, chunks) in enumerate(RELATIONS):
        graph.add_edge(src, dst, weight=1.0, description="<SEP>".join(chunks), keywords=keywords,
                       source_id=f"chunk-{i}", file_path="spec.md")
    nx.write_graphml(graph, path)
    return path
