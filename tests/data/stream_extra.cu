// stream_extra.cu — a TEST-ONLY tile-stream mechanism (tests/conftest.py registers its record): adding a
// mechanism is one record (asynccopy.mechanism.register) and one kernel like this one.
//
// test_ldgsts: the tile-stream workload (asynccopy/tile_stream.cuh) through STAGES buffers, each thread
// copying its 16-byte chunks of a tile with cp.async.ca, TWO chunks per loop step (hence its record's
// rule: TILE % (8 * THREADS) == 0), one commit group per tile (an empty one past the block's range),
// wait_group<STAGES - 2> and a barrier before a tile is read. One stage: issue, wait, barrier, compute.
// Boundary tiles are zero-filled through the copy's source size, as stream_ldgsts does.
// The template takes what its record's `template` names, in order: threads, tile, stages.
#include <asynccopy/ldgsts.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tile_stream.cuh>
#include <asynccopy/trace.cuh>

namespace ac = asynccopy;
namespace acs = asynccopy::stream;
using u64 = unsigned long long;

template <int THREADS, int TILE>
__device__ __forceinline__ void extra_issue(float* buf, const float* __restrict__ in, u64 k, u64 my_tiles, u64 n)
{
    constexpr int CHUNKS = TILE / 4;  // 16-byte chunks of a tile
    static_assert(CHUNKS % (2 * THREADS) == 0, "every thread copies its chunks two at a time");
    if (k < my_tiles) {
        const u64 t = ac::tile_of_block(k);
        const u64 start = t * TILE;
        const u64 valid = acs::valid_elems<TILE>(t, n);
#pragma unroll
        for (int c = 0; c < CHUNKS / THREADS; c += 2) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int e = (threadIdx.x + (c + h) * THREADS) * 4;
                const unsigned src_bytes = e >= valid ? 0u : 4u * static_cast<unsigned>(valid - e < 4 ? valid - e : 4);
                const float* src = src_bytes ? in + start + e : in;  // no out-of-bounds pointer is formed
                ac::cp_async<16, false>(buf + e, src, src_bytes);
            }
        }
    }
    ac::commit_group();  // converged, empty past the block's range
}

template <int THREADS, int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS)
    stream_extra_ldgsts(const float* __restrict__ in, float* __restrict__ out, u64 n, int intensity AC_TRACE_PARAM)
{
    float* smem = ac::dynamic_smem<float>();  // [STAGES][TILE] f32
    const u64 n_tiles = (n + TILE - 1) / TILE;
    const u64 my_tiles = ac::tiles_of_block(n_tiles);
    AC_TRACE_BEGIN(threadIdx.x == 0);
    if constexpr (STAGES == 1) {
        for (u64 k = 0; k < my_tiles; ++k) {
            __syncthreads();  // every thread has read the previous tile
            AC_TRACE(k, ISSUED);
            extra_issue<THREADS, TILE>(smem, in, k, my_tiles, n);
            ac::wait_group<0>();
            __syncthreads();
            AC_TRACE(k, READY);
            AC_TRACE(k, COMPUTE_START);
            acs::compute_tile<THREADS, TILE>(smem, out, ac::tile_of_block(k), n, intensity);
            AC_TRACE(k, COMPUTE_END);
        }
    } else {
        for (int s = 0; s < STAGES - 1; ++s) {
            AC_TRACE(s, ISSUED);
            extra_issue<THREADS, TILE>(smem + s * TILE, in, s, my_tiles, n);
        }
        for (u64 k = 0; k < my_tiles; ++k) {
            ac::wait_group<STAGES - 2>();  // this thread's copies of tile k have landed
            __syncthreads();               // ... and everyone's; tile k - 1 has been read by all
            AC_TRACE(k, READY);
            const u64 next = k + STAGES - 1;
            AC_TRACE(next, ISSUED);
            extra_issue<THREADS, TILE>(smem + ac::stage_of<STAGES>(next) * TILE, in, next, my_tiles, n);
            AC_TRACE(k, COMPUTE_START);
            acs::compute_tile<THREADS, TILE>(smem + ac::stage_of<STAGES>(k) * TILE, out, ac::tile_of_block(k), n,
                                             intensity);
            AC_TRACE(k, COMPUTE_END);
        }
    }
    ac::wait_all();  // nothing in flight into shared memory when the block exits
    AC_TRACE_END(threadIdx.x == 0);
}
