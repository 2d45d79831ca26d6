/* ring_store.c - what a hooked call's two costly steps (one TSC read, one 64-byte ring
 * slot store) cost next to the work around them, on this machine.
 *
 * Part 1, one thread: a 64 MiB array touched at a random line per iteration (a load, or
 * a store), with and without an rdtsc or a fence after it: does rdtsc wait for earlier
 * cache-missing loads, and for earlier cache-missing stores?
 * Part 2, a producer thread and a consumer thread over a 16384-slot ring of 64-byte
 * slots, as the shim's per-thread ring and its flusher (the consumer drains everything
 * published, then sleeps 100 us): ns per push on the producer for each way of storing
 * the slot, with and without an rdtsc per push, alone and next to a random store into a
 * 4 MiB table (the test runtime's access pattern).
 * Prints one line per case: ns per iteration. Build: cc -O2 -pthread ring_store.c */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

static double now(void) { struct timespec x; clock_gettime(CLOCK_MONOTONIC, &x); return x.tv_sec + x.tv_nsec * 1e-9; }
static volatile uint64_t sink;

/* ---------- part 1 ---------- */
#define BIG (64u << 20)
static uint8_t *big;
enum { P_LOAD, P_STORE };
enum { F_NONE, F_RDTSC, F_LFENCE, F_SFENCE, F_MFENCE };
static const char *fname[] = {"nothing", "rdtsc", "lfence", "sfence", "mfence"};
static double part1(int access, int fence) {
    const long R = 4000000;
    uint64_t k = 88172645463325252ull, acc = 0;
    double t0 = now();
    for (long i = 0; i < R; i++) {
        k ^= k << 13; k ^= k >> 7; k ^= k << 17;
        uint64_t off = (k % (BIG / 64)) * 64;
        if (access == P_LOAD) acc += big[off];
        else big[off] = (uint8_t)i;
        switch (fence) {
        case F_RDTSC: acc += __rdtsc(); break;
        case F_LFENCE: _mm_lfence(); break;
        case F_SFENCE: _mm_sfence(); break;
        case F_MFENCE: _mm_mfence(); break;
        }
    }
    sink = acc;
    return (now() - t0) * 1e9 / R;
}

/* ---------- part 2 ---------- */
#define SLOTS 16384
typedef struct { uint64_t w[8]; } __attribute__((aligned(64))) Slot;
static Slot *ring;
static struct { _Alignas(64) volatile uint64_t head; _Alignas(64) volatile uint64_t tail; _Alignas(64) volatile int stop; } q;
static uint64_t *table; /* 4 MiB */
enum { S_PLAIN, S_PLAIN_PF4, S_PLAIN_PF16, S_NT_SFENCE, S_NT_SFENCE16, S_NONE };
static const char *sname[] = {"plain stores", "plain + prefetchw 4 ahead", "plain + prefetchw 16 ahead",
                              "non-temporal + sfence per push", "non-temporal + sfence per 16 pushes", "no slot store"};
static void *consumer(void *arg) {
    (void)arg;
    uint64_t acc = 0;
    struct timespec nap = {0, 100000};
    while (!q.stop) {
        uint64_t h = __atomic_load_n(&q.head, __ATOMIC_ACQUIRE), t = q.tail;
        for (; t < h; t++) { Slot *s = &ring[t & (SLOTS - 1)]; acc += s->w[0] + s->w[7]; }
        __atomic_store_n(&q.tail, t, __ATOMIC_RELEASE);
        nanosleep(&nap, NULL);
    }
    sink = acc;
    return NULL;
}
static double part2(int store, int tsc, int work) {
    const long R = 3000000;
    memset(&q, 0, sizeof q);
    pthread_t c;
    pthread_create(&c, NULL, consumer, NULL);
    uint64_t k = 88172645463325252ull, pending = 0;
    double t0 = now();
    for (long i = 0; i < R; i++) {
        if (work) { /* the runtime's insert into its table */
            k ^= k << 13; k ^= k >> 7; k ^= k << 17;
            table[k & ((4u << 20) / 8 - 1)] = (uint64_t)i;
        }
        uint64_t ts = tsc ? __rdtsc() : (uint64_t)i;
        uint64_t h = q.head;
        while (h - __atomic_load_n(&q.tail, __ATOMIC_RELAXED) >= SLOTS) _mm_pause();
        Slot *s = &ring[h & (SLOTS - 1)];
        if (store == S_NT_SFENCE || store == S_NT_SFENCE16) {
            __m128i a = _mm_set_epi64x((long long)ts, i), b = _mm_set_epi64x(i, (long long)k);
            _mm_stream_si128((__m128i *)&s->w[0], a); _mm_stream_si128((__m128i *)&s->w[2], b);
            _mm_stream_si128((__m128i *)&s->w[4], a); _mm_stream_si128((__m128i *)&s->w[6], b);
            if (store == S_NT_SFENCE || ++pending == 16) { _mm_sfence(); pending = 0; __atomic_store_n(&q.head, h + 1, __ATOMIC_RELEASE); }
            else q.head = h + 1; /* published late by the next fence (the consumer may read early: measurement only) */
        } else if (store != S_NONE) {
            s->w[0] = ts; s->w[1] = (uint64_t)i; s->w[2] = k; s->w[3] = (uint64_t)i;
            s->w[4] = ts; s->w[5] = (uint64_t)i; s->w[6] = k; s->w[7] = (uint64_t)i;
            __atomic_store_n(&q.head, h + 1, __ATOMIC_RELEASE);
            if (store == S_PLAIN_PF4) _mm_prefetch((const char *)&ring[(h + 4) & (SLOTS - 1)], _MM_HINT_ET0);
            if (store == S_PLAIN_PF16) _mm_prefetch((const char *)&ring[(h + 16) & (SLOTS - 1)], _MM_HINT_ET0);
        } else {
            sink = ts;
            __atomic_store_n(&q.head, h + 1, __ATOMIC_RELEASE);
        }
    }
    double el = now() - t0;
    q.stop = 1;
    pthread_join(c, NULL);
    return el * 1e9 / R;
}

int main(void) {
    big = aligned_alloc(4096, BIG); memset(big, 1, BIG);
    ring = aligned_alloc(4096, SLOTS * sizeof(Slot)); memset(ring, 0, SLOTS * sizeof(Slot));
    table = aligned_alloc(4096, 4u << 20); memset(table, 0, 4u << 20);
    for (int a = P_LOAD; a <= P_STORE; a++)
        for (int f = F_NONE; f <= F_MFENCE; f++)
            printf("part 1: random %s miss then %s: %.1f ns per iteration\n", a == P_LOAD ? "load" : "store", fname[f], part1(a, f));
    for (int work = 0; work <= 1; work++)
        for (int tsc = 0; tsc <= 1; tsc++)
            for (int s = S_PLAIN; s <= S_NONE; s++)
                printf("part 2: %s, %s, %s: %.1f ns per push\n", work ? "with a random 4 MiB table store" : "ring only",
                       tsc ? "rdtsc per push" : "no clock", sname[s], part2(s, tsc, work));
    return 0;
}
