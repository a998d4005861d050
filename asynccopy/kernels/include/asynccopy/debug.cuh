// asynccopy/debug.cuh — bounded barrier waits: a deadlock becomes a message and a trap.
//
// Every barrier wait in asynccopy's kernels goes through bounded_wait() with a WaitSite naming the
// kernel, the barrier and its index. Built normally, bounded_wait() is the plain spin loop and the
// site's strings are never emitted. Built with -DASYNCCOPY_HANG_TIMEOUT_NS=<ns> (Python: set the
// environment variable ASYNCCOPY_HANG_TIMEOUT_MS before compiling), a wait that has not completed
// after that long prints
//   asynccopy: barrier wait timed out after 100 ms: kernel stream_ws_ldgsts, barrier full[2], waiting
//   for phase parity 1, block (3,0,0) thread 64
// and executes trap: the launch fails (CUDA_ERROR_LAUNCH_FAILED or similar, the context is lost)
// instead of hanging the GPU. A wrong arrival count, a missing expect_tx or a flipped parity all end
// this way.
// Use: ac::bounded_wait([&] { return try_wait(...); }, ac::WaitSite{"kernel", "barrier", index}, parity);
#pragma once

#ifndef ASYNCCOPY_HANG_TIMEOUT_NS
#define ASYNCCOPY_HANG_TIMEOUT_NS 0
#endif

namespace asynccopy {

// Where a thread waits: printed when the wait times out. index < 0: a barrier that is not an array.
struct WaitSite {
    const char* kernel;
    const char* barrier;
    int index;
};

// parity: the phase parity waited for; NO_PARITY for waits on an arrival token.
constexpr unsigned NO_PARITY = ~0u;

// The GPU's nanosecond timer (%globaltimer): the hang check's clock, and the traces' (trace.cuh).
__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

#if ASYNCCOPY_HANG_TIMEOUT_NS > 0

__device__ __noinline__ void report_hang(WaitSite site, unsigned parity, unsigned long long waited_ns)
{
    char index[16] = "";
    if (site.index >= 0) {  // "[index]" without snprintf (not in device code)
        char digits[12];
        int n = 0, v = site.index;
        do {
            digits[n++] = static_cast<char>('0' + v % 10);
            v /= 10;
        } while (v && n < 11);
        int k = 0;
        index[k++] = '[';
        while (n) index[k++] = digits[--n];
        index[k++] = ']';
        index[k] = '\0';
    }
    if (parity == NO_PARITY)
        printf("asynccopy: barrier wait timed out after %llu ms: kernel %s, barrier %s%s, waiting on an arrival "
               "token, block (%d,%d,%d) thread %d\n",
               waited_ns / 1000000ull, site.kernel, site.barrier, index, blockIdx.x, blockIdx.y, blockIdx.z,
               threadIdx.x);
    else
        printf("asynccopy: barrier wait timed out after %llu ms: kernel %s, barrier %s%s, waiting for phase parity "
               "%u, block (%d,%d,%d) thread %d\n",
               waited_ns / 1000000ull, site.kernel, site.barrier, index, parity, blockIdx.x, blockIdx.y, blockIdx.z,
               threadIdx.x);
    __trap();
}

template <class TryWait>
__device__ __forceinline__ void bounded_wait(TryWait try_wait, WaitSite site, unsigned parity)
{
    if (try_wait()) return;
    const unsigned long long start = globaltimer();
    while (!try_wait()) {
        const unsigned long long waited = globaltimer() - start;
        if (waited > static_cast<unsigned long long>(ASYNCCOPY_HANG_TIMEOUT_NS)) report_hang(site, parity, waited);
    }
}
#else
template <class TryWait>
__device__ __forceinline__ void bounded_wait(TryWait try_wait, WaitSite, unsigned)
{
    while (!try_wait()) {
    }
}
#endif

}  // namespace asynccopy
