// Frame -> network input, in one pass: read the camera's pixels (BGR, BGRx, RGBA, NV12, YUYV or UYVY), convert
// YCbCr to RGB, bilinear resize into the letterbox or stretch rectangle, pad, colour swap, per-channel
// out = pixel * a + b, HWC -> CHW or HWC, float/half/uint8 out. One kernel per source format and output type.
//
// The geometry is edge.runtime.engines.preprocess.plan_resize. The resize reproduces cv2.resize(INTER_LINEAR) on uint8
// frames: the host computes each output column's and row's two source taps with 11-bit weights exactly as OpenCV
// does (half-pixel centres, edge clamping), and the kernel does OpenCV's integer arithmetic, including the
// rounding of its vectorised vertical pass, so the resized pixels equal OpenCV's on downscaling. Each of the four
// taps is converted to BGR first with the fixed-point arithmetic of OpenCV's YUV->BGR converters
// (edge.runtime.sources.pixels), so a YCbCr frame gives what cv2.cvtColor followed by the resize gives.
#include <cuda_fp16.h>

struct Params {
    int src_w, src_h;                  // frame size (pixels); NV12's interleaved chroma rows start at row src_h
    int pitch;                         // bytes per row (of the luma plane for NV12)
    int dst_w, dst_h;                  // network input size
    int roi_x, roi_y, roi_w, roi_h;    // where the resized frame sits in the input (the rest is padding)
    float pad;                         // padding value, 0..255
    int swap_rb;                       // 1: write RGB from BGR
    int nchw;                          // 1: planar output
    float a[3], b[3];                  // normalisation per output channel: out = pixel * a + b
    int y_offset, c_y, cr_r, cb_g, cr_g, cb_b;  // YCbCr -> RGB, 20-bit fixed point (edge.runtime.sources.pixels.Colour)
};

enum Format { BGR = 0, BGRX = 1, RGBA = 2, NV12 = 3, YUYV = 4, UYVY = 5 };

__device__ __forceinline__ void store(float *dst, size_t i, float v) { dst[i] = v; }
__device__ __forceinline__ void store(__half *dst, size_t i, float v) { dst[i] = __float2half_rn(v); }
__device__ __forceinline__ void store(unsigned char *dst, size_t i, float v) { dst[i] = (unsigned char)v; }

// OpenCV's YUV->BGR: y = max(Y - 16, 0) * CY (limited range), each channel (y + chroma terms + 2^19) >> 20, clamped.
__device__ __forceinline__ void ycbcr_to_bgr(int Y, int U, int V, const Params &p, int bgr[3]) {
    const int y = max(Y - p.y_offset, 0) * p.c_y + (1 << 19);
    const int u = U - 128, v = V - 128;
    bgr[0] = min(max((y + p.cb_b * u) >> 20, 0), 255);
    bgr[1] = min(max((y + p.cb_g * u + p.cr_g * v) >> 20, 0), 255);
    bgr[2] = min(max((y + p.cr_r * v) >> 20, 0), 255);
}

// The B, G, R values (0..255) of frame pixel (x, y). Chroma is shared by each 2x2 block (NV12) or pixel pair
// (YUYV/UYVY) without interpolation, as OpenCV's converters share it.
template <int FMT>
__device__ __forceinline__ void fetch(const unsigned char *__restrict__ src, int x, int y, const Params &p, int bgr[3]) {
    const unsigned char *row = src + (size_t)y * p.pitch;
    if (FMT == BGR || FMT == BGRX) {
        const unsigned char *q = row + x * (FMT == BGR ? 3 : 4);
        bgr[0] = q[0];
        bgr[1] = q[1];
        bgr[2] = q[2];
    } else if (FMT == RGBA) {
        const unsigned char *q = row + x * 4;
        bgr[0] = q[2];
        bgr[1] = q[1];
        bgr[2] = q[0];
    } else if (FMT == NV12) {
        const unsigned char *uv = src + ((size_t)p.src_h + (y >> 1)) * p.pitch + (x & ~1);
        ycbcr_to_bgr(row[x], uv[0], uv[1], p, bgr);
    } else {  // YUYV: Y0 U Y1 V; UYVY: U Y0 V Y1 (4 bytes per pixel pair)
        const unsigned char *q = row + (x & ~1) * 2;
        if (FMT == YUYV)
            ycbcr_to_bgr(q[(x & 1) * 2], q[1], q[3], p, bgr);
        else
            ycbcr_to_bgr(q[1 + (x & 1) * 2], q[0], q[2], p, bgr);
    }
}

