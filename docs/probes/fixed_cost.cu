// Where a call's fixed cost goes: a timeline of every CTA of the prepared GEMV (NVFP4,
// M = 1) and of the `wgmma` weight-only GEMM (NVFP4, M = 128) in graph replay, as the
// GPU bench runs them (back-to-back calls over rotating weight copies, cold L2).
//
// Built and run by hand on the Hopper machine (not part of the library build):
//   nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 -I. -o fixed_cost \
//        docs/probes/fixed_cost.cu && ./fixed_cost
// (from the repository root). The kernels are the library's own device functions
// (kernels/gemv/prepared.cu, kernels/gemm/wgemm.cu), launched with the library's plans
// (grid, splits, clusters, shared memory, programmatic dependent launch), wrapped so that
// thread 0 of every CTA records %globaltimer at entry and exit with its SM. Weights are
// random bytes (timing does not depend on the values). Printed per shape: the graph's
// time per call, each kernel's span (first CTA start to last CTA end), the gap or overlap
// between consecutive kernels, percentiles of when CTAs start and finish within the span
// and of when they pass each marked point, CTAs per SM; and the timer's resolution.
// PROBE_GEMM=1 adds the GEMM cases; PROBE_GEMV_CAP=c pads the GEMV's shared memory so
// that at most c CTAs share an SM. Variants of a kernel are probed by building with the
// change (docs/DECISIONS.md #68 lists the ones measured).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

// Thread 0 of a CTA records the time it passes the kernels' marked points (BS_PROBE_MARK
// in prepared.cu: 0 after the wait for the previous kernel, 1 after the main loop, 2 the
// warps' sums added, 3 outputs or partials written, 4 the split counter read, and in the
// last CTA of a tile 5 after its fence, 6 the outputs written; wgemm.cu: 0 after the
// wait, 1 after a tile's main loop, 2 its sums in shared memory, with K split 3 after the
// cluster barrier, 4 its share stored, and 5 after the epilogue).
__shared__ unsigned long long probe_marks[8];
#define BS_PROBE_MARK(i)                                                                  \
    do {                                                                                  \
        if (threadIdx.x == 0) {                                                           \
            unsigned long long t_;                                                        \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                        \
            probe_marks[i] = t_;                                                          \
        }                                                                                 \
    } while (0)
#include "kernels/gemv/prepared.cu"
#include "kernels/gemm/wgemm.cu"

#define CK(x)                                                                                    \
    do {                                                                                         \
        cudaError_t e_ = (x);                                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

struct Rec {
    unsigned long long t0, t1;
    unsigned int sm, pad;
    unsigned long long mark[8];  // 0: not passed
};

__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned int smid() {
    unsigned int s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
__device__ __forceinline__ void clear_marks() {
    if (threadIdx.x == 0)
        for (int i = 0; i < 8; ++i) probe_marks[i] = 0;
}
__device__ __forceinline__ void record(Rec* rec, unsigned long long t0) {
    if (threadIdx.x == 0) {
        const unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        Rec r{t0, gtime(), smid(), 0u, {}};
        for (int i = 0; i < 8; ++i) r.mark[i] = probe_marks[i];
        rec[b] = r;
    }
}

template <class T>
__global__ void __launch_bounds__(bs::pgemv::kThreads, 3) probe_gemv(const bs::PgemvParams p, Rec* rec) {
    const unsigned long long t0 = gtime();
    clear_marks();
    bs::pgemv::entry<T, 1, false>(p);
    record(rec, t0);
}
extern "C" __global__ void __launch_bounds__(256) probe_acts(const bs::PgemmParams p, Rec* rec) {
    const unsigned long long t0 = gtime();
    clear_marks();
    bs::wgemm::acts_bf16<false>(p);
    record(rec, t0);
}
extern "C" __global__ void __launch_bounds__(bs::wgemm::kThreads, 1) probe_wgemm(const bs::PgemmParams p, Rec* rec) {
    const unsigned long long t0 = gtime();
    clear_marks();
    bs::wgemm::gemm<bs::pgemv::TNvfp4, false>(p);
    record(rec, t0);
}
// The timer's resolution: one thread's distinct successive readings.
__global__ void tick(unsigned long long* out) {
    unsigned long long last = gtime(), best = ~0ull;
    int seen = 0;
    for (int i = 0; i < 200000 && seen < 64; ++i) {
        const unsigned long long t = gtime();
        if (t != last) {
            best = t - last < best ? t - last : best;
            last = t;
            ++seen;
        }
    }
    out[0] = best;
}
__global__ void fill(uint8_t* p, size_t n, uint32_t seed, uint8_t mask, uint8_t or_) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        p[i] = (uint8_t)((h & mask) | or_);
    }
}

