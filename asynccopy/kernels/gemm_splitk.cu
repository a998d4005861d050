// gemm_splitk.cu — the second half of a split-k GEMM: C = the sum of the f32 partial products a GEMM
// kernel wrote into a workspace, one [m][ldw] matrix per split of k, rounded once to C's dtype.
//
// What: c[i * ldc + j] = OutT(sum over s < splits of ws[s * split_stride + i * ldw + j]) for i < m, j < n.
// How: a grid-stride loop over groups of 4 columns of one row: per split one 16-byte load (ldw and
// split_stride are multiples of 4 floats, ws is 16-byte aligned; at the row's end, where fewer than 4
// columns are left, one load per column, so nothing the GEMM did not write is read), summed in split
// order (the result does not depend on the launch), then scalar stores (C of any alignment and
// leading dimension).
// Memory-bound: splits x m x n x 4 bytes read, m x n x sizeof(OutT) written.
// Constraints: ldw >= n, ldw % 4 == 0, split_stride % 4 == 0, ws 16-byte aligned.
// Run: asynccopy.gemm(a, b) on a shape with fewer output tiles than SMs (asynccopy.matmul launches it).
#include <asynccopy/gemm.cuh>

namespace ac = asynccopy;

template <class OutT>
__global__ void gemm_splitk_sum(const float* __restrict__ ws, long long split_stride, long long ldw, int splits,
                                OutT* __restrict__ c, long long ldc, int m, int n)
{
    const long long groups = (n + 3) / 4;  // column groups per row
    const long long total = groups * m;
    for (long long g = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; g < total;
         g += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long row = g / groups;
        const int col = static_cast<int>(g - row * groups) * 4;
        const float* p = ws + row * ldw + col;
        float out[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (col + 4 <= n) {
            for (int s = 0; s < splits; ++s) {
                const float4 v = *reinterpret_cast<const float4*>(p + s * split_stride);
                out[0] += v.x, out[1] += v.y, out[2] += v.z, out[3] += v.w;
            }
        } else {  // the row's last columns: only those the GEMM wrote are read
            for (int s = 0; s < splits; ++s)
                for (int j = 0; j < n - col; ++j) out[j] += p[s * split_stride + j];
        }
        OutT* q = c + row * ldc + col;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (col + j < n) q[j] = ac::from_float<OutT>(out[j]);
    }
}
