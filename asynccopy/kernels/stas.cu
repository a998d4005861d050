// stas.cu — a ring of st.async (STAS) messages between the blocks of a cluster, and the same exchange
// through global memory.
//
// The blocks of a cluster form a ring: every round, block `rank` sends a message of MSG bytes from its
// registers into the distributed shared memory of block next = (rank + 1) % C with st.async
// (cuda::ptx::st_async, VEC = 4, 8 or 16 bytes per instruction), and receives the message of block
// prev = (rank + C - 1) % C. SLOTS receive buffers per block (1: a send waits until next has read
// the previous round's message; 2: double buffered; 3-4: more rounds in flight). Per block and slot s:
//   filled[s]: 1 arrival (this block's own arrive.expect_tx of MSG bytes) + the MSG bytes that prev's
//              st.async complete on it (space_cluster from prev's side, space_shared from ours);
//   ready[s]:  1 arrival, remote, from next (mbarrier.arrive.release.cluster on our barrier mapped
//              into next's view) once next has consumed what we put in its slot s.
// Round r uses slot s = r % SLOTS in phase (r / SLOTS) & 1:
//   wait ready[s] for round r - SLOTS (next has read that slot) → st.async the message into next's
//   slot s → arrive.expect_tx(filled[s], MSG) → wait filled[s] (prev's message landed) → check every
//   word → __syncthreads → one thread arrives on prev's ready[s].
// cluster.sync() at the start (every block's barriers are initialized before anyone maps them) and
// at the end (no block leaves while a neighbour may still write into it or arrive on its barriers).
// Waits on barriers completed from another block acquire at cluster scope.
// Word w of round r from block src of cluster c: ring_word(seed, c, src, r) ^ (w * 0x9E3779B1): every
// receiver checks every word and counts mismatches into *errors; corrupt_round flips bit 0 of word 0
// of rank 0's message in that round (the checker's own test); `last` (optional) receives each
// block's last message.
// global_ring: the same protocol through global memory — messages in gbuf, `filled` / `ready` are
// round counters (st.release.gpu / ld.acquire.gpu), polled by one thread per block, data read with
// ld.global.cg (L2). Round r of a launch stores base + r + 1, so consecutive launches need no reset
// as long as base grows by `rounds` per launch. It is launched as a cluster too, so that the spinning
// blocks are co-resident.
// Constraints: MSG % 16 == 0; SLOTS * MSG bytes of dynamic shared memory (stas_ring); CC 9.0.
#include <asynccopy/cluster.cuh>
#include <asynccopy/debug.cuh>
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>

#include <cooperative_groups.h>
#include <cuda/ptx>

namespace ac = asynccopy;
namespace cg = cooperative_groups;

__device__ __forceinline__ unsigned ring_word(unsigned seed, unsigned cluster, unsigned src, unsigned round)
{
    unsigned h = seed ^ (cluster * 0x27D4EB2Fu) ^ ((src + 1u) * 0xC2B2AE3Du) ^ (round * 0x85EBCA77u);
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}
constexpr unsigned WORD_MUL = 0x9E3779B1u;
constexpr unsigned NO_CORRUPTION = 0xFFFFFFFFu;

// Words w .. w + 3 of a message whose round word is `base` (both rings send and check these).
__device__ __forceinline__ uint4 ring_quad(unsigned base, unsigned w)
{
    return make_uint4(base ^ (w * WORD_MUL), base ^ ((w + 1) * WORD_MUL), base ^ ((w + 2) * WORD_MUL),
                      base ^ ((w + 3) * WORD_MUL));
}

// How many of the four received words v differ from words w .. w + 3 of the message `base`.
__device__ __forceinline__ unsigned bad_words(uint4 v, unsigned base, unsigned w)
{
    const uint4 want = ring_quad(base, w);
    return (v.x != want.x) + (v.y != want.y) + (v.z != want.z) + (v.w != want.w);
}

