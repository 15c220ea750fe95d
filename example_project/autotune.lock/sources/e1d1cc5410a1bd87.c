/* Cache-blocked single-precision matrix multiply, C = A * B (n x n, row-major).
 *
 * Tunable parameters (prepended as #define lines by pytest-autotune):
 *   BLOCK_I, BLOCK_J, BLOCK_K  tile sizes of the three loops
 *   UNROLL                     unroll factor of the innermost loop
 *   LOOP_ORDER                 order of the loops inside a tile: ijk, ikj, jik, jki, kij, kji
 *                              (a categorical parameter: the innermost index decides the stride)
 */
#define ORDER_ijk 0
#define ORDER_ikj 1
#define ORDER_jik 2
#define ORDER_jki 3
#define ORDER_kij 4
#define ORDER_kji 5
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define ORDER CAT(ORDER_, LOOP_ORDER)
#define PRAGMA(x) _Pragma(#x)
#define UNROLLED_(n) PRAGMA(GCC unroll n)
#define UNROLLED(n) UNROLLED_(n)

static inline int min_int(int a, int b) { return a < b ? a : b; }

void matmul(float *restrict C, const float *restrict A, const float *restrict B, int n) {
    for (int x = 0; x < n * n; x++) C[x] = 0.0f;
    for (int ii = 0; ii < n; ii += BLOCK_I) {
        const int ie = min_int(ii + BLOCK_I, n);
        for (int kk = 0; kk < n; kk += BLOCK_K) {
            const int ke = min_int(kk + BLOCK_K, n);
            for (int jj = 0; jj < n; jj += BLOCK_J) {
                const int je = min_int(jj + BLOCK_J, n);
#if ORDER == 0
                for (int i = ii; i < ie; i++)
                    for (int j = jj; j < je; j++) {
                        float s = C[i * n + j];
                        UNROLLED(UNROLL)
                        for (int k = kk; k < ke; k++) s += A[i * n + k] * B[k * n + j];
                        C[i * n + j] = s;
                    }
#elif ORDER == 1
                for (int i = ii; i < ie; i++)
                    for (int k = kk; k < ke; k++) {
                        const float a = A[i * n + k];
                        UNROLLED(UNROLL)
                        for (int j = jj; j < je; j++) C[i * n + j] += a * B[k * n + j];
                    }
#elif ORDER == 2
                for (int j = jj; j < je; j++)
                    for (int i = ii; i < ie; i++) {
                        float s = C[i * n + j];
                        UNROLLED(UNROLL)
                        for (int k = kk; k < ke; k++) s += A[i * n + k] * B[k * n + j];
                        C[i * n + j] = s;
                    }
#elif ORDER == 3
                for (int j = jj; j < je; j++)
                    for (int k = kk; k < ke; k++) {
                        const float b = B[k * n + j];
                        UNROLLED(UNROLL)
                        for (int i = ii; i < ie; i++) C[i * n + j] += A[i * n + k] * b;
                    }
#elif ORDER == 4
                for (int k = kk; k < ke; k++)
                    for (int i = ii; i < ie; i++) {
                        const float a = A[i * n + k];
                        UNROLLED(UNROLL)
                        for (int j = jj; j < je; j++) C[i * n + j] += a * B[k * n + j];
                    }
#elif ORDER == 5
                for (int k = kk; k < ke; k++)
                    for (int j = jj; j < je; j++) {
                        const float b = B[k * n + j];
                        UNROLLED(UNROLL)
                        for (int i = ii; i < ie; i++) C[i * n + j] += A[i * n + k] * b;
                    }
#else
#error "LOOP_ORDER must be one of ijk, ikj, jik, jki, kij, kji"
#endif
            }
        }
    }
}
