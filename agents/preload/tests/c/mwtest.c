/* mwtest.c - drives the memwatch test runtime through one of three lookup paths and
 * prints, for every call the shim must record, one line
 *   E <api> <kind> <mem_kind> <result> <ptr> <size> <device> errno=<e>
 * (kind/mem_kind as in memwatch-wire; host pointers printed as h0x... because they
 * vary between runs). Lines starting with N are calls that must NOT be recorded.
 * Built twice: -DDIRECT (linked with -lmemwatch_testrt: symbol interposition) and
 * without (dlopen + dlsym, or *GetProcAddress, chosen by argv[1]).
 * Usage: mwtest direct|dlsym|proc basic|threads|fork|exec|exec-child|bench|bench-ab|bench-lat ARGS */
#define _GNU_SOURCE
#include <fcntl.h>
#include <signal.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*fn_pp_s)(void **, size_t);
typedef int (*fn_p)(void *);
typedef int (*fn_i)(int);
typedef int (*fn_pp_s_u)(void **, size_t, unsigned);
typedef int (*fn_pp_s_p)(void **, size_t, void *);
typedef int (*fn_p_p)(void *, void *);
typedef int (*fn_pp_s_p_p)(void **, size_t, void *, void *);
typedef int (*fn_pp_ps_s_s)(void **, size_t *, size_t, size_t);
typedef int (*fn_p_s_u)(void *, size_t, unsigned);
typedef int (*fn_h_s_p_f)(uint64_t *, size_t, const void *, unsigned long long);
typedef int (*fn_h)(uint64_t);
typedef int (*fn_p_s_s_h_f)(void *, size_t, size_t, uint64_t, unsigned long long);
typedef int (*fn_p_s)(void *, size_t);
typedef int (*fn_pp_s_s_p_f)(void **, size_t, size_t, void *, unsigned long long);
typedef int (*fn_pp_cp)(void **, const void *);
typedef int (*fn_pp)(void **);
typedef int (*fn_pp_u)(void **, unsigned);
typedef int (*fn_pp_c)(void **, const char *);
/* driver */
typedef int (*fn_d_s)(uint64_t *, size_t);
typedef int (*fn_d)(uint64_t);
typedef int (*fn_d_s_p)(uint64_t *, size_t, void *);
typedef int (*fn_dv_p)(uint64_t, void *);
typedef int (*fn_d_s_p_p)(uint64_t *, size_t, void *, void *);
typedef int (*fn_d_ps_s_s_u)(uint64_t *, size_t *, size_t, size_t, unsigned);
typedef int (*fn_d_s_u)(uint64_t *, size_t, unsigned);
typedef int (*fn_dr_s_s_d_f)(uint64_t *, size_t, size_t, uint64_t, unsigned long long);
typedef int (*fn_dv_s_s_h_f)(uint64_t, size_t, size_t, uint64_t, unsigned long long);
typedef int (*fn_dv_s)(uint64_t, size_t);
typedef int (*fn_u)(unsigned);
typedef int (*fn_pp_i)(void **, int);
typedef int (*fn_getproc)(const char *, void **, int, unsigned long long, int *);

static struct {
    fn_pp_s hipMalloc; fn_p hipFree; fn_pp_s_u hipMallocManaged; fn_pp_s_p hipMallocAsync; fn_p_p hipFreeAsync;
    fn_pp_s_p_p hipMallocFromPoolAsync; fn_pp_s_u hipHostMalloc; fn_p hipHostFree; fn_pp_s_u hipExtMallocWithFlags;
    fn_pp_ps_s_s hipMallocPitch; fn_p_s_u hipHostRegister; fn_p hipHostUnregister; fn_h_s_p_f hipMemCreate; fn_h hipMemRelease;
    fn_p_s_s_h_f hipMemMap; fn_p_s hipMemUnmap; fn_pp_s_s_p_f hipMemAddressReserve; fn_p_s hipMemAddressFree;
    fn_pp_cp hipMemPoolCreate; fn_p hipMemPoolDestroy; fn_pp hipStreamCreate; fn_pp_u hipStreamCreateWithFlags; fn_p hipStreamDestroy;
    fn_pp_c hipModuleLoad; fn_pp_cp hipModuleLoadData; fn_p hipModuleUnload; fn_i hipSetDevice;
    fn_u cuInit; fn_pp_i cuDevicePrimaryCtxRetain; fn_p cuCtxSetCurrent; fn_d_s cuMemAlloc_v2; fn_d cuMemFree_v2;
    fn_d_s_u cuMemAllocManaged; fn_d_ps_s_s_u cuMemAllocPitch_v2; fn_pp_s_u cuMemHostAlloc; fn_pp_s cuMemAllocHost_v2; fn_p cuMemFreeHost;
    fn_d_s_p cuMemAllocAsync; fn_dv_p cuMemFreeAsync; fn_d_s_p_p cuMemAllocFromPoolAsync; fn_h_s_p_f cuMemCreate; fn_h cuMemRelease;
    fn_dv_s_s_h_f cuMemMap; fn_dv_s cuMemUnmap; fn_dr_s_s_d_f cuMemAddressReserve; fn_dv_s cuMemAddressFree;
    fn_pp_cp cuMemPoolCreate; fn_p cuMemPoolDestroy; fn_pp_u cuStreamCreate; fn_p cuStreamDestroy_v2; fn_pp_cp cuModuleLoadData; fn_p cuModuleUnload;
    fn_pp_s cudaMalloc; fn_p cudaFree; fn_pp_s_u cudaMallocManaged; fn_pp_s_p cudaMallocAsync; fn_p_p cudaFreeAsync;
    fn_pp_s cudaMallocHost; fn_pp_s_u cudaHostAlloc; fn_p cudaFreeHost; fn_i cudaSetDevice;
    fn_d_s_p cuMemAllocAsync_ptsz;
} T;

