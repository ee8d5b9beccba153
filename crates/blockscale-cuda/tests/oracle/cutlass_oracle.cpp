// CUTLASS 4.2's own host code as an oracle for the SM120 GEMM shims
// (kernels/cutlass/sm120_*.cu), used by tests/cutlass_oracle.rs. Host-only C++17: built
// with g++ against the CUTLASS and CUDA include folders, no GPU needed.
//
//   cutlass_oracle layout IN OUT   scale-factor offsets from CUTLASS's layout functions
//   cutlass_oracle gemm IN OUT     CUTLASS's host reference GEMM (Gett), f32 output
//
// Every file is little-endian binary.
//
// layout IN: u32 count, then count x (u32 rows, u32 kblocks, u32 vec). vec 16 or 32 asks
//   for `cutlass::detail::Sm1xxBlockScaledConfig<vec>` (what the block-scaled shims
//   use), vec 128 for `Sm120BlockwiseScaleConfig<1, 128, 128, K, K>` (the FP8 blockwise
//   shim: SFA at 1 x 128, SFB at 128 x 128). For each triple the layouts are built for
//   K = kblocks * vec, SFA = tile_atom_to_shape_SFA(M = rows, N = 8, K, 1) and
//   SFB = tile_atom_to_shape_SFB(M = 8, N = rows, K, 1).
// layout OUT, per triple, for SFA then SFB: u64 x 4 (size of the layout's row mode,
//   size of its K mode, cosize, size(filter_zeros)), then for every row r in
//   [0, rows_dom) and k-block j in [0, kblocks_dom), row-major, the u32 offset
//   layout(r, j * vec, 0), where rows_dom and kblocks_dom are the layout's own domain
//   (its row-mode size, and its K-mode size / vec): the padded shape, so the padding
//   positions are reported as well.
//
// gemm IN: u32 m, n, k, kind_a, kind_b; f32 alpha; then four u64-length-prefixed byte
//   blobs: A's packed codes, A's scales, B's packed codes, B's scales. A is M x K and B
//   is N x K, both row-major along K (CUTLASS's RowMajor A and ColumnMajor B), packed as
//   CUTLASS packs sub-byte types (FP4 two per byte, low nibble first; FP6 as an
//   LSB-first bitstream, four codes per three bytes). Kinds: 0 NVFP4 (E2M1, UE4M3 per
//   16), 1 MXFP4 (E2M1), 2 MXFP6 E2M3, 3 MXFP6 E3M2, 4 MXFP8 E4M3, 5 MXFP8 E5M2 (MX:
//   UE8M0 per 32, scales in the Sm1xx layout), 6 FP8 blockwise (E4M3, f32 scales in the
//   Sm120BlockwiseScaleConfig<1, 128, 128> K-major layout). Only the pairs listed in
//   `run_gemm` are instantiated.
// gemm OUT: D = alpha * A . B^T as M x N f32, row-major, computed by
//   cutlass::reference::host::Gemm3x (Gett) exactly as examples 79a/79c/87a verify
//   their kernels: GettBlockScalingMainloopParams over cute tensors of the packed data
//   and of the scales with the layouts the shims pass, GettBlockScalingEpilogueParams
//   with beta 0.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <cuda_fp16.h>

// CUTLASS 4.2's numeric_conversion.h calls these CUDA device intrinsics in converter
// templates that the host reference never instantiates. nvcc declares them; g++ needs a
// declaration to parse the header. Declared only, never defined: a use would not link.
int __dp4a(int, int, int);
unsigned int __byte_perm(unsigned int, unsigned int, unsigned int);
__half2 __hfma2(__half2, __half2, __half2);

#include "cute/tensor.hpp"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/detail/sm100_blockscaled_layout.hpp"
#include "cutlass/float_subbyte.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/reference/host/gett.hpp"

using namespace cute;

namespace {

[[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "cutlass_oracle: %s\n", why.c_str());
    std::exit(2);
}

// A little-endian reader over a whole input file.
struct Reader {
    std::vector<uint8_t> bytes;
    size_t at = 0;