static void random_bytes(void* p, size_t n, uint32_t seed, uint8_t mask = 0xFF, uint8_t or_ = 0) {
    fill<<<1024, 256>>>((uint8_t*)p, n, seed, mask, or_);
    CK(cudaGetLastError());
}

template <class P>
static void launch(const void* fn, dim3 grid, dim3 block, size_t smem, unsigned cluster, cudaStream_t s, const P& p,
                   Rec* rec) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    int n = 0;
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
    if (cluster > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster;
        attr[n].val.clusterDim.y = 1;
        attr[n].val.clusterDim.z = 1;
        ++n;
    }
    cfg.attrs = attr;
    cfg.numAttrs = n;
    void* args[2] = {(void*)&p, (void*)&rec};
    CK(cudaLaunchKernelExC(&cfg, fn, args));
}

static double pct(std::vector<double> v, double q) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, (size_t)(q * (v.size() - 1) + 0.5))];
}

// One kernel of a launch sequence: its records and CTA count.
struct Kern {
    const char* name;
    std::vector<Rec> recs;
};

// The timeline of the replay: per kernel role (0 .. roles - 1 in each call), spans, gaps to
// the previous kernel's last CTA, and CTA start / end offsets within the span, in µs,
// averaged over the calls after the first two.
static void report(const std::vector<Kern>& ks, int roles) {
    const int calls = (int)ks.size() / roles;
    for (int r = 0; r < roles; ++r) {
        std::vector<double> span, gap, s50, s90, s100, e50, e90, e100, d50, d10;
        for (int c = 2; c < calls; ++c) {
            const Kern& k = ks[c * roles + r];
            const Kern& prev = ks[c * roles + r - 1];
            unsigned long long lo = ~0ull, hi = 0, plo = ~0ull, phi = 0;
            for (auto& x : k.recs) lo = std::min(lo, x.t0), hi = std::max(hi, x.t1);
            for (auto& x : prev.recs) plo = std::min(plo, x.t0), phi = std::max(phi, x.t1);
            std::vector<double> st, en, du;
            for (auto& x : k.recs) {
                st.push_back((x.t0 - lo) * 1e-3);
                en.push_back((hi - x.t1) * 1e-3);
                du.push_back((x.t1 - x.t0) * 1e-3);
            }
            span.push_back((hi - lo) * 1e-3);
            gap.push_back(((double)lo - (double)phi) * 1e-3);
            s50.push_back(pct(st, 0.5));
            s90.push_back(pct(st, 0.9));
            s100.push_back(pct(st, 1.0));
            e50.push_back(pct(en, 0.5));
            e90.push_back(pct(en, 0.1));
            e100.push_back(pct(en, 0.0));
            d50.push_back(pct(du, 0.5));
            d10.push_back(pct(du, 0.1));
        }
        auto med = [](std::vector<double> v) { return pct(v, 0.5); };
        printf(
            "  %-6s CTAs %4zu  span %6.2f  start-after-prev-end %+6.2f  CTA start at p50 %5.2f p90 %5.2f max %5.2f  "
            "CTA end before span end p50 %5.2f p10 %5.2f min %5.2f  CTA time p50 %6.2f p10 %6.2f\n",
            ks[r].name, ks[r].recs.size(), med(span), med(gap), med(s50), med(s90), med(s100), med(e50), med(e90),
            med(e100), med(d50), med(d10));
        // The marked points: when CTAs pass each, against the previous kernel's last CTA
        // end (p10 / p50 / p90 over the CTAs that passed it, medians over the calls), and
        // the steps between consecutive marks (and from the last one to the CTA's end).
        for (int i = 0; i < 8; ++i) {
            std::vector<double> a10, a50, a90, amax, d50m;
            size_t passed = 0;
            for (int c = 2; c < calls; ++c) {
                const Kern& k = ks[c * roles + r];
                const Kern& prev = ks[c * roles + r - 1];
                unsigned long long phi = 0;
                for (auto& x : prev.recs) phi = std::max(phi, x.t1);
                std::vector<double> at, step;
                for (auto& x : k.recs) {
                    if (!x.mark[i]) continue;
                    at.push_back(((double)x.mark[i] - (double)phi) * 1e-3);
                    unsigned long long nxt = x.t1;
                    for (int j = i + 1; j < 8; ++j)
                        if (x.mark[j]) {
                            nxt = x.mark[j];
                            break;
                        }
                    step.push_back(((double)nxt - (double)x.mark[i]) * 1e-3);
                }
                if (at.empty()) continue;
                passed = at.size();
                a10.push_back(pct(at, 0.1));
                a50.push_back(pct(at, 0.5));
                a90.push_back(pct(at, 0.9));
                amax.push_back(pct(at, 1.0));
                d50m.push_back(pct(step, 0.5));
            }
            if (a50.empty()) continue;
            printf("    mark %d (%zu CTAs): at p10 %+6.2f p50 %+6.2f p90 %+6.2f max %+6.2f us from the previous kernel's "
                   "end; to the next mark or end p50 %5.2f\n",
                   i, passed, med(a10), med(a50), med(a90), med(amax), med(d50m));
        }
    }
}

