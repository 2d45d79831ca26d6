// Times allocation + release pairs through the real CUDA driver, the way XLA reaches it:
// libcuda.so.1 opened with dlopen and its entry points looked up with dlsym (so under
// LD_PRELOAD=libmemwatch_preload.so the calls go through the shim's dlsym path).
//
//   cuda_driver_pairs MODE THREADS BATCHES PAIRS BYTES
//     MODE sync:  cuMemAlloc_v2 + cuMemFree_v2
//          async: cuMemAllocAsync + cuMemFreeAsync on a per-thread stream (the device's
//                 default memory pool; what XLA_PYTHON_CLIENT_ALLOCATOR=cuda_async uses)
//          ab-sync, ab-async: the same side by side in one process: each round times
//                 a batch through the dlsym'd entry points (the shim's wrappers when it
//                 is preloaded), then two batches through the functions' own addresses
//                 (read from libcuda's ELF symbol table, which no dlsym hook sees), then
//                 one through dlsym again (ABBA); BATCHES rounds.
//
// Each thread retains device 0's primary context, warms up with one batch, then times
// BATCHES batches of PAIRS pairs; prints the median, p10 and p90 over all threads'
// batches of the time per call (a pair is two calls) as
//   mode=.. threads=.. median_ns_per_call=.. p10=.. p90=.. calls=.. failed=..
// ab modes print the per-round differences (dlsym'd minus direct, per call) instead:
//   mode=.. threads=.. direct_median_ns_per_call=.. dlsym_median_ns_per_call=..
//   added_median_ns_per_call=.. added_p10=.. added_p90=.. calls=.. hooked_calls=.. failed=..
// Diagnostic: CUDA_PAIRS_PAD_NS=N (ab modes) adds N ns of busy work, touching no memory,
// after each call of the dlsym'd batches. Run without the shim, the "added" figure is then
// what N ns of the caller's own work outside the driver costs per call, so a shim's added
// cost can be told apart from how the driver's locking amplifies any work between calls.
// Exit 1 when the driver is missing or any call failed.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUstream;

