// tma.cu — TMA building blocks on their own (compute capability 9.0; tma_walk needs sm_90a).
//
//   tma_load_dump<RANK>  poison a shared region, load one box through a tensor map into it at
//                        `base` bytes past a 1024-byte boundary, copy the region back to global:
//                        what a swizzled / out-of-bounds load really leaves in shared memory
//   tma_store_box<RANK>  put a given shared-memory image in place with ordinary stores, then TMA-store
//                        the box (fence.proxy.async between the two proxies)
//   bulk_scale           y = 2x through 1D bulk copies both ways: load on an mbarrier, compute into
//                        one of two output buffers, fence, bulk store, wait for the store's reads
//                        before the buffer comes round again
//   tma_walk<R, C>       one host-encoded template, edited on the device for each of a list of
//                        differently shaped 2D float tensors (address, dims, row stride), published
//                        with tensormap.cp_fenceproxy, acquired, then used to load an RxC box
// Run: the functions of asynccopy.tma.
#include <asynccopy/mbarrier.cuh>
#include <asynccopy/pipeline.cuh>
#include <asynccopy/tma.cuh>

namespace ac = asynccopy;
using u64 = unsigned long long;

template <int RANK>
__device__ __forceinline__ void coords_of(int (&c)[RANK], int c0, int c1, int c2, int c3, int c4)
{
    const int all[5] = {c0, c1, c2, c3, c4};
#pragma unroll
    for (int i = 0; i < RANK; ++i) c[i] = all[i];
}

template <int RANK>
__global__ void tma_load_dump(const __grid_constant__ ac::TensorMap map, int c0, int c1, int c2, int c3, int c4,
                              unsigned box_bytes, unsigned base, unsigned dump_bytes, unsigned char* __restrict__ out)
{
    unsigned char* smem = ac::dynamic_smem<unsigned char>();  // 1024-byte aligned; box at smem + base
    __shared__ ac::mbarrier_t bar;
    for (unsigned i = threadIdx.x; i < base + dump_bytes; i += blockDim.x) smem[i] = 0xA5;
    ac::fence_proxy_async_shared();  // the poison (generic proxy) is ordered before TMA's writes
    if (threadIdx.x == 0) {
        ac::mbarrier_init(&bar, 1);
        ac::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int c[RANK];
        coords_of<RANK>(c, c0, c1, c2, c3, c4);
        ac::mbarrier_arrive_expect_tx(&bar, box_bytes);
        ac::tensor_load<RANK>(smem + base, &map, c, &bar);
    }
    ac::mbarrier_wait_parity(&bar, 0, {"tma_load_dump", "bar", -1});
    for (unsigned i = threadIdx.x; i < dump_bytes; i += blockDim.x) out[i] = smem[base + i];
}

template <int RANK>
__global__ void tma_store_box(const __grid_constant__ ac::TensorMap map, int c0, int c1, int c2, int c3, int c4,
                              const unsigned char* __restrict__ image, unsigned image_bytes)
{
    unsigned char* smem = ac::dynamic_smem<unsigned char>();  // [image_bytes], 1024-byte aligned
    for (unsigned i = threadIdx.x; i < image_bytes; i += blockDim.x) smem[i] = image[i];
    ac::fence_proxy_async_shared();  // TMA (async proxy) reads what these ordinary stores wrote
    __syncthreads();
    if (threadIdx.x == 0) {
        int c[RANK];
        coords_of<RANK>(c, c0, c1, c2, c3, c4);
        ac::tensor_store<RANK>(&map, c, smem);
        ac::bulk_commit_group();
        ac::bulk_wait_group<0>();  // the writes are done before shared memory goes away
    }
}

