// attention_wgmma.cu — attention forward on Hopper (sm_90a), the FlashAttention-3 design: a producer
// warp loads Q once and K / V tiles through a STAGES-deep ring with TMA, two or three consumer warpgroups run
// wgmma from shared memory (S = Q K^T) and from registers (O += P V), online softmax in between.
//
// What: out[b, h, i, :] = sum_j softmax_j(scale * q_i . k_j) v_j for query head h, key/value head
// h / group, keys j < k_len (and j <= i when CAUSAL: the top-left aligned mask of PyTorch's is_causal);
// bf16 / f16 in and out, f32 softmax and accumulators; lse[b, h, i] = log sum_j exp(scale q_i . k_j)
// when asked for. Q, K, V and out are 4-D tensor maps over (head_dim, seq, heads, batch), innermost
// first, with any strides that are multiples of 16 bytes (so both the (batch, heads, seq, head_dim)
// and the (batch, seq, heads, head_dim) memory layouts work without a copy).
// How: a block is 1 + CONSUMERS warpgroups and one tile of 64 x CONSUMERS queries of one (batch, head)
// (CONSUMERS 3 at head dim 64, 2 at 128: ASYNCCOPY_ATTN_CONSUMERS below); its K / V tiles are BN keys
// (176 at head dim 128 without the causal mask, else 128: ASYNCCOPY_ATTN_BN). Warpgroup 0 is the
// producer: its thread 0 issues Q's load (one box per 64 columns of head_dim,
// 128B swizzle) on full_q, then for each K / V tile waits for the stage's K to be free (empty_k[s]) and
// loads K on full_k[s], then the same for V (empty_v[s], full_v[s]): S = Q K^T starts before V has landed,
// and K is refilled once S is done, a softmax before V is released. Boxes
// past the sequence's end come back zero-filled. Warpgroups 1 .. CONSUMERS are consumers, each owning 64 query
// rows: per tile, S (64 x BN, f32, in registers) = Q K^T by D / 16 wgmma m64nBNk16 from shared memory;
// masking (keys >= k_len, and past the diagonal when CAUSAL) only on the tiles that need it; the row
// maxima and sums by quad shuffles; O rescaled; P rounded to T straight into the A-fragment registers of
// the next product (the accumulator layout of 16 columns is the register A layout of a k16 step:
// wgmma.cuh, WgmmaRS); O (64 x D) += P V by BN / 16 wgmma m64nDk16 with V MN-major in shared memory;
// K and V handed back (one arrival per consumer warp each). Causal blocks skip the key tiles wholly past
// their last query, and the grid runs the longest query tiles first (asynccopy/attention.cuh). Without the
// mask the launch may cut each item (query tile, head, batch) of the grid's last wave into `pieces` ranges
// of its key tiles, one block each (a 1-D grid: whole_items whole items first), merged by the last piece to
// finish (merge_pieces, through split_partial and split_counter: a workspace the launch keeps per stream).
// Epilogue: O / l rounded to T into the consumer's own rows of Q's buffer (the same 128B-swizzled
// [64][128 bytes] boxes the map describes), then TMA stores of 64 rows x 64 columns; rows past q_len
// are clipped by the store. setmaxnreg moves registers from the producer (24) to the consumers (240
// each with two, 160 with three).
// Shared memory (dynamic, 1024-byte aligned): Q [D / 64][BM][64]; then per stage K [D / 64][BN][64]
// and V [D / 64][BN][64] (each panel rows of 128 bytes, 128B-swizzled by TMA); then (ASYNCCOPY_ATTN_O_BUFFER) O's
// staging buffer, laid out as Q's.
// Traced (-DASYNCCOPY_TRACE=1): one more argument, the buffer asynccopy.attention_trace decodes (the layout
// at TRACE_STRIDE below); untraced builds are the same binary as without the macros.
// Constraints: sm_90a; T bf16 or f16; D 64 or 128; q_len, k_len >= 1; strides multiples of 16 bytes.
// Run: asynccopy.attention(q, k, v, kernel="wgmma").
#include <asynccopy/attention.cuh>
#include <asynccopy/fastmath.cuh>
#include <asynccopy/gemm.cuh>
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tma.cuh>
#include <asynccopy/trace.cuh>
#include <asynccopy/wgmma.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace ac = asynccopy;
using u64 = unsigned long long;

