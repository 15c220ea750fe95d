/* Tiled single-precision matrix multiply C = A * B (n x n, row-major) with local memory.
 *
 * A work-group of block_size_x * block_size_y work-items computes a tile of
 * (block_size_y * tile_size_y) x (block_size_x * tile_size_x) outputs; each
 * work-item computes tile_size_y x tile_size_x of them. TILE_K columns of A and
 * rows of B are staged in local memory per step, between two barriers.
 * Requires n to be a multiple of the output tile and of TILE_K (the test's sizes are).
 */
#define TILE_M (block_size_y * tile_size_y)
#define TILE_N (block_size_x * tile_size_x)

__kernel void matmul(__global float *restrict C, __global const float *restrict A,
                     __global const float *restrict B, const int n) {
    __local float As[TILE_M][TILE_K];
    __local float Bs[TILE_K][TILE_N];
    const int tx = get_local_id(0), ty = get_local_id(1);
    const int tid = ty * block_size_x + tx;
    const int threads = block_size_x * block_size_y;
    const int row0 = get_group_id(1) * TILE_M, col0 = get_group_id(0) * TILE_N;
    float acc[tile_size_y][tile_size_x];
    for (int i = 0; i < tile_size_y; i++)
        for (int j = 0; j < tile_size_x; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < n; k0 += TILE_K) {
        for (int e = tid; e < TILE_M * TILE_K; e += threads)
            As[e / TILE_K][e % TILE_K] = A[(row0 + e / TILE_K) * n + k0 + e % TILE_K];
        for (int e = tid; e < TILE_K * TILE_N; e += threads)
            Bs[e / TILE_N][e % TILE_N] = B[(k0 + e / TILE_N) * n + col0 + e % TILE_N];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < TILE_K; k++) {
            for (int i = 0; i < tile_size_y; i++) {
                const float a = As[ty + i * block_size_y][k];
                for (int j = 0; j < tile_size_x; j++) acc[i][j] += a * Bs[k][tx + j * block_size_x];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < tile_size_y; i++)
        for (int j = 0; j < tile_size_x; j++)
            C[(row0 + ty + i * block_size_y) * n + col0 + tx + j * block_size_x] = acc[i][j];
}
