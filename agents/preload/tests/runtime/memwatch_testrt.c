/* memwatch_testrt.c - a simulated HIP + CUDA (driver and runtime) library for the
 * memwatch shim tests. Exports the entry points memwatch intercepts over a simulated
 * heap: 8 devices, capacity per device from MEMWATCH_TESTRT_CAPACITY (bytes, default
 * 1 GiB); MEMWATCH_TESTRT_INTEGRATED=1 makes them report hipDeviceAttributeIntegrated = 1
 * (an APU such as Strix Halo; with an APU-sized capacity, e.g. 128 GiB). Each device
 * has an identity (UUID and PCI bus id, in each runtime's own form) of the physical GPU
 * its ordinal stands for under CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES (numbers only:
 * "2,0" makes ordinal 0 GPU 2); MEMWATCH_TESTRT_MIG=1 makes each CUDA device a MIG
 * instance (cuDeviceGetUuid names its GPU, cuDeviceGetUuid_v2 the instance). Device pointers are unmapped addresses ((device+1) << 40 + offset); host
 * (pinned) memory is real malloc memory. Errors use the real codes: out of memory 2
 * (hipErrorOutOfMemory, CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation), invalid
 * value 1, invalid device 101, invalid context 201, file not found 301, invalid handle
 * 400, not found 500. Every call sets errno (0x5eed on success, ENOMEM / EINVAL on
 * failure) so tests can check that the shim hands errno back unchanged.
 * Tests link it as libmemwatch_testrt.so and also reach it through symlinks named
 * libamdhip64.so / libcuda.so / libcudart.so. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NDEV 8
/* Hash table slots per heap (bench/shim_overhead.sh also builds a 2^10 variant whose
 * table stays in cache, to separate the shim's own cost from the cache misses of this
 * 4 MiB table). */
#ifndef MEMWATCH_TESTRT_TABLE_BITS
#define MEMWATCH_TESTRT_TABLE_BITS 17
#endif
#define TABLE (1u << MEMWATCH_TESTRT_TABLE_BITS)
#define HOSTHEAP NDEV
#define OK_ERRNO 0x5eed

enum { K_DEV = 1, K_MANAGED, K_HOST, K_ASYNC, K_PHYS, K_RESERVE, K_POOL, K_STREAM, K_MODULE, K_MAP, K_REGISTERED };

typedef struct { uint64_t key, size; int kind, state; int dev; } Entry; /* state: 0 empty, 1 live, 2 dead */
/* Each device's heap starts on its own cache line. Unaligned, the array began in the
 * line holding `once`, which every call of every thread reads (pthread_once), while
 * device 0's lock word is written on every device-0 call: with 8 threads on 8 devices
 * each call waited for that line to come back from another core (an H100 host, 16 cores:
 * 143 ns per call instead of 44, 8 threads; GCC 13 put `once` 32 bytes before `heaps`,
 * GCC 12 one line earlier). */
typedef struct { pthread_mutex_t mu; uint64_t used, next; Entry t[TABLE]; } __attribute__((aligned(64))) Heap;
static Heap heaps[NDEV + 1];
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t cap_bytes = 1ull << 30;
static int integrated = 0;
static __thread int cur_dev = 0;

static void init_heaps(void) {
    const char *c = getenv("MEMWATCH_TESTRT_CAPACITY");
    if (c && *c) cap_bytes = strtoull(c, NULL, 0);
    const char *i = getenv("MEMWATCH_TESTRT_INTEGRATED");
    integrated = i && !strcmp(i, "1");
    for (int i = 0; i <= NDEV; i++) pthread_mutex_init(&heaps[i].mu, NULL);
}
static int ret(int r) { errno = r == 0 ? OK_ERRNO : (r == 2 ? ENOMEM : EINVAL); return r; }
static uint32_t slot_of(uint64_t k) { return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 47) & (TABLE - 1); }

/* Inserts key; 0 ok, 2 table full. Caller holds the lock. */
static int put(Heap *h, uint64_t key, uint64_t size, int kind, int dev) {
    uint32_t i = slot_of(key);
    for (uint32_t n = 0; n < TABLE; n++, i = (i + 1) & (TABLE - 1)) {
        if (h->t[i].state != 1) { h->t[i] = (Entry){key, size, kind, 1, dev}; return 0; }
    }
    return 2;
}
static Entry *find(Heap *h, uint64_t key) {
    uint32_t i = slot_of(key);
    for (uint32_t n = 0; n < TABLE; n++, i = (i + 1) & (TABLE - 1)) {
        if (h->t[i].state == 0) return NULL;
        if (h->t[i].state == 1 && h->t[i].key == key) return &h->t[i];
    }
    return NULL;
}

