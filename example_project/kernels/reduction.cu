/* Sum reduction, first pass: each block writes the sum of its chunk to partial[blockIdx.x].
 *
 * Tunables: block_size_x (threads, a power of two), ELEMS_PER_THREAD (sequential loads per
 * thread before the tree), USE_SHUFFLE (warp-shuffle for the last 32 lanes instead of shared memory).
 */
extern "C" __global__ void reduce_sum(float *__restrict__ partial, const float *__restrict__ x, int n) {
    __shared__ float buf[block_size_x];
    const int tid = threadIdx.x;
    const int base = blockIdx.x * block_size_x * ELEMS_PER_THREAD + tid;
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < ELEMS_PER_THREAD; e++) {
        const int i = base + e * block_size_x;
        if (i < n) s += x[i];
    }
    buf[tid] = s;
    __syncthreads();
#if USE_SHUFFLE
    for (int stride = block_size_x / 2; stride >= 32; stride >>= 1) {
        if (tid < stride) buf[tid] += buf[tid + stride];
        __syncthreads();
    }
    if (tid < 32) {
        float v = buf[tid];  /* block_size_x >= 32 (a restriction of the test) */
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
        if (tid == 0) partial[blockIdx.x] = v;
    }
#else
    for (int stride = block_size_x / 2; stride > 0; stride >>= 1) {
        if (tid < stride) buf[tid] += buf[tid + stride];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
#endif
}
