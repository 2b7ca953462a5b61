// llama.cpp's own matrix-vector product, timed the way `waste bench kernels`
// times waste's: one thread, GB/s of weight bytes, streaming over a set of
// matrices of at least STREAM_BYTES (weights from RAM, as in decode) and on
// one matrix repeated (resident), beside one core's plain read of the same
// bytes, repetitions interleaved, medians. The product is ggml's MUL_MAT node
// on the CPU backend, so it runs what llama.cpp runs for that type on this
// CPU: the activations quantized to the type's vec_dot type inside the node,
// then either the type's vec_dot (BUFT "plain": a plain CPU buffer, what
// llama.cpp does with use_extra_bufts=False) or, where llama.cpp repacks the
// type for this CPU (BUFT "repack", its default), the repacked GEMV.
//
// With TOKENS > 1 the activations are TOKENS columns, a prefill's batched
// product: llama.cpp then takes its GEMM paths (its repacked GEMM, or
// llamafile's sgemm for the types it covers) as it does for a prompt. GB/s
// stays weight bytes per product, as `waste bench kernels --n` counts them.
//
// Built and driven by scripts/bench-llama-kernels.py; prints one JSON line.
// Usage: harness TYPE ROWS COLS STREAM_BYTES REPEATS plain|repack TOKENS
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

// One core summing the bytes as u64 words, four accumulators (the read
// baseline of waste's bench).
static uint64_t mem_read(struct ggml_tensor **w, int count) {
    uint64_t acc[4] = {0, 0, 0, 0};
    for (int i = 0; i < count; i++) {
        const uint64_t *p = (const uint64_t *)w[i]->data;
        size_t words = ggml_nbytes(w[i]) / 8;
        for (size_t j = 0; j + 4 <= words; j += 4) {
            acc[0] += p[j];
            acc[1] += p[j + 1];
            acc[2] += p[j + 2];
            acc[3] += p[j + 3];
        }
    }
    return acc[0] + acc[1] + acc[2] + acc[3];
}