/* Address reuse between threads, on request (mwtest reuse-race): after
 * memwatchTestrtHoldNextAlloc(), the next device allocation, once entered, waits until a
 * device free has completed and then hands out the address just freed, as a stream-
 * ordered pool hands a released block to a concurrent caller. The flags sit on their own
 * line and are only read on the hot paths. */
static struct {
    int armed, waiting;
    uint64_t freed;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} __attribute__((aligned(64))) hold = {0, 0, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
void memwatchTestrtHoldNextAlloc(void) {
    pthread_mutex_lock(&hold.mu);
    hold.freed = 0;
    __atomic_store_n(&hold.armed, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold.mu);
}
/* 1 once the held allocation has been entered and waits for a free. */
int memwatchTestrtAllocWaiting(void) { return __atomic_load_n(&hold.waiting, __ATOMIC_ACQUIRE); }
/* The held allocation: wait for a free, then take its address; 0 = not held. */
static uint64_t held_alloc(void) {
    if (!__atomic_load_n(&hold.armed, __ATOMIC_ACQUIRE)) return 0;
    pthread_mutex_lock(&hold.mu);
    if (!hold.armed) { pthread_mutex_unlock(&hold.mu); return 0; }
    hold.armed = 0;
    __atomic_store_n(&hold.waiting, 1, __ATOMIC_RELEASE);
    while (!hold.freed) pthread_cond_wait(&hold.cv, &hold.mu);
    uint64_t p = hold.freed;
    hold.freed = 0;
    __atomic_store_n(&hold.waiting, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&hold.mu);
    return p;
}
static void freed_for_hold(uint64_t p) {
    if (!__atomic_load_n(&hold.waiting, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&hold.mu);
    if (hold.waiting && !hold.freed) { hold.freed = p; pthread_cond_broadcast(&hold.cv); }
    pthread_mutex_unlock(&hold.mu);
}

/* Device-memory allocation on `dev`, counted against the capacity. */
static int dev_alloc(int dev, uint64_t size, int kind, uint64_t *out) {
    pthread_once(&once, init_heaps);
    if (dev < 0 || dev >= NDEV) return 101;
    if (!out) return 1;
    Heap *h = &heaps[dev];
    uint64_t reused = held_alloc();
    if (reused) {
        pthread_mutex_lock(&h->mu);
        int r = put(h, reused, size, kind, dev);
        if (!r) h->used += size;
        pthread_mutex_unlock(&h->mu);
        if (r) return 2;
        *out = reused;
        return 0;
    }
    pthread_mutex_lock(&h->mu);
    if (size > cap_bytes || h->used + size > cap_bytes) { pthread_mutex_unlock(&h->mu); return 2; }
    uint64_t p = ((uint64_t)(dev + 1) << 40) + 0x1000 + h->next;
    if (put(h, p, size, kind, dev)) { pthread_mutex_unlock(&h->mu); return 2; }
    h->next += (size + 255) & ~255ull;
    if (size == 0) h->next += 256;
    h->used += size;
    pthread_mutex_unlock(&h->mu);
    *out = p;
    return 0;
}
static int dev_free(uint64_t p, int kind) {
    pthread_once(&once, init_heaps);
    int dev = (int)(p >> 40) - 1;
    if (dev < 0 || dev >= NDEV) return 1;
    Heap *h = &heaps[dev];
    pthread_mutex_lock(&h->mu);
    Entry *e = find(h, p);
    if (!e || e->kind != kind) { pthread_mutex_unlock(&h->mu); return 1; }
    e->state = 2; h->used -= e->size;
    pthread_mutex_unlock(&h->mu);
    freed_for_hold(p);
    return 0;
}
/* Objects without device memory (host memory, streams, pools, reservations ...). */
static uint64_t obj_counter = 0xC0DE0000;
static int obj_new(uint64_t key, uint64_t size, int kind) {
    pthread_once(&once, init_heaps);
    Heap *h = &heaps[HOSTHEAP];
    pthread_mutex_lock(&h->mu);
    if (!key) key = (obj_counter += 0x100);
    int r = put(h, key, size, kind, -1);
    pthread_mutex_unlock(&h->mu);
    return r;
}
static uint64_t obj_alloc_key(void) {
    pthread_once(&once, init_heaps);
    Heap *h = &heaps[HOSTHEAP];
    pthread_mutex_lock(&h->mu);
    uint64_t k = (obj_counter += 0x100);
    pthread_mutex_unlock(&h->mu);
    return k;
}
static int obj_del(uint64_t key, int kind, uint64_t *size) {
    pthread_once(&once, init_heaps);
    Heap *h = &heaps[HOSTHEAP];
    pthread_mutex_lock(&h->mu);
    Entry *e = find(h, key);
    if (!e || e->kind != kind) { pthread_mutex_unlock(&h->mu); return 1; }
    if (size) *size = e->size;
    e->state = 2;
    pthread_mutex_unlock(&h->mu);
    return 0;
}
static int obj_exists(uint64_t key, int kind) {
    pthread_once(&once, init_heaps);
    Heap *h = &heaps[HOSTHEAP];
    pthread_mutex_lock(&h->mu);
    Entry *e = find(h, key);
    int ok = e && e->kind == kind;
    pthread_mutex_unlock(&h->mu);
    return ok;
}
static int host_alloc(void **pp, size_t size) {
    if (!pp) return 1;
    if (size > cap_bytes) return 2;
    void *p = malloc(size ? size : 1);
    if (!p) return 2;
    if (obj_new((uint64_t)(uintptr_t)p, size, K_HOST)) { free(p); return 2; }
    *pp = p;
    return 0;
}
static int host_free(void *p) {
    if (!p) return 0;
    if (obj_del((uint64_t)(uintptr_t)p, K_HOST, NULL)) return 1;
    free(p);
    return 0;
}
static int set_dev(int d) { if (d < 0 || d >= NDEV) return 101; cur_dev = d; return 0; }
static int prop_dev(const void *prop) {
    if (!prop) return -1;
    const int *w = (const int *)prop;
    return w[2] == 1 ? w[3] : -1;
}

/* Marker the shim uses to label devices as simulated; and a test query. */
int memwatchSimulatedRuntime(void) { return 1; }
unsigned long long memwatchTestrtUsedBytes(int dev) {
    pthread_once(&once, init_heaps);
    if (dev < 0 || dev >= NDEV) return 0;
    pthread_mutex_lock(&heaps[dev].mu);
    uint64_t u = heaps[dev].used;
    pthread_mutex_unlock(&heaps[dev].mu);
    return u;
}

/* ------------------------------ HIP ------------------------------ */
typedef void *hipStream_t;
static inline int hip_malloc(void **p, size_t s) { uint64_t v; int r = dev_alloc(cur_dev, s, K_DEV, &v); if (!r) *p = (void *)v; return ret(r); }
static inline int hip_free(void *p) { return ret(p ? dev_free((uint64_t)p, K_DEV) : 0); }
int hipMalloc(void **p, size_t s) { return hip_malloc(p, s); }
int hipFree(void *p) { return hip_free(p); }
/* hipMalloc / hipFree under names the shim does not intercept: `mwtest bench-ab` times
 * the same runtime code with and without the shim in one process, batch by batch. */
int memwatchTestrtUnhookedMalloc(void **p, size_t s) { return hip_malloc(p, s); }
int memwatchTestrtUnhookedFree(void *p) { return hip_free(p); }
int hipMallocManaged(void **p, size_t s, unsigned f) { (void)f; uint64_t v; int r = dev_alloc(cur_dev, s, K_MANAGED, &v); if (!r) *p = (void *)v; return ret(r); }
int hipMallocAsync(void **p, size_t s, hipStream_t st) { (void)st; uint64_t v; int r = dev_alloc(cur_dev, s, K_ASYNC, &v); if (!r) *p = (void *)v; return ret(r); }
int hipFreeAsync(void *p, hipStream_t st) { (void)st; return ret(p ? dev_free((uint64_t)p, K_ASYNC) : 0); }
int hipMallocFromPoolAsync(void **p, size_t s, void *pool, hipStream_t st) {
    (void)st; if (!obj_exists((uint64_t)pool, K_POOL)) return ret(400);
    uint64_t v; int r = dev_alloc(cur_dev, s, K_ASYNC, &v); if (!r) *p = (void *)v; return ret(r);
}
int hipHostMalloc(void **p, size_t s, unsigned f) { (void)f; return ret(host_alloc(p, s)); }
int hipHostFree(void *p) { return ret(host_free(p)); }
int hipExtMallocWithFlags(void **p, size_t s, unsigned f) { (void)f; return hipMalloc(p, s); }
int hipMallocPitch(void **p, size_t *pitch, size_t w, size_t h) {
    if (!pitch) return ret(1);
    size_t pt = (w + 511) & ~(size_t)511; uint64_t v;
    int r = dev_alloc(cur_dev, (uint64_t)pt * h, K_DEV, &v);
    if (!r) { *p = (void *)v; *pitch = pt; }
    return ret(r);
}
int hipHostRegister(void *p, size_t s, unsigned f) { (void)f; if (!p) return ret(1); return ret(obj_new((uint64_t)p, s, K_REGISTERED)); }
int hipHostUnregister(void *p) { return ret(obj_del((uint64_t)p, K_REGISTERED, NULL)); }
int hipMemCreate(unsigned long long *handle, size_t s, const void *prop, unsigned long long f) {
    (void)f; int d = prop_dev(prop); if (d < 0 || !handle) return ret(1);
    uint64_t v; int r = dev_alloc(d, s, K_PHYS, &v); if (!r) *handle = v; return ret(r);
}
int hipMemRelease(unsigned long long h) { return ret(dev_free(h, K_PHYS)); }
int hipMemAddressReserve(void **p, size_t s, size_t a, void *addr, unsigned long long f) {
    (void)a; (void)addr; (void)f; if (!p) return ret(1);
    uint64_t k = 0x900000000000ull + obj_alloc_key() * 0x10000; int r = obj_new(k, s, K_RESERVE); if (!r) *p = (void *)k; return ret(r);
}
int hipMemAddressFree(void *p, size_t s) { (void)s; return ret(obj_del((uint64_t)p, K_RESERVE, NULL)); }
int hipMemMap(void *p, size_t s, size_t off, unsigned long long h, unsigned long long f) {
    (void)off; (void)f; int d = (int)(h >> 40) - 1;
    if (d < 0 || d >= NDEV || !p) return ret(1);
    return ret(obj_new((uint64_t)p, s, K_MAP));
}
int hipMemUnmap(void *p, size_t s) { (void)s; return ret(obj_del((uint64_t)p, K_MAP, NULL)); }
int hipMemPoolCreate(void **pool, const void *props) { (void)props; if (!pool) return ret(1); uint64_t k = obj_alloc_key(); int r = obj_new(k, 0, K_POOL); if (!r) *pool = (void *)k; return ret(r); }
int hipMemPoolDestroy(void *pool) { return ret(obj_del((uint64_t)pool, K_POOL, NULL)); }
static int stream_new(void **s) { if (!s) return 1; uint64_t k = obj_alloc_key(); int r = obj_new(k, 0, K_STREAM); if (!r) *s = (void *)k; return r; }
int hipStreamCreate(hipStream_t *s) { return ret(stream_new(s)); }
int hipStreamCreateWithFlags(hipStream_t *s, unsigned f) { (void)f; return ret(stream_new(s)); }
int hipStreamCreateWithPriority(hipStream_t *s, unsigned f, int pr) { (void)f; (void)pr; return ret(stream_new(s)); }
int hipStreamDestroy(hipStream_t s) { return ret(obj_del((uint64_t)s, K_STREAM, NULL)); }
static int module_new(void **m) { if (!m) return 1; uint64_t k = obj_alloc_key(); int r = obj_new(k, 0, K_MODULE); if (!r) *m = (void *)k; return r; }
int hipModuleLoad(void **m, const char *fname) { FILE *f = fname ? fopen(fname, "rb") : NULL; if (!f) return ret(301); fclose(f); return ret(module_new(m)); }
int hipModuleLoadData(void **m, const void *img) { if (!img) return ret(1); return ret(module_new(m)); }
int hipModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v) { (void)n; (void)o; (void)v; return hipModuleLoadData(m, img); }
int hipModuleUnload(void *m) { return ret(obj_del((uint64_t)m, K_MODULE, NULL)); }
int hipSetDevice(int d) { return ret(set_dev(d)); }
int hipGetDevice(int *d) { if (!d) return ret(1); *d = cur_dev; return ret(0); }
int hipGetDeviceCount(int *n) { if (!n) return ret(1); *n = NDEV; return ret(0); }
int hipDeviceGetName(char *name, int len, int d) { if (d < 0 || d >= NDEV) return ret(101); snprintf(name, len, "memwatch simulated GPU %d", d); return ret(0); }
int hipDeviceTotalMem(size_t *b, int d) { pthread_once(&once, init_heaps); if (d < 0 || d >= NDEV) return ret(101); *b = cap_bytes; return ret(0); }
/* hipDeviceAttributeIntegrated (16 in ROCm's hipDeviceAttribute_t); other attributes
 * are not simulated: hipErrorInvalidValue. */
int hipDeviceGetAttribute(int *v, int attr, int d) {
    pthread_once(&once, init_heaps);
    if (!v) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    if (attr != 16) return ret(1);
    *v = integrated;
    return ret(0);
}

/* The physical GPU ordinal `ord` stands for under the visible-devices list `var` (the
 * ordinal itself without one, or where the entry is not a number). */
static int physical(const char *var, int ord) {
    const char *v = getenv(var);
    if (!v || !*v) return ord;
    for (int i = 0; *v; i++) {
        char *end;
        long p = strtol(v, &end, 10);
        if (i == ord) return (end != v && (*end == ',' || !*end) && p >= 0 && p < NDEV) ? (int)p : ord;
        const char *comma = strchr(v, ',');
        if (!comma) break;
        v = comma + 1;
    }
    return ord;
}
static int hip_physical(int d) { return physical(getenv("HIP_VISIBLE_DEVICES") ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES", d); }
/* hipUUID: the 16 hex characters of the GPU's unique id, as ROCm fills it. */
int hipDeviceGetUuid(char *uuid, int d) {
    if (!uuid) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    char s[17];
    snprintf(s, sizeof s, "6d777465%08x", 0xa0 + hip_physical(d));
    memcpy(uuid, s, 16);
    return ret(0);
}
int hipDeviceGetPCIBusId(char *bus, int len, int d) {
    if (!bus || len <= 0) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    snprintf(bus, (size_t)len, "%04x:%02x:%02x.%x", 0, 0xc1 + hip_physical(d), 0, 0);
    return ret(0);
}

/* --------------------------- CUDA driver --------------------------- */
/* CUuuid of GPU `p` (bytes 6d 77 74 65 73 74 72 74, zeros, then 0xa0 + p: NVML prints it
 * GPU-6d777465-7374-7274-0000-0000000000a<p>); `mig` an instance on it. */
static void cu_uuid(unsigned char *u, int p, int mig) {
    static const unsigned char head[8] = {0x6d, 0x77, 0x74, 0x65, 0x73, 0x74, 0x72, 0x74};
    memcpy(u, head, 8);
    memset(u + 8, 0, 8);
    u[8] = mig ? 0x4d : 0;
    u[15] = (unsigned char)(0xa0 + p);
}
static int cu_mig(void) { const char *m = getenv("MEMWATCH_TESTRT_MIG"); return m && !strcmp(m, "1"); }
int cuDeviceGetUuid(unsigned char *u, int d) {
    if (!u) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    cu_uuid(u, physical("CUDA_VISIBLE_DEVICES", d), 0);
    return ret(0);
}
int cuDeviceGetUuid_v2(unsigned char *u, int d) {
    if (!u) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    cu_uuid(u, physical("CUDA_VISIBLE_DEVICES", d), cu_mig());
    return ret(0);
}
/* The CUDA driver's form: four-digit domain, upper-case hex. */
int cuDeviceGetPCIBusId(char *bus, int len, int d) {
    if (!bus || len <= 0) return ret(1);
    if (d < 0 || d >= NDEV) return ret(101);
    snprintf(bus, (size_t)len, "%04X:%02X:%02X.%X", 0, 0x1a + physical("CUDA_VISIBLE_DEVICES", d), 0, 0);
    return ret(0);
}
typedef uint64_t CUdeviceptr;
int cuInit(unsigned f) { (void)f; return ret(0); }
int cuDeviceGet(int *d, int ord) { if (ord < 0 || ord >= NDEV) return ret(101); *d = ord; return ret(0); }
int cuDeviceGetCount(int *n) { *n = NDEV; return ret(0); }
int cuDeviceGetName(char *name, int len, int d) { return hipDeviceGetName(name, len, d); }
int cuDeviceTotalMem_v2(size_t *b, int d) { return hipDeviceTotalMem(b, d); }
int cuDevicePrimaryCtxRetain(void **ctx, int d) { if (d < 0 || d >= NDEV) return ret(101); *ctx = (void *)(uintptr_t)(0xC0000 + d); return ret(0); }
int cuCtxSetCurrent(void *ctx) {
    uintptr_t c = (uintptr_t)ctx;
    if (!ctx) return ret(0);
    if (c < 0xC0000 || c >= 0xC0000 + NDEV) return ret(201);
    cur_dev = (int)(c - 0xC0000);
    return ret(0);
}
int cuCtxGetDevice(int *d) { *d = cur_dev; return ret(0); }
int cuMemAlloc_v2(CUdeviceptr *p, size_t s) { if (!p) return ret(1); return ret(dev_alloc(cur_dev, s, K_DEV, p)); }
int cuMemFree_v2(CUdeviceptr p) { return ret(p ? dev_free(p, K_DEV) : 0); }
int cuMemAllocManaged(CUdeviceptr *p, size_t s, unsigned f) { (void)f; if (!p) return ret(1); return ret(dev_alloc(cur_dev, s, K_MANAGED, p)); }
int cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h, unsigned e) {
    (void)e; if (!p || !pitch) return ret(1);
    size_t pt = (w + 511) & ~(size_t)511; int r = dev_alloc(cur_dev, (uint64_t)pt * h, K_DEV, p); if (!r) *pitch = pt; return ret(r);
}
int cuMemHostAlloc(void **p, size_t s, unsigned f) { (void)f; return ret(host_alloc(p, s)); }
int cuMemAllocHost_v2(void **p, size_t s) { return ret(host_alloc(p, s)); }
int cuMemFreeHost(void *p) { return ret(p ? host_free(p) : 1); }
int cuMemAllocAsync(CUdeviceptr *p, size_t s, void *st) { (void)st; if (!p) return ret(1); return ret(dev_alloc(cur_dev, s, K_ASYNC, p)); }
int cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t s, void *st) { return cuMemAllocAsync(p, s, st); }
int cuMemFreeAsync(CUdeviceptr p, void *st) { (void)st; return ret(dev_free(p, K_ASYNC)); }
int cuMemFreeAsync_ptsz(CUdeviceptr p, void *st) { return cuMemFreeAsync(p, st); }
int cuMemAllocFromPoolAsync(CUdeviceptr *p, size_t s, void *pool, void *st) {
    (void)st; if (!obj_exists((uint64_t)pool, K_POOL)) return ret(400); if (!p) return ret(1);
    return ret(dev_alloc(cur_dev, s, K_ASYNC, p));
}
int cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *p, size_t s, void *pool, void *st) { return cuMemAllocFromPoolAsync(p, s, pool, st); }
int cuMemCreate(unsigned long long *h, size_t s, const void *prop, unsigned long long f) { return hipMemCreate(h, s, prop, f); }
int cuMemRelease(unsigned long long h) { return hipMemRelease(h); }
int cuMemAddressReserve(CUdeviceptr *p, size_t s, size_t a, CUdeviceptr addr, unsigned long long f) { return hipMemAddressReserve((void **)p, s, a, (void *)addr, f); }
int cuMemAddressFree(CUdeviceptr p, size_t s) { return hipMemAddressFree((void *)p, s); }
int cuMemMap(CUdeviceptr p, size_t s, size_t off, unsigned long long h, unsigned long long f) { return hipMemMap((void *)p, s, off, h, f); }
int cuMemUnmap(CUdeviceptr p, size_t s) { return hipMemUnmap((void *)p, s); }
int cuMemPoolCreate(void **pool, const void *props) { return hipMemPoolCreate(pool, props); }
int cuMemPoolDestroy(void *pool) { return hipMemPoolDestroy(pool); }
int cuStreamCreate(void **s, unsigned f) { (void)f; return ret(stream_new(s)); }
int cuStreamCreateWithPriority(void **s, unsigned f, int p) { (void)f; (void)p; return ret(stream_new(s)); }
int cuStreamDestroy_v2(void *s) { return hipStreamDestroy(s); }
/* Streams run nothing here: synchronizing a live stream (or the null stream) succeeds at
   once; an unknown handle is CUDA_ERROR_INVALID_HANDLE (400). */
