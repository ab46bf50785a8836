"""Split-KV ("flash-decoding") arithmetic: the same partition, workspace and combine the rendered kernel runs
(templates/attention/fmha_sm90_splitkv.cu.j2), in Python, for the rules, the cost model, the op and the tests.

A decode-like call has few query rows and a long KV cache: one CTA per (batch, KV head) walks the whole KV length
and leaves most of the 132 SMs idle (H200 run 2: 64 CTAs, 0.52-0.55 of the HBM floor). The split kernel cuts the
KV length into ``S = min(kv_splits, T)`` chunks of whole KV tiles (``T = ceil(seqlen_kv / tile_kv)``), split ``j``
taking tiles ``[floor(j T / S), floor((j + 1) T / S))``: balanced to one tile, never empty. Each split writes its
normalized partial O and its log-sum-exp ``l_j`` (natural log of the scaled scores' exp-sum) in float32; the
combine kernel gives ``L = log sum_j exp(l_j)`` and ``O = sum_j exp(l_j - L) O_j``, which is the unsplit softmax
exactly (up to float rounding).

What the split kernel computes: no mask (see ``CAUSAL_NOTE``), MHA or grouped heads, each (batch, KV head) one
problem whose rows are its group's query heads x seqlen_q (FA3's PackGQA, exact without a mask).
"""
from __future__ import annotations

import math

FLOAT_BYTES = 4
WORKSPACE_ALIGN = 256
SMS = 132                       # H100/H200 SXM
PACKED_TILE_ROWS = 128          # the smallest warp-specialized Q tile (two consumer warpgroups of 64 rows)

CAUSAL_NOTE = ("causal attention here is top-left aligned (SDPA's is_causal: query i sees keys j <= i), so a Q block "
               "reads at most ceil((q_block + 1) x tile_q / tile_kv) KV tiles (fmha_fusion.hpp CausalFusion::"
               "get_trip_count): the keys past seqlen_q are never read, a decode call (seqlen_q << seqlen_kv) has no "
               "long KV walk to split, and the split kernel renders no causal mask")


def is_decode_like(batch: int, heads_q: int, heads_kv: int, seqlen_q: int, causal: bool, sms: int = SMS) -> bool:
    """Whether an unsplit kernel's grid leaves SMs idle: no mask, and fewer 128-row Q tiles than SMs when each
    (batch, KV head) is one problem of group x seqlen_q rows. The search offers splits only here
    (search/attention/engine.py offers_kv_splits) and the PyTorch op prefers a split kernel only here."""
    rows = (heads_q // heads_kv) * seqlen_q
    return not causal and batch * heads_kv * -(-rows // PACKED_TILE_ROWS) < sms


def kv_tiles(seqlen_kv: int, tile_kv: int) -> int:
    return -(-seqlen_kv // tile_kv)


def effective_splits(seqlen_kv: int, tile_kv: int, kv_splits: int) -> int:
    """The splits a call runs: ``min(kv_splits, T)``, so that every split has at least one KV tile."""
    return max(1, min(kv_splits, kv_tiles(seqlen_kv, tile_kv)))


def split_ranges(seqlen_kv: int, tile_kv: int, splits: int) -> list[tuple[int, int]]:
    """(first key, key count) of each split, as ``kv_split_of`` in the template computes them."""
    tiles = kv_tiles(seqlen_kv, tile_kv)
    out = []
    for j in range(splits):
        first = (j * tiles) // splits
        end = ((j + 1) * tiles) // splits
        out.append((first * tile_kv, min(end * tile_kv, seqlen_kv) - first * tile_kv))
    return out


def _round_up(n: int) -> int:
    return -(-n // WORKSPACE_ALIGN) * WORKSPACE_ALIGN


def workspace_bytes(batch: int, heads_q: int, seqlen_q: int, head_dim_v: int, splits: int) -> int:
    """Partial O (float32, head_dim_v per row) then partial LSE (one float per row), per (batch, query head,
    query row) and split, each 256-byte aligned: ``partial_o_bytes + partial_lse_bytes`` of the template."""
    rows = batch * heads_q * seqlen_q * splits
    return _round_up(rows * head_dim_v * FLOAT_BYTES) + _round_up(rows * FLOAT_BYTES)


def combine_bytes(batch: int, heads_q: int, seqlen_q: int, head_dim_v: int, splits: int, out_bytes: int = 2) -> int:
    """HBM traffic the split adds: the partials written once and read once, O written by the combine."""
    rows = batch * heads_q * seqlen_q
    partial = rows * splits * (head_dim_v + 1) * FLOAT_BYTES
    return 2 * partial + rows * head_dim_v * out_bytes


def combine_reference(partial_o, partial_lse):
    """The combine in numpy/torch-free Python floats, for tests: ``partial_o[j][d]``, ``partial_lse[j]`` of one
    row -> (O[d], LSE). Non-finite LSEs (an empty split) weigh 0."""
    finite = [l for l in partial_lse if math.isfinite(l)]
    if not finite:
        return [0.0] * len(partial_o[0]), math.inf
    m = max(finite)
    total = m + math.log(sum(math.exp(l - m) for l in finite))
    out = [0.0] * len(partial_o[0])
    for o, l in zip(partial_o, partial_lse):
        if math.isfinite(l):
            w = math.exp(l - total)
            out = [a + w * b for a, b in zip(out, o)]
    return out, total
