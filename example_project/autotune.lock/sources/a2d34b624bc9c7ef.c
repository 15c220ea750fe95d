/* Five-point Jacobi stencil on an nx x ny grid (row-major), `steps` sweeps between two buffers.
 *
 * Tunable parameters:
 *   TILE_X, TILE_Y   tile of the sweep (cache blocking)
 *   UNROLL           unroll of the innermost loop
 *   TRAVERSAL        0: rows innermost (unit stride), 1: columns innermost (stride nx)
 * The result is in `out` after the last sweep; `tmp` is scratch of the same size.
 */
#define PRAGMA(x) _Pragma(#x)
#define UNROLLED_(n) PRAGMA(GCC unroll n)
#define UNROLLED(n) UNROLLED_(n)

static inline int min_int(int a, int b) { return a < b ? a : b; }

static void sweep(float *restrict dst, const float *restrict src, int nx, int ny) {
    for (int ty = 1; ty < ny - 1; ty += TILE_Y) {
        const int ye = min_int(ty + TILE_Y, ny - 1);
        for (int tx = 1; tx < nx - 1; tx += TILE_X) {
            const int xe = min_int(tx + TILE_X, nx - 1);
#if TRAVERSAL == 0
            for (int y = ty; y < ye; y++) {
                UNROLLED(UNROLL)
                for (int x = tx; x < xe; x++)
                    dst[y * nx + x] = 0.2f * (src[y * nx + x] + src[y * nx + x - 1] + src[y * nx + x + 1]
                                              + src[(y - 1) * nx + x] + src[(y + 1) * nx + x]);
            }
#else
            for (int x = tx; x < xe; x++) {
                UNROLLED(UNROLL)
                for (int y = ty; y < ye; y++)
                    dst[y * nx + x] = 0.2f * (src[y * nx + x] + src[y * nx + x - 1] + src[y * nx + x + 1]
                                              + src[(y - 1) * nx + x] + src[(y + 1) * nx + x]);
            }
#endif
        }
    }
}

void stencil(float *restrict out, float *restrict tmp, const float *restrict in, int nx, int ny, int steps) {
    for (int i = 0; i < nx * ny; i++) { out[i] = in[i]; tmp[i] = in[i]; }
    for (int s = 0; s < steps; s++) {
        if (s % 2 == 0) sweep(tmp, out, nx, ny); else sweep(out, tmp, nx, ny);
    }
    if (steps % 2 == 1)
        for (int i = 0; i < nx * ny; i++) out[i] = tmp[i];
}