#ifdef DIRECT
#define DECL(ret, name, args) ret name args;
int hipMalloc(void **, size_t); int hipFree(void *); int hipMallocManaged(void **, size_t, unsigned); int hipMallocAsync(void **, size_t, void *);
int hipFreeAsync(void *, void *); int hipMallocFromPoolAsync(void **, size_t, void *, void *); int hipHostMalloc(void **, size_t, unsigned);
int hipHostFree(void *); int hipExtMallocWithFlags(void **, size_t, unsigned); int hipMallocPitch(void **, size_t *, size_t, size_t);
int hipHostRegister(void *, size_t, unsigned); int hipHostUnregister(void *); int hipMemCreate(uint64_t *, size_t, const void *, unsigned long long);
int hipMemRelease(uint64_t); int hipMemMap(void *, size_t, size_t, uint64_t, unsigned long long); int hipMemUnmap(void *, size_t);
int hipMemAddressReserve(void **, size_t, size_t, void *, unsigned long long); int hipMemAddressFree(void *, size_t);
int hipMemPoolCreate(void **, const void *); int hipMemPoolDestroy(void *); int hipStreamCreate(void **); int hipStreamCreateWithFlags(void **, unsigned);
int hipStreamDestroy(void *); int hipModuleLoad(void **, const char *); int hipModuleLoadData(void **, const void *); int hipModuleUnload(void *);
int hipSetDevice(int); int cuInit(unsigned); int cuDevicePrimaryCtxRetain(void **, int); int cuCtxSetCurrent(void *);
int cuMemAlloc_v2(uint64_t *, size_t); int cuMemFree_v2(uint64_t); int cuMemAllocManaged(uint64_t *, size_t, unsigned);
int cuMemAllocPitch_v2(uint64_t *, size_t *, size_t, size_t, unsigned); int cuMemHostAlloc(void **, size_t, unsigned); int cuMemAllocHost_v2(void **, size_t);
int cuMemFreeHost(void *); int cuMemAllocAsync(uint64_t *, size_t, void *); int cuMemAllocAsync_ptsz(uint64_t *, size_t, void *); int cuMemFreeAsync(uint64_t, void *);
int cuMemAllocFromPoolAsync(uint64_t *, size_t, void *, void *); int cuMemCreate(uint64_t *, size_t, const void *, unsigned long long);
int cuMemRelease(uint64_t); int cuMemMap(uint64_t, size_t, size_t, uint64_t, unsigned long long); int cuMemUnmap(uint64_t, size_t);
int cuMemAddressReserve(uint64_t *, size_t, size_t, uint64_t, unsigned long long); int cuMemAddressFree(uint64_t, size_t);
int cuMemPoolCreate(void **, const void *); int cuMemPoolDestroy(void *); int cuStreamCreate(void **, unsigned); int cuStreamDestroy_v2(void *);
int cuModuleLoadData(void **, const void *); int cuModuleUnload(void *);
int cudaMalloc(void **, size_t); int cudaFree(void *); int cudaMallocManaged(void **, size_t, unsigned); int cudaMallocAsync(void **, size_t, void *);
int cudaFreeAsync(void *, void *); int cudaMallocHost(void **, size_t); int cudaHostAlloc(void **, size_t, unsigned); int cudaFreeHost(void *); int cudaSetDevice(int);
#define ALL(X) X(hipMalloc) X(hipFree) X(hipMallocManaged) X(hipMallocAsync) X(hipFreeAsync) X(hipMallocFromPoolAsync) X(hipHostMalloc) \
  X(hipHostFree) X(hipExtMallocWithFlags) X(hipMallocPitch) X(hipHostRegister) X(hipHostUnregister) X(hipMemCreate) X(hipMemRelease) X(hipMemMap) \
  X(hipMemUnmap) X(hipMemAddressReserve) X(hipMemAddressFree) X(hipMemPoolCreate) X(hipMemPoolDestroy) X(hipStreamCreate) X(hipStreamCreateWithFlags) \
  X(hipStreamDestroy) X(hipModuleLoad) X(hipModuleLoadData) X(hipModuleUnload) X(hipSetDevice) X(cuInit) X(cuDevicePrimaryCtxRetain) \
  X(cuCtxSetCurrent) X(cuMemAlloc_v2) X(cuMemFree_v2) X(cuMemAllocManaged) X(cuMemAllocPitch_v2) X(cuMemHostAlloc) X(cuMemAllocHost_v2) \
  X(cuMemFreeHost) X(cuMemAllocAsync) X(cuMemFreeAsync) X(cuMemAllocFromPoolAsync) X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap) \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuModuleLoadData) \
  X(cuModuleUnload) X(cudaMalloc) X(cudaFree) X(cudaMallocManaged) X(cudaMallocAsync) X(cudaFreeAsync) X(cudaMallocHost) X(cudaHostAlloc) \
  X(cudaFreeHost) X(cudaSetDevice) X(cuMemAllocAsync_ptsz)