static double graph_us(cudaGraphExec_t g, cudaStream_t s, int calls) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(g, s));
    std::vector<double> t;
    for (int r = 0; r < 7; ++r) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(g, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / calls);
    }
    return pct(t, 0.5);
}

// `copies` random weight matrices: codes and scale bytes (scales kept small and finite).
struct Weights {
    std::vector<uint8_t*> codes, scales;
    Weights(int copies, size_t code, size_t scale) : codes(copies), scales(copies) {
        for (int c = 0; c < copies; ++c) {
            CK(cudaMalloc(&codes[c], code));
            CK(cudaMalloc(&scales[c], scale));
            random_bytes(codes[c], code, 11 + c);
            random_bytes(scales[c], scale, 97 + c, 0x0F, 0x30);
        }
    }
    ~Weights() {
        for (size_t c = 0; c < codes.size(); ++c) {
            cudaFree(codes[c]);
            cudaFree(scales[c]);
        }
    }
    Weights(const Weights&) = delete;
    Weights& operator=(const Weights&) = delete;
};

static int l2_bytes() {
    int v;
    CK(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, 0));
    return v;
}

template <class T>
static void gemv_case(const char* scheme, int n, int k, int sms, cudaStream_t s) {
    using namespace bs::pgemv;
    const auto probe_gemv = ::probe_gemv<T>;
    const size_t code = (size_t)n * k / 2, scale = (size_t)n * k / (T::kPre ? 16 : 64);
    const int copies = std::max(2, (int)((4.0 * l2_bytes()) / (code + scale) + 0.999));
    const int calls = std::max(12, copies);
    // PROBE_GEMV_CAP=c: dynamic shared memory padded so that at most c CTAs fit an SM.
    const int cap = getenv("PROBE_GEMV_CAP") ? atoi(getenv("PROBE_GEMV_CAP")) : 0;
    const size_t ring = kWarps * depth<1>() * stage_bytes<T, 1>();
    const size_t smem = cap > 0 ? std::max(ring, (size_t)(227 * 1024 / cap - 1024)) : ring;
    CK(cudaFuncSetAttribute((const void*)probe_gemv, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, probe_gemv, kThreads, smem));
    const int slots = per_sm * sms;
    // prepared.rs Plan::new at M = 1 (no clusters at one row).
    const int tiles = (n / 16 + 3) / 4, chunks = k / 64 / 4;
    const int max_splits = std::max(1, chunks / 4);
    int wanted = 1;
    if (tiles <= slots) {
        wanted = slots / tiles;
    } else {
        double best = 0;
        auto fill_of = [&](int c) { return (double)c / ((double)((c + slots - 1) / slots) * slots); };
        best = fill_of(tiles);
        for (int sp = 2; sp <= 4; ++sp) {
            if (chunks / sp < 4) break;
            if (fill_of(tiles * sp) > best + 0.05) best = fill_of(tiles * sp), wanted = sp;
        }
    }
    wanted = std::min(std::max(1, std::min(wanted, max_splits)), chunks);
    const int cps = (chunks + wanted - 1) / wanted, splits = (chunks + cps - 1) / cps;
    const bool one_wave = tiles * splits <= slots;
    const Weights wt(copies, code, scale);
    const std::vector<uint8_t*>&w = wt.codes, &sc = wt.scales;
    void *x, *out;
    float* partial = nullptr;
    unsigned* counters = nullptr;
    CK(cudaMalloc(&x, (size_t)k * 2));
    random_bytes(x, (size_t)k * 2, 5, 0x3F, 0);
    CK(cudaMalloc(&out, (size_t)n * 2));
    CK(cudaMalloc(&partial, (size_t)splits * n * 4));
    CK(cudaMalloc(&counters, (size_t)tiles * 4));
    CK(cudaMemset(counters, 0, (size_t)tiles * 4));
    const int ctas = tiles * splits;
    Rec* rec;
    CK(cudaMalloc(&rec, sizeof(Rec) * ctas * calls));
    bs::PgemvParams p = {};
    p.x = x;
    p.out = out;
    p.partial = partial;
    p.counters = counters;
    p.x_stride = k;
    p.out_stride = n;
    p.alpha[0] = p.alpha[1] = 1.0f;
    p.m = 1;
    p.n = n;
    p.k = k;
    p.slabs = k / 64;
    p.chunks = chunks;
    p.splits = splits;
    p.chunks_per_split = cps;
    p.early_dependents = one_wave ? 1 : 0;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) {
        p.w[0] = (const uint32_t*)w[i % copies];
        p.s[0] = sc[i % copies];
        launch((const void*)probe_gemv, dim3(tiles, splits, 1), dim3(kThreads), smem, 1, s, p, rec + (size_t)i * ctas);
    }
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const double us = graph_us(exec, s, calls);
    CK(cudaStreamSynchronize(s));
    std::vector<Rec> all((size_t)ctas * calls);
    CK(cudaMemcpy(all.data(), rec, sizeof(Rec) * all.size(), cudaMemcpyDeviceToHost));
    const double mb = (code + scale) / 1e6;
    printf("GEMV %s M=1 %dx%d: %.1f MB, %d tiles x %d splits (%d slots, %d a SM), early %d, %d copies, "
           "graph %.2f us a call (%.2f TB/s)\n",
           scheme, n, k, mb, tiles, splits, slots, per_sm, (int)one_wave, copies, us, mb / us);
    std::vector<Kern> ks;
    for (int i = 0; i < calls; ++i) ks.push_back(Kern{"gemv", std::vector<Rec>(all.begin() + (size_t)i * ctas, all.begin() + (size_t)(i + 1) * ctas)});
    report(ks, 1);
    // One call's SMs: CTAs per SM and their end times against the span's end.
    const Kern& mid = ks[calls / 2];
    unsigned long long lo = ~0ull, hi = 0;
    for (auto& r : mid.recs) lo = std::min(lo, r.t0), hi = std::max(hi, r.t1);
    std::vector<int> per(sms * 2, 0);
    std::vector<double> sm_end(sms * 2, 0.0);
    for (auto& r : mid.recs) {
        per[r.sm]++;
        sm_end[r.sm] = std::max(sm_end[r.sm], (r.t1 - lo) * 1e-3);
    }
    std::vector<double> by[8];
    for (int i = 0; i < sms; ++i) by[std::min(per[i], 7)].push_back(sm_end[i]);
    for (int c = 0; c < 8; ++c)
        if (!by[c].empty())
            printf("    SMs with %d CTAs: %3zu, last end p50 %.2f max %.2f us after the first start\n", c, by[c].size(),
                   pct(by[c], 0.5), pct(by[c], 1.0));
    CK(cudaFree(x));
    CK(cudaFree(out));
    CK(cudaFree(partial));
    CK(cudaFree(counters));
    CK(cudaFree(rec));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
}

