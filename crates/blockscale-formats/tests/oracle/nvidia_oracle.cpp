// The NVIDIA oracle: runs the host-side conversion functions of NVIDIA's CUDA headers
// (cuda_fp8.h, cuda_fp6.h, cuda_fp4.h) on inputs the Rust tests send, so that
// blockscale's encoders are checked against NVIDIA's own code, not against ourselves.
// Built with plain g++ by tests/nvidia_oracle.rs; no GPU is involved.
//
// usage: nvidia_oracle MODE IN OUT
//   MODE f: IN holds u32 f32 bit patterns     (little-endian)
//   MODE D: IN holds u64 f64 (double) bit patterns, converted by the double entry
//           points (__nv_cvt_double_to_fp8/fp6/fp4/e8m0), never narrowed to float
//   MODE h: IN holds u16 f16 bit patterns
//   MODE b: IN holds u16 bf16 bit patterns
//     OUT gets, per input, RESULTS bytes in this order:
//       e4m3 satfinite, e4m3 nosat, e5m2 satfinite, e5m2 nosat,
//       e2m1 rn, e2m3 rn, e3m2 rn,
//       e8m0 rz satfinite, e8m0 rz nosat, e8m0 rp satfinite, e8m0 rp nosat,
//       e2m1 rz, e2m3 rz, e3m2 rz   (cudaRoundZero; FP4/FP6 always saturate)
//   MODE d: IN is ignored; OUT gets the decoded value of every code as u16 bit
//     patterns: e4m3 (256 codes) and e5m2 (256) as f16, e2m3 (64) and e3m2 (64) as
//     f16, e2m1 (16) as f16, e8m0 (256) as bf16.

#include <cuda_fp4.h>
#include <cuda_fp6.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static const int RESULTS = 14;

static std::vector<unsigned char> read_all(const char *path) {
    std::vector<unsigned char> data;
    FILE *f = std::fopen(path, "rb");
    if (!f) return data;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + n);
    std::fclose(f);
    return data;
}

// Writes the results for one input `x` of the entry points __nv_cvt_<FROM>_to_*, in
// column order, but for E8M0 those for `e8m0_x` of __nv_cvt_<E8M0_FROM>_to_e8m0.
#define CONVERT(FROM, x, E8M0_FROM, e8m0_x, out) \
    do { \
        out[0] = __nv_cvt_##FROM##_to_fp8(x, __NV_SATFINITE, __NV_E4M3); \
        out[1] = __nv_cvt_##FROM##_to_fp8(x, __NV_NOSAT, __NV_E4M3); \
        out[2] = __nv_cvt_##FROM##_to_fp8(x, __NV_SATFINITE, __NV_E5M2); \
        out[3] = __nv_cvt_##FROM##_to_fp8(x, __NV_NOSAT, __NV_E5M2); \
        out[4] = __nv_cvt_##FROM##_to_fp4(x, __NV_E2M1, cudaRoundNearest); \
        out[5] = __nv_cvt_##FROM##_to_fp6(x, __NV_E2M3, cudaRoundNearest); \
        out[6] = __nv_cvt_##FROM##_to_fp6(x, __NV_E3M2, cudaRoundNearest); \
        out[7] = __nv_cvt_##E8M0_FROM##_to_e8m0(e8m0_x, __NV_SATFINITE, cudaRoundZero); \
        out[8] = __nv_cvt_##E8M0_FROM##_to_e8m0(e8m0_x, __NV_NOSAT, cudaRoundZero); \
        out[9] = __nv_cvt_##E8M0_FROM##_to_e8m0(e8m0_x, __NV_SATFINITE, cudaRoundPosInf); \
        out[10] = __nv_cvt_##E8M0_FROM##_to_e8m0(e8m0_x, __NV_NOSAT, cudaRoundPosInf); \
        out[11] = __nv_cvt_##FROM##_to_fp4(x, __NV_E2M1, cudaRoundZero); \
        out[12] = __nv_cvt_##FROM##_to_fp6(x, __NV_E2M3, cudaRoundZero); \
        out[13] = __nv_cvt_##FROM##_to_fp6(x, __NV_E3M2, cudaRoundZero); \
    } while (0)

