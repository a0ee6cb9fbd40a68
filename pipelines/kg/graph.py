"""Graph statistics on the undirected sparse adjacency (scipy), fast enough for 100k-entity graphs.

``ball_sizes`` is the size of every node's depth-d BFS neighbourhood: it decides which entities can
seed a QA subgraph (the Omne-R1 paper keeps depth-3 subgraphs of 20-400 nodes).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel
from scipy import sparse
from scipy.sparse import csgraph

from pipelines.config import SeedParams
from pipelines.kg.model import KnowledgeGraph


class GraphStats(BaseModel):
    entities: int
    relations: int
    components: int
    largest_component: int
    isolated: int
    mean_degree: float
    described_share: float
    eligible_seeds: int
    seed_depth: int
    seed_min_nodes: int
    seed_max_nodes: int


def ball_sizes(adjacency: sparse.csr_matrix, depth: int, cap: int, batch: int = 2048) -> np.ndarray:
    """Number of nodes within ``depth`` hops of each node (itself included), clipped at ``cap + 1``.

    Frontiers of a batch of seeds are the columns of a sparse matrix, expanded by one product per
    hop; a seed whose ball already exceeds ``cap`` leaves the batch, since balls only grow.
    """
    n = adjacency.shape[0]
    step = (adjacency + sparse.identity(n, dtype=adjacency.dtype, format="csr")).astype(np.float32).tocsr()
    sizes = np.ones(n, dtype=np.int64)
    for start in range(0, n, batch):
        seeds = np.arange(start, min(start + batch, n))
        reach = sparse.csc_matrix((np.ones(seeds.size, dtype=np.float32), (seeds, np.arange(seeds.size))),
                                  shape=(n, seeds.size))
        alive = np.arange(seeds.size)
        for _ in range(depth):
            reach = (step @ reach).tocsc()
            reach.data[:] = 1.0
            counts = np.diff(reach.indptr)
            sizes[seeds[alive]] = counts
            small = counts <= cap
            if not small.all():
                sizes[seeds[alive[~small]]] = cap + 1
                alive = alive[small]
                reach = reach[:, small]
            if alive.size == 0:
                break
    return np.minimum(sizes, cap + 1)


def eligible_seeds(adjacency: sparse.csr_matrix, seeds: SeedParams) -> np.ndarray:
    """Ids of the entities whose depth-``seeds.depth`` ball has ``min_nodes..max_nodes`` nodes."""
    sizes = ball_sizes(adjacency, seeds.depth, seeds.max_nodes)
    return np.flatnonzero((sizes >= seeds.min_nodes) & (sizes <= seeds.max_nodes))


def graph_stats(kg: KnowledgeGraph, seeds: SeedParams) -> GraphStats:
    adjacency = kg.adjacency()
    n = kg.num_entities
    count, labels = csgraph.connected_components(adjacency, directed=False)
    degrees = np.diff(adjacency.indptr)
    described = int((kg.entities["description"].str.strip_chars() != "").sum())
    return GraphStats(
        entities=n,
        relations=kg.relations.height,
        components=int(count),
        largest_component=int(np.bincount(labels).max()) if n else 0,
        isolated=int((degrees == 0).sum()),
        mean_degree=round(float(degrees.mean()) if n else 0.0, 3),
        described_share=round(described / n, 4) if n else 0.0,
        eligible_seeds=int(eligible_seeds(adjacency, seeds).size),
        seed_depth=seeds.depth,
        seed_min_nodes=seeds.min_nodes,
        seed_max_nodes=seeds.max_nodes,
    )