static CUresult (*p_cuInit)(unsigned);
static CUresult (*p_cuDeviceGet)(CUdevice *, int);
static CUresult (*p_cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
static CUresult (*p_cuCtxSetCurrent)(CUcontext);
static CUresult (*p_cuStreamCreate)(CUstream *, unsigned);
static CUresult (*p_cuStreamSynchronize)(CUstream);
static CUresult (*p_cuStreamDestroy)(CUstream);
static CUresult (*p_cuMemAlloc)(CUdeviceptr *, size_t);
static CUresult (*p_cuMemFree)(CUdeviceptr);
static CUresult (*p_cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
static CUresult (*p_cuMemFreeAsync)(CUdeviceptr, CUstream);

struct fns {
  CUresult (*alloc)(CUdeviceptr *, size_t);
  CUresult (*free)(CUdeviceptr);
  CUresult (*alloc_async)(CUdeviceptr *, size_t, CUstream);
  CUresult (*free_async)(CUdeviceptr, CUstream);
};
static struct fns hooked, direct;

static int async_mode, ab_mode, batches, pairs;
static long pad_iters;  // busy-loop iterations after each dlsym'd call (CUDA_PAIRS_PAD_NS)
static size_t bytes;
static CUcontext ctx;

struct worker {
  pthread_t th;
  double *ns_per_call;  // ab modes: per-round added ns per call
  double *direct_ns;    // ab modes: per-round direct ns per call
  double *hooked_ns;    // ab modes: per-round dlsym'd ns per call
  long failed;
};

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

// ITERS rounds of a dependent multiply-add chain the compiler cannot drop; no memory.
static void spin(long iters) {
  uint64_t x = 1;
  for (long i = 0; i < iters; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ volatile("" : "+r"(x));
  }
}

// Iterations of spin() per nanosecond on this core, from a 20 ms run.
static double spin_per_ns(void) {
  long iters = 1000000;
  double t0 = now_ns();
  long done = 0;
  while (now_ns() - t0 < 20e6) {
    spin(iters);
    done += iters;
  }
  return (double)done / (now_ns() - t0);
}

static void run_batch(const struct fns *f, CUstream s, long *failed, long pad) {
  for (int i = 0; i < pairs; i++) {
    CUdeviceptr p = 0;
    if (async_mode) {
      if (f->alloc_async(&p, bytes, s) != 0) { (*failed)++; continue; }
      spin(pad);
      if (f->free_async(p, s) != 0) (*failed)++;
    } else {
      if (f->alloc(&p, bytes) != 0) { (*failed)++; continue; }
      spin(pad);
      if (f->free(p) != 0) (*failed)++;
    }
    spin(pad);
  }
}

// Nanoseconds per call of one batch.
static double timed_batch(const struct fns *f, CUstream s, long *failed) {
  double t0 = now_ns();
  run_batch(f, s, failed, f == &hooked ? pad_iters : 0);
  return (now_ns() - t0) / (2.0 * pairs);
}

static void *work(void *arg) {
  struct worker *w = arg;
  CUstream s = NULL;
  if (p_cuCtxSetCurrent(ctx) != 0 || (async_mode && p_cuStreamCreate(&s, 0) != 0)) {
    w->failed++;
    return NULL;
  }
  run_batch(&hooked, s, &w->failed, 0);  // warm-up: pool growth, first-touch costs
  if (ab_mode) run_batch(&direct, s, &w->failed, 0);
  if (async_mode) p_cuStreamSynchronize(s);
  for (int b = 0; b < batches; b++) {
    if (!ab_mode) {
      w->ns_per_call[b] = timed_batch(&hooked, s, &w->failed);
      continue;
    }
    double h = timed_batch(&hooked, s, &w->failed);
    double d = timed_batch(&direct, s, &w->failed);
    d += timed_batch(&direct, s, &w->failed);
    h += timed_batch(&hooked, s, &w->failed);
    w->hooked_ns[b] = h / 2;
    w->direct_ns[b] = d / 2;
    w->ns_per_call[b] = (h - d) / 2;
  }
  if (async_mode) {
    p_cuStreamSynchronize(s);
    p_cuStreamDestroy(s);
  }
  return NULL;
}

// The addresses of the driver functions NAMES[0..n) in the loaded library whose path
// contains "libcuda.so", from the file's .dynsym (the dynamic linker's view, without any
// dlsym interposer), read once for all of them. Names not found stay NULL.
struct elf_find {
  const char *const *names;
  void **addrs;
  int n;
};

static void lookup_elf(const char *path, ElfW(Addr) base, const struct elf_find *q) {
  FILE *f = fopen(path, "rb");
  if (!f) return;
  ElfW(Ehdr) eh;
  ElfW(Shdr) *sh = NULL;
  char *str = NULL;
  ElfW(Sym) *sym = NULL;
  if (fread(&eh, sizeof eh, 1, f) != 1 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) goto out;
  sh = calloc(eh.e_shnum, sizeof *sh);
  if (!sh || fseek(f, (long)eh.e_shoff, SEEK_SET) != 0 ||
      fread(sh, sizeof *sh, eh.e_shnum, f) != eh.e_shnum)
    goto out;
  int d = 0;
  while (d < eh.e_shnum && sh[d].sh_type != SHT_DYNSYM) d++;
  if (d == eh.e_shnum || sh[d].sh_link >= eh.e_shnum) goto out;
  ElfW(Shdr) *ss = &sh[sh[d].sh_link];
  str = malloc(ss->sh_size);
  sym = malloc(sh[d].sh_size);
  if (!str || !sym || fseek(f, (long)ss->sh_offset, SEEK_SET) != 0 ||
      fread(str, 1, ss->sh_size, f) != ss->sh_size ||
      fseek(f, (long)sh[d].sh_offset, SEEK_SET) != 0 ||
      fread(sym, 1, sh[d].sh_size, f) != sh[d].sh_size)
    goto out;
  size_t n = sh[d].sh_size / sizeof *sym;
  for (size_t k = 0; k < n; k++) {
    if (sym[k].st_name >= ss->sh_size || sym[k].st_value == 0 ||
        ELF64_ST_TYPE(sym[k].st_info) != STT_FUNC)
      continue;
    for (int j = 0; j < q->n; j++)
      if (!q->addrs[j] && strcmp(str + sym[k].st_name, q->names[j]) == 0)
        q->addrs[j] = (void *)(base + sym[k].st_value);
  }
out:
  free(sh);
  free(str);
  free(sym);
  fclose(f);
}

static int find_in_libcuda(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  if (info->dlpi_name && strstr(info->dlpi_name, "libcuda.so")) {
    lookup_elf(info->dlpi_name, info->dlpi_addr, arg);
    return 1;
  }
  return 0;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define LOOKUP(h, var, name)                                   \
  do {                                                         \
    *(void **)&var = dlsym(h, name);                           \
    if (!var) {                                                \
      fprintf(stderr, "cuda_driver_pairs: no %s in libcuda\n", name); \
      return 1;                                                \
    }                                                          \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: cuda_driver_pairs sync|async|ab-sync|ab-async THREADS BATCHES PAIRS "
                    "BYTES\n");
    return 2;
  }
  ab_mode = strncmp(argv[1], "ab-", 3) == 0;
  const char *base_mode = ab_mode ? argv[1] + 3 : argv[1];
  async_mode = strcmp(base_mode, "async") == 0;
  int threads = atoi(argv[2]);
  batches = atoi(argv[3]);
  pairs = atoi(argv[4]);
  bytes = strtoull(argv[5], NULL, 10);
  if ((!async_mode && strcmp(base_mode, "sync") != 0) || threads < 1 || threads > 64 ||
      batches < 1 || batches > 100000 || pairs < 1 || pairs > 10000000 || bytes == 0) {
    fprintf(stderr, "cuda_driver_pairs: mode sync|async|ab-sync|ab-async, 1-64 threads, "
                    "1-100000 batches, 1-10000000 pairs, BYTES > 0\n");
    return 2;
  }
  double pad_ns = 0;
  const char *pad = getenv("CUDA_PAIRS_PAD_NS");
  if (pad && *pad) {
    char *end;
    pad_ns = strtod(pad, &end);
    if (!ab_mode || *end || !(pad_ns >= 0 && pad_ns <= 1e6)) {
      fprintf(stderr, "cuda_driver_pairs: CUDA_PAIRS_PAD_NS wants 0-1000000 ns, ab modes only\n");
      return 2;
    }
  }
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cuda_driver_pairs: %s\n", dlerror());
    return 1;
  }
  LOOKUP(h, p_cuInit, "cuInit");
  LOOKUP(h, p_cuDeviceGet, "cuDeviceGet");
  LOOKUP(h, p_cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOOKUP(h, p_cuCtxSetCurrent, "cuCtxSetCurrent");
  LOOKUP(h, p_cuStreamCreate, "cuStreamCreate");
  LOOKUP(h, p_cuStreamSynchronize, "cuStreamSynchronize");
  LOOKUP(h, p_cuStreamDestroy, "cuStreamDestroy_v2");
  LOOKUP(h, p_cuMemAlloc, "cuMemAlloc_v2");
  LOOKUP(h, p_cuMemFree, "cuMemFree_v2");
  LOOKUP(h, p_cuMemAllocAsync, "cuMemAllocAsync");
  LOOKUP(h, p_cuMemFreeAsync, "cuMemFreeAsync");
  hooked = (struct fns){p_cuMemAlloc, p_cuMemFree, p_cuMemAllocAsync, p_cuMemFreeAsync};
  if (ab_mode) {
    static const char *const names[] = {"cuMemAlloc_v2", "cuMemFree_v2", "cuMemAllocAsync",
                                        "cuMemFreeAsync"};
    void *addrs[4] = {NULL, NULL, NULL, NULL};
    struct elf_find q = {names, addrs, 4};
    dl_iterate_phdr(find_in_libcuda, &q);
    *(void **)&direct.alloc = addrs[0];
    *(void **)&direct.free = addrs[1];
    *(void **)&direct.alloc_async = addrs[2];
    *(void **)&direct.free_async = addrs[3];
    if (!direct.alloc || !direct.free || !direct.alloc_async || !direct.free_async) {
      fprintf(stderr, "cuda_driver_pairs: libcuda's symbol table has not every function\n");
      return 1;
    }
  }
  if (pad_ns > 0) {
    double per_ns = spin_per_ns();
    pad_iters = (long)(pad_ns * per_ns + 0.5);
    printf("pad: %.0f ns after each dlsym'd call = %ld spin iterations (%.3f per ns)\n", pad_ns,
           pad_iters, per_ns);
  }
  CUdevice dev;
  if (p_cuInit(0) != 0 || p_cuDeviceGet(&dev, 0) != 0 ||
      p_cuDevicePrimaryCtxRetain(&ctx, dev) != 0) {
    fprintf(stderr, "cuda_driver_pairs: no usable CUDA device 0\n");
    return 1;
  }
  struct worker *w = calloc((size_t)threads, sizeof *w);
  size_t n = (size_t)threads * (size_t)batches;
  double *all = calloc(n, sizeof *all), *dir = calloc(n, sizeof *dir),
         *hk = calloc(n, sizeof *hk);
  if (!w || !all || !dir || !hk) {
    fprintf(stderr, "cuda_driver_pairs: out of memory\n");
    return 1;
  }
  for (int t = 0; t < threads; t++) {
    w[t].ns_per_call = all + (size_t)t * (size_t)batches;
    w[t].direct_ns = dir + (size_t)t * (size_t)batches;
    w[t].hooked_ns = hk + (size_t)t * (size_t)batches;
    if (pthread_create(&w[t].th, NULL, work, &w[t]) != 0) return 1;
  }
  long failed = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(w[t].th, NULL);
    failed += w[t].failed;
  }
  qsort(all, n, sizeof *all, cmp);
  if (ab_mode) {
    qsort(dir, n, sizeof *dir, cmp);
    qsort(hk, n, sizeof *hk, cmp);
    printf("mode=%s threads=%d direct_median_ns_per_call=%.1f dlsym_median_ns_per_call=%.1f "
           "added_median_ns_per_call=%.1f added_p10=%.1f added_p90=%.1f calls=%ld "
           "hooked_calls=%ld failed=%ld\n",
           argv[1], threads, dir[n / 2], hk[n / 2], all[n / 2], all[n / 10], all[n * 9 / 10],
           4L * threads * (2 * batches + 1) * pairs, 2L * threads * (2 * batches + 1) * pairs,
           failed);
    return failed ? 1 : 0;
  }
  printf("mode=%s threads=%d median_ns_per_call=%.1f p10=%.1f p90=%.1f calls=%ld failed=%ld\n",
         argv[1], threads, all[n / 2], all[n / 10], all[n * 9 / 10],
         2L * threads * (batches + 1) * pairs, failed);
  return failed ? 1 : 0;
}