// xtab[rx] = {x0, x1, weight0, weight1}, ytab[ry] = {y0, y1, weight0, weight1}; weights sum to ~2048.
template <typename T, bool NORMALISE, int FMT>
__device__ void preprocess(const unsigned char *__restrict__ src, const int4 *__restrict__ xtab,
                           const int4 *__restrict__ ytab, T *__restrict__ dst, const Params p) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= p.dst_w || y >= p.dst_h) return;

    float bgr[3] = {p.pad, p.pad, p.pad};
    const int rx = x - p.roi_x, ry = y - p.roi_y;
    if (rx >= 0 && ry >= 0 && rx < p.roi_w && ry < p.roi_h) {
        const int4 tx = xtab[rx], ty = ytab[ry];
        int p00[3], p01[3], p10[3], p11[3];
        fetch<FMT>(src, tx.x, ty.x, p, p00);
        fetch<FMT>(src, tx.y, ty.x, p, p01);
        fetch<FMT>(src, tx.x, ty.y, p, p10);
        fetch<FMT>(src, tx.y, ty.y, p, p11);
#pragma unroll
        for (int c = 0; c < 3; ++c) {
            const int s0 = p00[c] * tx.z + p01[c] * tx.w;  // horizontal pass, exact integers
            const int s1 = p10[c] * tx.z + p11[c] * tx.w;
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

typedef const unsigned char *Src;
typedef const int4 *Tab;

// uint8 inputs take the resized pixels as they are (the CPU path skips normalisation for them too).
extern "C" {
__global__ void preprocess_float32_bgr(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, BGR>(s, x, y, d, p); }
__global__ void preprocess_float32_bgrx(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, BGRX>(s, x, y, d, p); }
__global__ void preprocess_float32_rgba(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, RGBA>(s, x, y, d, p); }
__global__ void preprocess_float32_nv12(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, NV12>(s, x, y, d, p); }
__global__ void preprocess_float32_yuyv(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, YUYV>(s, x, y, d, p); }
__global__ void preprocess_float32_uyvy(Src s, Tab x, Tab y, float *d, const Params p) { preprocess<float, true, UYVY>(s, x, y, d, p); }
__global__ void preprocess_float16_bgr(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, BGR>(s, x, y, d, p); }
__global__ void preprocess_float16_bgrx(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, BGRX>(s, x, y, d, p); }
__global__ void preprocess_float16_rgba(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, RGBA>(s, x, y, d, p); }
__global__ void preprocess_float16_nv12(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, NV12>(s, x, y, d, p); }
__global__ void preprocess_float16_yuyv(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, YUYV>(s, x, y, d, p); }
__global__ void preprocess_float16_uyvy(Src s, Tab x, Tab y, __half *d, const Params p) { preprocess<__half, true, UYVY>(s, x, y, d, p); }
__global__ void preprocess_uint8_bgr(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, BGR>(s, x, y, d, p); }
__global__ void preprocess_uint8_bgrx(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, BGRX>(s, x, y, d, p); }
__global__ void preprocess_uint8_rgba(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, RGBA>(s, x, y, d, p); }
__global__ void preprocess_uint8_nv12(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, NV12>(s, x, y, d, p); }
__global__ void preprocess_uint8_yuyv(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, YUYV>(s, x, y, d, p); }
__global__ void preprocess_uint8_uyvy(Src s, Tab x, Tab y, unsigned char *d, const Params p) { preprocess<unsigned char, false, UYVY>(s, x, y, d, p); }
}
