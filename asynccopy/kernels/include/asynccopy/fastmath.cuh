// asynccopy/fastmath.cuh — named wrappers for the special-function-unit PTX instructions a softmax needs.
//
// What: ex2_ftz(x) = 2^x by one MUFU.EX2 (ex2.approx.ftz.f32: relative error about 2^-22, results below
// 2^-126 flushed to zero). exp2f compiles to the same instruction plus, without -ftz, a compare and two
// multiplies a call to take denormal results; a softmax whose weights are rounded to bf16 / f16 has no use
// for those, and in an attention kernel they are a third of the instructions per score.
// Use: #include <asynccopy/fastmath.cuh>; p = asynccopy::ex2_ftz(fmaf(s, scale_log2, -row_max)).
#pragma once

namespace asynccopy {

__device__ __forceinline__ float ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

}  // namespace asynccopy