// One thread's VEC bytes of the message starting at word w, as st.async sends them.
template <int VEC>
__device__ __forceinline__ void send_chunk(unsigned* remote, unsigned w, unsigned base, unsigned flip,
                                           ac::mbarrier_t* bar)
{
    auto* remote_bar = reinterpret_cast<cuda::std::uint64_t*>(bar);  // libcu++'s barrier word type
    if constexpr (VEC == 4) {
        cuda::ptx::st_async(remote + w, (base ^ (w * WORD_MUL)) ^ flip, remote_bar);
    } else if constexpr (VEC == 8) {
        const unsigned long long v =
            static_cast<unsigned long long>((base ^ (w * WORD_MUL)) ^ flip) |
            (static_cast<unsigned long long>(base ^ ((w + 1) * WORD_MUL)) << 32);
        cuda::ptx::st_async(reinterpret_cast<unsigned long long*>(remote + w), v, remote_bar);
    } else {
        static_assert(VEC == 16, "st.async stores 4, 8 or 16 bytes");
        const uint4 q = ring_quad(base, w);
        const unsigned v[4] = {q.x ^ flip, q.y, q.z, q.w};
        cuda::ptx::st_async(remote + w, v, remote_bar);
    }
}

// Count the words of a received message (prev's, round r) that differ from what prev sent.
template <int THREADS>
__device__ __forceinline__ unsigned check_message(const unsigned* msg, unsigned words, unsigned base,
                                                  unsigned* __restrict__ last, bool is_last)
{
    unsigned bad = 0;
    for (unsigned w4 = threadIdx.x; w4 < words / 4; w4 += THREADS) {
        const uint4 v = reinterpret_cast<const uint4*>(msg)[w4];
        bad += bad_words(v, base, 4 * w4);
        if (is_last && last) reinterpret_cast<uint4*>(last + static_cast<unsigned long long>(blockIdx.x) * words)[w4] = v;
    }
    return bad;
}

__device__ __forceinline__ void add_errors(unsigned bad, unsigned* __restrict__ errors)
{
    for (int o = 16; o; o /= 2) bad += __shfl_xor_sync(0xFFFFFFFFu, bad, o);
    if (threadIdx.x % 32 == 0 && bad) atomicAdd(errors, bad);
}

template <int THREADS, int VEC, int SLOTS>
__device__ __forceinline__ void ring_body(unsigned msg_bytes, unsigned rounds, unsigned seed, unsigned corrupt_round,
                                          unsigned* __restrict__ errors, unsigned* __restrict__ last)
{
    static_assert(SLOTS >= 1 && SLOTS <= 4, "one to four receive buffers per block");
    unsigned* recv = ac::dynamic_smem<unsigned>();  // [SLOTS][msg_bytes / 4]
    __shared__ ac::mbarrier_t filled[SLOTS], ready[SLOTS];
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank(), size = cluster.num_blocks();
    const unsigned next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const unsigned cluster_id = blockIdx.x / size;  // 1D grid: a cluster's blocks are consecutive
    const unsigned words = msg_bytes / 4;
    if (threadIdx.x == 0) {
        for (int s = 0; s < SLOTS; ++s) {
            ac::mbarrier_init(&filled[s], 1);
            ac::mbarrier_init(&ready[s], 1);
        }
        ac::fence_barrier_init();  // release.cluster: visible to the other blocks after cluster.sync
    }
    cluster.sync();
    unsigned* next_recv = cluster.map_shared_rank(recv, next);
    ac::mbarrier_t* next_filled = cluster.map_shared_rank(&filled[0], next);
    ac::mbarrier_t* prev_ready = cluster.map_shared_rank(&ready[0], prev);
    unsigned bad = 0;
    for (unsigned r = 0; r < rounds; ++r) {
        const int s = ac::stage_of<SLOTS>(r);
        const unsigned use = r / SLOTS;
        if (use > 0)  // next has consumed the message we put into its slot s, SLOTS rounds ago
            ac::mbarrier_wait_parity_cluster(&ready[s], (use - 1) & 1u, {"stas_ring", "ready", s});
        const unsigned base = ring_word(seed, cluster_id, rank, r);
        const unsigned flip = (r == corrupt_round && rank == 0) ? 1u : 0u;
        for (unsigned c = threadIdx.x; c < msg_bytes / VEC; c += THREADS)
            send_chunk<VEC>(next_recv + s * words, c * (VEC / 4), base, c == 0 ? flip : 0u, next_filled + s);
        if (threadIdx.x == 0)
            cuda::ptx::mbarrier_arrive_expect_tx(cuda::ptx::sem_release, cuda::ptx::scope_cta, cuda::ptx::space_shared,
                                                 reinterpret_cast<cuda::std::uint64_t*>(&filled[s]), msg_bytes);
        ac::mbarrier_wait_parity_cluster(&filled[s], use & 1u, {"stas_ring", "filled", s});
        bad += check_message<THREADS>(recv + s * words, words, ring_word(seed, cluster_id, prev, r), last,
                                      r + 1 == rounds);
        __syncthreads();  // every thread has read slot s
        if (threadIdx.x == 0)
            ac::mbarrier_arrive_remote(prev_ready + s);
    }
    add_errors(bad, errors);
    cluster.sync();
}

