// asynccopy/wgmma.cuh — one named wrapper per warpgroup matrix-multiply PTX instruction (sm_90a).
//
// What: wgmma.mma_async — D (f32, in registers) += A (bf16/f16, shared memory or registers) x B
// (bf16/f16, shared memory), m64nNk16, issued by the 4 warps of a warpgroup together (threads 128w .. 128w + 127, all
// of them, converged) — and the fence / commit / wait that order it, the shared-memory matrix
// descriptor, and setmaxnreg.
// Operands in shared memory are described by a 64-bit descriptor (make_desc_*): the start address,
// the leading- and stride-dimension byte offsets, and the swizzle the tile was written with. For
// tiles TMA loaded with the 128B swizzle (1024-byte aligned, rows of 64 bf16 = 128 bytes):
//   K-major ([rows][64 k] : k contiguous)   make_desc_k_major(tile): SBO = 1024 (8 rows), LBO unused;
//                                           the k-th step of 16 starts 32 bytes further
//   MN-major ([k][64 mn] panels)            make_desc_mn_major(tile, panel_bytes): SBO = 1024 (8 k),
//                                           LBO = the distance between 64-wide mn panels; the k-th
//                                           step of 16 starts 16 rows (2048 bytes) further
// and the instruction's transpose flag says which (TRANS = 0: K-major, 1: MN-major; bf16/f16 only).
// Accumulator layout (m64nN f32, thread t of the warpgroup, register i of N/2):
//   row = 16 * (t / 32) + (t % 32) / 4 + 8 * ((i >> 1) & 1),  col = 8 * (i >> 2) + 2 * (t % 4) + (i & 1).
// Ordering: wgmma_fence() before the first wgmma and whenever the accumulators were touched by other
// instructions; wgmma_commit() closes a group; wgmma_wait<N>() returns when at most N groups are pending,
// after which the accumulators may be read and the shared operands of the finished groups reused.
// accumulator_fence(d) keeps the compiler from moving reads or writes of d across those asm statements
// (they do not name d).
// Use: #include <asynccopy/wgmma.cuh> in a kernel compiled for sm_90a (asynccopy.compile(arch="sm_90a")).
#pragma once

#include <asynccopy/address.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace asynccopy {

struct Bf16 {};  // the element types wgmma multiplies, as template tags
struct F16 {};
template <class T>
struct WgmmaType;  // a storage type's tag: WgmmaType<__nv_bfloat16>::tag is Bf16
template <>
struct WgmmaType<__nv_bfloat16> {
    using tag = Bf16;
};
template <>
struct WgmmaType<__half> {
    using tag = F16;
};

// wgmma.fence.sync.aligned
__device__ __forceinline__ void wgmma_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// wgmma.commit_group.sync.aligned
__device__ __forceinline__ void wgmma_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

