/* Test target for register-state restoration: spins in user code (no system calls) with
 * values held in vector registers across the whole loop, checks them every iteration and
 * counts mismatches. Prints "ready", runs argv[1] seconds (checking the clock only every
 * few million iterations, through the vDSO), then prints "bad N" and exits 0. An
 * injector that leaves the stopped thread's SSE/AVX state changed makes N non-zero:
 * dlopen's string functions overwrite xmm registers and clear the upper ymm halves. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

volatile double seed_a = 3.0, seed_b = 5.0;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2"))) static long spin_avx(double secs) {
    __m256d a = _mm256_set1_pd(seed_a), b = _mm256_set1_pd(seed_b);
    long bad = 0;
    double end = now() + secs;
    do {
        for (long i = 0; i < 4000000; i++) {
            __m256d s = _mm256_add_pd(a, b); /* 8.0 in every lane */
            __m128d hi = _mm256_extractf128_pd(s, 1), lo = _mm256_castpd256_pd128(s);
            if (_mm_cvtsd_f64(hi) != 8.0 || _mm_cvtsd_f64(lo) != 8.0) bad++;
            __asm__ volatile("" : "+x"(a), "+x"(b));
        }
    } while (now() < end);
    return bad;
}

static long spin_sse(double secs) {
    __m128d a = _mm_set1_pd(seed_a), b = _mm_set1_pd(seed_b);
    long bad = 0;
    double end = now() + secs;
    do {
        for (long i = 0; i < 4000000; i++) {
            if (_mm_cvtsd_f64(_mm_add_pd(a, b)) != 8.0) bad++;
            __asm__ volatile("" : "+x"(a), "+x"(b));
        }
    } while (now() < end);
    return bad;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3.0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("ready\n");
    long bad = __builtin_cpu_supports("avx2") ? spin_avx(secs) : spin_sse(secs);
    printf("bad %ld\n", bad);
    return 0;
}
