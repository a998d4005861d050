"""`asynccopy bench attention --plan`: the pipeline model's K/V stage count (asynccopy.attention_kernels.
plan_stages) for each (problem, kernel) the bench swept over two or more stage counts, against the best
measured one."""

from __future__ import annotations

from dataclasses import dataclass

from ..sdpa import KERNELS
from .attention_bench import AttentionBench, AttentionRow, problem_key, problem_label


@dataclass
class PlanRow:
    problem: str
    kernel: str
    tile_ns: float  # the compute per key tile the model is given: the fastest measured stage count's pace
    planned: int
    best_stages: int
    ratio: float | None  # measured at the planned stage count / best (None: not swept)


def key_tiles(rec, q_len: int, k_len: int, causal: bool, head_dim: int) -> int:
    """The key tiles one (batch, head) walks over all its query tiles (causal: none past a tile's last query)."""
    bm, bn = rec.tile_for(head_dim, keys=rec.keys_for(head_dim, causal))
    total = 0
    for q0 in range(0, q_len, bm):
        n = -(-k_len // bn)
        total += min(n, (min(q0 + bm, q_len) - 1) // bn + 1) if causal else n
    return total


def plan_check(result: AttentionBench, memory="cached") -> list[PlanRow]:
    """For every (problem, kernel) swept over two or more stage counts: the pipeline model's stage count
    (asynccopy.attention_kernels.plan_stages, given the compute per key tile at the fastest measured stage
    count's pace, one block per SM) against the best measured one."""
    from ..attention_kernels import plan_stages
    from ..device import DeviceFacts

    facts = DeviceFacts.from_dict(result.device)
    groups: dict[tuple, dict[int, AttentionRow]] = {}
    for r in result.rows:
        if r.impl in KERNELS and r.stages is not None:
            groups.setdefault((problem_key(r), r.impl), {})[r.stages] = r
    out = []
    for (key, name), by in groups.items():
        if len(by) < 2:
            continue
        rec = KERNELS[name]
        b, h, _, lq, lk, d, causal = key
        best = min(by, key=lambda s: by[s].ms)
        per_sm = b * h * key_tiles(rec, lq, lk, causal, d) / facts.sm_count
        tile_ns = by[best].ms * 1e6 / max(per_sm, 1.0)
        p = plan_stages(rec, d, result.dtype, facts, tile_ns=tile_ns, memory=memory, causal=causal)
        at = by.get(p.recommended)
        out.append(PlanRow(problem_label(key), name, tile_ns, p.recommended, best,
                           at.ms / by[best].ms if at else None))
    return out
