"""Seed subgraphs: entities whose depth-d BFS ball has min..max nodes, and the ball's node set.

The Omne-R1 paper samples a seed entity, takes its depth-3 subgraph and keeps it when it has 20-400
nodes; the generator then writes questions whose path lies inside it. Balls are computed for many
seeds at once by sparse matrix products (one per hop), not one BFS per seed.
"""

from __future__ import annotations

import numpy as np
import polars as pl
from scipy import sparse

from pipelines.config import SeedParams
from pipelines.kg.graph import eligible_seeds
from pipelines.kg.model import KnowledgeGraph
from pipelines.qa.models import SeedSubgraph

SEEDS_FILE = "seed_subgraphs.parquet"
SEED_SCHEMA = {"domain": pl.String, "seed": pl.Int32, "seed_name": pl.String, "depth": pl.Int32,
               "nodes": pl.List(pl.Int32), "size": pl.Int32}


def ball_nodes(adjacency: sparse.csr_matrix, seeds: np.ndarray, depth: int, batch: int = 1024) -> list[np.ndarray]:
    """The sorted node ids within ``depth`` hops of each seed (the seed included)."""
    n = adjacency.shape[0]
    step = (adjacency + sparse.identity(n, dtype=adjacency.dtype, format="csr")).astype(np.float32).tocsr()
    balls: list[np.ndarray] = []
    for start in range(0, seeds.size, batch):
        chunk = seeds[start:start + batch]
        reach = sparse.csc_matrix((np.ones(chunk.size, dtype=np.float32), (chunk, np.arange(chunk.size))),
                                  shape=(n, chunk.size))
        for _ in range(depth):
            reach = (step @ reach).tocsc()
            reach.data[:] = 1.0
        reach.sort_indices()
        balls.extend(reach.indices[reach.indptr[i]:reach.indptr[i + 1]].copy() for i in range(chunk.size))
    return balls


def sample_seed_subgraphs(kg: KnowledgeGraph, domain: str, seeds: SeedParams, count: int,
                          random_seed: int) -> list[SeedSubgraph]:
    """``count`` eligible seeds drawn without replacement (all when fewer), with their balls."""
    adjacency = kg.adjacency()
    eligible = eligible_seeds(adjacency, seeds)
    rng = np.random.default_rng(random_seed)
    chosen = rng.permutation(eligible)[:count] if eligible.size > count else rng.permutation(eligible)
    names = kg.entities["name"]
    subgraphs = []
    for seed, ball in zip(chosen.tolist(), ball_nodes(adjacency, chosen, seeds.depth), strict=True):
        nodes = [seed, *(int(v) for v in ball if v != seed)]
        subgraphs.append(SeedSubgraph(domain=domain, seed=seed, seed_name=names[seed], depth=seeds.depth,
                                      nodes=nodes, size=len(nodes)))
    return subgraphs


def seeds_table(subgraphs: list[SeedSubgraph]) -> pl.DataFrame:
    return pl.DataFrame([s.model_dump() for s in subgraphs], schema=SEED_SCHEMA)


def read_seeds(table: pl.DataFrame) -> list[SeedSubgraph]:
    return [SeedSubgraph.model_validate(row) for row in table.iter_rows(named=True)]
