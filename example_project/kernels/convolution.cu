/* 2D convolution (cross-correlation) of a (height + FH - 1) x (width + FW - 1) padded image
 * with an FH x FW filter; output is height x width (row-major).
 *
 * Tunables: block_size_x, block_size_y (threads), tile_size_x, tile_size_y (outputs per thread),
 * use_shmem (stage the input tile in shared memory or read global memory through the cache).
 * FH, FW, width are compile-time constants of the problem (passed as constants by the test).
 */
#define TILE_W (block_size_x * tile_size_x)
#define TILE_H (block_size_y * tile_size_y)

extern "C" __global__ void convolution(float *__restrict__ out, const float *__restrict__ in,
                                       const float *__restrict__ filter, int width, int height) {
    const int in_w = width + FW - 1;
    const int x0 = blockIdx.x * TILE_W, y0 = blockIdx.y * TILE_H;
#if use_shmem
    __shared__ float tile[TILE_H + FH - 1][TILE_W + FW - 1];
    const int tid = threadIdx.y * block_size_x + threadIdx.x;
    for (int e = tid; e < (TILE_H + FH - 1) * (TILE_W + FW - 1); e += block_size_x * block_size_y) {
        const int ty = e / (TILE_W + FW - 1), tx = e % (TILE_W + FW - 1);
        const int gy = y0 + ty, gx = x0 + tx;
        tile[ty][tx] = (gy < height + FH - 1 && gx < in_w) ? in[gy * in_w + gx] : 0.0f;
    }
    __syncthreads();
#define INPUT(yy, xx) tile[(yy) - y0][(xx) - x0]
#else
#define INPUT(yy, xx) in[(yy) * in_w + (xx)]
#endif
#pragma unroll
    for (int ty = 0; ty < tile_size_y; ty++) {
#pragma unroll
        for (int tx = 0; tx < tile_size_x; tx++) {
            const int y = y0 + threadIdx.y + ty * block_size_y;
            const int x = x0 + threadIdx.x + tx * block_size_x;
            if (y < height && x < width) {
                float sum = 0.0f;
                for (int i = 0; i < FH; i++)
#pragma unroll
                    for (int j = 0; j < FW; j++) sum += INPUT(y + i, x + j) * filter[i * FW + j];
                out[y * width + x] = sum;
            }
        }
    }
}
