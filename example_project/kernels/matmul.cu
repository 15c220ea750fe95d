/* Tiled single-precision matrix multiply C = A * B (n x n, row-major) with shared memory.
 *
 * A block of block_size_x * block_size_y threads computes a tile of
 * (block_size_y * tile_size_y) x (block_size_x * tile_size_x) outputs; each thread
 * computes tile_size_y x tile_size_x of them. TILE_K columns of A / rows of B are
 * staged in shared memory per step. UNROLL unrolls the inner product loop.
 * Requires n to be a multiple of the output tile and of TILE_K (the test's sizes are).
 */
#define STR(x) #x
#define PRAGMA_UNROLL_(n) _Pragma(STR(unroll n))
#define PRAGMA_UNROLL(n) PRAGMA_UNROLL_(n)
#define TILE_M (block_size_y * tile_size_y)
#define TILE_N (block_size_x * tile_size_x)

/* __launch_bounds__(threads, 1): ptxas keeps registers/thread x threads within the register
 * file (64 K), spilling if it must, so every block shape the restrictions allow can launch;
 * the 1 (one resident block is enough) leaves small blocks the registers they would use without it. */
extern "C" __global__ void __launch_bounds__(block_size_x * block_size_y, 1)
matmul(float *__restrict__ C, const float *__restrict__ A,
                                  const float *__restrict__ B, int n) {
    __shared__ float As[TILE_M][TILE_K];
    __shared__ float Bs[TILE_K][TILE_N];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int tid = ty * block_size_x + tx;
    const int threads = block_size_x * block_size_y;
    const int row0 = blockIdx.y * TILE_M, col0 = blockIdx.x * TILE_N;
    float acc[tile_size_y][tile_size_x];
#pragma unroll
    for (int i = 0; i < tile_size_y; i++)
#pragma unroll
        for (int j = 0; j < tile_size_x; j++) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < n; k0 += TILE_K) {
        for (int e = tid; e < TILE_M * TILE_K; e += threads)
            As[e / TILE_K][e % TILE_K] = A[(row0 + e / TILE_K) * n + k0 + e % TILE_K];
        for (int e = tid; e < TILE_K * TILE_N; e += threads)
            Bs[e / TILE_N][e % TILE_N] = B[(k0 + e / TILE_N) * n + col0 + e % TILE_N];
        __syncthreads();
        PRAGMA_UNROLL(UNROLL)
        for (int k = 0; k < TILE_K; k++) {
#pragma unroll
            for (int i = 0; i < tile_size_y; i++) {
                const float a = As[ty + i * block_size_y][k];
#pragma unroll
                for (int j = 0; j < tile_size_x; j++) acc[i][j] += a * Bs[k][tx + j * block_size_x];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < tile_size_y; i++)
#pragma unroll
        for (int j = 0; j < tile_size_x; j++)
            C[(row0 + ty + i * block_size_y) * n + col0 + tx + j * block_size_x] = acc[i][j];
}