extern "C" __global__ void bulk_scale(const float* __restrict__ in, float* __restrict__ out, u64 n, unsigned chunk)
{
    float* smem = ac::dynamic_smem<float>();  // in_buf [chunk] f32, then out_buf [2][chunk] f32
    float* in_buf = smem;
    __shared__ ac::mbarrier_t loaded;  // one phase per chunk
    if (threadIdx.x == 0) {
        ac::mbarrier_init(&loaded, 1);
        ac::fence_barrier_init();
    }
    __syncthreads();
    const u64 n_chunks = (n + chunk - 1) / chunk;
    const u64 mine = ac::tiles_of_block(n_chunks);
    for (u64 k = 0; k < mine; ++k) {
        const u64 t = ac::tile_of_block(k);
        const unsigned count = static_cast<unsigned>(n - t * chunk < chunk ? n - t * chunk : chunk);
        float* out_buf = smem + chunk * (1 + (k & 1));
        if (threadIdx.x == 0) {
            ac::mbarrier_arrive_expect_tx(&loaded, count * 4u);
            ac::bulk_load(in_buf, in + t * chunk, count * 4u, &loaded);
        }
        ac::mbarrier_wait_parity(&loaded, static_cast<unsigned>(k & 1), {"bulk_scale", "loaded", -1});
        // out_buf was handed to the bulk store of chunk k-2; thread 0 waited for that store's reads
        // (wait_group.read<1> after committing chunk k-1) before it issued this chunk's load.
        for (unsigned i = threadIdx.x; i < count; i += blockDim.x) out_buf[i] = 2.0f * in_buf[i];
        ac::fence_proxy_async_shared();  // ordinary writes of out_buf, read next by the bulk store
        __syncthreads();                 // all writes done; in_buf free for the next load
        if (threadIdx.x == 0) {
            ac::bulk_store(out + t * chunk, out_buf, count * 4u);
            ac::bulk_commit_group();
            ac::bulk_wait_group_read<1>();  // the store of chunk k-1 has read its buffer
        }
    }
    if (threadIdx.x == 0) ac::bulk_wait_group<0>();
}

struct Tensor2D {  // a row-major float32 matrix
    u64 address;
    unsigned rows, cols;
    u64 row_stride_bytes;
};

template <int BOX_R, int BOX_C>
__global__ void tma_walk(const __grid_constant__ ac::TensorMap tmpl, ac::TensorMap* __restrict__ workspace,
                         const Tensor2D* __restrict__ tensors, float* __restrict__ out)
{
    __shared__ alignas(128) ac::TensorMap edit;        // the template, being edited for this tensor
    __shared__ alignas(128) float box[BOX_R * BOX_C];  // [BOX_R][BOX_C] f32, unswizzled
    __shared__ ac::mbarrier_t bar;
    const Tensor2D me = tensors[blockIdx.x];
    ac::TensorMap* map = workspace + blockIdx.x;
    if (threadIdx.x == 0) {
        ac::mbarrier_init(&bar, 1);
        ac::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        if (lane < 16) edit.opaque[lane] = tmpl.opaque[lane];
        __syncwarp();
        if (lane == 0) {
            ac::tensormap_replace_address(&edit, reinterpret_cast<const void*>(me.address));
            ac::tensormap_replace_dim<0>(&edit, me.cols);
            ac::tensormap_replace_dim<1>(&edit, me.rows);
            ac::tensormap_replace_stride<0>(&edit, me.row_stride_bytes);
        }
        __syncwarp();
        ac::tensormap_cp_fenceproxy(map, &edit);  // all 32 lanes: copy to global, release
        if (lane == 0) {
            ac::fence_proxy_tensormap_acquire(map);  // this thread's TMA use sees the new map
            const int c[2] = {0, 0};
            ac::mbarrier_arrive_expect_tx(&bar, BOX_R * BOX_C * sizeof(float));
            ac::tensor_load<2>(box, map, c, &bar);
        }
    }
    ac::mbarrier_wait_parity(&bar, 0, {"tma_walk", "bar", -1});
    for (int i = threadIdx.x; i < BOX_R * BOX_C; i += blockDim.x) out[blockIdx.x * BOX_R * BOX_C + i] = box[i];
}
