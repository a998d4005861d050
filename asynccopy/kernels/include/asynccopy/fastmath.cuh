// asynccopy/fastmath.cuh — named wrappers for the special-function-unit PTX instructions a softmax needs.
//
// What: ex2_ftz(x) = 2^x by one MUFU.EX2 (ex2.approx.ftz.f32: relative error about 2^-22, results below
// 2^-126 flushed to zero). exp2f compiles to the same instruction plus, without -ftz, a compare and two
// multiplies a call to take denormal results; a softmax whose weights are rounded to bf16 / f16 has no use
// for those, and in an attention kernel they are a third of the instructions per score.
// rcp_ftz(x) = 1 / x by one MUFU.RCP (rcp.approx.ftz.f32: relative error about 2^-23, denormals flushed).
// 1.0f / x compiles to the same instruction plus, for IEEE rounding, a range test and a call to a slow path
// for large and tiny x: a call inside a kernel's loop keeps the values live across it out of the uniform
// registers. A softmax's row sum (at least 1 where any key is seen) has no use for that path.
// Use: #include <asynccopy/fastmath.cuh>; p = asynccopy::ex2_ftz(fmaf(s, scale_log2, -row_max)).
#pragma once

namespace asynccopy {

__device__ __forceinline__ float ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float rcp_ftz(float x)
{
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace asynccopy