int cuStreamSynchronize(void *s) { return ret(s == NULL || obj_exists((uint64_t)s, K_STREAM) ? 0 : 400); }
int cuModuleLoad(void **m, const char *f) { return hipModuleLoad(m, f); }
int cuModuleLoadData(void **m, const void *img) { return hipModuleLoadData(m, img); }
int cuModuleLoadDataEx(void **m, const void *img, unsigned n, void *o, void **v) { return hipModuleLoadDataEx(m, img, n, o, v); }
int cuModuleUnload(void *m) { return hipModuleUnload(m); }

/* --------------------------- CUDA runtime --------------------------- */
int cudaMalloc(void **p, size_t s) { return hipMalloc(p, s); }
int cudaFree(void *p) { return hipFree(p); }
int cudaMallocManaged(void **p, size_t s, unsigned f) { return hipMallocManaged(p, s, f); }
int cudaMallocAsync(void **p, size_t s, void *st) { return hipMallocAsync(p, s, st); }
int cudaMallocAsync_ptsz(void **p, size_t s, void *st) { return hipMallocAsync(p, s, st); }
int cudaFreeAsync(void *p, void *st) { return hipFreeAsync(p, st); }
int cudaFreeAsync_ptsz(void *p, void *st) { return hipFreeAsync(p, st); }
int cudaMallocHost(void **p, size_t s) { return ret(host_alloc(p, s)); }
int cudaHostAlloc(void **p, size_t s, unsigned f) { (void)f; return ret(host_alloc(p, s)); }
int cudaFreeHost(void *p) { return ret(host_free(p)); }
int cudaSetDevice(int d) { return ret(set_dev(d)); }
int cudaGetDevice(int *d) { *d = cur_dev; return ret(0); }

