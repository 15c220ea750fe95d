/* c = a + b with WORK_PER_THREAD elements per thread (grid-strided inside a block's chunk).
 * Tunables: block_size_x (threads per block), WORK_PER_THREAD. */
extern "C" __global__ void vector_add(float *__restrict__ c, const float *__restrict__ a,
                                      const float *__restrict__ b, int n) {
    const int base = blockIdx.x * block_size_x * WORK_PER_THREAD + threadIdx.x;
#pragma unroll
    for (int w = 0; w < WORK_PER_THREAD; w++) {
        const int i = base + w * block_size_x;  /* consecutive threads touch consecutive elements */
        if (i < n) c[i] = a[i] + b[i];
    }
}
