// util.cu — device-side helpers for the benchmark harness and the tests.
//
// fill_uniform: x[i] = a float in [-1, 1) from a hash of (seed, i) — fresh random inputs of any size
//               without a host round trip (splitmix64 finalizer; 24 random mantissa bits).
// fill_value:   x[i] = value — poisons an output before a run so that unwritten elements show.
// hold:         one thread spins on the global timer for `ns` nanoseconds: queued ahead of a batch of
//               timed launches, it keeps the GPU busy while the host queues them, so the events
//               around each launch time the GPU's work, not the host's Python between launches.
// Grid-stride loops; any grid size works.
using u64 = unsigned long long;

__device__ __forceinline__ u64 splitmix64(u64 z)
{
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

extern "C" __global__ void fill_uniform(float* __restrict__ x, u64 n, u64 seed)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) {
        const u64 r = splitmix64(seed * 0x632BE59BD9B4E019ull + i);
        x[i] = static_cast<float>(static_cast<unsigned>(r >> 40)) * (2.0f / 16777216.0f) - 1.0f;
    }
}

extern "C" __global__ void fill_value(float* __restrict__ x, u64 n, float value)
{
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) x[i] = value;
}

extern "C" __global__ void hold(u64 ns)
{
    u64 start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