/* ------------------------ *GetProcAddress ------------------------ */
int cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags);
int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status);
typedef struct { const char *base; void *fn; int min_ver; int ptsz; } Proc;
#define P(b, f, v, t) {b, (void *)f, v, t}
static const Proc procs[] = {
    P("cuInit", cuInit, 2000, 0), P("cuCtxGetDevice", cuCtxGetDevice, 2000, 0), P("cuCtxSetCurrent", cuCtxSetCurrent, 4000, 0),
    P("cuMemAlloc", cuMemAlloc_v2, 3020, 0), P("cuMemFree", cuMemFree_v2, 3020, 0),
    P("cuMemAllocManaged", cuMemAllocManaged, 6000, 0), P("cuMemAllocPitch", cuMemAllocPitch_v2, 3020, 0),
    P("cuMemHostAlloc", cuMemHostAlloc, 2020, 0), P("cuMemAllocHost", cuMemAllocHost_v2, 3020, 0), P("cuMemFreeHost", cuMemFreeHost, 2000, 0),
    P("cuMemAllocAsync", cuMemAllocAsync, 11020, 0), P("cuMemAllocAsync", cuMemAllocAsync_ptsz, 11020, 1),
    P("cuMemFreeAsync", cuMemFreeAsync, 11020, 0), P("cuMemFreeAsync", cuMemFreeAsync_ptsz, 11020, 1),
    P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync, 11020, 0), P("cuMemAllocFromPoolAsync", cuMemAllocFromPoolAsync_ptsz, 11020, 1),
    P("cuMemCreate", cuMemCreate, 10020, 0), P("cuMemRelease", cuMemRelease, 10020, 0), P("cuMemMap", cuMemMap, 10020, 0),
    P("cuMemUnmap", cuMemUnmap, 10020, 0), P("cuMemAddressReserve", cuMemAddressReserve, 10020, 0), P("cuMemAddressFree", cuMemAddressFree, 10020, 0),
    P("cuMemPoolCreate", cuMemPoolCreate, 11020, 0), P("cuMemPoolDestroy", cuMemPoolDestroy, 11020, 0),
    P("cuStreamCreate", cuStreamCreate, 2000, 0), P("cuStreamCreateWithPriority", cuStreamCreateWithPriority, 5050, 0),
    P("cuStreamDestroy", cuStreamDestroy_v2, 4000, 0), P("cuModuleLoad", cuModuleLoad, 2000, 0), P("cuModuleLoadData", cuModuleLoadData, 2000, 0),
    P("cuModuleLoadDataEx", cuModuleLoadDataEx, 2010, 0), P("cuModuleUnload", cuModuleUnload, 2000, 0),
    P("cuGetProcAddress", cuGetProcAddress, 11030, 0), P("cuGetProcAddress", cuGetProcAddress_v2, 12000, 0),
};
static int proc_lookup(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
    const Proc *best = NULL;
    int want_ptsz = (flags & 2) != 0, too_old = 0;
    if (!sym || !pfn) return ret(1);
    for (size_t i = 0; i < sizeof procs / sizeof procs[0]; i++) {
        const Proc *p = &procs[i];
        if (strcmp(p->base, sym)) continue;
        if (p->min_ver > ver) { too_old = 1; continue; }
        if (p->ptsz && !want_ptsz) continue;
        if (!best || (p->ptsz && want_ptsz) || (p->min_ver > best->min_ver && best->ptsz == p->ptsz)) best = p;
    }
    if (!best) { *pfn = NULL; if (status) *status = too_old ? 2 : 1; return ret(500); }
    *pfn = best->fn;
    if (status) *status = 0;
    return ret(0);
}
int cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) { return proc_lookup(sym, pfn, ver, flags, NULL); }
int cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) { return proc_lookup(sym, pfn, ver, flags, status); }