namespace {

constexpr int PRODUCER_REGS = 24;
constexpr int PANEL = 64;     // head_dim columns per 128-byte swizzle span
// Compile-time knobs (-D), for measuring variants (asynccopy bench attention --variants):
//   ASYNCCOPY_ATTN_OVERLAP (default 1) issues Q K^T of the next key tile with P V of this one and runs the
//   next tile's softmax under that P V; 0: the products and the softmax in turn (the variant "serial").
//   ASYNCCOPY_ATTN_PINGPONG (with OVERLAP): 1, the consumer warpgroups take turns issuing their products (named
//   barriers TURN_BARRIER + w), so that one's softmax runs while another's products have the tensor cores;
//   0, they issue as they go; -1 (default): at head dim 64 only, where it measured faster (design.md 11b).
#ifndef ASYNCCOPY_ATTN_OVERLAP
#define ASYNCCOPY_ATTN_OVERLAP 1
#endif
#ifndef ASYNCCOPY_ATTN_PINGPONG
#define ASYNCCOPY_ATTN_PINGPONG -1
#endif
constexpr bool OVERLAP = ASYNCCOPY_ATTN_OVERLAP != 0;
template <int D>
constexpr bool PING_PONG = ASYNCCOPY_ATTN_PINGPONG < 0 ? OVERLAP && D == 64 : ASYNCCOPY_ATTN_PINGPONG != 0;
//   ASYNCCOPY_ATTN_RING (with PINGPONG): 1, the turn ring runs on across a block's units (a warpgroup done with a
//   unit's last issue hands the turn on, and the next takes its next unit's first turn while the others finish);
//   0, it closes at each unit's end and the last warpgroup opens it again at the next unit's start (warpgroup 0's
//   first issue of a unit waits for the last warpgroup to reach that unit); -1 (default): 1 without the causal
//   mask, 0 with it, as measured (H100, 2026-12-07, head dim 64, 8192: 478 against 423 TFLOP/s without the mask,
//   423 against 458 with it; docs/design.md 11b).
#ifndef ASYNCCOPY_ATTN_RING
#define ASYNCCOPY_ATTN_RING -1
#endif
template <int CAUSAL>
constexpr bool RING_ACROSS_UNITS = ASYNCCOPY_ATTN_RING < 0 ? !CAUSAL : ASYNCCOPY_ATTN_RING != 0;
//   ASYNCCOPY_ATTN_CONSUMERS: consumer warpgroups of 64 queries a block (2 or 3); 0 (default): 3 at head dim 64
//   (192 queries a block share each K / V tile, as FlashAttention-3 does there), 2 at 128. The Python side
//   reads the knob too (AttentionConfig.consumers): the grid, the block and Q's box follow it.
#ifndef ASYNCCOPY_ATTN_CONSUMERS
#define ASYNCCOPY_ATTN_CONSUMERS 0
#endif
template <int D>
constexpr int CONSUMERS_OF = ASYNCCOPY_ATTN_CONSUMERS > 0 ? ASYNCCOPY_ATTN_CONSUMERS : D == 64 ? 3 : 2;
//   ASYNCCOPY_ATTN_BN: keys per K / V tile (128 or 176); 0 (default): 176 at head dim 128 without the causal
//   mask (a third more work per tile for the same per-tile costs, as FlashAttention-3 does there; 2 stages
//   fit), else 128. The Python side reads it too (AttentionConfig.keys).
#ifndef ASYNCCOPY_ATTN_BN
#define ASYNCCOPY_ATTN_BN 0
#endif
//   ASYNCCOPY_ATTN_PREFETCH_MAPS: 1, thread 0 prefetches the four tensor maps into the TMA unit's descriptor cache
//   as the block starts (so Q's first load need not wait for its map's fetch); 0 (default until it is timed on a
//   GPU): no prefetch.
#ifndef ASYNCCOPY_ATTN_PREFETCH_MAPS
#define ASYNCCOPY_ATTN_PREFETCH_MAPS 0
#endif
//   ASYNCCOPY_ATTN_PERSISTENT: 1, a grid of at most one block an SM, each block taking the grid's units (whole
//   items, then without the mask the key split's pieces) one after another: its own first, then the next not yet
//   taken (unit_counter: two ints of the stream's workspace, which the last block lowers again). The producer loads
//   the next unit's Q as soon as every consumer warp is done with the last Q K^T of the unit before (empty_q), and
//   its K / V tiles as stages free up, so a unit's start (Q's and the first K's loads) runs under the previous
//   unit's last softmax, P V and epilogue; O is then staged in the unit's last K / V stage rather than in Q's buffer
//   (in its K tile alone where O fits there, as soon as every consumer warp's last Q K^T is done), or in a buffer of
//   its own (ASYNCCOPY_ATTN_O_BUFFER).
//   0 (default): a block an item. Traced builds are not persistent (the trace follows one item a block); the
//   launch reads the knob too (AttentionConfig.persistent: the grid).
#ifndef ASYNCCOPY_ATTN_PERSISTENT
#define ASYNCCOPY_ATTN_PERSISTENT 0
#endif
#if defined(ASYNCCOPY_TRACE) && ASYNCCOPY_TRACE
constexpr bool PERSISTENT = false;
#else
constexpr bool PERSISTENT = ASYNCCOPY_ATTN_PERSISTENT != 0;
#endif
//   ASYNCCOPY_ATTN_O_BUFFER (with PERSISTENT): 1, O is staged for its TMA stores in a buffer of its own after the
//   stages (BM x D elements, a warpgroup's rows each), so that a warpgroup's epilogue waits for no other: it goes on
//   to the next unit while the others finish their last products, and the wait for its store to have read the buffer
//   comes at its next epilogue (by then long done). 0 (default): O is staged in the unit's last K / V stage, which
//   every consumer warpgroup must be done with first (a barrier of all of them) and which goes back to the producer
//   only when the stores have read it. The launch sets it on items of few key tiles, where the kernel's record says it
//   pays (AttentionKernel.o_buffer_tiles: at head dim 64) and the buffer fits beside the stages
//   (asynccopy.attention_schedule.with_persistence); the Python side counts its bytes (AttentionConfig.smem_bytes).
#ifndef ASYNCCOPY_ATTN_O_BUFFER
#define ASYNCCOPY_ATTN_O_BUFFER 0
#endif
constexpr bool O_BUFFER = PERSISTENT && ASYNCCOPY_ATTN_O_BUFFER != 0;
constexpr bool HOLD_LAST = PERSISTENT && !O_BUFFER;  // a unit's last K / V stage stages its O
template <int D, int CAUSAL>
constexpr int BN_OF = ASYNCCOPY_ATTN_BN > 0 ? ASYNCCOPY_ATTN_BN : D == 128 && !CAUSAL ? 176 : 128;
// named barriers: 1 + w warpgroup w's epilogue, TURN_BARRIER + w its turn to issue, ALL_CONSUMERS_BARRIER every
// consumer warpgroup done with a unit's last stage (HOLD_LAST) (0: __syncthreads)
constexpr int TURN_BARRIER = 4;
constexpr int ALL_CONSUMERS_BARRIER = 7;
#define NEG_INF __int_as_float(0xff800000u)

// Two floats rounded to T and packed into one 32-bit register, the first in the low half.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi);
template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack2<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&v);
}

// The max and the sum over the four threads of a quad (lanes 4g .. 4g + 3 hold one row's columns).
__device__ __forceinline__ float quad_max(float x)
{
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x)
{
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// S = Q K^T issued for one key tile (one commit group): A = the warpgroup's 64 rows of Q (K-major), B = K^T
// (K [keys][D]: K-major too), D / 16 steps of k16 over the panels of 64 columns.
template <class Tag, int D, int BM, int BN>
__device__ __forceinline__ void issue_qk(float (&acc_s)[BN / 2], const unsigned short* q_w, const unsigned short* k_s)
{
    ac::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int p = kk / 4, off = (kk % 4) * 16;  // panel, and the k16 step's element offset in its rows
        const u64 dq = ac::make_desc_k_major(q_w + p * BM * PANEL + off);
        const u64 dk = ac::make_desc_k_major(k_s + p * BN * PANEL + off);
        ac::Wgmma<BN, Tag>::template mma<0, 0>(acc_s, dq, dk, kk > 0 ? 1 : 0);
    }
    ac::wgmma_commit();
}

// O += P V issued (one commit group): B = V [keys][D], MN-major (head_dim contiguous), panels of 64 columns
// BN * 128 bytes apart; A = P from the registers, per k16 step of keys.
template <class Tag, int D, int BN>
__device__ __forceinline__ void issue_pv(float (&acc_o)[D / 2], const unsigned (&pa)[BN / 16][4], const unsigned short* v_s)
{
    ac::wgmma_fence();
#pragma unroll
    for (int c = 0; c < BN / 16; ++c) {
        const u64 dv = ac::make_desc_mn_major(v_s + c * 16 * PANEL, 2u * BN * PANEL);
        ac::WgmmaRS<D, Tag>::template mma<1>(acc_o, pa[c], dv, 1);
    }
    ac::wgmma_commit();
}

// The max (MAX) or the min over the four threads of a quad (lanes 4g .. 4g + 3 hold one row's columns).
template <bool MAX>
__device__ __forceinline__ float quad_extreme(float x)
{
    return MAX ? quad_max(x) : -quad_max(-x);
}

