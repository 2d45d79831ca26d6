/* rdtsc_mlp.c - what one TSC read costs next to independent cache-missing loads.
 * The loop inserts keys into a 4 MiB hash table at a hashed slot (the access pattern of
 * the test runtime's simulated heap, agents/preload/tests/runtime): without a clock read
 * the CPU overlaps the misses of consecutive iterations; a `rdtsc` between them (what a
 * hooked call does once) stops that overlap on the CPUs measured, so each miss is paid in
 * full. Used by bench/shim_overhead.sh to explain the shim's added cost on that runtime.
 * A last line times `rdtsc` alone in a loop (its own cost on this machine, no misses).
 * Prints one line per mode: ns per iteration. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>
#define N (1u << 17)
typedef struct { uint64_t key, size; int kind, state, dev; } Entry;
static Entry t[N];
static volatile uint64_t sink;
static double now(void) { struct timespec x; clock_gettime(CLOCK_MONOTONIC, &x); return x.tv_sec + x.tv_nsec * 1e-9; }
int main(void) {
    const long R = 3000000;
    const char *names[] = {"no clock read", "one rdtsc", "one CLOCK_MONOTONIC_COARSE read"};
    uint64_t k = 0;
    for (int mode = 0; mode < 3; mode++) {
        double t0 = now();
        for (long i = 0; i < R; i++) {
            k += 256;
            uint32_t s = (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 47) & (N - 1);
            if (mode == 1) sink += __rdtsc();
            if (mode == 2) { struct timespec x; clock_gettime(CLOCK_MONOTONIC_COARSE, &x); sink += (uint64_t)x.tv_nsec; }
            while (t[s].state == 1) s = (s + 1) & (N - 1);
            t[s].state = 1; t[s].key = k; t[s].state = 2;
        }
        printf("%s: %.1f ns per insert\n", names[mode], (now() - t0) * 1e9 / R);
    }
    double t0 = now();
    uint64_t acc = 0;
    for (long i = 0; i < R; i++) acc += __rdtsc();
    sink = acc;
    printf("rdtsc alone: %.1f ns per read\n", (now() - t0) * 1e9 / R);
    return 0;
}