#define SET(f) T.f = (void *)f;
static void load(const char *mode) { (void)mode; ALL(SET) }
#else
static void *open_lib(const char *name) {
    char path[4096];
    const char *dir = getenv("MWTEST_LIBDIR");
    snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", name);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "dlopen %s: %s\n", path, dlerror()); exit(3); }
    return h;
}
static void *must(void *h, const char *name) {
    void *p = dlsym(h, name);
    if (!p) { fprintf(stderr, "dlsym %s: %s\n", name, dlerror()); exit(3); }
    return p;
}
static void load(const char *mode) {
    void *hip = open_lib("libamdhip64.so"), *cu = open_lib("libcuda.so"), *rt = open_lib("libcudart.so");
#define HS(f) T.f = must(hip, #f);
#define CS(f) T.f = must(cu, #f);
#define RS(f) T.f = must(rt, #f);
    RS(cudaMalloc) RS(cudaFree) RS(cudaMallocManaged) RS(cudaMallocAsync) RS(cudaFreeAsync) RS(cudaMallocHost) RS(cudaHostAlloc) RS(cudaFreeHost) RS(cudaSetDevice)
    CS(cuInit) CS(cuDevicePrimaryCtxRetain)
    if (!strcmp(mode, "dlsym")) {
        HS(hipMalloc) HS(hipFree) HS(hipMallocManaged) HS(hipMallocAsync) HS(hipFreeAsync) HS(hipMallocFromPoolAsync) HS(hipHostMalloc) HS(hipHostFree)
        HS(hipExtMallocWithFlags) HS(hipMallocPitch) HS(hipHostRegister) HS(hipHostUnregister) HS(hipMemCreate) HS(hipMemRelease) HS(hipMemMap)
        HS(hipMemUnmap) HS(hipMemAddressReserve) HS(hipMemAddressFree) HS(hipMemPoolCreate) HS(hipMemPoolDestroy) HS(hipStreamCreate)
        HS(hipStreamCreateWithFlags) HS(hipStreamDestroy) HS(hipModuleLoad) HS(hipModuleLoadData) HS(hipModuleUnload) HS(hipSetDevice)
        CS(cuCtxSetCurrent) CS(cuMemAlloc_v2) CS(cuMemFree_v2) CS(cuMemAllocManaged) CS(cuMemAllocPitch_v2) CS(cuMemHostAlloc) CS(cuMemAllocHost_v2)
        CS(cuMemFreeHost) CS(cuMemAllocAsync) CS(cuMemFreeAsync) CS(cuMemAllocFromPoolAsync) CS(cuMemCreate) CS(cuMemRelease) CS(cuMemMap)
        CS(cuMemUnmap) CS(cuMemAddressReserve) CS(cuMemAddressFree) CS(cuMemPoolCreate) CS(cuMemPoolDestroy) CS(cuStreamCreate)
        CS(cuStreamDestroy_v2) CS(cuModuleLoadData) CS(cuModuleUnload)
        T.cuMemAllocAsync_ptsz = (fn_d_s_p)dlvsym(cu, "cuMemAllocAsync_ptsz", "MWTESTRT_1.0");
        if (!T.cuMemAllocAsync_ptsz) T.cuMemAllocAsync_ptsz = must(cu, "cuMemAllocAsync_ptsz");
    } else {
        /* *GetProcAddress: get cuGetProcAddress_v2 by dlsym, then cuGetProcAddress itself through it. */
        fn_getproc gp0 = must(cu, "cuGetProcAddress_v2"), gp = NULL, hgp = must(hip, "hipGetProcAddress");
        int st = -1;
        if (gp0("cuGetProcAddress", (void **)&gp, 12000, 0, &st) || !gp) { fprintf(stderr, "cuGetProcAddress lookup failed\n"); exit(3); }
#define CP(f, base) if (gp(base, (void **)&T.f, 12000, 0, &st)) { fprintf(stderr, "proc %s\n", base); exit(3); }
#define HP(f) if (hgp(#f, (void **)&T.f, 60000000, 0, &st)) { fprintf(stderr, "hipproc %s\n", #f); exit(3); }
        HP(hipMalloc) HP(hipFree) HP(hipMallocManaged) HP(hipMallocAsync) HP(hipFreeAsync) HP(hipMallocFromPoolAsync) HP(hipHostMalloc) HP(hipHostFree)
        HP(hipExtMallocWithFlags) HP(hipMallocPitch) HP(hipHostRegister) HP(hipHostUnregister) HP(hipMemCreate) HP(hipMemRelease) HP(hipMemMap)
        HP(hipMemUnmap) HP(hipMemAddressReserve) HP(hipMemAddressFree) HP(hipMemPoolCreate) HP(hipMemPoolDestroy) HP(hipStreamCreate)
        HP(hipStreamCreateWithFlags) HP(hipStreamDestroy) HP(hipModuleLoad) HP(hipModuleLoadData) HP(hipModuleUnload) HP(hipSetDevice)
        CP(cuCtxSetCurrent, "cuCtxSetCurrent") CP(cuMemAlloc_v2, "cuMemAlloc") CP(cuMemFree_v2, "cuMemFree") CP(cuMemAllocManaged, "cuMemAllocManaged")
        CP(cuMemAllocPitch_v2, "cuMemAllocPitch") CP(cuMemHostAlloc, "cuMemHostAlloc") CP(cuMemAllocHost_v2, "cuMemAllocHost") CP(cuMemFreeHost, "cuMemFreeHost")
        CP(cuMemAllocAsync, "cuMemAllocAsync") CP(cuMemFreeAsync, "cuMemFreeAsync") CP(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync")
        CP(cuMemCreate, "cuMemCreate") CP(cuMemRelease, "cuMemRelease") CP(cuMemMap, "cuMemMap") CP(cuMemUnmap, "cuMemUnmap")
        CP(cuMemAddressReserve, "cuMemAddressReserve") CP(cuMemAddressFree, "cuMemAddressFree") CP(cuMemPoolCreate, "cuMemPoolCreate")
        CP(cuMemPoolDestroy, "cuMemPoolDestroy") CP(cuStreamCreate, "cuStreamCreate") CP(cuStreamDestroy_v2, "cuStreamDestroy")
        CP(cuModuleLoadData, "cuModuleLoadData") CP(cuModuleUnload, "cuModuleUnload")
        /* the per-thread-default-stream variant, picked by flags */
        if (gp("cuMemAllocAsync", (void **)&T.cuMemAllocAsync_ptsz, 12000, 2, &st)) { fprintf(stderr, "proc ptsz\n"); exit(3); }
        /* a lookup of something not hooked, and of something missing, pass through */
        void *x = NULL;
        int r = gp("cuNoSuchFunction", &x, 12000, 0, &st);
        printf("N cuGetProcAddress(missing) r=%d st=%d null=%d\n", r, st, x == NULL);
    }
}
#endif

/* kinds / mem kinds of memwatch-wire */
enum { ALLOC = 1, FREE = 2, ALLOC_FAILED = 3, SPAN = 4, FREE_FAILED = 5, SETDEV = 6 };
enum { MK_NONE = 0, DEV = 1, HOSTP = 2, MANAGED = 3, PHYS = 4, MAP = 5, RESERVE = 6, POOL = 7, POOLOBJ = 8 };
static int cur = 0;
static void E(const char *api, int kind, int mk, int r, uint64_t ptr, uint64_t size, int dev, int host) {
    int e = errno;
    int k = kind;
    if (r != 0 && kind == ALLOC) { k = ALLOC_FAILED; ptr = 0; }
    if (r != 0 && kind == FREE) k = FREE_FAILED;
    if (r != 0 && kind == SETDEV) { k = SPAN; }
    printf("E %s %d %d %d %s0x%llx %llu %d errno=%d\n", api, k, mk, r, host ? "h" : "", (unsigned long long)ptr,
           (unsigned long long)size, dev, e);
    errno = e;
}
#define MiB (1ull << 20)

static void basic(void) {
    void *p = NULL, *q = NULL, *s = NULL, *pool = NULL, *m = NULL, *res = NULL;
    uint64_t d = 0, h = 0;
    size_t pitch = 0;
    int r;
    int prop[8] = {1, 0, 1, 2, 0, 0, 0, 0}; /* pinned, device location, id 2 */
    /* HIP */
    r = T.hipSetDevice(3); E("hipSetDevice", SETDEV, MK_NONE, r, 3, 0, 3, 0); cur = 3;
    r = T.hipMalloc(&p, MiB); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, MiB, cur, 0);
    r = T.hipMalloc(&q, 1ull << 40); E("hipMalloc", ALLOC, DEV, r, 0, 1ull << 40, cur, 0);
    r = T.hipFree(p); E("hipFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    r = T.hipFree((void *)0x1234); E("hipFree", FREE, DEV, r, 0x1234, 0, cur, 0);
    r = T.hipMallocManaged(&p, 3000, 1); E("hipMallocManaged", ALLOC, MANAGED, r, (uint64_t)p, 3000, cur, 0);
    r = T.hipFree(p); E("hipFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    r = T.hipStreamCreate(&s); E("hipStreamCreate", SPAN, MK_NONE, r, (uint64_t)s, 0, cur, 0);
    r = T.hipMallocAsync(&p, 4096, s); E("hipMallocAsync", ALLOC, POOL, r, (uint64_t)p, 4096, cur, 0);
    r = T.hipFreeAsync(p, s); E("hipFreeAsync", FREE, POOL, r, (uint64_t)p, 0, cur, 0);
    r = T.hipMemPoolCreate(&pool, NULL); E("hipMemPoolCreate", ALLOC, POOLOBJ, r, (uint64_t)pool, 0, cur, 0);
    r = T.hipMallocFromPoolAsync(&p, 8192, pool, s); E("hipMallocFromPoolAsync", ALLOC, POOL, r, (uint64_t)p, 8192, cur, 0);
    r = T.hipFreeAsync(p, s); E("hipFreeAsync", FREE, POOL, r, (uint64_t)p, 0, cur, 0);
    r = T.hipMemPoolDestroy(pool); E("hipMemPoolDestroy", FREE, POOLOBJ, r, (uint64_t)pool, 0, cur, 0);
    r = T.hipStreamDestroy(s); E("hipStreamDestroy", SPAN, MK_NONE, r, (uint64_t)s, 0, cur, 0);
    r = T.hipHostMalloc(&p, 5000, 0); E("hipHostMalloc", ALLOC, HOSTP, r, (uint64_t)p, 5000, cur, 1);
    r = T.hipHostFree(p); E("hipHostFree", FREE, HOSTP, r, (uint64_t)p, 0, cur, 1);
    r = T.hipExtMallocWithFlags(&p, 6000, 2); E("hipExtMallocWithFlags", ALLOC, DEV, r, (uint64_t)p, 6000, cur, 0);
    r = T.hipFree(p); E("hipFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    r = T.hipMallocPitch(&p, &pitch, 1000, 10); E("hipMallocPitch", ALLOC, DEV, r, (uint64_t)p, pitch * 10, cur, 0);
    printf("N pitch=%zu\n", pitch);
    r = T.hipFree(p); E("hipFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    char buf[64];
    r = T.hipHostRegister(buf, sizeof buf, 0); E("hipHostRegister", ALLOC, HOSTP, r, (uint64_t)buf, sizeof buf, cur, 1);
    r = T.hipHostUnregister(buf); E("hipHostUnregister", FREE, HOSTP, r, (uint64_t)buf, 0, cur, 1);
    r = T.hipMemCreate(&h, 2 * MiB, prop, 0); E("hipMemCreate", ALLOC, PHYS, r, h, 2 * MiB, 2, 0);
    r = T.hipMemAddressReserve(&res, 4 * MiB, 0, NULL, 0); E("hipMemAddressReserve", ALLOC, RESERVE, r, (uint64_t)res, 4 * MiB, cur, 0);
    r = T.hipMemMap(res, 2 * MiB, 0, h, 0); E("hipMemMap", ALLOC, MAP, r, (uint64_t)res, 2 * MiB, cur, 0);
    r = T.hipMemUnmap(res, 2 * MiB); E("hipMemUnmap", FREE, MAP, r, (uint64_t)res, 2 * MiB, cur, 0);
    r = T.hipMemAddressFree(res, 4 * MiB); E("hipMemAddressFree", FREE, RESERVE, r, (uint64_t)res, 4 * MiB, cur, 0);
    r = T.hipMemRelease(h); E("hipMemRelease", FREE, PHYS, r, h, 0, cur, 0);
    r = T.hipModuleLoadData(&m, "image"); E("hipModuleLoadData", SPAN, MK_NONE, r, (uint64_t)m, 0, cur, 0);
    r = T.hipModuleUnload(m); E("hipModuleUnload", SPAN, MK_NONE, r, (uint64_t)m, 0, cur, 0);
    m = NULL;
    r = T.hipModuleLoad(&m, "/nonexistent/module.hsaco"); E("hipModuleLoad", SPAN, MK_NONE, r, 0, 0, cur, 0);
    r = T.hipSetDevice(99); E("hipSetDevice", SETDEV, MK_NONE, r, 99, 0, cur, 0);
    /* CUDA driver */
    void *ctx = NULL;
    r = T.cuInit(0); printf("N cuInit r=%d\n", r);
    r = T.cuDevicePrimaryCtxRetain(&ctx, 5); printf("N cuDevicePrimaryCtxRetain r=%d\n", r);
    r = T.cuCtxSetCurrent(ctx); E("cuCtxSetCurrent", SETDEV, MK_NONE, r, (uint64_t)ctx, 0, 5, 0); cur = 5;
    r = T.cuCtxSetCurrent((void *)0x99); E("cuCtxSetCurrent", SETDEV, MK_NONE, r, 0x99, 0, cur, 0);
    r = T.cuMemAlloc_v2(&d, 7 * MiB); E("cuMemAlloc_v2", ALLOC, DEV, r, d, 7 * MiB, cur, 0);
    uint64_t d2 = 0;
    r = T.cuMemAlloc_v2(&d2, 2ull << 30); E("cuMemAlloc_v2", ALLOC, DEV, r, 0, 2ull << 30, cur, 0);
    r = T.cuMemFree_v2(d); E("cuMemFree_v2", FREE, DEV, r, d, 0, cur, 0);
    r = T.cuMemFree_v2(d); E("cuMemFree_v2", FREE, DEV, r, d, 0, cur, 0);
    r = T.cuMemAllocManaged(&d, 100, 1); E("cuMemAllocManaged", ALLOC, MANAGED, r, d, 100, cur, 0);
    r = T.cuMemFree_v2(d); E("cuMemFree_v2", FREE, DEV, r, d, 0, cur, 0);
    r = T.cuMemAllocPitch_v2(&d, &pitch, 700, 3, 4); E("cuMemAllocPitch_v2", ALLOC, DEV, r, d, pitch * 3, cur, 0);
    r = T.cuMemFree_v2(d); E("cuMemFree_v2", FREE, DEV, r, d, 0, cur, 0);
    r = T.cuMemHostAlloc(&p, 300, 0); E("cuMemHostAlloc", ALLOC, HOSTP, r, (uint64_t)p, 300, cur, 1);
    r = T.cuMemFreeHost(p); E("cuMemFreeHost", FREE, HOSTP, r, (uint64_t)p, 0, cur, 1);
    r = T.cuMemAllocHost_v2(&p, 400); E("cuMemAllocHost_v2", ALLOC, HOSTP, r, (uint64_t)p, 400, cur, 1);
    r = T.cuMemFreeHost(p); E("cuMemFreeHost", FREE, HOSTP, r, (uint64_t)p, 0, cur, 1);
    r = T.cuStreamCreate(&s, 0); E("cuStreamCreate", SPAN, MK_NONE, r, (uint64_t)s, 0, cur, 0);
    r = T.cuMemAllocAsync(&d, 1000, s); E("cuMemAllocAsync", ALLOC, POOL, r, d, 1000, cur, 0);
    r = T.cuMemFreeAsync(d, s); E("cuMemFreeAsync", FREE, POOL, r, d, 0, cur, 0);
    r = T.cuMemAllocAsync_ptsz(&d, 1100, s); E("cuMemAllocAsync", ALLOC, POOL, r, d, 1100, cur, 0);
    r = T.cuMemFreeAsync(d, s); E("cuMemFreeAsync", FREE, POOL, r, d, 0, cur, 0);
    r = T.cuMemPoolCreate(&pool, NULL); E("cuMemPoolCreate", ALLOC, POOLOBJ, r, (uint64_t)pool, 0, cur, 0);
    r = T.cuMemAllocFromPoolAsync(&d, 1200, pool, s); E("cuMemAllocFromPoolAsync", ALLOC, POOL, r, d, 1200, cur, 0);
    r = T.cuMemAllocFromPoolAsync(&d2, 1300, (void *)0x77, s); E("cuMemAllocFromPoolAsync", ALLOC, POOL, r, 0, 1300, cur, 0);
    r = T.cuMemFreeAsync(d, s); E("cuMemFreeAsync", FREE, POOL, r, d, 0, cur, 0);
    r = T.cuMemPoolDestroy(pool); E("cuMemPoolDestroy", FREE, POOLOBJ, r, (uint64_t)pool, 0, cur, 0);
    r = T.cuStreamDestroy_v2(s); E("cuStreamDestroy_v2", SPAN, MK_NONE, r, (uint64_t)s, 0, cur, 0);
    prop[3] = 6;
    r = T.cuMemCreate(&h, 4 * MiB, prop, 0); E("cuMemCreate", ALLOC, PHYS, r, h, 4 * MiB, 6, 0);
    r = T.cuMemAddressReserve(&d, 8 * MiB, 0, 0, 0); E("cuMemAddressReserve", ALLOC, RESERVE, r, d, 8 * MiB, cur, 0);
    r = T.cuMemMap(d, 4 * MiB, 0, h, 0); E("cuMemMap", ALLOC, MAP, r, d, 4 * MiB, cur, 0);
    r = T.cuMemUnmap(d, 4 * MiB); E("cuMemUnmap", FREE, MAP, r, d, 4 * MiB, cur, 0);
    r = T.cuMemAddressFree(d, 8 * MiB); E("cuMemAddressFree", FREE, RESERVE, r, d, 8 * MiB, cur, 0);
    r = T.cuMemRelease(h); E("cuMemRelease", FREE, PHYS, r, h, 0, cur, 0);
    r = T.cuModuleLoadData(&m, "img"); E("cuModuleLoadData", SPAN, MK_NONE, r, (uint64_t)m, 0, cur, 0);
    r = T.cuModuleUnload(m); E("cuModuleUnload", SPAN, MK_NONE, r, (uint64_t)m, 0, cur, 0);
    /* CUDA runtime */
    r = T.cudaSetDevice(6); E("cudaSetDevice", SETDEV, MK_NONE, r, 6, 0, 6, 0); cur = 6;
    p = NULL;
    r = T.cudaMalloc(&p, 9 * MiB); E("cudaMalloc", ALLOC, DEV, r, (uint64_t)p, 9 * MiB, cur, 0);
    r = T.cudaMalloc(&q, 3ull << 30); E("cudaMalloc", ALLOC, DEV, r, 0, 3ull << 30, cur, 0);
    r = T.cudaFree(p); E("cudaFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    r = T.cudaFree(NULL); E("cudaFree", FREE, DEV, r, 0, 0, cur, 0);
    r = T.cudaMallocManaged(&p, 11, 1); E("cudaMallocManaged", ALLOC, MANAGED, r, (uint64_t)p, 11, cur, 0);
    r = T.cudaFree(p); E("cudaFree", FREE, DEV, r, (uint64_t)p, 0, cur, 0);
    r = T.cudaMallocAsync(&p, 12, NULL); E("cudaMallocAsync", ALLOC, POOL, r, (uint64_t)p, 12, cur, 0);
    r = T.cudaFreeAsync(p, NULL); E("cudaFreeAsync", FREE, POOL, r, (uint64_t)p, 0, cur, 0);
    r = T.cudaMallocHost(&p, 13); E("cudaMallocHost", ALLOC, HOSTP, r, (uint64_t)p, 13, cur, 1);
    r = T.cudaFreeHost(p); E("cudaFreeHost", FREE, HOSTP, r, (uint64_t)p, 0, cur, 1);
    r = T.cudaHostAlloc(&p, 14, 0); E("cudaHostAlloc", ALLOC, HOSTP, r, (uint64_t)p, 14, cur, 1);
    r = T.cudaFreeHost(p); E("cudaFreeHost", FREE, HOSTP, r, (uint64_t)p, 0, cur, 1);
    r = T.cudaFreeHost((void *)0x4321); E("cudaFreeHost", FREE, HOSTP, r, 0x4321, 0, cur, 1);
}

/* 8 threads, one per simulated device, each: set device, N x (alloc size, free). */
static int per_thread = 200;
static void *worker(void *arg) {
    int dev = (int)(intptr_t)arg;
    T.hipSetDevice(dev);
    for (int i = 0; i < per_thread; i++) {
        void *p = NULL;
        size_t size = (size_t)(dev + 1) * 4096 + (size_t)i;
        if (T.hipMalloc(&p, size) == 0) T.hipFree(p);
    }
    printf("T dev=%d tid=%ld n=%d\n", dev, (long)gettid(), per_thread);
    return NULL;
}
/* crowd: every thread records one pair, then waits until all have, so all are alive
 * at once (past the shim's 1024 per-thread rings the rest use its shared queue). */
static pthread_barrier_t crowd_barrier;
static void *crowd_worker(void *arg) {
    void *p = NULL;
    size_t size = 1024 + (size_t)(intptr_t)arg;
    if (T.hipMalloc(&p, size) == 0) T.hipFree(p);
    pthread_barrier_wait(&crowd_barrier);
    return NULL;
}
static void *churn_worker(void *arg) {
    void *p = NULL;
    (void)arg;
    if (T.hipMalloc(&p, 512) == 0) T.hipFree(p);
    return NULL;
}
static void threads(void) {
    pthread_t th[8];
    for (int i = 0; i < 8; i++) pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
}
/* cu-threads: `threads` through the CUDA driver (each thread on its device's primary
 * context, cuMemAlloc_v2 / cuMemFree_v2 pairs). */
static void *cu_worker(void *arg) {
    int dev = (int)(intptr_t)arg;
    void *ctx = NULL;
    if (T.cuDevicePrimaryCtxRetain(&ctx, dev) == 0) T.cuCtxSetCurrent(ctx);
    for (int i = 0; i < per_thread; i++) {
        uint64_t d = 0;
        if (T.cuMemAlloc_v2(&d, (size_t)(dev + 1) * 4096 + (size_t)i) == 0) T.cuMemFree_v2(d);
    }
    return NULL;
}
static void cu_threads(int n) {
    pthread_t th[8];
    T.cuInit(0);
    for (int i = 0; i < n; i++) pthread_create(&th[i], NULL, cu_worker, (void *)(intptr_t)i);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
/* bench THREADS BATCHES BATCH_PAIRS: each thread times BATCHES batches of BATCH_PAIRS
 * hipMalloc+hipFree pairs; prints the median and p90 ns per call over all batches.
 * rate THREADS SECONDS CALLS_PER_S: rate-limited pairs (total CALLS_PER_S over all
 * threads) for SECONDS; prints the calls made and the rate reached. */
#define MAXB 4096
static long bench_batches, bench_batch; static double bench_rate, bench_secs;
static double batch_ns[64][MAXB];
static long made[64];
static void *bench_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    T.hipSetDevice(t % 8);
    void *p;
    if (T.hipMalloc(&p, 256) == 0) T.hipFree(p); /* first call: start-up not timed */
    for (long b = 0; b < bench_batches && b < MAXB; b++) {
        double t0 = now_s();
        for (long i = 0; i < bench_batch; i++)
            if (T.hipMalloc(&p, 256) == 0) T.hipFree(p);
        batch_ns[t][b] = (now_s() - t0) * 1e9 / (2.0 * bench_batch);
    }
    return NULL;
}
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
static void bench(int nthreads) {
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, bench_worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    static double all[64 * MAXB];
    long n = 0;
    for (int i = 0; i < nthreads; i++) for (long b = 0; b < bench_batches && b < MAXB; b++) all[n++] = batch_ns[i][b];
    qsort(all, n, sizeof all[0], cmpd);
    printf("B threads=%d batches=%ld median_ns_per_call=%.1f p10=%.1f p90=%.1f\n", nthreads, n, all[n / 2], all[n / 10], all[n * 9 / 10]);
}
static void *rate_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    T.hipSetDevice(t % 8);
    double t0 = now_s(), per_thread_pairs_s = bench_rate / 2.0;
    long i = 0;
    void *p;
    while (1) {
        double el = now_s() - t0;
        if (el >= bench_secs) break;
        long due = (long)(el * per_thread_pairs_s);
        for (; i < due; i++)
            if (T.hipMalloc(&p, 256) == 0) T.hipFree(p);
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
    made[t] = 2 * i + 2; /* + the set-device ... counted as calls below */
    return NULL;
}
static void rate(int nthreads) {
    pthread_t th[64];
    double t0 = now_s();
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, rate_worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    double el = now_s() - t0;
    long calls = 0;
    for (int i = 0; i < nthreads; i++) calls += made[i] - 2;
    printf("R threads=%d target_calls_per_s=%.0f calls=%ld seconds=%.3f reached_calls_per_s=%.0f\n", nthreads, bench_rate, calls, el, calls / el);
}

#ifdef DIRECT
/* bench-ab THREADS ROUNDS BATCH_PAIRS: the same hipMalloc+hipFree pairs timed in one
 * process two ways, batch by batch: through hipMalloc / hipFree (the shim's hooks when it
 * is preloaded) and straight into the runtime through memwatchTestrtUnhooked* (the same
 * runtime code under names the shim does not intercept). Each round is one batch of each,
 * in ABBA order; a barrier puts every thread in the same mode at once. Prints the median
 * ns per call of each mode and the median over all (thread, round) of the shim batch
 * minus the direct batch: slow spells of the host hit both halves of a round alike. */
int memwatchTestrtUnhookedMalloc(void **p, size_t s);
int memwatchTestrtUnhookedFree(void *p);
static pthread_barrier_t ab_barrier;
static long ab_rounds;
static double ab_ns[64][2][MAXB];
static void *ab_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    T.hipSetDevice(t % 8);
    void *p;
    if (T.hipMalloc(&p, 256) == 0) T.hipFree(p); /* start-up not timed */
    if (memwatchTestrtUnhookedMalloc(&p, 256) == 0) memwatchTestrtUnhookedFree(p);
    for (long b = 0; b < 2 * ab_rounds; b++) {
        int shim = (int)(((b >> 1) ^ b) & 1); /* 0 1 1 0 0 1 1 0 ... */
        pthread_barrier_wait(&ab_barrier);
        double t0 = now_s();
        if (shim) {
            for (long i = 0; i < bench_batch; i++)
                if (T.hipMalloc(&p, 256) == 0) T.hipFree(p);
        } else {
            for (long i = 0; i < bench_batch; i++)
                if (memwatchTestrtUnhookedMalloc(&p, 256) == 0) memwatchTestrtUnhookedFree(p);
        }
        ab_ns[t][shim][b >> 1] = (now_s() - t0) * 1e9 / (2.0 * bench_batch);
    }
    return NULL;
}
static double median_of(double *v, long n) { qsort(v, n, sizeof v[0], cmpd); return n ? v[n / 2] : 0; }
static void bench_ab(int nthreads) {
    if (nthreads < 1 || nthreads > 64 || ab_rounds < 1 || ab_rounds > MAXB) { fprintf(stderr, "bench-ab: 1-64 threads, 1-%d rounds\n", MAXB); exit(2); }
    pthread_barrier_init(&ab_barrier, NULL, (unsigned)nthreads);
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, ab_worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    static double direct[64 * MAXB], shim[64 * MAXB], diff[64 * MAXB];
    long n = 0;
    for (int i = 0; i < nthreads; i++)
        for (long r = 0; r < ab_rounds; r++, n++) {
            direct[n] = ab_ns[i][0][r];
            shim[n] = ab_ns[i][1][r];
            diff[n] = shim[n] - direct[n];
        }
    double md = median_of(direct, n), ms = median_of(shim, n), mdiff = median_of(diff, n);
    printf("AB threads=%d rounds=%ld direct_median_ns_per_call=%.1f shim_median_ns_per_call=%.1f added_median_ns_per_call=%.1f added_p10=%.1f added_p90=%.1f\n",
           nthreads, ab_rounds, md, ms, mdiff, diff[n / 10], diff[n * 9 / 10]);
}

/* bench-lat THREADS PAIRS: every call timed on its own (a CLOCK_MONOTONIC read before
 * and after it), PAIRS hipMalloc+hipFree pairs per thread through the hooks and PAIRS
 * straight into the runtime, alternating pair by pair (ABBA). Prints the median ns of
 * each call kind in each mode. This is the latency a call gains, the form a program that
 * does other work between its allocations sees; the batch benches above time back-to-back
 * calls, where the runtime's cache misses of consecutive calls overlap unless something
 * between them (the shim's timestamp) waits for them. The clock reads are in both modes
 * alike and cancel in the difference. */
static long lat_pairs;
static uint32_t *lat_ns[64][4]; /* [thread][shim malloc, shim free, direct malloc, direct free] */
static inline uint64_t mono_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec; }
static void *lat_worker(void *arg) {
    int t = (int)(intptr_t)arg;
    T.hipSetDevice(t % 8);
    void *p;
    if (T.hipMalloc(&p, 256) == 0) T.hipFree(p); /* start-up not timed */
    if (memwatchTestrtUnhookedMalloc(&p, 256) == 0) memwatchTestrtUnhookedFree(p);
    long n[2] = {0, 0};
    for (long i = 0; i < 2 * lat_pairs; i++) {
        int shim = (int)(((i >> 1) ^ i) & 1);
        int r;
        uint64_t t0 = mono_ns(), t1, t2;
        if (shim) {
            r = T.hipMalloc(&p, 256);
            t1 = mono_ns();
            if (r == 0) T.hipFree(p);
        } else {
            r = memwatchTestrtUnhookedMalloc(&p, 256);
            t1 = mono_ns();
            if (r == 0) memwatchTestrtUnhookedFree(p);
        }
        t2 = mono_ns();
        long k = n[shim]++;
        lat_ns[t][shim ? 0 : 2][k] = (uint32_t)(t1 - t0);
        lat_ns[t][shim ? 1 : 3][k] = (uint32_t)(t2 - t1);
    }
    return NULL;
}
static int cmpu(const void *a, const void *b) { uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b; return (x > y) - (x < y); }
static void bench_lat(int nthreads) {
    if (nthreads < 1 || nthreads > 64 || lat_pairs < 1 || lat_pairs > 10000000) { fprintf(stderr, "bench-lat: 1-64 threads, 1-10000000 pairs\n"); exit(2); }
    pthread_t th[64];
    for (int i = 0; i < nthreads; i++)
        for (int k = 0; k < 4; k++)
            if (!(lat_ns[i][k] = malloc(sizeof(uint32_t) * (size_t)lat_pairs))) { fprintf(stderr, "bench-lat: out of memory\n"); exit(2); }
    for (int i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, lat_worker, (void *)(intptr_t)i);
    for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
    double med[4];
    uint32_t *all = malloc(sizeof(uint32_t) * (size_t)lat_pairs * (size_t)nthreads);
    if (!all) { fprintf(stderr, "bench-lat: out of memory\n"); exit(2); }
    for (int k = 0; k < 4; k++) {
        long m = 0;
        for (int i = 0; i < nthreads; i++) for (long j = 0; j < lat_pairs; j++) all[m++] = lat_ns[i][k][j];
        qsort(all, (size_t)m, sizeof all[0], cmpu);
        med[k] = all[m / 2];
    }
    printf("L threads=%d pairs=%ld shim_malloc_median_ns=%.0f shim_free_median_ns=%.0f direct_malloc_median_ns=%.0f direct_free_median_ns=%.0f added_malloc_ns=%.0f added_free_ns=%.0f added_per_call_ns=%.1f\n",
           nthreads, lat_pairs, med[0], med[1], med[2], med[3], med[0] - med[2], med[1] - med[3], ((med[0] - med[2]) + (med[1] - med[3])) / 2);
}
#endif

#ifdef DIRECT
/* reuse-race: thread B enters hipMalloc first; the runtime holds it until the main
 * thread's hipFree of P (entered 2 ms later) has completed, then gives B the address P.
 * Prints the calls in the order the runtime carried them out. */
void memwatchTestrtHoldNextAlloc(void);
int memwatchTestrtAllocWaiting(void);
static void *race_alloc(void *arg) {
    void **q = arg;
    int r = T.hipMalloc(q, 8192);
    printf("Q alloc r=%d ptr=%p\n", r, *q);
    return NULL;
}
static void reuse_race(void) {
    void *p = NULL, *q = NULL;
    int r = T.hipMalloc(&p, 4096);
    printf("Q alloc r=%d ptr=%p\n", r, p);
    memwatchTestrtHoldNextAlloc();
    pthread_t th;
    pthread_create(&th, NULL, race_alloc, &q);
    while (!memwatchTestrtAllocWaiting()) sched_yield();
    struct timespec gap = {0, 2000000};
    nanosleep(&gap, NULL);
    r = T.hipFree(p);
    printf("Q free r=%d ptr=%p\n", r, p);
    pthread_join(th, NULL);
    r = T.hipFree(q);
    printf("Q free r=%d ptr=%p\n", r, q);
}
#endif

/* Ending scenarios (abnormal_end): a SIGALRM handler that ends the process while the
 * main thread is inside malloc, and a thread allocating without pause. */
static void end_by_abort(int s) { (void)s; abort(); }

/* Under a file sink (MEMWATCH_SINK=file:PATH), waits up to 5 s until the shim opened it
 * and announced the process (the file holds more than its 16-byte preamble). */
static void wait_for_file_sink(void) {
    const char *sink = getenv("MEMWATCH_SINK");
    if (!sink || strncmp(sink, "file:", 5)) return;
    for (int i = 0; i < 5000; i++) {
        struct stat sb;
        if (stat(sink + 5, &sb) == 0 && sb.st_size > 16) return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}
static pthread_barrier_t end_barrier;
static volatile int aborting;
static void *alloc_then_abort(void *a) {
    (void)a;
    void *p; T.hipMalloc(&p, 8100);
    pthread_barrier_wait(&end_barrier);
    __atomic_store_n(&aborting, 1, __ATOMIC_SEQ_CST);
    abort();
    return NULL;
}
static void *alloc_forever(void *a) {
    (void)a;
    for (;;) { void *p; if (T.hipMalloc(&p, 64) == 0) T.hipFree(p); }
    return NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) { fprintf(stderr, "usage: mwtest direct|dlsym|proc basic|threads|fork|exec|bench\n"); return 2; }
    const char *sc = argv[2];
#ifdef DIRECT
    if (!strcmp(sc, "reuse-race")) { load(argv[1]); reuse_race(); return 0; }
    if (!strcmp(sc, "bench-lat")) {
        load(argv[1]);
        lat_pairs = argc > 4 ? atol(argv[4]) : 25000;
        bench_lat(argc > 3 ? atoi(argv[3]) : 1);
        return 0;
    }
    if (!strcmp(sc, "bench-ab")) {
        load(argv[1]);
        ab_rounds = argc > 4 ? atol(argv[4]) : 200;
        bench_batch = argc > 5 ? atol(argv[5]) : 1000;
        bench_ab(argc > 3 ? atoi(argv[3]) : 1);
        return 0;
    }
#endif
#ifndef DIRECT
    if (!strcmp(sc, "reload")) {
        /* dlopen, call, dlclose, dlopen again (maybe elsewhere), call: both recorded */
        for (int round = 0; round < 2; round++) {
            void *h = open_lib("libamdhip64.so");
            fn_pp_s m = (fn_pp_s)must(h, "hipMalloc");
            fn_p f = (fn_p)must(h, "hipFree");
            void *p = NULL;
            int r = m(&p, 777 + round);
            E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 777 + round, 0, 0);
            r = f(p);
            E("hipFree", FREE, DEV, r, (uint64_t)p, 0, 0, 0);
            /* let the flusher's device query (which holds a reference for microseconds) finish */
            struct timespec settle = {0, 50000000};
            nanosleep(&settle, NULL);
            dlclose(h);
            if (round == 0) { void *pad = dlopen("libm.so.6", RTLD_NOW); (void)pad; }
        }
        return 0;
    }
#endif
#ifndef DIRECT
    if (!strcmp(sc, "dlclose-exit")) {
        /* dlopen, allocate on device 3, dlclose at once, exit at once: the capture must
         * still describe device 3 (the shim asks the runtime before it is unloaded), and
         * the wrapper the program kept must not call into the unmapped library. */
        void *h = open_lib("libamdhip64.so");
        fn_i sd = (fn_i)must(h, "hipSetDevice");
        fn_pp_s m = (fn_pp_s)must(h, "hipMalloc");
        int r = sd(3); E("hipSetDevice", SETDEV, MK_NONE, r, 3, 0, 3, 0);
        void *p = NULL;
        r = m(&p, 4321); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 4321, 3, 0);
        errno = 77;
        int c = dlclose(h);
        int e = errno;
        char path[4096];
        snprintf(path, sizeof path, "%s/libamdhip64.so", getenv("MWTEST_LIBDIR") ? getenv("MWTEST_LIBDIR") : ".");
        void *still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
        printf("D dlclose=%d errno=%d unloaded=%d\n", c, e, still == NULL);
        /* Only under the shim (m is its wrapper): without it this would jump into
         * unmapped code. The shim forgot the unloaded function: "not initialised". */
        if (getenv("MWTEST_CALL_AFTER_CLOSE")) printf("A after_close=%d\n", m(&p, 1));
        return 0;
    }
#endif
    if (!strcmp(sc, "probe")) {
        /* no runtime loaded: RTLD_DEFAULT lookups of hooked names must still fail */
        const char *names[] = {"hipMalloc", "cuMemAlloc_v2", "cuGetProcAddress_v2", "cudaMalloc", "dlsym"};
        for (int i = 0; i < 5; i++) {
            void *p = dlsym(RTLD_DEFAULT, names[i]);
            const char *err = dlerror();
            printf("N probe %s found=%d error=%d\n", names[i], p != NULL, err != NULL);
        }
        return 0;
    }
    load(argv[1]);
    if (!strcmp(sc, "basic")) basic();
    else if (!strcmp(sc, "threads")) { if (argc > 3) per_thread = atoi(argv[3]); threads(); }
    else if (!strcmp(sc, "cu-threads")) {
        int n = argc > 4 ? atoi(argv[4]) : 8;
        if (argc > 3) per_thread = atoi(argv[3]);
        cu_threads(n < 1 ? 1 : n > 8 ? 8 : n);
    }
    else if (!strcmp(sc, "fork")) {
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 1000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 1000, 0, 0);
        pid_t c = fork();
        if (c == 0) {
            r = T.hipSetDevice(1); E("hipSetDevice", SETDEV, MK_NONE, r, 1, 0, 1, 0);
            r = T.hipMalloc(&p, 2000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 2000, 1, 0);
            printf("C pid=%d ppid=%d\n", getpid(), getppid());
            exit(0);
        }
        int st; waitpid(c, &st, 0);
        r = T.hipMalloc(&p, 3000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 3000, 0, 0);
        printf("P pid=%d child=%d status=%d\n", getpid(), c, st);
    } else if (!strcmp(sc, "exec")) {
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 4000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 4000, 0, 0);
        printf("X pid=%d\n", getpid());
        char *args[] = {argv[0], argv[1], "exec-child", NULL};
        execv("/proc/self/exe", args);
        perror("execv");
        return 1;
    } else if (!strcmp(sc, "exec-fail")) {
        /* exec that fails (as in a PATH search that tries directories in turn): the
         * image goes on, allocates again and exits normally. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 4000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 4000, 0, 0);
        char *args[] = {"memwatch-no-such-program", NULL};
        int e1 = execv("/nonexistent/memwatch-no-such-program", args);
        int err1 = errno;
        int e2 = execvp("memwatch-no-such-program", args);
        int err2 = errno;
        r = T.hipMalloc(&p, 6000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 6000, 0, 0);
        printf("F pid=%d execv=%d errno=%d execvp=%d errno=%d\n", getpid(), e1, err1, e2, err2);

    } else if (!strcmp(sc, "thread-exit")) {
        /* The main thread allocates and ends with pthread_exit: the process must end
         * then, as it does without the shim (its flusher thread must not keep it). */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7000, 0, 0);
        printf("T pid=%d\n", getpid());
        fflush(stdout);
        pthread_exit(NULL);
    } else if (!strcmp(sc, "abort") || !strcmp(sc, "_exit")) {
        /* Allocates, then ends without exit(): abort() as LOG(FATAL) after an OOM does,
         * or _exit(3) as os._exit does. The allocation must still reach the capture. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        printf("A pid=%d\n", getpid());
        fflush(stdout);
        if (!strcmp(sc, "abort")) abort();
        _exit(3);
    } else if (!strcmp(sc, "alarm-in-malloc")) {
        /* Allocates, then abort()s from a SIGALRM handler that interrupts the program's
         * own malloc/free loop: the shim's last pass must not need that allocator. That
         * holds once the sink is open (the flusher's first pass sizes its buffers and
         * announces the process); a process ending this way before that pass ran loses
         * its capture, since opening the sink allocates. The loop starts after it. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        fflush(stdout);
        wait_for_file_sink();
        signal(SIGALRM, end_by_abort);
        struct itimerval it = {{0, 0}, {0, 30000}};
        setitimer(ITIMER_REAL, &it, NULL);
        for (;;) {
            void *v[64];
            for (int i = 0; i < 64; i++) v[i] = malloc(16 + i * 1000);
            for (int i = 0; i < 64; i++) free(v[i]);
        }
    } else if (!strcmp(sc, "busy-abort")) {
        /* Another thread allocates without pause while this one allocates twice and
         * aborts: the last pass must end, and include this thread's allocations. */
        pthread_t th; pthread_create(&th, NULL, alloc_forever, NULL);
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        struct timespec pause = {0, 200000000};
        nanosleep(&pause, NULL);
        r = T.hipMalloc(&p, 7200); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7200, 0, 0);
        fflush(stdout);
        abort();
    } else if (!strcmp(sc, "fork-exec-fail")) {
        /* A forked child whose exec fails ends with _exit(127), as shells do; it makes
         * no hooked call of its own, so nothing but the exec starts its flusher. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            char *args[] = {"memwatch-no-such-program", NULL};
            execv("/nonexistent/memwatch-no-such-program", args);
            _exit(127);
        }
        int st; waitpid(c, &st, 0);
        printf("P child status=%d\n", WEXITSTATUS(st));
    } else if (!strcmp(sc, "abort-then-exit")) {
        /* One thread aborts; main calls exit(3) 3 ms after it entered abort(). Without
         * the shim the abort ends the process first (SIGABRT); the hand-off must not let
         * exit overtake it. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        fflush(stdout);
        pthread_barrier_init(&end_barrier, NULL, 2);
        pthread_t th; pthread_create(&th, NULL, alloc_then_abort, NULL);
        /* Both threads set up and the flusher's first pass long done (it then sleeps
         * up to 20 ms between passes, which the old hand-off waited out). */
        struct timespec settle = {0, 100000000};
        nanosleep(&settle, NULL);
        pthread_barrier_wait(&end_barrier);
        /* The 3 ms count from the moment the other thread enters abort(), however late
         * it was woken. */
        while (!__atomic_load_n(&aborting, __ATOMIC_SEQ_CST)) {}
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do clock_gettime(CLOCK_MONOTONIC, &t1);
        while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 3000000L);
        exit(3);
    } else if (!strcmp(sc, "fork-vfork-exec-fail")) {
        /* A forked child that has recorded nothing spawns a helper with vfork whose exec
         * fails (_exit(127)), then allocates and ends with _exit(5). The vfork child
         * shares the forked child's memory: the shim must leave its exec alone. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            pid_t g = vfork();
            if (g == 0) {
                char *args[] = {"memwatch-no-such-program", NULL};
                execv("/nonexistent/memwatch-no-such-program", args);
                _exit(127);
            }
            int gst; waitpid(g, &gst, 0);
            r = T.hipMalloc(&p, 8100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 8100, 0, 0);
            fflush(stdout);
            _exit(5);
        }
        int st; waitpid(c, &st, 0);
        printf("P child status=%d\n", WEXITSTATUS(st));
    } else if (!strcmp(sc, "dlopen-ctor-exit")) {
        /* argv[3]: a library whose constructor starts a thread that calls _exit(3) and
         * waits for it, holding the dynamic loader's lock all the while. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 7100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 7100, 0, 0);
        fflush(stdout);
        dlopen(argv[3], RTLD_NOW);
        printf("dlopen returned\n");
    } else if (!strcmp(sc, "exec-child")) {
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 5000); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 5000, 0, 0);
        printf("Y pid=%d\n", getpid());
    } else if (!strcmp(sc, "closefds")) {
        /* A daemon's habits: close every descriptor it did not open, open its own file
         * (which gets the lowest free number), keep allocating, write one line; then
         * block SIGUSR1, raise it and take it with sigwait. argv[3]: the file. */
        void *p = NULL; int r;
        r = T.hipMalloc(&p, 100); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 100, 0, 0);
        struct timespec pause = {0, 250000000};
        nanosleep(&pause, NULL); /* the flusher has opened the sink by now */
        for (int fd = 3; fd < 4096; fd++) close(fd);
        int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        for (int i = 0; i < 20; i++) {
            r = T.hipMalloc(&p, 200 + i); E("hipMalloc", ALLOC, DEV, r, (uint64_t)p, 200 + i, 0, 0);
            struct timespec tick = {0, 5000000};
            nanosleep(&tick, NULL);
        }
        const char line[] = "program data\n";
        if (write(fd, line, sizeof line - 1) != (ssize_t)(sizeof line - 1)) { perror("write"); return 1; }
        close(fd);
        sigset_t set; sigemptyset(&set); sigaddset(&set, SIGUSR1);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        raise(SIGUSR1);
        int got = 0;
        sigwait(&set, &got);
        printf("S sigwait=%d\n", got);
    } else if (!strcmp(sc, "churn")) {
        /* many short-lived threads, one after another: per-thread rings must be reused */
        int n = argc > 3 ? atoi(argv[3]) : 1500;
        for (int i = 0; i < n; i++) {
            pthread_t th;
            per_thread = 1;
            pthread_create(&th, NULL, churn_worker, (void *)(intptr_t)(i % 8));
            pthread_join(th, NULL);
        }
        printf("churn threads=%d\n", n);
    } else if (!strcmp(sc, "crowd")) {
        int n = argc > 3 ? atoi(argv[3]) : 1100;
        if (n < 1 || n > 4096) { fprintf(stderr, "crowd: 1-4096 threads\n"); return 2; }
        static pthread_t th[4096];
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        pthread_barrier_init(&crowd_barrier, NULL, (unsigned)n);
        for (int i = 0; i < n; i++)
            if (pthread_create(&th[i], &attr, crowd_worker, (void *)(intptr_t)i)) { perror("pthread_create"); return 1; }
        for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
        printf("crowd threads=%d\n", n);
    } else if (!strcmp(sc, "clock")) {
        /* CLOCK_MONOTONIC around calls, to check the capture's timestamps and durations */
        for (int i = 0; i < 20; i++) {
            struct timespec a, b, pause = {0, 2000000};
            void *p = NULL;
            clock_gettime(CLOCK_MONOTONIC, &a);
            int r = T.hipMalloc(&p, 100 + i);
            clock_gettime(CLOCK_MONOTONIC, &b);
            printf("K %d %lld %lld r=%d\n", 100 + i, a.tv_sec * 1000000000LL + a.tv_nsec, b.tv_sec * 1000000000LL + b.tv_nsec, r);
            nanosleep(&pause, NULL);
        }
    } else if (!strcmp(sc, "bench")) {
        bench_batches = argc > 4 ? atol(argv[4]) : 200;
        bench_batch = argc > 5 ? atol(argv[5]) : 1000;
        bench(argc > 3 ? atoi(argv[3]) : 1);
    } else if (!strcmp(sc, "rate")) {
        bench_secs = argc > 4 ? atof(argv[4]) : 2;
        bench_rate = (argc > 5 ? atof(argv[5]) : 1e6) / (argc > 3 ? atoi(argv[3]) : 1);
        rate(argc > 3 ? atoi(argv[3]) : 1);
    } else { fprintf(stderr, "unknown scenario %s\n", sc); return 2; }
    return 0;
}