// The scores of key tile j become P (f32, in place). The row maxima are taken on the raw scores and
// scaled once (the max for a positive scale, the min for a negative one: POSITIVE), so that each score
// costs one FFMA and one ex2: p = 2^(s * scale_log2 - m) with m the running max in log2 units. Keys past
// k_len, and (causal) keys past each row's query, are masked (to the extreme that never wins and gives
// p = 0) on the tiles that have any; the running max m and sum l are updated and the factor O must be
// scaled by is returned in `rescale`. q0w: the warpgroup's first query.
// A thread's BN / 4 scores of a row are reduced (max, then sum) in C (SOFTMAX_CHAINS) independent chains (by the
// parity of the column group and the pair's column), combined at the end: in one chain each FMNMX / FADD waits out
// the previous one's latency, BN / 4 of them in a row (Nsight Compute: "wait" the first stall reason, 2.1 cycles an
// issue at head dim 64, against 0.7 in cuDNN's kernel).
// ASYNCCOPY_ATTN_CHAINS: 1, 2 or 4; 0 (default): 4 at head dim 64 without the causal mask, else 1, as measured (H100,
// 2026-12-07, TFLOP/s at 1 / 2 / 4 chains: 8192 x 64 485 / 478 / 496, 2048 x 64 417 / 409 / 419; 2048 x 128 565 / 539
// / 552, 8192 x 128 causal 608 / 578 / 579; head dim 64 causal within 2% of each other; docs/design.md 11b).
#ifndef ASYNCCOPY_ATTN_CHAINS
#define ASYNCCOPY_ATTN_CHAINS 0
#endif
template <int D, int CAUSAL>
constexpr int SOFTMAX_CHAINS = ASYNCCOPY_ATTN_CHAINS > 0 ? ASYNCCOPY_ATTN_CHAINS : D == 64 && !CAUSAL ? 4 : 1;
template <bool POSITIVE>
__device__ __forceinline__ float extreme(float a, float b)
{
    return POSITIVE ? fmaxf(a, b) : fminf(a, b);
}
template <int CAUSAL, bool POSITIVE, int BN, int C>
__device__ __forceinline__ void softmax_tile(float (&acc_s)[BN / 2], float (&m)[2], float (&l)[2], float (&rescale)[2],
                                             float scale_log2, int j, int lane, int k_len, int q0w,
                                             const int (&qrow)[2])
{
    const float masked = POSITIVE ? NEG_INF : -NEG_INF;  // masked * scale_log2 = -inf
    const int key0 = j * BN + 2 * (lane % 4);
    const bool edge = (j + 1) * BN > k_len || (CAUSAL && (j + 1) * BN - 1 > q0w);
    if (edge) {
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
            const int key = key0 + 8 * (i >> 2) + (i & 1);
            const int row = (i >> 1) & 1;
            if (key >= k_len || (CAUSAL && key > qrow[row])) acc_s[i] = masked;
        }
    }
    static_assert(C == 1 || C == 2 || C == 4, "chains: one, or the pair's column (x the column group's parity)");
    auto chain = [](int i) { return C == 4 ? ((i >> 2) & 1) * 2 + (i & 1) : C == 2 ? i & 1 : 0; };  // register i's chain
    float mx[2][C];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c) mx[r][c] = masked;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        const int r = (i >> 1) & 1;
        mx[r][chain(i)] = extreme<POSITIVE>(mx[r][chain(i)], acc_s[i]);
    }
    float neg_base[2], sum[2][C];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float row_extreme = mx[r][0];
        if constexpr (C >= 2) row_extreme = extreme<POSITIVE>(row_extreme, mx[r][1]);
        if constexpr (C == 4) row_extreme = extreme<POSITIVE>(row_extreme, extreme<POSITIVE>(mx[r][2], mx[r][3]));
        const float tile_max = quad_extreme<POSITIVE>(row_extreme) * scale_log2;  // -inf: every key of the row masked
        const float new_m = fmaxf(m[r], tile_max);
        // a row that saw no key yet keeps -inf; exp2(-inf - -inf) would be NaN
        rescale[r] = m[r] == NEG_INF ? 0.0f : ac::ex2_ftz(m[r] - new_m);
        m[r] = new_m;
        neg_base[r] = new_m == NEG_INF ? 0.0f : -new_m;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c) sum[r][c] = 0.0f;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        const int r = (i >> 1) & 1;
        acc_s[i] = ac::ex2_ftz(fmaf(acc_s[i], scale_log2, neg_base[r]));
        sum[r][chain(i)] += acc_s[i];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
        l[r] = l[r] * rescale[r] + quad_sum(C == 4   ? (sum[r][0] + sum[r][1]) + (sum[r][2] + sum[r][3])
                                            : C == 2 ? sum[r][0] + sum[r][1]
                                                     : sum[r][0]);
}

template <int D>
__device__ __forceinline__ void rescale_o(float (&acc_o)[D / 2], const float (&rescale)[2])
{
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc_o[i] *= rescale[(i >> 1) & 1];
}

// P in T, as the A fragments of the k16 steps: registers 8c .. 8c + 7 of S are step c's a0..a3.
template <class T, int BN>
__device__ __forceinline__ void pack_p(unsigned (&pa)[BN / 16][4], const float (&acc_s)[BN / 2])
{
#pragma unroll
    for (int c = 0; c < BN / 16; ++c) {
#pragma unroll
        for (int x = 0; x < 4; ++x) pa[c][x] = pack2<T>(acc_s[8 * c + 2 * x], acc_s[8 * c + 2 * x + 1]);
    }
}

