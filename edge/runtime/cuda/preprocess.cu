// Frame (uint8 BGR, HxWx3, tightly packed) -> network input, in one pass: bilinear resize into the letterbox or
// stretch rectangle, pad, colour swap, per-channel out = pixel * a + b, HWC -> CHW or HWC, float/half/uint8 out.
//
// The geometry is edge.runtime.preprocess.plan_resize. The resize reproduces cv2.resize(INTER_LINEAR) on uint8
// frames: the host computes each output column's and row's two source taps with 11-bit weights exactly as OpenCV
// does (half-pixel centres, edge clamping), and the kernel does OpenCV's integer arithmetic, including the
// rounding of its vectorised vertical pass, so the resized pixels equal OpenCV's on downscaling.
#include <cuda_fp16.h>

struct Params {
    int src_w;                         // frame width (pixels); rows are src_w * 3 bytes
    int dst_w, dst_h;                  // network input size
    int roi_x, roi_y, roi_w, roi_h;    // where the resized frame sits in the input (the rest is padding)
    float pad;                         // padding value, 0..255
    int swap_rb;                       // 1: write RGB from BGR
    int nchw;                          // 1: planar output
    float a[3], b[3];                  // normalisation per output channel: out = pixel * a + b
};

__device__ __forceinline__ void store(float *dst, size_t i, float v) { dst[i] = v; }
__device__ __forceinline__ void store(__half *dst, size_t i, float v) { dst[i] = __float2half_rn(v); }
__device__ __forceinline__ void store(unsigned char *dst, size_t i, float v) { dst[i] = (unsigned char)v; }

// xtab[rx] = {3 * x0, 3 * x1, weight0, weight1}, ytab[ry] = {y0, y1, weight0, weight1}; weights sum to ~2048.
template <typename T, bool NORMALISE>
__device__ void preprocess(const unsigned char *__restrict__ src, const int4 *__restrict__ xtab,
                           const int4 *__restrict__ ytab, T *__restrict__ dst, const Params p) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= p.dst_w || y >= p.dst_h) return;

    float bgr[3] = {p.pad, p.pad, p.pad};
    const int rx = x - p.roi_x, ry = y - p.roi_y;
    if (rx >= 0 && ry >= 0 && rx < p.roi_w && ry < p.roi_h) {
        const int4 tx = xtab[rx], ty = ytab[ry];
        const unsigned char *r0 = src + (size_t)ty.x * p.src_w * 3;
        const unsigned char *r1 = src + (size_t)ty.y * p.src_w * 3;
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const int s0 = r0[tx.x + c] * tx.z + r0[tx.y + c] * tx.w;  // horizontal pass, exact integers
            const int s1 = r1[tx.x + c] * tx.z + r1[tx.y + c] * tx.w;
            const int t = (((s0 >> 4) * ty.z) >> 16) + (((s1 >> 4) * ty.w) >> 16);  // OpenCV's SIMD vertical pass
            bgr[c] = (float)min(max((t + 2) >> 2, 0), 255);
        }
    }

    const size_t plane = (size_t)p.dst_w * p.dst_h;
    const size_t pixel = (size_t)y * p.dst_w + x;
#pragma unroll
    for (int c = 0; c < 3; ++c) {
        float v = bgr[p.swap_rb ? 2 - c : c];
        // Multiply, then add, each rounded: the same two float32 steps as the numpy reference (no fused FMA).
        if (NORMALISE) v = __fadd_rn(__fmul_rn(v, p.a[c]), p.b[c]);
        store(dst, p.nchw ? c * plane + pixel : pixel * 3 + c, v);
    }
}

extern "C" {
__global__ void preprocess_float32(const unsigned char *src, const int4 *xtab, const int4 *ytab, float *dst, const Params p) {
    preprocess<float, true>(src, xtab, ytab, dst, p);
}
__global__ void preprocess_float16(const unsigned char *src, const int4 *xtab, const int4 *ytab, __half *dst, const Params p) {
    preprocess<__half, true>(src, xtab, ytab, dst, p);
}
// uint8 inputs take the resized pixels as they are (the CPU path skips normalisation for them too).
__global__ void preprocess_uint8(const unsigned char *src, const int4 *xtab, const int4 *ytab, unsigned char *dst, const Params p) {
    preprocess<unsigned char, false>(src, xtab, ytab, dst, p);
}
}
