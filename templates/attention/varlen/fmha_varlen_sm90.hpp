// cutegen's variable-length ("varlen") variant of CUTLASS 4.2's Hopper FMHA forward kernel (examples/88_hopper_fmha).
// Rendered verbatim into every varlen kernel.cu by cutegen/ops/attention/render.py (templates/attention/fmha_varlen_sm90.cu.j2),
// so its bytes are part of the kernel's hash; it needs -I <CUTLASS>/examples/88_hopper_fmha like the dense kernels.
//
// What changes against the 88 kernel, and why:
// - Packed tensors: Q and O are (total_q, heads_q, D), K and V (total_k, heads_kv, D), sequence b holding rows
//   [cu_seqlens_q[b], cu_seqlens_q[b+1]) (flash-attention's flash_attn_varlen_func). The lengths are device data: the
//   kernel is compiled and launched without knowing them.
// - Loads (Q, K, V by TMA) as CUTLASS 4.2's Blackwell FMHA loads them (examples/77_blackwell_fmha,
//   collective/sm100_fmha_load_tma_warpspecialized.hpp): one tensor map over the whole packed tensor (rows = total_q or
//   total_k, batch coordinate 0), the sequence's tiles offset by cu_seqlens[b] rows. Rows past a sequence's end read
//   the next sequence (masked: keys >= len_k score -inf, so their V rows are weighted 0; Q rows >= len_q are never
//   stored) or, past the packed tensor, TMA's zero fill. (A first version used the row-shift construction of 77's O
//   store for the loads too: r = max - len + i, c = start + len, base moved back by max rows; it validated, but one
//   GQA call of the H200 runs, 8 x 3255 tokens, 32/8 heads, faulted with an illegal address at its own launch, while
//   memcheck of smaller calls was clean. The loads are now the form 77 itself uses; max_seqlen only sizes the grid.)
// - The masks see the sequence's own lengths: the kernel hands each tile a problem shape (B, H, len_q, len_k, D), so
//   the 88 ResidualFusion masks keys >= len_k, and the causal mask is per sequence, **bottom-right aligned** as
//   flash-attention's (query i sees key j iff j <= i + len_k - len_q).
// - O and the LSE are stored by the consumer threads straight from registers, predicated on row < len_q (no TMA
//   store: its tile coordinates cannot carry a per-sequence row offset without a custom TMA epilogue). LSE is packed
//   like flash-attention's varlen softmax_lse: float32 (heads_q, total_q); it is written only when a pointer is given.
// - The tile scheduler skips Q tiles past a sequence's length (short sequences cost no CTA time); a tile with no KV
//   work (len_k = 0, or every row masked by the bottom-right causal mask) writes O = 0 and LSE = +inf (the 88 softmax's
//   and flash-attention's value for a row with no keys) without touching the pipelines.
#ifndef CUTEGEN_FMHA_VARLEN_SM90_HPP
#define CUTEGEN_FMHA_VARLEN_SM90_HPP

#include <cmath>
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/fast_math.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "cutlass/arch/arch.h"

#include "collective/fmha_common.hpp"
#include "collective/fmha_fusion.hpp"
#include "collective/fmha_collective_load.hpp"
#include "collective/fmha_collective_tma_warpspecialized.hpp"
#include "kernel/fmha_options.hpp"

namespace cutegen_varlen {

using namespace cute;
using cutlass::fmha::kernel::Tag;
using cutlass::fmha::kernel::find_option_t;
using cutlass::fmha::collective::LoadKind;

// The per-tile problem shape the 88 fusions and softmax read: (B, H, len_q, len_k, D) of the tile's sequence.
using TileProblem = cute::tuple<int, int, int, int, int>;
// The tensor maps' batch mode: (c, query head in its group, KV head); see the file comment for c.
using BatchShape = cute::tuple<int, int, int>;

// ---------------------------------------------------------------------------------------------------------------
// Masks (88 fusion policies with the tile's own lengths).
// No mask: the 88 ResidualFusion unchanged (keys >= len_k of the last KV tile are masked; trip count ceil(len_k / tile_kv)).
using ResidualMask = cutlass::fmha::collective::ResidualFusion;

// Causal, bottom-right aligned: query i (0-based in its sequence) sees key j iff j <= i + len_k - len_q.
struct BottomRightCausalMask : cutlass::fmha::collective::DefaultFusion {
  // KV tiles the Q tile's rows can see: the last valid row min((m+1) tile_q, len_q) - 1 sees keys < its row + 1 + offset.
  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_trip_count(BlkCoord const& blk_coord, TileShape const& tile_shape, ProblemSize const& problem_size) {
    const int len_q = get<2>(problem_size), len_k = get<3>(problem_size);
    const int rows_end = cute::min((int(get<0>(blk_coord)) + 1) * int(get<0>(tile_shape)), len_q);
    const int keys = cute::min(len_k, rows_end + len_k - len_q);
    return keys <= 0 ? 0 : (keys + int(get<1>(tile_shape)) - 1) / int(get<1>(tile_shape));
  }