// A piece of a key-split item (the launch cuts each item of the grid's last wave into `pieces` ranges of its
// key tiles, so that the last wave's SMs are not left idle; asynccopy.attention_kernels.tail_split): warpgroup
// w writes its unnormalised O, running max m (log2 units) and sum l to its slot of `partial`, and the last of
// the item's pieces to arrive on its counter (atom.acq_rel.gpu after the warpgroup's barrier) adds the
// others' in, O = sum_p 2^(m_p - M) O_p and l likewise with M the rows' max, lowers the counter for the next
// launch and returns true (it stores the rows); the others return false. Nothing waits on another block, so
// the pieces may run in any order. A slot is [D / 8 + 1][128 threads][4] floats (O, then m0 m1 l0 l1): each
// warp's float4 stores coalesce.
template <int D>
__device__ __forceinline__ bool merge_pieces(float (&acc_o)[D / 2], float (&m)[2], float (&l)[2], int* counter,
                                             float* partial, int tail, int piece, int pieces, int consumers, int w,
                                             int t, int* last)
{
    constexpr int QUADS = D / 8 + 1;  // float4s a thread: its O registers, then (m, l)
    auto slot = [&](int p) {
        const long long at = (static_cast<long long>(tail) * pieces + p) * consumers + w;
        return reinterpret_cast<float4*>(partial) + at * QUADS * 128 + t;
    };
    float4* mine = slot(piece);
#pragma unroll
    for (int i = 0; i < D / 2; i += 4)
        __stcg(mine + (i / 4) * 128, make_float4(acc_o[i], acc_o[i + 1], acc_o[i + 2], acc_o[i + 3]));
    __stcg(mine + (D / 8) * 128, make_float4(m[0], m[1], l[0], l[1]));
    ac::named_barrier_sync(1 + w, 128);  // the warpgroup's slot is written before its arrival
    if (t == 0) {
        int* c = counter + tail * consumers + w;
        last[w] = ac::counter_arrive(c) == pieces - 1;
        if (last[w]) *c = 0;  // every piece has arrived: the next launch on this stream finds it down
    }
    ac::named_barrier_sync(1 + w, 128);  // thread 0 saw every other piece's arrival: their slots are complete
    if (!last[w]) return false;
    for (int p = 0; p < pieces; ++p) {
        if (p == piece) continue;
        const float4* theirs = slot(p);
        const float4 ml = __ldcg(theirs + (D / 8) * 128);
        const float their_m[2] = {ml.x, ml.y}, their_l[2] = {ml.z, ml.w};
        float mine_f[2], their_f[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float new_m = fmaxf(m[r], their_m[r]);
            mine_f[r] = m[r] == NEG_INF ? 0.0f : ac::ex2_ftz(m[r] - new_m);
            their_f[r] = their_m[r] == NEG_INF ? 0.0f : ac::ex2_ftz(their_m[r] - new_m);
            m[r] = new_m;
            l[r] = l[r] * mine_f[r] + their_l[r] * their_f[r];
        }
#pragma unroll
        for (int i = 0; i < D / 2; i += 4) {
            const float4 o = __ldcg(theirs + (i / 4) * 128);  // registers i, i + 1: row 0; i + 2, i + 3: row 1
            acc_o[i] = acc_o[i] * mine_f[0] + o.x * their_f[0];
            acc_o[i + 1] = acc_o[i + 1] * mine_f[0] + o.y * their_f[0];
            acc_o[i + 2] = acc_o[i + 2] * mine_f[1] + o.z * their_f[1];
            acc_o[i + 3] = acc_o[i + 3] * mine_f[1] + o.w * their_f[1];
        }
    }
    return true;
}

// Traced builds (-DASYNCCOPY_TRACE=1, asynccopy.attention_trace): per block trace::HEADER words, then per
// K/V tile j < TRACE_TILES the producer's issue of K and of V, and per consumer warpgroup w its K there
// (S = Q K^T starts), S done, softmax done (P in registers), V there, P V done: clock64, by one thread each.
constexpr int TRACE_TILES = 64;
constexpr int PRODUCER_EVENTS = 2, CONSUMER_EVENTS = 5;
template <int C>
constexpr int TILE_WORDS_OF = PRODUCER_EVENTS + C * CONSUMER_EVENTS;  // the kernel's TILE_WORDS, TRACE_STRIDE
template <int C>
constexpr int TRACE_STRIDE_OF = ac::trace::HEADER + TRACE_TILES * TILE_WORDS_OF<C>;
enum ProducerEvent { K_ISSUED = 0, V_ISSUED = 1 };
enum ConsumerEvent { K_READY = 0, S_DONE = 1, SOFTMAX_DONE = 2, V_READY = 3, PV_DONE = 4 };

}  // namespace

#if defined(ASYNCCOPY_TRACE) && ASYNCCOPY_TRACE
#define AT_PRODUCER(j, e) \
    if ((j) < TRACE_TILES) ac::trace::stamp<TRACE_STRIDE>(ac_trace, (j) * TILE_WORDS + (e), true)
#define AT_CONSUMER(j, e)                                                                                      \
    if ((j) < TRACE_TILES)                                                                                     \
    ac::trace::stamp<TRACE_STRIDE>(ac_trace, (j) * TILE_WORDS + PRODUCER_EVENTS + w * CONSUMER_EVENTS + (e), t == 0)
#define AT_MARK(at, who) ac::trace::mark_block<TRACE_STRIDE>(ac_trace, (at), (who))
#else
#define AT_PRODUCER(j, e) ((void)0)
#define AT_CONSUMER(j, e) ((void)0)
#define AT_MARK(at, who) ((void)0)
#endif