// Launch-time cluster dimensions (LaunchConfig(cluster=C)).
template <int THREADS, int VEC, int SLOTS>
__global__ void __launch_bounds__(THREADS) stas_ring(unsigned msg_bytes, unsigned rounds, unsigned seed,
                                                     unsigned corrupt_round, unsigned* __restrict__ errors,
                                                     unsigned* __restrict__ last)
{
    ring_body<THREADS, VEC, SLOTS>(msg_bytes, rounds, seed, corrupt_round, errors, last);
}

// Compile-time cluster dimensions: launched with no cluster in the LaunchConfig.
template <int CLUSTER, int THREADS, int VEC, int SLOTS>
__global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS)
    stas_ring_fixed(unsigned msg_bytes, unsigned rounds, unsigned seed, unsigned corrupt_round,
                    unsigned* __restrict__ errors, unsigned* __restrict__ last)
{
    ring_body<THREADS, VEC, SLOTS>(msg_bytes, rounds, seed, corrupt_round, errors, last);
}

// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned load_acquire(const unsigned* p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release(unsigned* p, unsigned v)
{
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

// One thread waits until *flag >= want (a bounded wait under the hang check), then the block goes on.
__device__ __forceinline__ void block_wait_flag(const unsigned* flag, unsigned want, const char* name, int slot)
{
    if (threadIdx.x == 0) ac::bounded_wait([&] { return load_acquire(flag) >= want; }, {"global_ring", name, slot}, ac::NO_PARITY);
    __syncthreads();
}

// gbuf: [gridDim.x][SLOTS][words]; filled, ready: [gridDim.x][SLOTS] round counters, zero at launch.
template <int THREADS, int SLOTS>
__global__ void __launch_bounds__(THREADS)
    global_ring(unsigned msg_bytes, unsigned rounds, unsigned seed, unsigned corrupt_round,
                unsigned* __restrict__ errors, unsigned* __restrict__ last, unsigned* gbuf, unsigned* filled,
                unsigned* ready, unsigned base)
{
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank(), size = cluster.num_blocks();
    const unsigned me = blockIdx.x, next = me - rank + (rank + 1) % size, prev = me - rank + (rank + size - 1) % size;
    const unsigned cluster_id = blockIdx.x / size;
    const unsigned words = msg_bytes / 4;
    unsigned bad = 0;
    for (unsigned r = 0; r < rounds; ++r) {
        const int s = static_cast<int>(r % SLOTS);
        if (r >= SLOTS) block_wait_flag(&ready[me * SLOTS + s], base + r - SLOTS + 1, "ready", s);
        const unsigned mine = ring_word(seed, cluster_id, rank, r);
        const unsigned flip = (r == corrupt_round && rank == 0) ? 1u : 0u;
        uint4* dst = reinterpret_cast<uint4*>(gbuf + (static_cast<unsigned long long>(next) * SLOTS + s) * words);
        for (unsigned c = threadIdx.x; c < words / 4; c += THREADS) {
            uint4 q = ring_quad(mine, 4 * c);
            q.x ^= c == 0 ? flip : 0u;
            __stcg(dst + c, q);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            store_release(&filled[next * SLOTS + s], base + r + 1);
        }
        block_wait_flag(&filled[me * SLOTS + s], base + r + 1, "filled", s);
        const uint4* src = reinterpret_cast<const uint4*>(gbuf + (static_cast<unsigned long long>(me) * SLOTS + s) * words);
        const unsigned pbase = ring_word(seed, cluster_id, (rank + size - 1) % size, r);
        for (unsigned c = threadIdx.x; c < words / 4; c += THREADS) {
            const uint4 v = __ldcg(src + c);
            bad += bad_words(v, pbase, 4 * c);
            if (r + 1 == rounds && last) reinterpret_cast<uint4*>(last + static_cast<unsigned long long>(me) * words)[c] = v;
        }
        __syncthreads();  // every thread has read slot s
        if (threadIdx.x == 0) store_release(&ready[prev * SLOTS + s], base + r + 1);
    }
    add_errors(bad, errors);
}