// Seeded standard normals (splitmix64, Box-Muller).
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return ((double)(z >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) {
    return (float)(sqrt(-2.0 * log(uniform())) * cos(6.283185307179586 * uniform()));
}

static ggml_backend_buffer_type_t repack_buft(ggml_backend_dev_t dev) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
    ggml_backend_dev_get_extra_bufts_t get =
        (ggml_backend_dev_get_extra_bufts_t)ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts");
    if (!get) return NULL;
    for (ggml_backend_buffer_type_t *b = get(dev); b && *b; b++) {
        if (strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 8) {
        fprintf(stderr, "usage: %s TYPE ROWS COLS STREAM_BYTES REPEATS plain|repack TOKENS\n", argv[0]);
        return 2;
    }
    enum ggml_type type = (enum ggml_type)atoi(argv[1]);
    int64_t rows = atoll(argv[2]), cols = atoll(argv[3]);
    size_t stream_bytes = (size_t)atoll(argv[4]);
    int repeats = atoi(argv[5]);
    int want_repack = strcmp(argv[6], "repack") == 0;
    int64_t tokens = atoll(argv[7]);
    if (tokens <= 0 || tokens > 4096 || rows <= 0 || cols <= 0 || repeats <= 0 || cols % ggml_blck_size(type) != 0) {
        fprintf(stderr, "bad shape %lldx%lld for %s\n", (long long)rows, (long long)cols, ggml_type_name(type));
        return 2;
    }

    ggml_cpu_init();
    ggml_backend_t backend = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(backend, 1);
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
    if (want_repack) {
        buft = repack_buft(dev);
        if (!buft) {
            printf("{\"type\": \"%s\", \"buft\": \"repack\", \"supported\": false}\n", ggml_type_name(type));
            return 0;
        }
    }

    size_t one = ggml_row_size(type, cols) * (size_t)rows;
    int count = (int)((stream_bytes + one - 1) / one);
    if (count < 1) count = 1;
    int passes = (int)((32u << 20) / one) + 1;  // resident: ~32 MiB of work per timing
    int nodes = count > passes ? count : passes;

    struct ggml_init_params wp = {(size_t)(count + 1) * ggml_tensor_overhead(), NULL, true};
    struct ggml_context *wctx = ggml_init(wp);
    struct ggml_tensor **w = calloc((size_t)count, sizeof *w);
    for (int i = 0; i < count; i++) w[i] = ggml_new_tensor_2d(wctx, type, cols, rows);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
    if (!wbuf) {
        fprintf(stderr, "could not allocate %d matrices of %zu bytes\n", count, one);
        return 1;
    }

    // The graphs: the streaming one multiplies every matrix once, the
    // resident one the first matrix `passes` times.
    size_t gmem = (size_t)(2 * nodes + 8) * ggml_tensor_overhead() + 2 * ggml_graph_overhead_custom((size_t)nodes + 8, false);
    struct ggml_init_params gp = {gmem, NULL, true};
    struct ggml_context *gctx = ggml_init(gp);
    struct ggml_tensor *x = ggml_new_tensor_2d(gctx, GGML_TYPE_F32, cols, tokens);
    ggml_set_input(x);
    struct ggml_cgraph *stream_g = ggml_new_graph_custom(gctx, (size_t)nodes + 8, false);
    struct ggml_cgraph *res_g = ggml_new_graph_custom(gctx, (size_t)nodes + 8, false);
    for (int i = 0; i < count; i++) {
        struct ggml_tensor *y = ggml_mul_mat(gctx, w[i], x);
        ggml_set_output(y);
        ggml_build_forward_expand(stream_g, y);
    }
    for (int i = 0; i < passes; i++) {
        struct ggml_tensor *y = ggml_mul_mat(gctx, w[0], x);
        ggml_set_output(y);
        ggml_build_forward_expand(res_g, y);
    }
    if (want_repack && !ggml_backend_dev_supports_op(dev, ggml_graph_node(stream_g, 0))) {
        printf("{\"type\": \"%s\", \"buft\": \"repack\", \"supported\": false}\n", ggml_type_name(type));
        return 0;
    }

    // Weights: seeded normals quantized by llama.cpp's own quantizer (a
    // uniform importance matrix for the types that need one), one matrix
    // copied into every slot of the set.
    float *src = malloc((size_t)(rows * cols) * sizeof *src);
    for (int64_t i = 0; i < rows * cols; i++) src[i] = normal() * 0.02f;
    float *imatrix = NULL;
    if (ggml_quantize_requires_imatrix(type)) {
        imatrix = malloc((size_t)cols * sizeof *imatrix);
        for (int64_t i = 0; i < cols; i++) imatrix[i] = 1.0f;
    }
    void *q = malloc(one);
    ggml_quantize_init(type);
    size_t made = ggml_quantize_chunk(type, src, q, 0, rows, cols, imatrix);
    if (made != one) {
        fprintf(stderr, "quantized %zu bytes, expected %zu\n", made, one);
        return 1;
    }
    for (int i = 0; i < count; i++) ggml_backend_tensor_set(w[i], q, 0, one);

    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_cpu_buffer_type());
    size_t xn = (size_t)(cols * tokens);
    float *xs = malloc(xn * sizeof *xs);
    for (size_t i = 0; i < xn; i++) xs[i] = (float)((int64_t)(i % 97) - 48) / 50.0f;

    double *t_read_s = calloc((size_t)repeats, sizeof(double)), *t_kern_s = calloc((size_t)repeats, sizeof(double));
    double *t_read_r = calloc((size_t)repeats, sizeof(double)), *t_kern_r = calloc((size_t)repeats, sizeof(double));
    volatile uint64_t sink = 0;
    for (int mode = 0; mode < 2; mode++) {
        struct ggml_cgraph *g = mode == 0 ? stream_g : res_g;
        if (!ggml_gallocr_alloc_graph(galloc, g)) {
            fprintf(stderr, "graph allocation failed\n");
            return 1;
        }
        ggml_backend_tensor_set(x, xs, 0, xn * sizeof *xs);
        ggml_backend_graph_compute(backend, g);  // warm-up (and the repack's first touch)
        size_t bytes = mode == 0 ? one * (size_t)count : one * (size_t)passes;
        for (int r = 0; r < repeats; r++) {
            double t0 = now();
            if (mode == 0) {
                sink += mem_read(w, count);
            } else {
                for (int p = 0; p < passes; p++) sink += mem_read(w, 1);
            }
            double t1 = now();
            ggml_backend_graph_compute(backend, g);
            double t2 = now();
            (mode == 0 ? t_read_s : t_read_r)[r] = (double)bytes / (t1 - t0) / 1e9;
            (mode == 0 ? t_kern_s : t_kern_r)[r] = (double)bytes / (t2 - t1) / 1e9;
        }
    }
    printf("{\"type\": \"%s\", \"buft\": \"%s\", \"supported\": true, \"rows\": %lld, \"cols\": %lld, "
           "\"bytes\": %zu, \"matrices\": %d, \"streaming\": %.4f, \"read_streaming\": %.4f, "
           "\"resident\": %.4f, \"read_resident\": %.4f, \"sink\": %llu}\n",
           ggml_type_name(type), want_repack ? "repack" : "plain", (long long)rows, (long long)cols, one, count,
           median(t_kern_s, repeats), median(t_read_s, repeats), median(t_kern_r, repeats),
           median(t_read_r, repeats), (unsigned long long)(sink & 1));
    return 0;
}