// Accumulator register i of consumer thread t (0..127) after m64nN: row 16 (t / 32) + (t % 32) / 4 +
// 8 ((i >> 1) & 1) of the warpgroup's 64 rows, column 8 (i >> 2) + 2 (t % 4) + (i & 1). A thread
// holds two rows (r0, r0 + 8): registers with (i >> 1) & 1 == 0 are r0's, the others r0 + 8's.
template <class T, int D, int STAGES, int CAUSAL>
__global__ void __launch_bounds__(128 * (CONSUMERS_OF<D> + 1), 1)
    attention_wgmma(const __grid_constant__ ac::TensorMap map_q, const __grid_constant__ ac::TensorMap map_k,
                    const __grid_constant__ ac::TensorMap map_v, const __grid_constant__ ac::TensorMap map_o,
                    float* __restrict__ lse, int heads, int group, int q_len, int k_len, float scale_log2,
                    int* __restrict__ split_counter, float* __restrict__ split_partial, int whole_items,
                    int pieces, int batch, int* __restrict__ unit_counter AC_TRACE_PARAM)
{
    static_assert(D == 64 || D == 128, "head dims 64 and 128");
    static_assert(STAGES >= 1 && STAGES <= 8, "1 to 8 K / V stages");
    constexpr bool PINGPONG = PING_PONG<D>;
    constexpr int CHAINS = SOFTMAX_CHAINS<D, CAUSAL>;
    constexpr int CONSUMERS = CONSUMERS_OF<D>;
    static_assert(CONSUMERS == 2 || CONSUMERS == 3, "2 or 3 consumer warpgroups");
    constexpr int BM = 64 * CONSUMERS;  // queries per block: 64 per consumer warpgroup
    constexpr int BN = BN_OF<D, CAUSAL>;  // keys per K / V tile
    static_assert(BN == 128 || BN == 176, "key tiles of 128 or 176 (wgmma m64n128k16 / m64n176k16)");
    // the registers the producer gives up, shared by the consumers (setmaxnreg: multiples of 8, 64 K a block)
    constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 240;
    static_assert(128 * PRODUCER_REGS + 128 * CONSUMERS * CONSUMER_REGS <= 65536, "the register file");
    constexpr int TILE_WORDS = TILE_WORDS_OF<CONSUMERS>;
    constexpr int TRACE_STRIDE = TRACE_STRIDE_OF<CONSUMERS>;
    (void)TILE_WORDS;
    (void)TRACE_STRIDE;
    static_assert(!PINGPONG || OVERLAP, "the ping-pong alternates the issue of both products: build with OVERLAP too");
    using Tag = typename ac::WgmmaType<T>::tag;
    constexpr int PANELS = D / PANEL;
    constexpr int Q_ELEMS = BM * D;
    constexpr int KV_ELEMS = BN * D;  // one of K or V, one stage
    constexpr unsigned Q_BYTES = 2u * Q_ELEMS, KV_BYTES = 2u * KV_ELEMS;
    static_assert(Q_BYTES % 1024 == 0 && KV_BYTES % 1024 == 0, "whole 1024-byte swizzle repeats");
    static_assert(!HOLD_LAST || Q_ELEMS <= 2 * KV_ELEMS, "O (BM x D) fits a K / V stage, where HOLD_LAST stages it");
    // HOLD_LAST with O no larger than a K tile (BN >= BM: two consumer warpgroups): O goes to the last stage's K tile
    // once every consumer warp is done with the unit's last Q K^T (empty_q's phase for the unit: what hands Q's buffer
    // back), not once every warpgroup's last P V is; that stage's V goes back as it is read
    constexpr bool O_IN_K = HOLD_LAST && Q_ELEMS <= KV_ELEMS;

    unsigned char* base = ac::dynamic_smem<unsigned char>();
    unsigned short* smem = reinterpret_cast<unsigned short*>(base + (-ac::smem_addr(base) & 1023u));
    unsigned short* q_s = smem;
    AT_MARK(0, threadIdx.x == 0);
    // full_k / full_v: the stage's K / V landed; empty_k / empty_v: its K / V read by every consumer warp
    // (K is handed back once S = Q K^T is done, V once P V is: the producer refills K a softmax earlier).
    __shared__ ac::mbarrier_t full_q, empty_q, full_k[STAGES], full_v[STAGES], empty_k[STAGES], empty_v[STAGES];
    if (threadIdx.x == 0) {
        if (ASYNCCOPY_ATTN_PREFETCH_MAPS) {
            ac::tensormap_prefetch(&map_q);
            ac::tensormap_prefetch(&map_k);
            ac::tensormap_prefetch(&map_v);
            ac::tensormap_prefetch(&map_o);
        }
        ac::mbarrier_init(&full_q, 1);
        ac::mbarrier_init(&empty_q, 4 * CONSUMERS);  // PERSISTENT: one arrival per consumer warp
        for (int s = 0; s < STAGES; ++s) {
            ac::mbarrier_init(&full_k[s], 1);
            ac::mbarrier_init(&full_v[s], 1);
            ac::mbarrier_init(&empty_k[s], 4 * CONSUMERS);  // one arrival per consumer warp
            ac::mbarrier_init(&empty_v[s], 4 * CONSUMERS);
        }
        ac::fence_barrier_init();
    }
    __syncthreads();

    const int q_tiles = (q_len + BM - 1) / BM;
    // unit and item indices in 32 bits (2^32 items of 64 queries would be terabytes of Q), so that the unit loop
    // inlines its divisions (a 64-bit division by a run-time value is a subroutine call, and values cannot stay in
    // the uniform datapath across a call)
    const unsigned items = static_cast<unsigned>(q_tiles) * heads * batch;
    const unsigned whole = static_cast<unsigned>(whole_items);
    // the grid's units: whole items, then (a key-split last wave) `pieces` pieces of each of the rest
    const unsigned units = !CAUSAL && pieces > 1 ? whole + (items - whole) * pieces : items;
    const int pairs = heads * batch, chunk = ac::causal_chunk(pairs, 4ll * k_len * D / group);
    // A unit and what it is: its query tile, head and batch, its piece of a key-split item (tail >= 0: the item's
    // index among the split ones), its key tiles kv_first .. kv_first + kv_tiles - 1. Units run in index order
    // (the causal grid's longest first): a block takes its own (the linear block index) and, PERSISTENT, then the
    // next not yet taken (unit_counter[0]), as the hardware hands blocks to SMs, so that the units running at once
    // stay neighbours (K and V shared in L2) and a causal grid's long units spread over the SMs.
    struct Unit {
        int qt, h, b, tail, piece, kv_first, kv_tiles;
    };
    auto decode = [&](unsigned unit) {
        Unit u;
        unsigned item = unit;
        u.tail = -1;
        u.piece = 0;
        if (!CAUSAL && pieces > 1 && unit >= whole) {
            u.tail = static_cast<int>((unit - whole) / static_cast<unsigned>(pieces));
            u.piece = static_cast<int>((unit - whole) % static_cast<unsigned>(pieces));
            item = whole + u.tail;
        }
        if (CAUSAL) {  // the longest tiles first over chunks of heads whose K and V share L2 (asynccopy/attention.cuh)
            ac::causal_item(item, q_tiles, heads, pairs, chunk, u.qt, u.h, u.b);
        } else {
            const unsigned pair = item / static_cast<unsigned>(q_tiles);
            u.qt = static_cast<int>(item - pair * q_tiles);
            u.h = static_cast<int>(pair % static_cast<unsigned>(heads));
            u.b = static_cast<int>(pair / static_cast<unsigned>(heads));
        }
        u.kv_tiles = (k_len + BN - 1) / BN;
        u.kv_first = 0;
        if (CAUSAL) {  // query i sees keys j <= i: none past the block's last query
            const int last = min(u.qt * BM + BM, q_len) - 1;
            u.kv_tiles = min(u.kv_tiles, last / BN + 1);
        } else if (u.tail >= 0) {
            // the key tiles in `pieces` ranges as equal as can be, the first all % pieces one tile longer; no product
            // of a piece and the tiles (32 bits, so that the unit loop inlines its divisions)
            const unsigned all = static_cast<unsigned>(u.kv_tiles), each = all / static_cast<unsigned>(pieces);
            const unsigned longer = all - each * static_cast<unsigned>(pieces), piece = static_cast<unsigned>(u.piece);
            u.kv_first = static_cast<int>(piece * each + min(piece, longer));
            u.kv_tiles = static_cast<int>(each + (piece < longer ? 1u : 0u));
        }
        return u;
    };
    const unsigned own = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    // PERSISTENT: the producer's unit n, for the consumers to read once full_q's phase n completes (-1: no more)
    __shared__ int unit_slot;
    const int warpgroup = threadIdx.x / 128;

    if (warpgroup == 0) {  // the producer
        ac::setmaxnreg_dec<PRODUCER_REGS>();
        if (threadIdx.x != 0) return;
        unsigned long long j0 = 0;  // the block's key tiles before this unit: the ring runs on across units
        unsigned unit = own;
        for (unsigned n = 0;; ++n) {
            if (n > 0) {
                if constexpr (!PERSISTENT) break;
                // the next unit, taken while this block's consumers still finish the last one
                unit = gridDim.x + static_cast<unsigned>(ac::counter_arrive(unit_counter));
                // every consumer warp is done with the previous unit's Q (its last Q K^T) and has read unit_slot
                ac::mbarrier_wait_parity(&empty_q, (n - 1) & 1u,
                                         {"attention_wgmma", "empty_q", 0});
                if (unit >= units) {  // none left: the consumers find -1 when full_q's phase n completes
                    unit_slot = -1;
                    ac::mbarrier_arrive(&full_q);
                    break;
                }
            }
            if constexpr (PERSISTENT) unit_slot = static_cast<int>(unit);
            const Unit u = decode(unit);
            ac::mbarrier_arrive_expect_tx(&full_q, Q_BYTES);  // boxes off the tensor count in full
#pragma unroll
            for (int p = 0; p < PANELS; ++p) {
                const int at[4] = {PANEL * p, u.qt * BM, u.h, u.b};
                ac::tensor_load<4>(q_s + p * BM * PANEL, &map_q, at, &full_q);
            }
            const int hk = u.h / group;
            for (int j = 0; j < u.kv_tiles; ++j) {
                const int s = ac::stage_of<STAGES>(j0 + j);
                const unsigned free_phase = ac::phase_of<STAGES>(j0 + j) ^ 1u;
                unsigned short* k_s = smem + Q_ELEMS + s * 2 * KV_ELEMS;
                unsigned short* v_s = k_s + KV_ELEMS;
                ac::mbarrier_wait_parity(&empty_k[s], free_phase, {"attention_wgmma", "empty_k", s});
                AT_PRODUCER(j, K_ISSUED);
                ac::mbarrier_arrive_expect_tx(&full_k[s], KV_BYTES);
#pragma unroll
                for (int p = 0; p < PANELS; ++p) {
                    const int at[4] = {PANEL * p, (u.kv_first + j) * BN, hk, u.b};
                    ac::tensor_load<4>(k_s + p * BN * PANEL, &map_k, at, &full_k[s]);
                }
                ac::mbarrier_wait_parity(&empty_v[s], free_phase, {"attention_wgmma", "empty_v", s});
                AT_PRODUCER(j, V_ISSUED);
                ac::mbarrier_arrive_expect_tx(&full_v[s], KV_BYTES);
#pragma unroll
                for (int p = 0; p < PANELS; ++p) {
                    const int at[4] = {PANEL * p, (u.kv_first + j) * BN, hk, u.b};
                    ac::tensor_load<4>(v_s + p * BN * PANEL, &map_v, at, &full_v[s]);
                }
            }
            j0 += u.kv_tiles;
        }
        if constexpr (PERSISTENT) {  // the last block to stop taking units lowers the counters for the next launch
            if (ac::counter_arrive(unit_counter + 1) == static_cast<int>(gridDim.x) - 1) {
                unit_counter[0] = 0;
                unit_counter[1] = 0;
            }
        }
        return;
    }

    // the consumers: warpgroup w = 0 .. CONSUMERS - 1 owns queries q0 + 64w .. q0 + 64w + 63 of each unit
    ac::setmaxnreg_inc<CONSUMER_REGS>();
    const int w = warpgroup - 1;
    const int t = threadIdx.x % 128, lane = t % 32;
    const int r0 = 64 * w + 16 * (t / 32) + lane / 4;  // this thread's rows r0 and r0 + 8 of the block
    // scale 0 (uniform weights) as the least normal float: every score then scales to (nearly) 0, and a
    // masked one still to -inf (-inf x 0 would be NaN)
    if (scale_log2 == 0.0f) scale_log2 = __int_as_float(0x00800000);
    const unsigned short* q_w = q_s + w * 64 * PANEL;  // this warpgroup's rows of Q's first panel
    auto release = [&](ac::mbarrier_t* bar) {
        if (lane == 0) ac::mbarrier_arrive(bar);  // one arrival per warp: the producer may refill
    };
    unsigned long long j0 = 0;  // the block's key tiles before this unit (the producer's count)
    // The unit loop, in two instances (the outer loop is unrolled, so `merge` is known in each): the first without
    // merge_pieces, the second with it. A PERSISTENT block without the mask runs its whole items through the first
    // and leaves it at the first piece of a key-split item (the grid's last units) for the second, which waits again
    // on the phase of full_q it left at (complete: it returns at once) and takes the same unit. merge_pieces inside
    // the loop of whole items cost that loop its uniform registers (descriptors rebuilt in per-thread ones, R2UR
    // 35 -> 85 at head dim 64) and spilled into the key loop, by SASS. Other builds run one instance (merging where
    // a piece may come).
    constexpr int INSTANCES = PERSISTENT && !CAUSAL ? 2 : 1;
    unsigned n = 0;  // the units this block has taken before
    // PINGPONG: the turn ring opens with the last warpgroup handing warpgroup 0 its first turn; RING_ACROSS_UNITS, it
    // opens once, and closes as the block ends with warpgroup 0 taking the turn the last one passes after its very
    // last issue; else it opens at each unit's start and the last warpgroup keeps a unit's last turn. Either way every
    // bar.sync of a turn barrier meets one bar.arrive.
    constexpr bool RING_ONCE = PINGPONG && RING_ACROSS_UNITS<CAUSAL>;
    auto turn_ring = [&](bool open) {
        if (open && w == CONSUMERS - 1) ac::named_barrier_arrive(TURN_BARRIER, 256);
        if (!open && w == 0) ac::named_barrier_sync(TURN_BARRIER, 256);
    };
    if constexpr (RING_ONCE) turn_ring(true);
#pragma unroll
    for (int instance = 0; instance < INSTANCES; ++instance) {
        const bool merge = !CAUSAL && (!PERSISTENT || instance == 1);
        for (; PERSISTENT || n == 0; ++n) {
            ac::mbarrier_wait_parity(&full_q, n & 1u, {"attention_wgmma", "full_q", 0});
            unsigned unit = own;
            if constexpr (PERSISTENT) {
                // lane 0 alone reads the slot: it is the lane whose arrival on empty_q (a release) hands the slot
                // back to the producer, so no other lane's read is left unordered with the producer's next write
                // (racecheck: a WAR hazard per warp otherwise); the warp's maximum is uniform (see below)
                int mine = -2147483647 - 1;  // INT_MIN
                if (lane == 0) mine = *static_cast<volatile int*>(&unit_slot);  // volatile: not read by the rest
                const int slot = __reduce_max_sync(0xffffffffu, mine);
                if (slot < 0) break;
                if (INSTANCES == 2 && !merge && pieces > 1 && static_cast<unsigned>(slot) >= whole) break;
                unit = static_cast<unsigned>(slot);
            }
            Unit u = decode(unit);
            if constexpr (PERSISTENT) {
                // The same in every lane, but read from shared memory, so not known to be by the compiler, which
                // then keeps everything derived from the unit (key tiles, stages, addresses, wgmma descriptors) in
                // per-thread registers. A warp reduction's result is a uniform register: through it they stay on the
                // uniform datapath, as the default build's (from blockIdx) do.
                u.qt = __reduce_max_sync(0xffffffffu, u.qt);
                u.h = __reduce_max_sync(0xffffffffu, u.h);
                u.b = __reduce_max_sync(0xffffffffu, u.b);
                u.kv_first = __reduce_max_sync(0xffffffffu, u.kv_first);
                u.kv_tiles = __reduce_max_sync(0xffffffffu, u.kv_tiles);
            }
            const int q0 = u.qt * BM, kv_first = u.kv_first, kv_tiles = u.kv_tiles;
            const int qrow[2] = {q0 + r0, q0 + r0 + 8};
            float acc_s[BN / 2];
            float acc_o[D / 2];
#pragma unroll
            for (int i = 0; i < D / 2; ++i) acc_o[i] = 0.0f;
            float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};  // running max (scaled, log2 units) and sum
            unsigned pa[BN / 16][4];                                // P as the A operand, per k16 step of keys
            auto stage = [&](int j) { return ac::stage_of<STAGES>(j0 + j); };
            auto phase = [&](int j) { return ac::phase_of<STAGES>(j0 + j); };
            auto k_tile = [&](int j) { return smem + Q_ELEMS + stage(j) * 2 * KV_ELEMS; };
            auto v_tile = [&](int j) { return k_tile(j) + KV_ELEMS; };
            // S of tile j is done: its K goes back to the producer, except (HOLD_LAST) the unit's last, whose stage
            // stages O (below); after the unit's last S (PERSISTENT), Q's buffer goes back for the next unit's Q
            auto k_done = [&](int j) {
                if (!HOLD_LAST || j != kv_tiles - 1) release(&empty_k[stage(j)]);
                if (PERSISTENT && j == kv_tiles - 1) release(&empty_q);
            };
            float rescale[2];
            // the softmax for each sign of the scale (the row maxima of the raw scores are maxima for a positive
            // one, minima for a negative one); the branch is uniform
            auto softmax = [&](int j) {  // j: the block's own count of its key tiles
                if (scale_log2 > 0.0f)
                    softmax_tile<CAUSAL, true, BN, CHAINS>(acc_s, m, l, rescale, scale_log2, kv_first + j, lane, k_len,
                                                           q0 + 64 * w, qrow);
                else
                    softmax_tile<CAUSAL, false, BN, CHAINS>(acc_s, m, l, rescale, scale_log2, kv_first + j, lane, k_len,
                                                            q0 + 64 * w, qrow);
            };
            if constexpr (!OVERLAP) {
                for (int j = 0; j < kv_tiles; ++j) {
                    const int s = stage(j);
                    ac::mbarrier_wait_parity(&full_k[s], phase(j), {"attention_wgmma", "full_k", s});
                    AT_CONSUMER(j, K_READY);
                    ac::accumulator_fence(acc_s);
                    issue_qk<Tag, D, BM, BN>(acc_s, q_w, k_tile(j));
                    ac::wgmma_wait<0>();
                    ac::accumulator_fence(acc_s);
                    k_done(j);
                    AT_CONSUMER(j, S_DONE);
                    softmax(j);
                    ac::accumulator_fence(acc_o);
                    rescale_o<D>(acc_o, rescale);
                    pack_p<T, BN>(pa, acc_s);
                    AT_CONSUMER(j, SOFTMAX_DONE);
                    ac::mbarrier_wait_parity(&full_v[s], phase(j), {"attention_wgmma", "full_v", s});
                    AT_CONSUMER(j, V_READY);
                    ac::accumulator_fence(acc_o);
                    issue_pv<Tag, D, BN>(acc_o, pa, v_tile(j));
                    ac::wgmma_wait<0>();
                    ac::accumulator_fence(acc_o);
                    AT_CONSUMER(j, PV_DONE);
                    if (!HOLD_LAST || O_IN_K || j != kv_tiles - 1) release(&empty_v[s]);
                }
            } else {
                // Q K^T of tile j is issued together with P V of tile j - 1, and tile j's softmax runs while the
                // tensor cores do that P V; O is rescaled for tile j - 1's maximum between the two issues (under
                // Q K^T). K and V have their own stages' barriers, so this works from one stage up.
                // With PINGPONG each issue (the first Q K^T, each pair, the last P V: kv_tiles + 1 of them a unit)
                // waits for this warpgroup's turn and then hands the turn to the next (w + 1, round the ring).
                // RING_ONCE, the ring runs on across units (every warpgroup takes the same units, so as many turns):
                // the first turn of a unit follows the last of the unit before, and a warpgroup done with its last
                // P V starts its next unit while the others finish theirs; else the last warpgroup keeps the unit's
                // last turn and opens the ring again at the next unit (see turn_ring above).
                auto my_turn = [&] {
                    if constexpr (PINGPONG) ac::named_barrier_sync(TURN_BARRIER + w, 256);
                };
                int turns_left = kv_tiles + 1;  // (the last warpgroup's, where the ring closes a unit)
                auto pass_turn = [&] {
                    if constexpr (PINGPONG) {
                        if (RING_ONCE || w != CONSUMERS - 1 || --turns_left > 0)
                            ac::named_barrier_arrive(TURN_BARRIER + (w + 1) % CONSUMERS, 256);
                    }
                };
                if constexpr (PINGPONG && !RING_ONCE) turn_ring(true);
                ac::mbarrier_wait_parity(&full_k[stage(0)], phase(0), {"attention_wgmma", "full_k", stage(0)});
                AT_CONSUMER(0, K_READY);
                ac::accumulator_fence(acc_s);
                my_turn();
                issue_qk<Tag, D, BM, BN>(acc_s, q_w, k_tile(0));
                pass_turn();
                ac::wgmma_wait<0>();
                ac::accumulator_fence(acc_s);
                k_done(0);
                AT_CONSUMER(0, S_DONE);
                softmax(0);  // O is still zero: its rescale (0) is harmless
                pack_p<T, BN>(pa, acc_s);
                AT_CONSUMER(0, SOFTMAX_DONE);
                for (int j = 1; j < kv_tiles; ++j) {
                    const int s = stage(j), sp = stage(j - 1);
                    ac::mbarrier_wait_parity(&full_k[s], phase(j), {"attention_wgmma", "full_k", s});
                    AT_CONSUMER(j, K_READY);
                    ac::mbarrier_wait_parity(&full_v[sp], phase(j - 1), {"attention_wgmma", "full_v", sp});
                    AT_CONSUMER(j - 1, V_READY);
                    ac::accumulator_fence(acc_s);
                    ac::accumulator_fence(acc_o);
                    my_turn();
                    issue_qk<Tag, D, BM, BN>(acc_s, q_w, k_tile(j));
                    rescale_o<D>(acc_o, rescale);  // tile j - 1's factor, before its P V adds in
                    issue_pv<Tag, D, BN>(acc_o, pa, v_tile(j - 1));
                    pass_turn();
                    ac::wgmma_wait<1>();  // Q K^T of tile j is done; P V of tile j - 1 may still run
                    ac::accumulator_fence(acc_s);
                    k_done(j);
                    AT_CONSUMER(j, S_DONE);
                    softmax(j);
                    ac::wgmma_wait<0>();
                    ac::accumulator_fence(acc_o);
                    AT_CONSUMER(j - 1, PV_DONE);
                    release(&empty_v[sp]);
                    pack_p<T, BN>(pa, acc_s);
                    AT_CONSUMER(j, SOFTMAX_DONE);
                }
                const int last = kv_tiles - 1, sl = stage(last);
                ac::mbarrier_wait_parity(&full_v[sl], phase(last), {"attention_wgmma", "full_v", sl});
                AT_CONSUMER(last, V_READY);
                ac::accumulator_fence(acc_o);
                my_turn();
                rescale_o<D>(acc_o, rescale);
                issue_pv<Tag, D, BN>(acc_o, pa, v_tile(last));
                pass_turn();
                ac::wgmma_wait<0>();
                ac::accumulator_fence(acc_o);
                AT_CONSUMER(last, PV_DONE);
                if (!HOLD_LAST || O_IN_K) release(&empty_v[sl]);
            }

            // O is staged for its TMA stores in Q's buffer; PERSISTENT (Q's buffer already holds the next unit's Q),
            // in O's own buffer (O_BUFFER) or else in the unit's last K / V stage: its K tile once every consumer warp's
            // last Q K^T has read it (O_IN_K: empty_q's phase n), or the whole stage once every consumer warpgroup's last
            // products have (that tile or stage goes back to the producer when the stores have read O)
            const int sl = stage(kv_tiles - 1);  // (HOLD_LAST's)
            unsigned short* o_s = q_s;
            if constexpr (O_BUFFER) o_s = smem + Q_ELEMS + STAGES * 2 * KV_ELEMS;
            if constexpr (O_IN_K) {
                ac::mbarrier_wait_parity(&empty_q, n & 1u, {"attention_wgmma", "empty_q (staging O in K)", -1});
                o_s = k_tile(kv_tiles - 1);
            } else if constexpr (HOLD_LAST) {
                ac::named_barrier_sync(ALL_CONSUMERS_BARRIER, 128 * CONSUMERS);
                o_s = k_tile(kv_tiles - 1);
            }
            auto stage_done = [&] {
                if constexpr (HOLD_LAST) {
                    release(&empty_k[sl]);
                    if constexpr (!O_IN_K) release(&empty_v[sl]);
                }
            };
            j0 += kv_tiles;
            // a piece of a key-split item: the last to finish stores the merged rows
            bool store = true;
            if (merge && pieces > 1 && unit >= whole) {
                // the piece's place from its unit again: kept live through the key tiles instead (u.tail, u.piece),
                // they spilled, an LDL in the pieces' key loop at head dim 64 (SASS)
                const unsigned tail = (unit - whole) / static_cast<unsigned>(pieces);
                const int piece = static_cast<int>(unit - whole - tail * static_cast<unsigned>(pieces));
                __shared__ int last_piece[CONSUMERS];
                store = merge_pieces<D>(acc_o, m, l, split_counter, split_partial, static_cast<int>(tail), piece,
                                        pieces, CONSUMERS, w, t, last_piece);
            }
            if (store) {
                // lse (natural log) of the rows this quad holds, by its first thread
                if (lse != nullptr && lane % 4 == 0) {
                    float* out_lse = lse + (static_cast<long long>(u.b) * heads + u.h) * q_len;
#pragma unroll
                    for (int r = 0; r < 2; ++r)
                        if (qrow[r] < q_len) out_lse[qrow[r]] = (m[r] + __log2f(l[r])) * 0.69314718055994530942f;
                }
                // O / l into this warpgroup's rows of the staging buffer (its 64 rows of each panel: [64][128 bytes],
                // 128B-swizzled as the map's boxes), then one TMA store per panel. O_BUFFER: the warpgroup's stores of
                // its previous unit have read the buffer (issued a unit ago: no wait in practice)
                if constexpr (O_BUFFER) {
                    if (t == 0) ac::bulk_wait_group_read<0>();
                    ac::named_barrier_sync(1 + w, 128);
                }
                const float inv[2] = {l[0] > 0.0f ? ac::rcp_ftz(l[0]) : 0.0f, l[1] > 0.0f ? ac::rcp_ftz(l[1]) : 0.0f};
#pragma unroll
                for (int i = 0; i < D / 2; i += 2) {
                    const int r = (i >> 1) & 1;
                    const int row = 16 * (t / 32) + lane / 4 + 8 * r;  // within the warpgroup's 64 rows
                    const int col = 8 * (i >> 2) + 2 * (lane % 4);
                    const int p = col / PANEL, byte = 2 * (col % PANEL);
                    unsigned char* panel = reinterpret_cast<unsigned char*>(o_s + p * BM * PANEL + w * 64 * PANEL);
                    unsigned char* at = panel + row * 128 + ac::swizzle_128b(row, byte);
                    *reinterpret_cast<unsigned*>(at) = pack2<T>(acc_o[i] * inv[r], acc_o[i + 1] * inv[r]);
                }
                ac::fence_proxy_async_shared();  // these generic-proxy writes before the TMA engine reads them
                ac::named_barrier_sync(1 + w, 128);
                if (t == 0) {
#pragma unroll
                    for (int p = 0; p < PANELS; ++p) {
                        const int at[4] = {PANEL * p, q0 + 64 * w, u.h, u.b};
                        ac::tensor_store<4>(&map_o, at, o_s + p * BM * PANEL + w * 64 * PANEL);
                    }
                    ac::bulk_commit_group();
                    // the buffer stays alive until the stores have read it (O_BUFFER: waited for at the next epilogue,
                    // or as the block ends)
                    if constexpr (!O_BUFFER) ac::bulk_wait_group_read<0>();
                }
                if constexpr (HOLD_LAST) ac::named_barrier_sync(1 + w, 128);  // the stores have read O
            }
            stage_done();  // HOLD_LAST: the unit's last stage may be refilled
        }
    }
    if constexpr (RING_ONCE) turn_ring(false);
    if (O_BUFFER && t == 0) ac::bulk_wait_group_read<0>();  // the last stores have read the buffer before it goes
    AT_MARK(2, w == 0 && t == 0);
}
