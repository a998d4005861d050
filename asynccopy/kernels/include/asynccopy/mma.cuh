// asynccopy/mma.cuh — one named wrapper per warp-level matrix PTX instruction (sm_80+): ldmatrix and
// mma.sync.
//
// What: ldmatrix reads 8x8 matrices of 16-bit elements from shared memory straight into the register
// fragments mma.sync takes; mma.sync.aligned.m16n8k16 multiplies a 16x16 A by a 16x8 B (bf16 or f16)
// into a 16x8 f32 accumulator. Both are issued by the 32 threads of a warp together, converged.
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16" and "ldmatrix"), lane = the thread's
// index in its warp, g = lane / 4 (its group), q = lane % 4 (its place in the group). A 32-bit
// register holds two 16-bit elements, the lower-indexed one in the low half:
//   ldmatrix .x4    lanes 8i .. 8i + 7 give the addresses of rows 0..7 of matrix i (16 bytes each,
//                   16-byte aligned, any row order in memory); register i of every lane receives
//                   row g, elements 2q and 2q + 1, of matrix i.
//   ldmatrix .trans register i receives element 2q and 2q + 1 of *column* g of matrix i (rows 2q and
//                   2q + 1, column g): the transpose, so a tile stored with the other dimension
//                   contiguous arrives in the same fragment.
//   mma A (16 x 16, row: [m][k], 4 registers)  a0 = (g, 2q..2q+1)  a1 = (g+8, 2q..2q+1)
//                                              a2 = (g, 2q+8..2q+9)  a3 = (g+8, 2q+8..2q+9)
//   mma B (16 x 8, col: [k][n], 2 registers)   b0 = (k 2q..2q+1, n g)  b1 = (k 2q+8..2q+9, n g)
//   mma C / D (16 x 8 f32, 4 registers)        c0, c1 = (g, 2q), (g, 2q+1)  c2, c3 = (g+8, 2q), (g+8, 2q+1)
// So one ldmatrix .x4 of the four 8x8 quarters of a 16x16 A tile, in the order (m 0-7, k 0-7),
// (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15), is exactly a0..a3; and one of the quarters
// (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15) of B is b0, b1 of two n8 tiles.
// ldmatrix without .trans takes rows that run along k (a K-major tile), .trans rows that run along m
// or n (an MN-major tile).
// The asm statements are volatile: the compiler keeps them in program order with __syncthreads() and
// the cp.async wrappers, so an ldmatrix stays between the barrier that publishes a stage and the one
// after which the stage is refilled.
// Use: #include <asynccopy/mma.cuh> in a kernel compiled for sm_80 or later.
#pragma once

#include <asynccopy/address.cuh>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace asynccopy {

// The element types mma multiplies, as template tags. Declared only: a tag needs no definition, and
// asynccopy/wgmma.cuh defines the same two, so both headers may share a translation unit in any order.
struct Bf16;
struct F16;
template <class T>
struct MmaType;  // a storage type's tag: MmaType<__nv_bfloat16>::tag is Bf16
template <>
struct MmaType<__nv_bfloat16> {
    using tag = Bf16;
};
template <>
struct MmaType<__half> {
    using tag = F16;
};

// ldmatrix.sync.aligned.m8n8.x4.shared.b16: four 8x8 matrices; this lane's row address is `row`.
// r[i] = matrix i's row g, elements 2q, 2q + 1 (see the layouts above).
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: r[i] = matrix i's rows 2q, 2q + 1 of column g.
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(row)));
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d += A (a0..a3) x B (b0, b1), with
// the fragment layouts above; d is C on the way in and D on the way out (f32, 16 x 8).
template <class TAG>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]);

template <>
__device__ __forceinline__ void mma_m16n8k16<Bf16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <>
__device__ __forceinline__ void mma_m16n8k16<F16>(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

}  // namespace asynccopy