  // Unmasked: the KV tiles every row of the Q tile sees whole (keys below the first row's limit and below len_k);
  // every later tile of the trip is masked (at least one, as the dense template does).
  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_masked_trip_count(BlkCoord const& blk_coord, TileShape const& tile_shape, ProblemSize const& problem_size) {
    const int trip = get_trip_count(blk_coord, tile_shape, problem_size);
    const int len_q = get<2>(problem_size), len_k = get<3>(problem_size);
    const int first_limit = cute::min(int(get<0>(blk_coord)) * int(get<0>(tile_shape)) + 1 + len_k - len_q, len_k);
    const int unmasked = first_limit <= 0 ? 0 : cute::min(trip, first_limit / int(get<1>(tile_shape)));
    return cute::max(1, trip - unmasked);
  }

  template <class BlkCoord, class TileShape, class ProblemSize>
  CUTLASS_DEVICE int get_unmasked_trip_count(BlkCoord const& blk_coord, TileShape const& tile_shape, ProblemSize const& problem_size) {
    return get_trip_count(blk_coord, tile_shape, problem_size) - get_masked_trip_count(blk_coord, tile_shape, problem_size);
  }

  template <class AccQK, class IndexQK, class ProblemSize>
  CUTLASS_DEVICE void before_softmax(AccQK& acc_qk, IndexQK const& index_qk, ProblemSize const& problem_size) {
    const int offset = get<3>(problem_size) - get<2>(problem_size);
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc_qk); i++) {
      auto pos = index_qk(i);
      if (int(get<1>(pos)) > int(get<0>(pos)) + offset || int(get<1>(pos)) >= get<3>(problem_size)) {
        acc_qk(i) = -INFINITY;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The run-time facts of the batch, and of one tile's sequence.
struct VarlenParams {
  int const* cu_seqlens_q = nullptr;   // batch + 1 offsets into the packed Q/O rows
  int const* cu_seqlens_k = nullptr;   // batch + 1 offsets into the packed K/V rows
  int rows_q = 1;                      // the Q tensor map's row extent: total_q
  int rows_k = 1;                      // the K/V tensor maps' row extent: total_k
  int group = 1;                       // query heads per KV head
  int head_dim = 0;
  BatchShape batch_shape{};            // (1, group, heads_kv)
};

struct SeqTile {
  int len_q, len_k, start_q, start_k, head;
  TileProblem problem;                 // (B, H, len_q, len_k, D)
  cute::tuple<int, int, int> batch;    // the tensor maps' batch coordinate (0, g, kv head)
  int shift_q, shift_k;                // the row coordinate of local row 0: start_q, start_k
};

template <class BlkCoord>
CUTLASS_DEVICE SeqTile seq_tile(VarlenParams const& v, BlkCoord const& blk_coord, int batch, int heads) {
  const int b = int(get<2, 0>(blk_coord));
  const int h = int(get<2, 1>(blk_coord));
  const int q0 = v.cu_seqlens_q[b], q1 = v.cu_seqlens_q[b + 1];
  const int k0 = v.cu_seqlens_k[b], k1 = v.cu_seqlens_k[b + 1];
  const int len_q = q1 - q0, len_k = k1 - k0;
  const int g = h % v.group, hkv = h / v.group;
  return SeqTile{len_q, len_k, q0, k0, h, TileProblem{batch, heads, len_q, len_k, v.head_dim},
                 make_tuple(0, g, hkv), q0, k0};
}

// ---------------------------------------------------------------------------------------------------------------
// TMA loads at a per-sequence row offset: the 88 CollectiveLoadTma's step(), a partition of our own coordinates.
template <LoadKind kKind, class Pipeline, class Element, class SmemLayout, class TMA>
struct VarlenLoadTma : cutlass::fmha::collective::CollectiveLoadTma<kKind, Pipeline, Element, SmemLayout, TMA> {
  using Base = cutlass::fmha::collective::CollectiveLoadTma<kKind, Pipeline, Element, SmemLayout, TMA>;
  using Base::Base;

  template <class GTensor>
  CUTLASS_DEVICE auto partition(GTensor const& g) {
    Tensor s = make_tensor(make_smem_ptr(this->storage.data()), SmemLayout{});
    auto block_tma = this->params.get_slice(0);
    return make_tuple(block_tma.partition_S(g), block_tma.partition_D(s));
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The mainloop: the 88 warp-specialized collective's compute() as it is (it reads lengths only through the fusion and
// the softmax, which get the tile's problem shape); tensor maps and loads of our own.
template <class Element_, class ElementAccumulatorQK_, class ElementAccumulatorPV_, class TileShape_,
          class LayoutQ_, class LayoutK_, class LayoutV_, class Fusion_, class... Options>
struct VarlenMainloop : cutlass::fmha::collective::FmhaMainloopTmaWarpSpecialized<
    Element_, ElementAccumulatorQK_, ElementAccumulatorPV_, TileShape_, LayoutQ_, LayoutK_, LayoutV_, Fusion_, Options...> {
  using Base = cutlass::fmha::collective::FmhaMainloopTmaWarpSpecialized<
      Element_, ElementAccumulatorQK_, ElementAccumulatorPV_, TileShape_, LayoutQ_, LayoutK_, LayoutV_, Fusion_, Options...>;
  using Fusion = Fusion_;
  using Element = typename Base::Element;
  using TileShape = typename Base::TileShape;
  using TileShapeQK = typename Base::TileShapeQK;
  using TileShapePV = typename Base::TileShapePV;
  using CollectiveMmaQK = typename Base::CollectiveMmaQK;
  using CollectiveMmaPV = typename Base::CollectiveMmaPV;
  using MainloopPipeline = typename Base::MainloopPipeline;
  using MainloopPipelineQ = typename Base::MainloopPipelineQ;
  using PipelineState = typename Base::PipelineState;
  using PipelineStateQ = typename Base::PipelineStateQ;
  using SharedStorage = typename Base::SharedStorage;
  using SmemLayoutQ = typename Base::SmemLayoutQ;
  using SmemLayoutK = typename Base::SmemLayoutK;
  using SmemLayoutV = typename Base::SmemLayoutV;
  static constexpr int NumMmaWarpGroups = Base::NumMmaWarpGroups;

  using LoadQ = VarlenLoadTma<LoadKind::kQ, MainloopPipelineQ, Element, SmemLayoutQ, typename Base::TMA_Q>;
  using LoadK = VarlenLoadTma<LoadKind::kK, MainloopPipeline, Element, SmemLayoutK, typename Base::TMA_K>;
  using LoadV = VarlenLoadTma<LoadKind::kV, MainloopPipeline, Element, SmemLayoutV, typename Base::TMA_V>;

  struct Params : Base::Params {
    VarlenParams varlen;
  };

  struct Arguments {
    Element const* ptr_Q; LayoutQ_ dQ;
    Element const* ptr_K; LayoutK_ dK;
    Element const* ptr_V; LayoutV_ dV;
    VarlenParams varlen;
  };

  // Tensor maps over the packed tensors: (total rows, D, (1, group, heads_kv)) (file comment).
  static Params to_underlying_arguments(Arguments const& args) {
    VarlenParams const& v = args.varlen;
    auto problem_shape_qk = make_shape(v.rows_q, v.rows_k, v.head_dim, v.batch_shape);
    Element const* q_base = args.ptr_Q;
    Element const* k_base = args.ptr_K;
    Element const* v_base = args.ptr_V;
    auto params_qk = CollectiveMmaQK::to_underlying_arguments(problem_shape_qk,
        typename CollectiveMmaQK::Arguments{q_base, args.dQ, k_base, args.dK}, /*workspace=*/nullptr);
    auto problem_shape_pv = select<0, 2, 1, 3>(problem_shape_qk);
    auto params_pv = CollectiveMmaPV::to_underlying_arguments(problem_shape_pv,
        typename CollectiveMmaPV::Arguments{k_base, args.dK, v_base, select<1, 0, 2>(args.dV)}, /*workspace=*/nullptr);
    // the softmax scale is the 88 default here; the launcher sets the caller's
    return Params{typename Base::Params{params_qk.tma_load_a, params_qk.tma_load_b, params_pv.tma_load_b,
                                        1.0f / std::sqrt(float(v.head_dim)),
                                        float(std::log2(std::exp(1.0)) / std::sqrt(double(v.head_dim))), 1.0f},
                  v};
  }

  // Coordinates of the tile's Q rows (NumMmaWarpGroups sub-tiles of TileShapeQK rows), K and V tiles.
  template <class BlkCoord>
  CUTLASS_DEVICE static auto q_tiles(Params const& params, SeqTile const& t, BlkCoord const& blk_coord) {
    using X = Underscore;
    VarlenParams const& v = params.varlen;
    Tensor m = params.tma_load_q.get_tma_tensor(make_shape(v.rows_q, v.head_dim, v.batch_shape));
    Tensor ms = make_tensor(m.data() + t.shift_q * stride<0>(m), m.layout());
    Tensor g_full = local_tile(ms, TileShapeQK{}, make_coord(_, _, _), Step<_1, X, _1>{});
    Tensor g = g_full(_, _, _, _0{}, t.batch);
    return make_tensor(g.data() + NumMmaWarpGroups * int(get<0>(blk_coord)) * stride<2>(g), g.layout());
  }

  CUTLASS_DEVICE static auto k_tiles(Params const& params, SeqTile const& t) {
    using X = Underscore;
    VarlenParams const& v = params.varlen;
    Tensor m = params.tma_load_k.get_tma_tensor(make_shape(v.rows_k, v.head_dim, v.batch_shape));
    Tensor ms = make_tensor(m.data() + t.shift_k * stride<0>(m), m.layout());
    Tensor g_full = local_tile(ms, TileShapeQK{}, make_coord(_, _, _), Step<X, _1, _1>{});
    return g_full(_, _, _, _0{}, t.batch);
  }

  CUTLASS_DEVICE static auto v_tiles(Params const& params, SeqTile const& t) {
    using X = Underscore;
    VarlenParams const& v = params.varlen;
    Tensor m = params.tma_load_v.get_tma_tensor(make_shape(v.head_dim, v.rows_k, v.batch_shape));
    Tensor ms = make_tensor(m.data() + t.shift_k * stride<1>(m), m.layout());
    Tensor g_full = local_tile(ms, TileShapePV{}, make_coord(_, _, _), Step<X, _1, _1>{});
    return g_full(_, _, _0{}, _, t.batch);
  }

  // The 88 load_kv_maybe_q with the varlen coordinates (same order of loads: Q0, K0, Q1.., V0, then K_j, V_j).
  template <bool kLoadQ, class BlkCoord, class LoadWarpBarrier>
  CUTLASS_DEVICE void load_kv_maybe_q(BlkCoord const& blk_coord, Params const& params, SeqTile const& t,
                                      MainloopPipeline& pipeline, PipelineState& smem_pipe_write,
                                      MainloopPipelineQ& pipeline_q, PipelineStateQ& smem_pipe_write_q,
                                      SharedStorage& storage, LoadWarpBarrier& load_warp_barrier, bool do_barrier) {
    int fusion_tile_count = Fusion{}.get_trip_count(blk_coord, TileShape{}, t.problem);
    int lane_predicate = cute::elect_one_sync();

    auto q_tile_iter = cute::make_coord_iterator(Int<NumMmaWarpGroups>{});
    [[maybe_unused]] int q_tile_count = NumMmaWarpGroups;
    auto k_tile_iter = cute::make_coord_iterator(fusion_tile_count);
    int k_tile_count = 2 * fusion_tile_count;

    LoadQ load_q{params.tma_load_q, pipeline_q, storage.smem_q};
    auto load_state_q = load_q.partition(q_tiles(params, t, blk_coord));
    LoadK load_k{params.tma_load_k, pipeline, storage.smem_k};
    auto load_state_k = load_k.partition(k_tiles(params, t));
    LoadV load_v{params.tma_load_v, pipeline, storage.smem_v};
    auto load_state_v = load_v.partition(v_tiles(params, t));

    if constexpr (kLoadQ) {
      load_q.step(q_tile_iter, load_state_q, smem_pipe_write_q, lane_predicate, q_tile_count);
    }
    load_k.template step<false>(k_tile_iter, load_state_k, smem_pipe_write, lane_predicate, k_tile_count);
    if constexpr (kLoadQ) {
      load_q.step(q_tile_iter, load_state_q, smem_pipe_write_q, lane_predicate, q_tile_count);
    }
    if constexpr (!kLoadQ) {
      if (do_barrier) {
        load_warp_barrier.arrive();
        load_warp_barrier.wait(/*phase=*/0);
        do_barrier = false;
      }
    }
    load_v.template step<true>(k_tile_iter, load_state_v, smem_pipe_write, lane_predicate, k_tile_count);
    if constexpr (kLoadQ) {
      while (q_tile_count > 0) {
        load_q.step(q_tile_iter, load_state_q, smem_pipe_write_q, lane_predicate, q_tile_count);
      }
    }
    CUTLASS_PRAGMA_NO_UNROLL
    while (k_tile_count > 0) {
      load_k.template step<false>(k_tile_iter, load_state_k, smem_pipe_write, lane_predicate, k_tile_count);
      load_v.template step<true>(k_tile_iter, load_state_v, smem_pipe_write, lane_predicate, k_tile_count);
    }
  }

  template <class BlkCoord, class LoadWarpBarrier>
  CUTLASS_DEVICE void load_maybe_q(BlkCoord const& blk_coord, Params const& params, SeqTile const& t,
                                   MainloopPipelineQ& pipeline_q, PipelineStateQ& smem_pipe_write_q,
                                   SharedStorage& storage, LoadWarpBarrier& load_warp_barrier, bool do_barrier) {
    int lane_predicate = cute::elect_one_sync();
    LoadQ load_q{params.tma_load_q, pipeline_q, storage.smem_q};
    auto load_state_q = load_q.partition(q_tiles(params, t, blk_coord));
    auto q_tile_iter = cute::make_coord_iterator(Int<NumMmaWarpGroups>{});
    CUTLASS_PRAGMA_UNROLL
    for (int q_tile_count = 0; q_tile_count < NumMmaWarpGroups; q_tile_count++) {
      int count = 1;
      load_q.step(q_tile_iter, load_state_q, smem_pipe_write_q, lane_predicate, count);
      if (q_tile_count == 0 && do_barrier) {
        load_warp_barrier.arrive();
        load_warp_barrier.wait(/*phase=*/0);
        do_barrier = false;
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Epilogue: O (and the LSE) from the consumer's registers to the packed rows of the sequence, rows < len_q only.
template <class ElementOut, int kHeadDim>
struct VarlenEpilogue {
  struct Params {
    ElementOut* ptr_O = nullptr;
    int64_t o_row = 0;        // elements between rows (tokens)
    int64_t o_head = 0;       // elements between heads
    float* ptr_LSE = nullptr; // (heads_q, total_q) float32, or null: not written
    int64_t lse_head = 0;     // total_q
  };

  template <class TileShapeWG, class WgCoord, class Acc, class Lse, class TiledMma>
  CUTLASS_DEVICE void operator()(TileShapeWG const& tile_shape, WgCoord const& wg_coord, Acc const& acc, Lse const& lse,
                                 TiledMma const& tiled_mma, SeqTile const& t, Params const& params) {
    auto thr_mma = tiled_mma.get_thread_slice(threadIdx.x);
    Tensor cO = make_identity_tensor(take<0, 2>(tile_shape));
    Tensor tOcO = thr_mma.partition_C(cO);
    Tensor acc_mn = make_tensor(acc.data(), cutlass::fmha::collective::layout_acc_mn(tiled_mma, acc.layout()));
    Tensor c_mn = make_tensor(tOcO.data(), cutlass::fmha::collective::layout_acc_mn(tiled_mma, tOcO.layout()));
    const int row0 = int(get<0>(wg_coord)) * int(get<0>(tile_shape));
    const bool writes_lse = params.ptr_LSE != nullptr && int(get<1>(c_mn(0, 0))) == 0;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size<0>(acc_mn); i++) {
      const int row = row0 + int(get<0>(c_mn(i, 0)));
      if (row < t.len_q) {
        ElementOut* o = params.ptr_O + int64_t(t.start_q + row) * params.o_row + int64_t(t.head) * params.o_head;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < size<1>(acc_mn); j += 2) {
          const int col = int(get<1>(c_mn(i, j)));
          // WGMMA accumulators hold column pairs (2k, 2k+1): one 4-byte store per pair
          if (j + 1 < size<1>(acc_mn) && int(get<1>(c_mn(i, j + 1))) == col + 1 && col + 1 < kHeadDim) {
            cutlass::Array<ElementOut, 2> pair;
            pair[0] = ElementOut(acc_mn(i, j));
            pair[1] = ElementOut(acc_mn(i, j + 1));
            *reinterpret_cast<cutlass::Array<ElementOut, 2>*>(o + col) = pair;
          } else {
            if (col < kHeadDim) o[col] = ElementOut(acc_mn(i, j));
            if (j + 1 < size<1>(acc_mn)) {
              const int col1 = int(get<1>(c_mn(i, j + 1)));
              if (col1 < kHeadDim) o[col1] = ElementOut(acc_mn(i, j + 1));
            }
          }
        }
        if (writes_lse) {
          params.ptr_LSE[int64_t(t.head) * params.lse_head + t.start_q + row] = lse(i);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------------------------
// Tile schedulers: the 88 individual and persistent schedulers over (ceil(max_q / tile_q), batch, heads_q), skipping
// the Q tiles at or past their sequence's length.
CUTLASS_DEVICE bool q_tile_in_sequence(int const* cu_seqlens_q, int m_block, int b, int tile_q) {
  return m_block * tile_q < cu_seqlens_q[b + 1] - cu_seqlens_q[b];
}

struct VarlenIndividualTileScheduler {
  struct Params {
    dim3 grid;
    int const* cu_seqlens_q;
    int tile_q;
  };
  bool valid_;
  CUTLASS_DEVICE VarlenIndividualTileScheduler(Params const& params)
      : valid_(q_tile_in_sequence(params.cu_seqlens_q, int(blockIdx.x), int(blockIdx.y), params.tile_q)) {}

  static Params to_underlying_arguments(int num_m_blocks, int batch, int heads, int const* cu_seqlens_q, int tile_q) {
    return Params{dim3(num_m_blocks, batch, heads), cu_seqlens_q, tile_q};
  }
  static dim3 get_grid_shape(Params const& params) { return params.grid; }
  CUTLASS_DEVICE bool is_valid() { return valid_; }
  CUTLASS_DEVICE auto get_block_coord() { return make_coord(int(blockIdx.x), _0{}, make_coord(int(blockIdx.y), int(blockIdx.z))); }
  CUTLASS_DEVICE VarlenIndividualTileScheduler& operator++() { valid_ = false; return *this; }
};

struct VarlenPersistentTileScheduler {
  struct Params {
    int num_blocks;
    cutlass::FastDivmod divmod_m_block;
    cutlass::FastDivmod divmod_b;
    cutlass::FastDivmod divmod_h;
    int sm_count;
    int const* cu_seqlens_q;
    int tile_q;
  };
  int block_idx = 0;
  Params params;

  CUTLASS_DEVICE VarlenPersistentTileScheduler(Params const& p) : block_idx(int(blockIdx.x)), params(p) { skip_empty(); }

  static Params to_underlying_arguments(int num_m_blocks, int batch, int heads, int const* cu_seqlens_q, int tile_q, int sm_count) {
    return Params{num_m_blocks * batch * heads, cutlass::FastDivmod(num_m_blocks), cutlass::FastDivmod(batch),
                  cutlass::FastDivmod(heads), sm_count, cu_seqlens_q, tile_q};
  }
  static dim3 get_grid_shape(Params const& params) { return dim3(std::min(params.num_blocks, params.sm_count), 1, 1); }

  CUTLASS_DEVICE auto decode(int idx) const {
    int m_block, bidb, bidh, rest = idx;
    params.divmod_m_block(rest, m_block, rest);
    params.divmod_b(rest, bidb, rest);
    params.divmod_h(rest, bidh, rest);
    return make_coord(m_block, _0{}, make_coord(bidb, bidh));
  }
  CUTLASS_DEVICE void skip_empty() {
    while (block_idx < params.num_blocks) {
      auto c = decode(block_idx);
      if (q_tile_in_sequence(params.cu_seqlens_q, get<0>(c), get<2, 0>(c), params.tile_q)) break;
      block_idx += int(gridDim.x);
    }
  }
  CUTLASS_DEVICE bool is_valid() { return block_idx < params.num_blocks; }
  CUTLASS_DEVICE auto get_block_coord() { return decode(block_idx); }
  CUTLASS_DEVICE VarlenPersistentTileScheduler& operator++() {
    block_idx += int(gridDim.x);
    skip_empty();
    return *this;
  }
};

// ---------------------------------------------------------------------------------------------------------------
// The kernel: the 88 FmhaKernelTmaWarpSpecialized with the tile's sequence threaded through, no TMA epilogue.
template <class CollectiveMainloop, class CollectiveEpilogue, class TileScheduler, class... Options>
struct VarlenFmhaKernel {
  static constexpr bool kLoadsQSeparately = find_option_t<Tag::kLoadsQSeparately, false_type, Options...>::value;
  static const int NumLoadWarpGroups = 1;
  static constexpr int NumMmaWarpGroups = CollectiveMainloop::NumMmaWarpGroups;

  using TileShape = typename CollectiveMainloop::TileShape;
  using TileShapePV = typename CollectiveMainloop::TileShapePV;
  using TiledMmaPV = typename CollectiveMainloop::TiledMmaPV;
  using ClusterShape = typename CollectiveMainloop::ClusterShape;
  using Fusion = typename CollectiveMainloop::Fusion;

  using MainloopPipelineOuter = typename CollectiveMainloop::MainloopPipelineQ;
  using MainloopPipelineInner = typename CollectiveMainloop::MainloopPipeline;
  using MainloopPipelineReducer = cutlass::PipelineAsync<2>;

  static constexpr uint32_t StagesPerMathWarpGroup = 2;
  using MathWarpGroupOrderBarrier = cutlass::OrderedSequenceBarrier<StagesPerMathWarpGroup, NumMmaWarpGroups>;

  struct SharedStorage {
    typename CollectiveMainloop::SharedStorage mainloop;
    alignas(16) typename MainloopPipelineInner::SharedStorage pipeline_storage_inner;
    alignas(16) typename MainloopPipelineOuter::SharedStorage pipeline_storage_outer;
    alignas(16) typename MainloopPipelineReducer::SharedStorage pipeline_storage_reducer;
    alignas(16) typename MathWarpGroupOrderBarrier::SharedStorage math_wg_order;
    alignas(16) cutlass::arch::ClusterBarrier load_warp_barrier;
  };
  static constexpr int SharedStorageSize = sizeof(SharedStorage);

  using ProblemShape = cute::tuple<int, int, int, int, int>;   // (B, heads_q, max_q, max_k, D)

  struct Params {
    ProblemShape problem_size;
    typename CollectiveMainloop::Params mainloop;
    typename CollectiveEpilogue::Params epilogue;
    typename TileScheduler::Params tile_scheduler;
  };

  using PipelineParamsInner = typename MainloopPipelineInner::Params;
  using PipelineStateInner = typename cutlass::PipelineState<MainloopPipelineInner::Stages>;
  using PipelineParamsOuter = typename MainloopPipelineOuter::Params;
  using PipelineStateOuter = typename cutlass::PipelineState<MainloopPipelineOuter::Stages>;
  using PipelineParamsReducer = typename MainloopPipelineReducer::Params;

  static const int MinBlocksPerMultiprocessor = 1;
  static const int MaxThreadsPerBlock = (NumMmaWarpGroups + NumLoadWarpGroups) * cutlass::NumThreadsPerWarpGroup;
  using ArchTag = cutlass::arch::Sm90;

  static constexpr uint32_t LoadRegisterRequirement = 40 - 2 * 8;
  static constexpr uint32_t TotalRegisterSupply =
      (64 * 1024 / MaxThreadsPerBlock / MinBlocksPerMultiprocessor / 8) * 8 * MaxThreadsPerBlock / cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t MmaRegisterRequirement = ((TotalRegisterSupply - LoadRegisterRequirement) / NumMmaWarpGroups / 8) * 8;

  static dim3 get_grid_shape(Params const& params) { return TileScheduler::get_grid_shape(params.tile_scheduler); }
  static dim3 get_block_shape() { return dim3(MaxThreadsPerBlock, 1, 1); }

  // A tile with no KV work (len_k = 0, or all rows masked): O = 0 and LSE = +inf for its rows, no pipeline traffic.
  template <class WgCoord>
  CUTLASS_DEVICE static void store_empty(WgCoord const& wg_coord, SeqTile const& t, Params const& params) {
    TiledMmaPV tiled_mma_pv;
    Tensor acc = partition_fragment_C(tiled_mma_pv, take<0, 2>(TileShapePV{}));
    clear(acc);
    Tensor lse = make_fragment_like<float>(size<0>(cutlass::fmha::collective::layout_acc_mn(tiled_mma_pv, acc.layout())));
    fill(lse, INFINITY);
    CollectiveEpilogue{}(TileShapePV{}, wg_coord, acc, lse, tiled_mma_pv, t, params.epilogue);
  }

  CUTLASS_DEVICE void operator()(const Params& params, char* smem) {
#if !defined(CUTLASS_ARCH_MMA_SM90A_ENABLED)
    printf("ERROR : Arch conditional MMA instruction used without targeting appropriate compute capability. Aborting.\n");
#else
    enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2, Consumer2 = 3, Consumer3 = 4 };
    enum class ProducerWarpRole { LoadKV = 1, Reducer = 0, MaybeLoadQ = 2, MainloopEpilogue = 3 };
    static constexpr ProducerWarpRole WarpRoleLoadQ = kLoadsQSeparately ? ProducerWarpRole::MaybeLoadQ : ProducerWarpRole::LoadKV;

    TileScheduler tile_scheduler{params.tile_scheduler};
    auto& storage = *reinterpret_cast<SharedStorage*>(smem);

    int warp_idx = cutlass::canonical_warp_idx_sync();
    int warp_idx_in_warp_group = warp_idx % cutlass::NumWarpsPerWarpGroup;
    int warp_group_idx = cutlass::canonical_warp_group_idx();
    auto warp_group_role = WarpGroupRole(warp_group_idx);
    auto producer_warp_role = ProducerWarpRole(warp_idx_in_warp_group);
    int consumer_warp_group_idx = warp_group_idx - (int)WarpGroupRole::Consumer0;
    int lane_predicate = cute::elect_one_sync();
    const int batch = get<0>(params.problem_size), heads = get<1>(params.problem_size);

    if ((warp_idx == 0) && lane_predicate) {
      CollectiveMainloop::prefetch_tma_descriptors(params.mainloop);
    }

    PipelineParamsOuter pipeline_params_outer;
    pipeline_params_outer.transaction_bytes = CollectiveMainloop::kOuterLoadBytes;
    pipeline_params_outer.is_leader = lane_predicate && (producer_warp_role == WarpRoleLoadQ);
    pipeline_params_outer.num_consumers = cutlass::NumThreadsPerWarpGroup;

    PipelineParamsInner pipeline_params_inner;
    pipeline_params_inner.transaction_bytes = CollectiveMainloop::kInnerLoadBytes;
    pipeline_params_inner.is_leader = lane_predicate && (producer_warp_role == ProducerWarpRole::LoadKV);
    pipeline_params_inner.num_consumers = NumMmaWarpGroups * cutlass::NumThreadsPerWarpGroup;

    PipelineParamsReducer pipeline_params_reducer;
    pipeline_params_reducer.producer_arv_count = NumMmaWarpGroups * cutlass::NumThreadsPerWarpGroup;
    pipeline_params_reducer.consumer_arv_count = cutlass::NumThreadsPerWarp;

    if (warp_group_role == WarpGroupRole::Producer && producer_warp_role == ProducerWarpRole::LoadKV) {
      pipeline_params_inner.role = MainloopPipelineInner::ThreadCategory::Producer;
    }
    if (warp_group_role == WarpGroupRole::Producer && producer_warp_role == WarpRoleLoadQ) {
      pipeline_params_outer.role = MainloopPipelineOuter::ThreadCategory::Producer;
    }
    if (warp_group_role == WarpGroupRole::Producer && producer_warp_role == ProducerWarpRole::Reducer) {
      pipeline_params_reducer.role = MainloopPipelineReducer::ThreadCategory::Consumer;
    }
    if (warp_group_role != WarpGroupRole::Producer) {
      pipeline_params_inner.role = MainloopPipelineInner::ThreadCategory::Consumer;
      pipeline_params_outer.role = MainloopPipelineOuter::ThreadCategory::Consumer;
      pipeline_params_reducer.role = MainloopPipelineReducer::ThreadCategory::Producer;
    }

    MainloopPipelineOuter pipeline_outer(storage.pipeline_storage_outer, pipeline_params_outer, Shape<_1, _1, _1>{});
    MainloopPipelineInner pipeline_inner(storage.pipeline_storage_inner, pipeline_params_inner, ClusterShape{});
    MainloopPipelineReducer pipeline_reducer(storage.pipeline_storage_reducer, pipeline_params_reducer);

    PipelineStateInner smem_pipe_read_inner;
    PipelineStateInner smem_pipe_write_inner = cutlass::make_producer_start_state<MainloopPipelineInner>();
    PipelineStateOuter smem_pipe_read_outer;
    PipelineStateOuter smem_pipe_write_outer = cutlass::make_producer_start_state<MainloopPipelineOuter>();
    typename cutlass::PipelineState<MainloopPipelineReducer::Stages> smem_pipe_write_reducer =
        cutlass::make_producer_start_state<MainloopPipelineReducer>();

    typename MathWarpGroupOrderBarrier::Params params_math_wg_order_barrier;
    params_math_wg_order_barrier.group_id = consumer_warp_group_idx;
    params_math_wg_order_barrier.group_size = cutlass::NumThreadsPerWarpGroup;
    MathWarpGroupOrderBarrier math_wg_order_barrier(storage.math_wg_order, params_math_wg_order_barrier);

    if constexpr (kLoadsQSeparately) {
      if ((warp_idx == 0) && lane_predicate) {
        storage.load_warp_barrier.init(2 * cutlass::NumThreadsPerWarp);
      }
      cutlass::arch::fence_barrier_init();
    }
    __syncthreads();

    CollectiveMainloop collective_mainloop;

    if (warp_group_role == WarpGroupRole::Producer) {
      cutlass::arch::warpgroup_reg_dealloc<LoadRegisterRequirement>();
      if (producer_warp_role == ProducerWarpRole::LoadKV) {
        bool do_barrier = kLoadsQSeparately;
        CUTLASS_PRAGMA_NO_UNROLL
        for (; tile_scheduler.is_valid(); ++tile_scheduler) {
          auto blk_coord = tile_scheduler.get_block_coord();
          SeqTile t = seq_tile(params.mainloop.varlen, blk_coord, batch, heads);
          if (Fusion{}.get_trip_count(blk_coord, TileShape{}, t.problem) <= 0) continue;   // store_empty tile
          collective_mainloop.template load_kv_maybe_q<!kLoadsQSeparately>(
              blk_coord, params.mainloop, t, pipeline_inner, smem_pipe_write_inner, pipeline_outer, smem_pipe_write_outer,
              storage.mainloop, storage.load_warp_barrier, do_barrier);
          do_barrier = false;
        }
      } else if (kLoadsQSeparately && (producer_warp_role == ProducerWarpRole::MaybeLoadQ)) {
        bool do_barrier = true;
        CUTLASS_PRAGMA_NO_UNROLL
        for (; tile_scheduler.is_valid(); ++tile_scheduler) {
          auto blk_coord = tile_scheduler.get_block_coord();
          SeqTile t = seq_tile(params.mainloop.varlen, blk_coord, batch, heads);
          if (Fusion{}.get_trip_count(blk_coord, TileShape{}, t.problem) <= 0) continue;
          collective_mainloop.load_maybe_q(blk_coord, params.mainloop, t, pipeline_outer, smem_pipe_write_outer,
                                           storage.mainloop, storage.load_warp_barrier, do_barrier);
          do_barrier = false;
        }
      }
      // the 88 reducer warp has nothing to do in the forward pass (its reduce() is a no-op)
    } else {
      cutlass::arch::warpgroup_reg_alloc<MmaRegisterRequirement>();
      CUTLASS_PRAGMA_NO_UNROLL
      for (; tile_scheduler.is_valid(); ++tile_scheduler) {
        auto blk_coord = tile_scheduler.get_block_coord();
        SeqTile t = seq_tile(params.mainloop.varlen, blk_coord, batch, heads);
        auto wg_coord = blk_coord;
        auto& wg_block = get<0>(wg_coord);
        wg_block = NumMmaWarpGroups * wg_block + consumer_warp_group_idx;

        if (Fusion{}.get_trip_count(blk_coord, TileShape{}, t.problem) <= 0) {
          store_empty(wg_coord, t, params);
          continue;
        }

        constexpr int kOuterLoads = CollectiveMainloop::kOuterLoads;
        smem_pipe_read_outer.advance(consumer_warp_group_idx * kOuterLoads);

        auto result = collective_mainloop.compute(
            blk_coord, wg_coord, params.mainloop, t.problem, pipeline_inner, smem_pipe_read_inner,
            pipeline_outer, smem_pipe_read_outer, pipeline_reducer, smem_pipe_write_reducer,
            storage.mainloop, math_wg_order_barrier);

        smem_pipe_read_outer.advance(kOuterLoads * (NumMmaWarpGroups - consumer_warp_group_idx));

        math_wg_order_barrier.wait();
        CollectiveEpilogue{}(TileShapePV{}, wg_coord, get<0>(result), get<1>(result), TiledMmaPV{}, t, params.epilogue);
        math_wg_order_barrier.arrive();
      }
    }
#endif
  }
};

}  // namespace cutegen_varlen
#endif  // CUTEGEN_FMHA_VARLEN_SM90_HPP