typedef struct { const char *name; void *fn; } HipProc;
#define H(f) {#f, (void *)f}
static const HipProc hipprocs[] = {
    H(hipMalloc), H(hipFree), H(hipMallocManaged), H(hipMallocAsync), H(hipFreeAsync), H(hipMallocFromPoolAsync),
    H(hipHostMalloc), H(hipHostFree), H(hipExtMallocWithFlags), H(hipMallocPitch), H(hipHostRegister), H(hipHostUnregister),
    H(hipMemCreate), H(hipMemRelease), H(hipMemMap), H(hipMemUnmap), H(hipMemAddressReserve), H(hipMemAddressFree),
    H(hipMemPoolCreate), H(hipMemPoolDestroy), H(hipStreamCreate), H(hipStreamCreateWithFlags), H(hipStreamCreateWithPriority),
    H(hipStreamDestroy), H(hipModuleLoad), H(hipModuleLoadData), H(hipModuleLoadDataEx), H(hipModuleUnload), H(hipSetDevice),
    H(hipGetDevice), H(hipGetDeviceCount),
};
int hipGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags, int *status) {
    (void)ver; (void)flags;
    if (!sym || !pfn) return ret(1);
    for (size_t i = 0; i < sizeof hipprocs / sizeof hipprocs[0]; i++)
        if (!strcmp(hipprocs[i].name, sym)) { *pfn = hipprocs[i].fn; if (status) *status = 0; return ret(0); }
    *pfn = NULL; if (status) *status = 1;
    return ret(500);
}