// The results for one value given as a float (exact for f16/bf16 inputs) plus, for the
// 16-bit modes, NVIDIA's dedicated halfraw / bfloat16raw entry points.
static void convert_float(float x, unsigned char *out) {
    CONVERT(float, x, float, x, out);
}

static void convert_double(double x, unsigned char *out) {
    CONVERT(double, x, double, x, out);
}

static void convert_half(uint16_t bits, unsigned char *out) {
    __half_raw h;
    h.x = bits;
    // cuda_fp8.h has no half entry point for E8M0: convert the exact float value.
    float x = __half2float(__half(h));
    CONVERT(halfraw, h, float, x, out);
}

static void convert_bf16(uint16_t bits, unsigned char *out) {
    __nv_bfloat16_raw b;
    b.x = bits;
    CONVERT(bfloat16raw, b, bfloat16raw, b, out);
}

static void push16(std::vector<unsigned char> &out, uint16_t v) {
    out.push_back(v & 0xff);
    out.push_back(v >> 8);
}

int main(int argc, char **argv) {
    if (argc != 4 || std::strlen(argv[1]) != 1) {
        std::fprintf(stderr, "usage: %s f|D|h|b|d IN OUT\n", argv[0]);
        return 2;
    }
    char mode = argv[1][0];
    std::vector<unsigned char> in = read_all(argv[2]);
    std::vector<unsigned char> out;
    if (mode == 'f') {
        size_t n = in.size() / 4;
        out.resize(n * RESULTS);
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = in[4 * i] | (in[4 * i + 1] << 8) | (in[4 * i + 2] << 16) | ((uint32_t)in[4 * i + 3] << 24);
            float x;
            std::memcpy(&x, &bits, 4);
            convert_float(x, &out[i * RESULTS]);
        }
    } else if (mode == 'D') {
        size_t n = in.size() / 8;
        out.resize(n * RESULTS);
        for (size_t i = 0; i < n; i++) {
            uint64_t bits = 0;
            for (int k = 7; k >= 0; k--) bits = (bits << 8) | in[8 * i + k];
            double x;
            std::memcpy(&x, &bits, 8);
            convert_double(x, &out[i * RESULTS]);
        }
    } else if (mode == 'h' || mode == 'b') {
        size_t n = in.size() / 2;
        out.resize(n * RESULTS);
        for (size_t i = 0; i < n; i++) {
            uint16_t bits = in[2 * i] | (in[2 * i + 1] << 8);
            if (mode == 'h')
                convert_half(bits, &out[i * RESULTS]);
            else
                convert_bf16(bits, &out[i * RESULTS]);
        }
    } else if (mode == 'd') {
        for (int c = 0; c < 256; c++) push16(out, __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E4M3).x);
        for (int c = 0; c < 256; c++) push16(out, __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)c, __NV_E5M2).x);
        for (int c = 0; c < 64; c++) push16(out, __nv_cvt_fp6_to_halfraw((__nv_fp6_storage_t)c, __NV_E2M3).x);
        for (int c = 0; c < 64; c++) push16(out, __nv_cvt_fp6_to_halfraw((__nv_fp6_storage_t)c, __NV_E3M2).x);
        for (int c = 0; c < 16; c++) push16(out, __nv_cvt_fp4_to_halfraw((__nv_fp4_storage_t)c, __NV_E2M1).x);
        for (int c = 0; c < 256; c++) push16(out, __nv_cvt_e8m0_to_bf16raw((__nv_fp8_storage_t)c).x);
    } else {
        std::fprintf(stderr, "unknown mode %c\n", mode);
        return 2;
    }
    FILE *f = std::fopen(argv[3], "wb");
    if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size()) {
        std::fprintf(stderr, "cannot write %s\n", argv[3]);
        return 1;
    }
    std::fclose(f);
    return 0;
}
