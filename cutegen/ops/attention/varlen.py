"""Variable-length ("varlen") attention: the facts the kernel, the bench and the tests share.

Semantics (flash-attention's ``flash_attn_varlen_func``): sequence b holds packed rows
``[cu_seqlens_q[b], cu_seqlens_q[b+1])`` of Q/O and ``[cu_seqlens_k[b], cu_seqlens_k[b+1])`` of K/V. Causal is
**bottom-right** aligned per sequence: query i (0-based) sees key j iff ``j <= i + len_k - len_q``; with
len_q > len_k the first ``len_q - len_k`` queries see no key, and a row with no visible key (or a sequence with
len_k = 0) gives O = 0 and LSE = +inf. (The dense problem's causal is top-left, as SDPA's; for len_q == len_k the
two agree.)

``tile_trips`` mirrors, in Python, what the kernel's masks decide per Q tile (templates/attention/varlen/
fmha_varlen_sm90.hpp: ``BottomRightCausalMask`` and the 88 ``ResidualFusion``): how many KV tiles the tile visits
and how many of them (the trip's last) are masked. tests/test_attention_varlen.py checks it against every
(query, key) pair; the GPU validation (bench/varlen_bench.py) checks the kernel.
"""
from __future__ import annotations


def visible_keys(i: int, len_q: int, len_k: int, causal: bool) -> int:
    """How many keys (a prefix 0..n-1) query ``i`` of a (len_q, len_k) sequence sees."""
    if not causal:
        return len_k
    return max(0, min(len_k, i + 1 + len_k - len_q))


def causal_pairs_bottom_right(len_q: int, len_k: int) -> int:
    """The (query, key) pairs a bottom-right causal mask keeps."""
    if len_q <= len_k:
        return len_q * (len_q + 1) // 2 + len_q * (len_k - len_q)
    return len_k * (len_k + 1) // 2          # the first len_q - len_k rows see nothing


def pairs(lens_q, lens_k, causal: bool) -> int:
    """Useful (query, key) pairs of a varlen batch."""
    return sum(causal_pairs_bottom_right(q, k) if causal else q * k for q, k in zip(lens_q, lens_k))


def tile_trips(m_block: int, tile_q: int, tile_kv: int, len_q: int, len_k: int, causal: bool) -> tuple[int, int]:
    """(KV tiles visited, of which masked) for the CTA's Q tile ``m_block`` of a sequence, as the kernel computes
    them (0 visited: the tile writes O = 0, LSE = +inf without the mainloop)."""
    if not causal:                             # 88 ResidualFusion: ceil(len_k / tile_kv), the last one masked
        trips = -(-len_k // tile_kv)
        return trips, min(1, trips)
    rows_end = min((m_block + 1) * tile_q, len_q)
    keys = min(len_k, rows_end + len_k - len_q)
    trips = 0 if keys <= 0 else -(-keys // tile_kv)
    first_limit = min(m_block * tile_q + 1 + len_k - len_q, len_k)
    unmasked = 0 if first_limit <= 0 else min(trips, first_limit // tile_kv)
    return trips, max(1, trips - unmasked) if trips else 0