/* ---- memory queries (used by `memwatch attach`'s pre-attach baseline) ---- */
static void dev_usage(int d, size_t *freeb, size_t *total) {
    pthread_once(&once, init_heaps);
    pthread_mutex_lock(&heaps[d].mu);
    uint64_t used = heaps[d].used;
    pthread_mutex_unlock(&heaps[d].mu);
    *total = cap_bytes;
    *freeb = cap_bytes - used;
}
int hipMemGetInfo(size_t *freeb, size_t *total) { if (!freeb || !total) return ret(1); dev_usage(cur_dev, freeb, total); return ret(0); }
int cuMemGetInfo_v2(size_t *freeb, size_t *total) { if (!freeb || !total) return ret(1); dev_usage(cur_dev, freeb, total); return ret(0); }
/* A device's primary context is "active" once anything was allocated on it. */
int cuDevicePrimaryCtxGetState(int d, unsigned *flags, int *active) {
    if (d < 0 || d >= NDEV || !flags || !active) return ret(101);
    pthread_once(&once, init_heaps);
    pthread_mutex_lock(&heaps[d].mu);
    *active = heaps[d].next > 0;
    pthread_mutex_unlock(&heaps[d].mu);
    *flags = 0;
    return ret(0);
}
static __thread int ctx_stack[16];
static __thread int ctx_depth;
int cuCtxPushCurrent_v2(void *ctx) {
    uintptr_t c = (uintptr_t)ctx;
    if (c < 0xC0000 || c >= 0xC0000 + NDEV || ctx_depth >= 16) return ret(201);
    ctx_stack[ctx_depth++] = cur_dev;
    cur_dev = (int)(c - 0xC0000);
    return ret(0);
}
int cuCtxPopCurrent_v2(void **ctx) {
    if (ctx_depth == 0) return ret(201);
    if (ctx) *ctx = (void *)(uintptr_t)(0xC0000 + cur_dev);
    cur_dev = ctx_stack[--ctx_depth];
    return ret(0);
}
int cuDevicePrimaryCtxRelease_v2(int d) { if (d < 0 || d >= NDEV) return ret(101); return ret(0); }
