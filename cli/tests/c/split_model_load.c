/* split_model_load.c - the split-model loading mistake, as a HIP program.
 *
 * A loader that hipMallocs a whole model file (MODEL bytes) to copy it to the GPU, when
 * this process needed only NEEDED bytes of it (its split of the layers); the request
 * fails, and the loader then allocates just its split, in PARTS pieces. Around it the
 * usual: a pinned staging buffer (hipHostMalloc), a registered host buffer
 * (hipHostRegister), optionally managed memory (hipMallocManaged, MANAGED bytes, left to
 * the process's exit), and the memory held for HOLD_MS milliseconds (so `memwatch run`
 * reads the amdgpu counters while it is live) before the rest is freed.
 *
 *   split_model_load MODEL NEEDED PARTS MANAGED HOLD_MS
 *
 * Written against ROCm's hip_runtime_api.h (Debian's ROCm 5.2); linked with
 * -lamdhip64, it runs over the simulated runtime (its libamdhip64.so link, with
 * MEMWATCH_TESTRT_CAPACITY / MEMWATCH_TESTRT_INTEGRATED for an APU) and over the real
 * libamdhip64, where without an AMD GPU every call fails with the runtime's own code.
 * Prints every call's result, so runs with and without memwatch can be compared. */
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static unsigned long long arg(char **argv, int i) { return strtoull(argv[i], NULL, 0); }

/* The names of the codes this program meets (the simulated runtime has no
 * hipGetErrorName). */
static const char *code_name(hipError_t r) {
    switch ((int)r) {
    case 0: return "hipSuccess";
    case 2: return "hipErrorOutOfMemory";
    case 100: return "hipErrorNoDevice";
    case 101: return "hipErrorInvalidDevice";
    default: return "other";
    }
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODEL NEEDED PARTS MANAGED HOLD_MS\n", argv[0]);
        return 2;
    }
    unsigned long long model = arg(argv, 1), needed = arg(argv, 2), parts = arg(argv, 3);
    unsigned long long managed = arg(argv, 4), hold_ms = arg(argv, 5);
    if (parts == 0 || parts > 64) parts = 1;

    printf("hipSetDevice r=%d\n", (int)hipSetDevice(0));
    int integrated = -1;
    hipError_t r = hipDeviceGetAttribute(&integrated, hipDeviceAttributeIntegrated, 0);
    printf("hipDeviceGetAttribute(integrated) r=%d value=%d\n", (int)r, r == hipSuccess ? integrated : -1);

    void *staging = NULL;
    printf("hipHostMalloc(64 MiB) r=%d\n", (int)hipHostMalloc(&staging, 64u << 20, 0));
    size_t reg_bytes = 16u << 20;
    void *host = malloc(reg_bytes);
    hipError_t rr = hipHostRegister(host, reg_bytes, 0);
    printf("hipHostRegister(16 MiB) r=%d\n", (int)rr);

    /* The whole file at once. */
    void *whole = NULL;
    r = hipMalloc(&whole, model);
    printf("hipMalloc(model %llu) r=%d %s\n", model, (int)r, code_name(r));
    if (r == hipSuccess) hipFree(whole);

    /* What this rank needed: its split, in parts. */
    void *part[64] = {0};
    unsigned long long each = needed / parts, got = 0;
    for (unsigned long long i = 0; i < parts; i++) {
        unsigned long long n = i + 1 == parts ? needed - each * (parts - 1) : each;
        r = hipMalloc(&part[i], n);
        printf("hipMalloc(part %llu: %llu) r=%d\n", i, n, (int)r);
        if (r == hipSuccess) got += n;
    }
    void *kv = NULL;
    if (managed) printf("hipMallocManaged(%llu) r=%d\n", managed, (int)hipMallocManaged(&kv, managed, 1));
    printf("loaded %llu of %llu bytes\n", got, needed);
    fflush(stdout);

    struct timespec ts = {(time_t)(hold_ms / 1000), (long)(hold_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);

    for (unsigned long long i = 0; i < parts; i++)
        if (part[i]) hipFree(part[i]);
    /* The managed buffer is left to the process's exit (the simulated runtime's hipFree
     * takes only hipMalloc memory). */
    if (rr == hipSuccess) hipHostUnregister(host);
    free(host);
    if (staging) hipHostFree(staging);
    return 0;
}
