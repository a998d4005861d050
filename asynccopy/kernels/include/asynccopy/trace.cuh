// asynccopy/trace.cuh — timestamps of each tile's stage events, compiled in only on request.
//
// Built with -DASYNCCOPY_TRACE=1, a kernel takes one more parameter (AC_TRACE_PARAM) and records,
// for its first MAX_TILES tiles, when a tile's copy was issued, when its data was ready, when its
// compute started and ended, and when its buffer was released. Built without it, AC_TRACE_PARAM and
// every AC_TRACE* expand to nothing: the kernel is the same binary as one that never heard of traces.
// Record layout, per block b (u64 words): [b * STRIDE + 0] %globaltimer at the block's start,
// [+1] clock64 at its start, [+2] %globaltimer at its end, [+3] clock64 at its end, then
// [+4 + tile * EVENTS + event] = clock64 of the event (0: not recorded). Clock ticks are converted to
// nanoseconds per block from the two %globaltimer readings (asynccopy.trace.decode).
#pragma once

#include <asynccopy/debug.cuh>  // globaltimer()

namespace asynccopy {
namespace trace {

enum Event { ISSUED = 0, READY = 1, COMPUTE_START = 2, COMPUTE_END = 3, RELEASED = 4, EVENTS = 5 };
constexpr int MAX_TILES = 64;
constexpr int HEADER = 4;
constexpr int STRIDE = HEADER + MAX_TILES * EVENTS;

__device__ __forceinline__ void record(unsigned long long* buf, unsigned long long tile, int event, bool who)
{
    if (who && tile < MAX_TILES)
        buf[blockIdx.x * static_cast<unsigned long long>(STRIDE) + HEADER + tile * EVENTS + event] = clock64();
}

__device__ __forceinline__ void mark(unsigned long long* buf, int at, bool who)
{
    if (who) {
        unsigned long long* h = buf + blockIdx.x * static_cast<unsigned long long>(STRIDE) + at;
        h[0] = globaltimer();
        h[1] = clock64();
    }
}

// Kernels with their own event sets (attention_wgmma.cu) keep the header above and lay out their own
// words after it: a record per block of a 1-, 2- or 3-D grid (its linear index), STRIDE words long.
__device__ __forceinline__ unsigned long long linear_block()
{
    return blockIdx.x + gridDim.x * (blockIdx.y + static_cast<unsigned long long>(gridDim.y) * blockIdx.z);
}

template <int STRIDE_WORDS>
__device__ __forceinline__ void stamp(unsigned long long* buf, int word, bool who)
{
    if (who) buf[linear_block() * STRIDE_WORDS + HEADER + word] = clock64();
}

template <int STRIDE_WORDS>
__device__ __forceinline__ void mark_block(unsigned long long* buf, int at, bool who)
{
    if (who) {
        unsigned long long* h = buf + linear_block() * STRIDE_WORDS + at;
        h[0] = globaltimer();
        h[1] = clock64();
    }
}

}  // namespace trace
}  // namespace asynccopy

#if defined(ASYNCCOPY_TRACE) && ASYNCCOPY_TRACE
#define AC_TRACE_PARAM , unsigned long long* __restrict__ ac_trace
#define AC_TRACE_ARG , ac_trace  // hands the trace buffer on to a device function declared with AC_TRACE_PARAM
#define AC_TRACE_BY(who, tile, event) asynccopy::trace::record(ac_trace, (tile), asynccopy::trace::event, (who))
#define AC_TRACE_BEGIN(who) asynccopy::trace::mark(ac_trace, 0, (who))
#define AC_TRACE_END(who) asynccopy::trace::mark(ac_trace, 2, (who))
#else
#define AC_TRACE_PARAM
#define AC_TRACE_ARG
#define AC_TRACE_BY(who, tile, event) ((void)0)
#define AC_TRACE_BEGIN(who) ((void)0)
#define AC_TRACE_END(who) ((void)0)
#endif
// The usual recorder: thread 0 of the block.
#define AC_TRACE(tile, event) AC_TRACE_BY(threadIdx.x == 0, tile, event)