// The `wgmma` kernel (NVFP4) with the plan gemm/prepared.rs makes (K splits as the
// driver's cluster occupancy allows), after the activation tiling kernel; `hot`: one
// weight copy (the GEMM bench's warm L2) instead of rotating copies.
static void wgemm_case(int m, int n, int k, bool hot, cudaStream_t s) {
    using namespace bs::wgemm;
    const size_t code = (size_t)n * k / 2, scale = (size_t)n * k / 16;
    const int copies = hot ? 1 : std::max(2, (int)((4.0 * l2_bytes()) / (code + scale) + 0.999));
    const int calls = std::max(12, copies);
    const int slabs = k / 64;
    const int tiles_n = n / 128, tiles_m = (m + 127) / 128;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t smem = smem_bytes<bs::pgemv::TNvfp4>();
    CK(cudaFuncSetAttribute((const void*)probe_wgemm, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CK(cudaFuncSetAttribute((const void*)probe_wgemm, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    // gemm/prepared.rs Plan::wgmma: splits of at least 8 slabs (even), clusters of at most
    // 8, as many as the GPU holds every tile's cluster at once.
    auto active = [&](int c) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(c);
        cfg.blockDim = dim3(bs::wgemm::kThreads);
        cfg.dynamicSmemBytes = smem;
        cudaLaunchAttribute at;
        at.id = cudaLaunchAttributeClusterDimension;
        at.val.clusterDim.x = c;
        at.val.clusterDim.y = 1;
        at.val.clusterDim.z = 1;
        cfg.attrs = &at;
        cfg.numAttrs = 1;
        int nc = 0;
        if (cudaOccupancyMaxActiveClusters(&nc, (const void*)probe_wgemm, &cfg) != cudaSuccess) nc = 0;
        return nc;
    };
    const int tiles = tiles_n * tiles_m;
    int splits = 1, per = slabs;
    const int most = tiles < sms ? std::max(1, std::min(8, std::min(sms / tiles, slabs / 8))) : 1;
    for (int c = most; c >= 2; --c) {
        const int pp = ((slabs + c - 1) / c + 1) / 2 * 2, sp = (slabs + pp - 1) / pp;
        if (sp > 1 && active(sp) >= tiles) {
            splits = sp;
            per = pp;
            break;
        }
    }
    printf("clusters held at once: 2: %d, 3: %d, 4: %d\n", active(2), active(3), active(4));
    // Persistent without a split: one CTA an SM at most.
    const int ctas = splits > 1 ? tiles * splits : std::min(tiles, sms);
    const Weights wt(copies, code, scale);
    const std::vector<uint8_t*>&w = wt.codes, &sc = wt.scales;
    void *x, *out, *ws;
    CK(cudaMalloc(&x, (size_t)m * k * 2));
    random_bytes(x, (size_t)m * k * 2, 5, 0x3F, 0);
    CK(cudaMalloc(&out, (size_t)m * n * 2));
    const size_t image = (size_t)tiles_m * slabs * kActTile;
    CK(cudaMalloc(&ws, image));
    int acts_per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&acts_per_sm, probe_acts, 256, 0));
    const long items = (long)tiles_m * 128 * slabs * 8;
    const int acts_blocks = (int)std::min((items + 255) / 256, (long)sms * acts_per_sm);
    Rec *rec_a, *rec_g;
    CK(cudaMalloc(&rec_a, sizeof(Rec) * acts_blocks * calls));
    CK(cudaMalloc(&rec_g, sizeof(Rec) * ctas * calls));
    bs::PgemmParams p = {};
    p.x = x;
    p.out = ws;
    p.x_stride = k;
    p.out_stride = n;
    p.alpha = 1.0f;
    p.m = m;
    p.n = n;
    p.k = k;
    p.slabs = slabs;
    p.splits = splits;
    p.slabs_per_split = per;
    bs::PgemmParams g = p;
    g.x = ws;
    g.out = out;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) {
        g.w = (const uint32_t*)w[i % copies];
        g.s = sc[i % copies];
        launch((const void*)probe_acts, dim3(acts_blocks), dim3(256), 0, 1, s, p, rec_a + (size_t)i * acts_blocks);
        launch((const void*)probe_wgemm, dim3(ctas), dim3(bs::wgemm::kThreads), smem, splits > 1 ? splits : 1, s, g,
               rec_g + (size_t)i * ctas);
    }
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const double us = graph_us(exec, s, calls);
    CK(cudaStreamSynchronize(s));
    std::vector<Rec> a((size_t)acts_blocks * calls), gg((size_t)ctas * calls);
    CK(cudaMemcpy(a.data(), rec_a, sizeof(Rec) * a.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gg.data(), rec_g, sizeof(Rec) * gg.size(), cudaMemcpyDeviceToHost));
    printf("wgmma NVFP4 %dx%dx%d: %d CTAs (%d splits of %d slabs), acts %d blocks, %d copies, graph %.2f us a call\n", m,
           n, k, ctas, splits, per, acts_blocks, copies, us);
    std::vector<Kern> ks;
    for (int i = 0; i < calls; ++i) {
        ks.push_back(Kern{"acts", std::vector<Rec>(a.begin() + (size_t)i * acts_blocks, a.begin() + (size_t)(i + 1) * acts_blocks)});
        ks.push_back(Kern{"wgmma", std::vector<Rec>(gg.begin() + (size_t)i * ctas, gg.begin() + (size_t)(i + 1) * ctas)});
    }
    report(ks, 2);
    CK(cudaFree(x));
    CK(cudaFree(out));
    CK(cudaFree(ws));
    CK(cudaFree(rec_a));
    CK(cudaFree(rec_g));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
}

int main() {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, l2_bytes() >> 20);
    unsigned long long* t;
    CK(cudaMalloc(&t, 8));
    tick<<<1, 1>>>(t);
    unsigned long long res;
    CK(cudaMemcpy(&res, t, 8, cudaMemcpyDeviceToHost));
    printf("globaltimer: smallest step seen %llu ns\n", res);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int sms = prop.multiProcessorCount;
    const bool gemm = getenv("PROBE_GEMM") != nullptr;
    for (int r = 0; r < 2; ++r) {
        gemv_case<bs::pgemv::TNvfp4>("nvfp4", 28672, 8192, sms, s);
        gemv_case<bs::pgemv::TInt4G128>("int4-g128", 28672, 8192, sms, s);
        gemv_case<bs::pgemv::TNvfp4>("nvfp4", 16384, 2048, sms, s);
        gemv_case<bs::pgemv::TNvfp4>("nvfp4", 4096, 4096, sms, s);
    }
    if (gemm) {
        for (bool hot : {false, true}) {
            wgemm_case(128, 4096, 4096, hot, s);
            wgemm_case(128, 7168, 2048, hot, s);
        }
        wgemm_case(128, 28672, 8192, false, s);
    }
    return 0;
}