// wgmma.wait_group.sync.aligned N
template <int N>
__device__ __forceinline__ void wgmma_wait()
{
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// An empty asm that reads and writes every accumulator register: the compiler keeps d's accesses on
// their side of the fences and waits above.
template <int R>
__device__ __forceinline__ void accumulator_fence(float (&d)[R])
{
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// setmaxnreg.{inc,dec}.sync.aligned.u32 REGS: move registers between the warpgroups of a block. The
// kernel needs a register cap at entry (__launch_bounds__(threads, 1)) for it to take effect.
template <int REGS>
__device__ __forceinline__ void setmaxnreg_inc()
{
    static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg takes 24..256, a multiple of 8");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

template <int REGS>
__device__ __forceinline__ void setmaxnreg_dec()
{
    static_assert(REGS >= 24 && REGS <= 256 && REGS % 8 == 0, "setmaxnreg takes 24..256, a multiple of 8");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

// The shared-memory matrix descriptor: start address, leading- and stride-dimension byte offsets (all
// in 16-byte units, 14 bits each) and the layout: 1 = 128B swizzle (2 = 64B, 3 = 32B, 0 = none).
__device__ __forceinline__ unsigned long long make_desc(const void* smem, unsigned lbo_bytes, unsigned sbo_bytes,
                                                        unsigned layout)
{
    const unsigned long long addr = smem_addr(smem);
    return ((addr & 0x3FFFFull) >> 4) | (static_cast<unsigned long long>((lbo_bytes & 0x3FFFFu) >> 4) << 16) |
           (static_cast<unsigned long long>((sbo_bytes & 0x3FFFFu) >> 4) << 32) |
           (static_cast<unsigned long long>(layout) << 62);
}

constexpr unsigned SWIZZLE_128B_LAYOUT = 1;

// A K-major tile of rows of 64 two-byte elements (128 bytes), 128B-swizzled by TMA, 1024-byte aligned.
__device__ __forceinline__ unsigned long long make_desc_k_major(const void* tile)
{
    return make_desc(tile, 16, 1024, SWIZZLE_128B_LAYOUT);
}

// An MN-major tile: panels of [k][64 mn] two-byte elements, 128B-swizzled, panel_bytes apart.
__device__ __forceinline__ unsigned long long make_desc_mn_major(const void* tile, unsigned panel_bytes)
{
    return make_desc(tile, panel_bytes, 1024, SWIZZLE_128B_LAYOUT);
}

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, desc_a, desc_b, scale_d, 1, 1, TRANS_A, TRANS_B:
// d = A x B + (scale_d ? d : 0). Every thread of the warpgroup passes the same descriptors.
// Wgmma<N, Tag>::mma for N = 64, 128, 176, 256 and Tag = Bf16, F16: one specialization each, written by the
// macros below (the accumulator operands "+f"(d[0]) ... "+f"(d[N / 2 - 1]) in runs of 8, the register
// list %0 ... %(N / 2 - 1) of the asm text per N).
template <int N, class T>
struct Wgmma;

#define ASYNCCOPY_ACC8(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), \
    "+f"(d[o + 5]), "+f"(d[o + 6]), "+f"(d[o + 7])
#define ASYNCCOPY_ACC32(o) ASYNCCOPY_ACC8(o), ASYNCCOPY_ACC8(o + 8), ASYNCCOPY_ACC8(o + 16), ASYNCCOPY_ACC8(o + 24)
#define ASYNCCOPY_ACC_32 ASYNCCOPY_ACC32(0)
#define ASYNCCOPY_ACC_64 ASYNCCOPY_ACC32(0), ASYNCCOPY_ACC32(32)
#define ASYNCCOPY_ACC_88 ASYNCCOPY_ACC32(0), ASYNCCOPY_ACC32(32), ASYNCCOPY_ACC8(64), ASYNCCOPY_ACC8(72), ASYNCCOPY_ACC8(80)
#define ASYNCCOPY_ACC_128 ASYNCCOPY_ACC32(0), ASYNCCOPY_ACC32(32), ASYNCCOPY_ACC32(64), ASYNCCOPY_ACC32(96)

#define ASYNCCOPY_REGS_32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ASYNCCOPY_REGS_64 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define ASYNCCOPY_REGS_88 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87"
#define ASYNCCOPY_REGS_128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// REGS: the accumulators' count (N / 2); DA, DB, P, TA, TB: the operand numbers of the two descriptors,
// scale_d (the predicate's source) and the two transposes, REGS .. REGS + 4 in that order.
#define ASYNCCOPY_WGMMA(N, REGS, TAG, TYPE, P, DA, DB, TA, TB)                                                    \
    template <>                                                                                                  \
    struct Wgmma<N, TAG> {                                                                                       \
        template <int TRANS_A, int TRANS_B>                                                                      \
        __device__ __forceinline__ static void mma(float (&d)[REGS], unsigned long long desc_a,                   \
                                                   unsigned long long desc_b, int scale_d)                       \
        {                                                                                                        \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                        \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " "                     \
                         "{" ASYNCCOPY_REGS_##REGS "}, %" #DA ", %" #DB ", p, 1, 1, %" #TA ", %" #TB ";\n}\n"     \
                         : ASYNCCOPY_ACC_##REGS                                                                  \
                         : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));                   \
        }                                                                                                        \
    };

ASYNCCOPY_WGMMA(64, 32, Bf16, "bf16", 34, 32, 33, 35, 36)
ASYNCCOPY_WGMMA(128, 64, Bf16, "bf16", 66, 64, 65, 67, 68)
ASYNCCOPY_WGMMA(176, 88, Bf16, "bf16", 90, 88, 89, 91, 92)
ASYNCCOPY_WGMMA(256, 128, Bf16, "bf16", 130, 128, 129, 131, 132)
ASYNCCOPY_WGMMA(64, 32, F16, "f16", 34, 32, 33, 35, 36)
ASYNCCOPY_WGMMA(128, 64, F16, "f16", 66, 64, 65, 67, 68)
ASYNCCOPY_WGMMA(176, 88, F16, "f16", 90, 88, 89, 91, 92)
ASYNCCOPY_WGMMA(256, 128, F16, "f16", 130, 128, 129, 131, 132)

// wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, {a0, a1, a2, a3}, desc_b, scale_d, 1, 1, TRANS_B:
// d = A x B + (scale_d ? d : 0) with A (64 x 16) in registers. Each warp w of the warpgroup holds rows
// 16w .. 16w + 15 in the layout of mma.sync m16n8k16's A fragment (lane l, g = l / 4, q = l % 4; two
// elements per register, the lower k in the low half): a0 (row g, k 2q, 2q + 1), a1 (row g + 8, k 2q,
// 2q + 1), a2 (row g, k 2q + 8, 2q + 9), a3 (row g + 8, k 2q + 8, 2q + 9). That is the accumulator
// layout of registers 8c .. 8c + 7 of an m64nN product, columns 16c .. 16c + 15, rounded to T in pairs:
// a product's result (an attention score tile) is the next product's A operand without leaving the
// registers. The registers must not change until the group is waited for.
template <int N, class T>
struct WgmmaRS;

// REGS: the accumulators' count (N / 2); A: the four A registers' operand numbers; DB, P, TB: the
// descriptor's, scale_d's and the transpose's.
#define ASYNCCOPY_WGMMA_RS(N, REGS, TAG, TYPE, A, DB, P, TB)                                                      \
    template <>                                                                                                  \
    struct WgmmaRS<N, TAG> {                                                                                     \
        template <int TRANS_B>                                                                                   \
        __device__ __forceinline__ static void mma(float (&d)[REGS], const unsigned (&a)[4],                      \
                                                   unsigned long long desc_b, int scale_d)                       \
        {                                                                                                        \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P ", 0;\n"                                        \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." TYPE "." TYPE " "                     \
                         "{" ASYNCCOPY_REGS_##REGS "}, {" A "}, %" #DB ", p, 1, 1, %" #TB ";\n}\n"              \
                         : ASYNCCOPY_ACC_##REGS                                                                  \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(TRANS_B)); \
        }                                                                                                        \
    };

ASYNCCOPY_WGMMA_RS(64, 32, Bf16, "bf16", "%32, %33, %34, %35", 36, 37, 38)
ASYNCCOPY_WGMMA_RS(128, 64, Bf16, "bf16", "%64, %65, %66, %67", 68, 69, 70)
ASYNCCOPY_WGMMA_RS(64, 32, F16, "f16", "%32, %33, %34, %35", 36, 37, 38)
ASYNCCOPY_WGMMA_RS(128, 64, F16, "f16", "%64, %65, %66, %67", 68, 69, 70)

#undef ASYNCCOPY_WGMMA_RS
#undef ASYNCCOPY_WGMMA
#undef ASYNCCOPY_REGS_32
#undef ASYNCCOPY_REGS_64
#undef ASYNCCOPY_REGS_88
#undef ASYNCCOPY_REGS_128
#undef ASYNCCOPY_ACC_32
#undef ASYNCCOPY_ACC_64
#undef ASYNCCOPY_ACC_88
#undef ASYNCCOPY_ACC_128
#undef ASYNCCOPY_ACC32
#undef ASYNCCOPY_ACC8

}  // namespace asynccopy