    explicit Reader(const char* path) {
        std::ifstream f(path, std::ios::binary);
        if (!f) die(std::string("cannot read ") + path);
        bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
    void take(void* out, size_t n) {
        if (bytes.size() - at < n) die("input file is too short");
        std::memcpy(out, bytes.data() + at, n);
        at += n;
    }
    uint32_t u32() {
        uint32_t v;
        take(&v, 4);
        return v;
    }
    float f32() {
        float v;
        take(&v, 4);
        return v;
    }
    std::vector<uint8_t> blob() {
        uint64_t n;
        take(&n, 8);
        std::vector<uint8_t> v(n);
        take(v.data(), n);
        return v;
    }
    void finish() const {
        if (at != bytes.size()) die("trailing bytes in the input file");
    }
};

struct Writer {
    std::vector<uint8_t> bytes;
    template <class T>
    void put(T v) {
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    void save(const char* path) const {
        std::ofstream f(path, std::ios::binary);
        f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        if (!f) die(std::string("cannot write ") + path);
    }
};

// ---------------------------------------------------------------------------------------
// layout

// Writes the domain, sizes and every offset of one scale-factor layout.
template <class Layout>
void dump_layout(Writer& w, const Layout& layout, int vec) {
    const int64_t rows_dom = size<0>(layout);
    const int64_t k_dom = size<1>(layout);
    w.put<uint64_t>(rows_dom);
    w.put<uint64_t>(k_dom);
    w.put<uint64_t>(cosize(layout));
    w.put<uint64_t>(size(filter_zeros(layout)));
    if (k_dom % vec != 0) die("the layout's K extent is not a whole number of blocks");
    for (int64_t r = 0; r < rows_dom; ++r) {
        for (int64_t j = 0; j < k_dom / vec; ++j) {
            const int64_t off = layout(r, j * vec, 0);
            if (off < 0 || off > int64_t(UINT32_MAX)) die("offset out of u32 range");
            w.put<uint32_t>(uint32_t(off));
        }
    }
}

template <class Config, int Vec>
void layout_case(Writer& w, int rows, int kblocks) {
    const int k = kblocks * Vec;
    dump_layout(w, Config::tile_atom_to_shape_SFA(make_shape(rows, 8, k, 1)), Vec);
    dump_layout(w, Config::tile_atom_to_shape_SFB(make_shape(8, rows, k, 1)), Vec);
}

using Fp8BlockwiseConfig = cutlass::detail::Sm120BlockwiseScaleConfig<1, 128, 128, UMMA::Major::K, UMMA::Major::K>;

int run_layout(const char* in, const char* out) {
    Reader r(in);
    const uint32_t count = r.u32();
    Writer w;
    for (uint32_t i = 0; i < count; ++i) {
        const int rows = int(r.u32()), kblocks = int(r.u32()), vec = int(r.u32());
        if (rows <= 0 || kblocks <= 0) die("empty shape");
        switch (vec) {
            case 16: layout_case<cutlass::detail::Sm1xxBlockScaledConfig<16>, 16>(w, rows, kblocks); break;
            case 32: layout_case<cutlass::detail::Sm1xxBlockScaledConfig<32>, 32>(w, rows, kblocks); break;
            case 128: layout_case<Fp8BlockwiseConfig, 128>(w, rows, kblocks); break;
            default: die("vec must be 16, 32 or 128");
        }
    }
    r.finish();
    w.save(out);
    return 0;
}

// ---------------------------------------------------------------------------------------
// gemm

struct GemmInput {
    int m, n, k;
    float alpha;
    std::vector<uint8_t> a, sfa, b, sfb;
};

void check_len(const char* what, size_t got, size_t want) {
    if (got != want) {
        die(std::string(what) + ": " + std::to_string(got) + " bytes, expected " + std::to_string(want));
    }
}

// Runs CUTLASS's host reference on tensors over the caller's bytes, as examples 79a/79c
// (block-scaled) and 87a (FP8 blockwise) build them.
template <class ElementA, class ElementB, class ElementSF, class LayoutSFA, class LayoutSFB>
std::vector<float> gett(GemmInput& in, LayoutSFA layout_sfa, LayoutSFB layout_sfb) {
    const int64_t m = in.m, n = in.n, k = in.k;
    check_len("A", in.a.size(), size_t(m * k * cutlass::sizeof_bits<ElementA>::value / 8));
    check_len("B", in.b.size(), size_t(n * k * cutlass::sizeof_bits<ElementB>::value / 8));
    check_len("A's scales", in.sfa.size(), size(filter_zeros(layout_sfa)) * sizeof(ElementSF));
    check_len("B's scales", in.sfb.size(), size(filter_zeros(layout_sfb)) * sizeof(ElementSF));

    // K-major A (M, K, L) and B (N, K, L), packed: stride 1 along K.
    auto layout_a = make_layout(make_shape(m, k, int64_t(1)), make_stride(k, Int<1>{}, m * k));
    auto layout_b = make_layout(make_shape(n, k, int64_t(1)), make_stride(k, Int<1>{}, n * k));
    auto tensor_a = make_tensor(recast_ptr<ElementA>(reinterpret_cast<ElementA*>(in.a.data())), layout_a);
    auto tensor_b = make_tensor(recast_ptr<ElementB>(reinterpret_cast<ElementB*>(in.b.data())), layout_b);
    auto tensor_sfa = make_tensor(reinterpret_cast<ElementSF*>(in.sfa.data()), layout_sfa);
    auto tensor_sfb = make_tensor(reinterpret_cast<ElementSF*>(in.sfb.data()), layout_sfb);

    std::vector<float> d(size_t(m * n), 0.0f);
    auto layout_d = make_layout(make_shape(m, n, int64_t(1)), make_stride(n, Int<1>{}, m * n));
    auto tensor_d = make_tensor(d.data(), layout_d);
    // beta = 0: no C operand is read (a null C tensor is skipped by the epilogue).
    auto tensor_c = make_tensor(static_cast<float*>(nullptr), layout_d);

    cutlass::reference::host::GettBlockScalingMainloopParams<float, decltype(tensor_a), decltype(tensor_sfa),
                                                            decltype(tensor_b), decltype(tensor_sfb)>
        mainloop{tensor_a, tensor_sfa, tensor_b, tensor_sfb};
    cutlass::reference::host::GettBlockScalingEpilogueParams<float, float, float, decltype(tensor_c),
                                                            decltype(tensor_d)>
        epilogue{in.alpha, 0.0f, tensor_c, tensor_d};
    cutlass::reference::host::Gemm3x(mainloop, epilogue);
    return d;
}

// A block-scaled pair with the Sm1xx scale layout the shims use.
template <class ElementA, class ElementB, class ElementSF, int Vec>
std::vector<float> block_scaled(GemmInput& in) {
    using Config = cutlass::detail::Sm1xxBlockScaledConfig<Vec>;
    if (in.k % Vec != 0) die("K is not a multiple of the block size");
    auto shape = make_shape(in.m, in.n, in.k, 1);
    return gett<ElementA, ElementB, ElementSF>(in, Config::tile_atom_to_shape_SFA(shape),
                                               Config::tile_atom_to_shape_SFB(shape));
}

std::vector<float> fp8_blockwise(GemmInput& in) {
    auto shape = make_shape(in.m, in.n, in.k, 1);
    return gett<cutlass::float_e4m3_t, cutlass::float_e4m3_t, float>(
        in, Fp8BlockwiseConfig::tile_atom_to_shape_SFA(shape), Fp8BlockwiseConfig::tile_atom_to_shape_SFB(shape));
}

enum Kind : uint32_t { Nvfp4 = 0, Mxfp4 = 1, Mxfp6E2m3 = 2, Mxfp6E3m2 = 3, Mxfp8E4m3 = 4, Mxfp8E5m2 = 5, Fp8Block = 6 };

constexpr uint32_t pair(uint32_t a, uint32_t b) { return a * 16 + b; }

int run_gemm(const char* in_path, const char* out) {
    using cutlass::float_e2m1_t;
    using cutlass::float_e2m3_t;
    using cutlass::float_e3m2_t;
    using cutlass::float_e4m3_t;
    using cutlass::float_e5m2_t;
    using cutlass::float_ue4m3_t;
    using cutlass::float_ue8m0_t;

    Reader r(in_path);
    GemmInput in;
    in.m = int(r.u32());
    in.n = int(r.u32());
    in.k = int(r.u32());
    const uint32_t kind_a = r.u32(), kind_b = r.u32();
    in.alpha = r.f32();
    in.a = r.blob();
    in.sfa = r.blob();
    in.b = r.blob();
    in.sfb = r.blob();
    r.finish();
    if (in.m <= 0 || in.n <= 0 || in.k <= 0) die("empty GEMM");

    std::vector<float> d;
    switch (pair(kind_a, kind_b)) {
        case pair(Nvfp4, Nvfp4): d = block_scaled<float_e2m1_t, float_e2m1_t, float_ue4m3_t, 16>(in); break;
        case pair(Mxfp4, Mxfp4): d = block_scaled<float_e2m1_t, float_e2m1_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp8E4m3, Mxfp8E4m3): d = block_scaled<float_e4m3_t, float_e4m3_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp8E5m2, Mxfp8E5m2): d = block_scaled<float_e5m2_t, float_e5m2_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp6E2m3, Mxfp8E4m3): d = block_scaled<float_e2m3_t, float_e4m3_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp8E4m3, Mxfp6E2m3): d = block_scaled<float_e4m3_t, float_e2m3_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp6E3m2, Mxfp8E5m2): d = block_scaled<float_e3m2_t, float_e5m2_t, float_ue8m0_t, 32>(in); break;
        case pair(Mxfp8E5m2, Mxfp6E3m2): d = block_scaled<float_e5m2_t, float_e3m2_t, float_ue8m0_t, 32>(in); break;
        case pair(Fp8Block, Fp8Block): d = fp8_blockwise(in); break;
        default:
            die("pair of kinds " + std::to_string(kind_a) + " x " + std::to_string(kind_b) + " is not instantiated");
    }
    Writer w;
    for (float v : d) w.put<float>(v);
    w.save(out);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 4) die("usage: cutlass_oracle layout|gemm IN OUT");
    const std::string mode = argv[1];
    if (mode == "layout") return run_layout(argv[2], argv[3]);
    if (mode == "gemm") return run_gemm(argv[2], argv[3]);
    die("unknown mode " + mode);
}
