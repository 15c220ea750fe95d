// Valid 2D correlation: output[y][x] = sum over i, j of input[y + i][x + j] * d_filter[i * filter_width + j].

// The problem: parameters of one value in the port; without them, a 4096 x 4096 image and a 17 x 17 filter.
#ifndef image_height
#define image_height 4096
#endif
#ifndef image_width
#define image_width 4096
#endif
#ifndef filter_height
#define filter_height 17
#endif
#ifndef filter_width
#define filter_width 17
#endif

// The tuned parameters, and what a build without them gets.
#ifndef block_size_x
#define block_size_x 16
#endif
#ifndef block_size_y
#define block_size_y 16
#endif
#ifndef tile_size_x
#define tile_size_x 1
#endif
#ifndef tile_size_y
#define tile_size_y 1
#endif
#ifndef read_only
#define read_only 0  // 1: read the input through the read-only data cache (__ldg)
#endif
#ifndef use_padding
#define use_padding 1  // 1: pad the rows of the shared patch so the compute loop is free of bank conflicts
#endif

// The weights, row-major; room for filters up to 33 x 33 (a smaller filter fills the start).
__constant__ float d_filter[33 * 33];

// The input is the image with a border of filter / 2 pixels on each side (filter / 2 * 2 in all), row-major.
constexpr int in_width = image_width + filter_width / 2 * 2;
constexpr int in_height = image_height + filter_height / 2 * 2;

// A thread block produces a patch of out_rows x out_cols outputs. Thread (tx, ty) owns the outputs
// (ty + a * block_size_y, tx + b * block_size_x), a < tile_size_y, b < tile_size_x: a warp's
// threads then touch neighbouring pixels, in the shared patch and in the output alike.
constexpr int out_cols = block_size_x * tile_size_x;
constexpr int out_rows = block_size_y * tile_size_y;
constexpr int threads = block_size_x * block_size_y;

// The input the patch needs: the patch widened by the filter's reach.
constexpr int patch_cols = out_cols + filter_width - 1;
constexpr int patch_rows = out_rows + filter_height - 1;

// The shared row length. A warp reads shared word (ty + c) * row_length + tx + c' in the compute loop;
// a row length congruent to block_size_x modulo the 32 banks maps that to the thread's index in the
// warp plus a constant: 32 different banks. Blocks a multiple of 32 wide need no padding (a warp
// stays in one row); otherwise up to 31 columns are added.
constexpr int padding = (use_padding && block_size_x % 32 != 0)
                        ? ((block_size_x - patch_cols) % 32 + 32) % 32 : 0;
constexpr int row_length = patch_cols + padding;

// When the blocks tile the image exactly, no thread reads or writes out of bounds: the checks go.
constexpr bool exact_tiling = image_width % out_cols == 0 && image_height % out_rows == 0;

__device__ __forceinline__ float read_input(const float *pixel) {
#if read_only
    return __ldg(pixel);
#else
    return *pixel;
#endif
}

// filter is the host's copy of the weights, which the port passes along; the kernel reads d_filter.
__global__ void convolution_kernel(float *output, float *input, float *filter) {
    __shared__ float patch[patch_rows][row_length];
    const int x0 = blockIdx.x * out_cols;  // the patch's first column and row, in the output and the input
    const int y0 = blockIdx.y * out_rows;

    // Stage the patch's input: the block's threads walk it in row-major order, one pixel each per step.
    for (int k = threadIdx.y * block_size_x + threadIdx.x; k < patch_rows * patch_cols; k += threads) {
        const int r = k / patch_cols;
        const int c = k - r * patch_cols;
        const int y = y0 + r;
        const int x = x0 + c;
        const bool inside = exact_tiling || (y < in_height && x < in_width);
        patch[r][c] = inside ? read_input(input + y * in_width + x) : 0.0f;
    }
    __syncthreads();

    // One row of the thread's outputs at a time: tile_size_x sums live in registers, written out when done.
    // The rows stay a loop: unrolled, the compiler keeps shared values for the next rows in registers
    // and spills (255 registers and 1-3 KiB of spills at 4 x 4 tiles, NVRTC for sm_90).
    #pragma unroll 1
    for (int a = 0; a < tile_size_y; ++a) {
        const int row = threadIdx.y + a * block_size_y;
        float sums[tile_size_x];
        #pragma unroll
        for (int b = 0; b < tile_size_x; ++b) {
            sums[b] = 0.0f;
        }
        #pragma unroll
        for (int i = 0; i < filter_height; ++i) {
            const float *line = &patch[row + i][threadIdx.x];
            #pragma unroll
            for (int j = 0; j < filter_width; ++j) {
                const float weight = d_filter[i * filter_width + j];
                #pragma unroll
                for (int b = 0; b < tile_size_x; ++b) {
                    sums[b] += line[b * block_size_x + j] * weight;
                }
            }
        }
        const int y = y0 + row;
        #pragma unroll
        for (int b = 0; b < tile_size_x; ++b) {
            const int x = x0 + threadIdx.x + b * block_size_x;
            if (exact_tiling || (y < image_height && x < image_width)) {
                output[y * image_width + x] = sums[b];
            }
        }
    }
}
