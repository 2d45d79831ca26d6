/* A small PJRT plugin for memwatch's tests: exports GetPjrtApi and implements the
 * subset of the PJRT C API (layouts of xla/pjrt/c/pjrt_c_api.h, major 0) that the
 * shim wraps or calls, over a simulated device allocator with a byte limit.
 *
 * Programs are strings "name=jit_model;arg=N;out=N;temp=N;outs=K" (Client_Compile's
 * program->code, or the serialized bytes of DeserializeAndLoad). Execute allocates the
 * outputs (K buffers of out/K bytes) on each device, holds temp during the call, and
 * fails with RESOURCE_EXHAUSTED "Out of memory while trying to allocate N bytes." when
 * the device limit would be passed. With ";async=1" that failure is not returned by
 * Execute but delivered through the completion event's OnReady callback or, when the
 * caller asked for no completion events, through the output buffers' ready events
 * (PJRT_Buffer_ReadyEvent, then PJRT_Event_OnReady / _Await / _Error), as JAX sees it.
 *
 * The table's shape is chosen by the environment, read on each GetPjrtApi call:
 *   FAKE_PJRT_SLOTS  number of function slots (default 130: newer than memwatch knows;
 *                    slots past the known ones hold distinct sentinel functions)
 *   FAKE_PJRT_MAJOR / FAKE_PJRT_MINOR  the reported API version (default 0 / 94)
 *   FAKE_PJRT_CUDA_LIB  a CUDA driver library: Execute then also takes each temp buffer
 *                    from it (cuMemAlloc_v2 / cuMemFree_v2 looked up with dlsym), as a
 *                    plugin's allocator does, so driver calls nest inside execute
 * fake_pjrt_real_api() returns the table itself, fake_pjrt_calls(slot) how many times
 * each entry ran, so tests can check pass-through. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NSLOTS_MAX 160
#define NDEV 2
#define LIMIT (1ull << 30) /* 1 GiB per device */
#define POOL (LIMIT)

typedef struct { size_t struct_size; void *ext; } Head;
typedef struct { size_t struct_size; void *ext; size_t vsize; void *vext; int major, minor; void *fn[NSLOTS_MAX]; } Api;

struct Err_ { int code; char msg[160]; };
typedef struct { int id; int64_t in_use, peak, nallocs, largest; } Dev;
typedef struct Err_ Err;
typedef struct { int dev; uint64_t size; int deleted; Err *err; } Buf;
typedef struct { char name[64]; char fp[80]; int64_t arg, out, temp; int outs, async; } Exe;
typedef struct { int ready; Err *err; } Ev;

static Dev devs[NDEV] = {{0}, {1}};
static Dev *devptrs[NDEV] = {&devs[0], &devs[1]};
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static Api api;
static atomic_long calls[NSLOTS_MAX];

long fake_pjrt_calls(int slot) { return slot >= 0 && slot < NSLOTS_MAX ? atomic_load(&calls[slot]) : -1; }
const void *fake_pjrt_real_api(void) { return &api; }

static Err *mkerr(int code, const char *fmt, unsigned long long v) {
  Err *e = calloc(1, sizeof *e);
  e->code = code;
  snprintf(e->msg, sizeof e->msg, fmt, v);
  return e;
}
#define CNT(s) atomic_fetch_add(&calls[s], 1)
#define A(T) T *a = (T *)args

/* ---- errors (0,1,2) */
typedef struct { size_t ss; void *ext; Err *error; } ErrDestroyA;
static void Error_Destroy(void *args) { A(ErrDestroyA); CNT(0); free(a->error); }
typedef struct { size_t ss; void *ext; const Err *error; const char *message; size_t message_size; } ErrMsgA;
static void Error_Message(void *args) { A(ErrMsgA); CNT(1); a->message = a->error->msg; a->message_size = strlen(a->error->msg); }
typedef struct { size_t ss; void *ext; const Err *error; int code; } ErrCodeA;
static Err *Error_GetCode(void *args) { A(ErrCodeA); CNT(2); a->code = a->error->code; return NULL; }

static Err *errcopy(const Err *e) {
  if (!e) return NULL;
  Err *c = malloc(sizeof *c); *c = *e; return c;
}

/* ---- events (5, 7, 8, 9) */
typedef struct { size_t ss; void *ext; Ev *event; } EvA;
static Err *Event_Destroy(void *args) { A(EvA); CNT(5); free(a->event->err); free(a->event); return NULL; }
/* Error and Await return their own copy of the event's error (the caller destroys it). */
static Err *Event_Error(void *args) { A(EvA); CNT(7); return errcopy(a->event->err); }
static Err *Event_Await(void *args) { A(EvA); CNT(8); return errcopy(a->event->err); }
typedef struct { size_t ss; void *ext; Ev *event; void (*cb)(Err *, void *); void *user; } OnReadyA;
/* The callback owns the event's error (PJRT_Event_OnReadyCallback). */
static Err *Event_OnReady(void *args) {
  A(OnReadyA); CNT(9);
  Err *e = a->event->err; a->event->err = NULL;
  a->cb(e, a->user);
  return NULL;
}

/* ---- client (10, 11, 16) */
typedef struct { size_t ss; void *ext; void *opts; size_t nopts; void *g, *gu, *p, *pu; void *client; } CreateA;
static int the_client;
static Err *Client_Create(void *args) { A(CreateA); CNT(10); a->client = &the_client; return NULL; }
typedef struct { size_t ss; void *ext; void *client; } DestroyA;
static Err *Client_Destroy(void *args) { (void)args; CNT(11); return NULL; }
typedef struct { size_t ss; void *ext; void *client; void **devices; size_t n; } DevsA;
static Err *Client_AddressableDevices(void *args) { A(DevsA); CNT(16); a->devices = (void **)devptrs; a->n = NDEV; return NULL; }

/* ---- memory accounting */
static int reserve(Dev *d, uint64_t n) {
  if ((uint64_t)d->in_use + n > LIMIT) return 0;
  d->in_use += n; d->nallocs++;
  if (d->in_use > d->peak) d->peak = d->in_use;
  if ((int64_t)n > d->largest) d->largest = n;
  return 1;
}
static Buf *newbuf(Dev *d, uint64_t n) {
  if (!reserve(d, n)) return NULL;
  Buf *b = calloc(1, sizeof *b); b->dev = d->id; b->size = n; return b;
}
static void unbuf(Buf *b) { if (!b->deleted) { devs[b->dev].in_use -= b->size; devs[b->dev].nallocs--; b->deleted = 1; } }

/* ---- compile (20), deserialize (56) */
static Exe *parse(const char *code, size_t n) {
  Exe *e = calloc(1, sizeof *e);
  char buf[512]; if (n >= sizeof buf) n = sizeof buf - 1;
  memcpy(buf, code, n); buf[n] = 0;
  e->outs = 1;
  for (char *t = strtok(buf, ";"); t; t = strtok(NULL, ";")) {
    if (!strncmp(t, "name=", 5)) snprintf(e->name, sizeof e->name, "%s", t + 5);
    else if (!strncmp(t, "arg=", 4)) e->arg = atoll(t + 4);
    else if (!strncmp(t, "out=", 4)) e->out = atoll(t + 4);
    else if (!strncmp(t, "temp=", 5)) e->temp = atoll(t + 5);
    else if (!strncmp(t, "outs=", 5)) e->outs = atoi(t + 5);
    else if (!strncmp(t, "async=", 6)) e->async = atoi(t + 6);
  }
  snprintf(e->fp, sizeof e->fp, "fp-%s-%lld", e->name, (long long)e->temp);
  return e;
}
typedef struct { size_t ss; void *ext; char *code; size_t code_size; const char *fmt; size_t fmt_size; } Program;
typedef struct { size_t ss; void *ext; void *client; Program *program; const char *opts; size_t opts_size; Exe *exe; } CompileA;
static Err *Client_Compile(void *args) {
  A(CompileA); CNT(20);
  if (!a->program || !a->program->code) return mkerr(3, "no program%llu", 0);
  a->exe = parse(a->program->code, a->program->code_size);
  return NULL;
}
typedef struct { size_t ss; void *ext; void *client; const char *ser; size_t ser_size; Exe *exe; } DeserA;
static Err *DeserializeAndLoad(void *args) { A(DeserA); CNT(56); a->exe = parse(a->ser, a->ser_size); return NULL; }

/* ---- buffers from host (22) */
typedef struct { size_t ss; void *ext; void *client; const void *data; int type; const int64_t *dims; size_t num_dims;
  const int64_t *strides; size_t nstrides; int sem; Dev *device; void *memory; void *layout; void *done; Buf *buffer; } FromHostA;
static Err *BufferFromHost(void *args) {
  A(FromHostA); CNT(22);
  uint64_t n = a->type == 11 ? 4 : a->type == 13 ? 2 : 1;
  for (size_t i = 0; i < a->num_dims; i++) n *= (uint64_t)a->dims[i];
  Dev *d = a->device ? a->device : &devs[0];
  pthread_mutex_lock(&mu);
  Buf *b = newbuf(d, n);
  pthread_mutex_unlock(&mu);
  if (!b) return mkerr(8, "Out of memory while trying to allocate %llu bytes.", (unsigned long long)n);
  a->buffer = b; a->done = NULL;
  return NULL;
}

/* ---- devices (31, 34) */
typedef struct { size_t ss; void *ext; Dev *device; int id; } HwIdA;
static Err *Device_LocalHardwareId(void *args) { A(HwIdA); CNT(31); a->id = a->device->id; return NULL; }
typedef struct { size_t ss; void *ext; Dev *device;
  int64_t in_use; int64_t peak; bool peak_set; int64_t nallocs; bool nallocs_set; int64_t largest; bool largest_set;
  int64_t limit; bool limit_set; int64_t reserved; bool reserved_set; int64_t peak_reserved; bool peak_reserved_set;
  int64_t reservable; bool reservable_set; int64_t free_block; bool free_block_set; int64_t pool; bool pool_set;
  int64_t peak_pool; bool peak_pool_set; } StatsA;
static Err *Device_MemoryStats(void *args) {
  A(StatsA); CNT(34);
  if (a->ss < offsetof(StatsA, peak_pool_set) + 1) return mkerr(3, "struct_size %llu too small", a->ss);
  pthread_mutex_lock(&mu);
  Dev *d = a->device;
  a->in_use = d->in_use; a->peak = d->peak; a->peak_set = true;
  a->nallocs = d->nallocs; a->nallocs_set = true; a->largest = d->largest; a->largest_set = true;
  a->limit = LIMIT; a->limit_set = true; a->free_block = LIMIT - d->in_use; a->free_block_set = true;
  a->pool = POOL; a->pool_set = true; a->peak_pool = POOL; a->peak_pool_set = true;
  a->reserved_set = a->peak_reserved_set = a->reservable_set = false;
  pthread_mutex_unlock(&mu);
  return NULL;
}

/* ---- executables (40, 41, 44, 50, 51, 52, 55, 57, 94, 96) */
typedef struct { size_t ss; void *ext; Exe *exe; } ExeA;
static Err *Executable_Destroy(void *args) { (void)args; CNT(40); return NULL; } /* view of the loaded one */
typedef struct { size_t ss; void *ext; Exe *exe; const char *s; size_t n; } ExeStrA;
static Err *Executable_Name(void *args) { A(ExeStrA); CNT(41); a->s = a->exe->name; a->n = strlen(a->exe->name); return NULL; }
typedef struct { size_t ss; void *ext; Exe *exe; size_t n; } ExeNA;
static Err *Executable_NumOutputs(void *args) { A(ExeNA); CNT(44); a->n = a->exe->outs; return NULL; }
static Err *LoadedExecutable_Destroy(void *args) { A(ExeA); CNT(50); free(a->exe); return NULL; }
typedef struct { size_t ss; void *ext; Exe *loaded; Exe *exe; } GetExeA;
static Err *LoadedExecutable_GetExecutable(void *args) { A(GetExeA); CNT(51); a->exe = a->loaded; return NULL; }
typedef struct { size_t ss; void *ext; Exe *exe; void **devices; size_t n; } ExeDevsA;
static Err *LoadedExecutable_AddressableDevices(void *args) { A(ExeDevsA); CNT(52); a->devices = (void **)devptrs; a->n = NDEV; return NULL; }
static Err *LoadedExecutable_Fingerprint(void *args) { A(ExeStrA); CNT(57); a->s = a->exe->fp; a->n = strlen(a->exe->fp); return NULL; }
static Err *Executable_Fingerprint(void *args) { A(ExeStrA); CNT(94); a->s = a->exe->fp; a->n = strlen(a->exe->fp); return NULL; }
typedef struct { size_t ss; void *ext; Exe *exe; int64_t v[12]; } MemStatsA;
static Err *Executable_GetCompiledMemoryStats(void *args) {
  A(MemStatsA); CNT(96);
  /* like a plugin built with the newest header: callers must know all 12 fields */
  if (a->ss < sizeof(MemStatsA)) return mkerr(3, "struct_size %llu too small", a->ss);
  memset(a->v, 0, sizeof a->v);
  a->v[10] = a->exe->arg + a->exe->out + a->exe->temp; a->v[11] = a->v[10];
  a->v[0] = 4096; a->v[1] = a->exe->arg; a->v[2] = a->exe->out; a->v[4] = a->exe->temp;
  return NULL;
}
static int (*cu_alloc)(unsigned long long *, size_t);
static int (*cu_free)(unsigned long long);
static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static void cu_load(void) {
  const char *lib = getenv("FAKE_PJRT_CUDA_LIB");
  void *h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_LOCAL) : NULL;
  if (!h) return;
  cu_alloc = (int (*)(unsigned long long *, size_t))dlsym(h, "cuMemAlloc_v2");
  cu_free = (int (*)(unsigned long long))dlsym(h, "cuMemFree_v2");
}
static void driver_temp(int64_t n) {
  pthread_once(&cu_once, cu_load);
  unsigned long long p = 0;
  if (n > 0 && cu_alloc && cu_free && cu_alloc(&p, (size_t)n) == 0) cu_free(p);
}

typedef struct { size_t ss; void *ext; Exe *exe; void *opts; Buf ***args; size_t ndev; size_t nargs; Buf ***outs; Ev **events; Dev *exec_dev; } ExecA;
static Err *Execute(void *args) {
  A(ExecA); CNT(55);
  Exe *e = a->exe;
  for (size_t d = 0; d < a->ndev; d++) {
    Dev *dev = a->exec_dev ? a->exec_dev : &devs[d % NDEV];
    pthread_mutex_lock(&mu);
    uint64_t per = e->outs ? (uint64_t)e->out / e->outs : 0;
    if (!reserve(dev, e->temp)) {
      pthread_mutex_unlock(&mu);
      Err *oom = mkerr(8, "Out of memory while trying to allocate %llu bytes.", (unsigned long long)e->temp);
      if (!e->async) return oom;
      /* async=1: a dispatched execute whose device-side run fails. Execute returns
       * success; outputs are error buffers holding no memory, the error comes with the
       * completion event (or is dropped when the caller asked for none). */
      for (int i = 0; i < e->outs; i++) {
        Buf *b = calloc(1, sizeof *b); b->dev = dev->id; b->deleted = 1; a->outs[d][i] = b;
        if (!a->events) b->err = errcopy(oom); /* seen when the output is awaited */
      }
      if (a->events) { a->events[d] = calloc(1, sizeof(Ev)); a->events[d]->err = oom; } else free(oom);
      continue;
    }
    int ok = 1;
    for (int i = 0; i < e->outs && ok; i++) {
      Buf *b = newbuf(dev, per);
      if (!b) ok = 0; else a->outs[d][i] = b;
    }
    dev->in_use -= e->temp; dev->nallocs--;
    pthread_mutex_unlock(&mu);
    driver_temp(e->temp);
    if (!ok) return mkerr(8, "Out of memory while trying to allocate %llu bytes.", (unsigned long long)per);
    if (a->events) a->events[d] = calloc(1, sizeof(Ev));
  }
  return NULL;
}

/* ---- buffers (58, 64, 65, 67, 69) */
typedef struct { size_t ss; void *ext; Buf *b; } BufA;
static Err *Buffer_Destroy(void *args) { A(BufA); CNT(58); pthread_mutex_lock(&mu); unbuf(a->b); pthread_mutex_unlock(&mu); free(a->b->err); free(a->b); return NULL; }
/* (72) a ready event carrying the buffer's error (an error buffer of a failed execute) */
typedef struct { size_t ss; void *ext; Buf *b; Ev *event; } ReadyA;
static Err *Buffer_ReadyEvent(void *args) {
  A(ReadyA); CNT(72);
  a->event = calloc(1, sizeof(Ev)); a->event->ready = 1; a->event->err = errcopy(a->b->err);
  return NULL;
}
typedef struct { size_t ss; void *ext; Buf *b; size_t n; } BufSizeA;
static Err *Buffer_OnDeviceSizeInBytes(void *args) { A(BufSizeA); CNT(64); a->n = a->b->size; return NULL; }
typedef struct { size_t ss; void *ext; Buf *b; Dev *dev; } BufDevA;
static Err *Buffer_Device(void *args) { A(BufDevA); CNT(65); a->dev = &devs[a->b->dev]; return NULL; }
static Err *Buffer_Delete(void *args) { A(BufA); CNT(67); pthread_mutex_lock(&mu); unbuf(a->b); pthread_mutex_unlock(&mu); return NULL; }
typedef struct { size_t ss; void *ext; Buf *b; Dev *dst; Buf *out; } CopyA;
static Err *Buffer_CopyToDevice(void *args) {
  A(CopyA); CNT(69);
  pthread_mutex_lock(&mu);
  Buf *b = newbuf(a->dst, a->b->size);
  pthread_mutex_unlock(&mu);
  if (!b) return mkerr(8, "Out of memory while trying to allocate %llu bytes.", a->b->size);
  a->out = b;
  return NULL;
}

/* Sentinels for slots this plugin does not implement: distinct, never called by tests. */
#define S(n) static Err *sentinel_##n(void *a) { (void)a; CNT(n); return mkerr(12, "unimplemented slot %llu", n); }
#define S10(t) S(t##0) S(t##1) S(t##2) S(t##3) S(t##4) S(t##5) S(t##6) S(t##7) S(t##8) S(t##9)
S10(9) S10(10) S10(11) S10(12) S10(13) S10(14) S10(15)
#define R10(t) sentinel_##t##0, sentinel_##t##1, sentinel_##t##2, sentinel_##t##3, sentinel_##t##4, \
  sentinel_##t##5, sentinel_##t##6, sentinel_##t##7, sentinel_##t##8, sentinel_##t##9
static Err *(*const sentinels[])(void *) = { R10(9), R10(10), R10(11), R10(12), R10(13), R10(14), R10(15) };

static int envint(const char *n, int d) { const char *v = getenv(n); return v && *v ? atoi(v) : d; }

const void *GetPjrtApi(void) {
  int nslots = envint("FAKE_PJRT_SLOTS", 130);
  if (nslots > NSLOTS_MAX) nslots = NSLOTS_MAX;
  memset(&api, 0, sizeof api);
  api.struct_size = 40 + 8 * (size_t)nslots;
  api.vsize = 24;
  api.major = envint("FAKE_PJRT_MAJOR", 0);
  api.minor = envint("FAKE_PJRT_MINOR", 94);
  void *f[NSLOTS_MAX] = {0};
  f[0] = (void *)Error_Destroy; f[1] = (void *)Error_Message; f[2] = (void *)Error_GetCode;
  f[5] = (void *)Event_Destroy; f[7] = (void *)Event_Error; f[8] = (void *)Event_Await;
  f[9] = (void *)Event_OnReady;
  f[10] = (void *)Client_Create; f[11] = (void *)Client_Destroy; f[16] = (void *)Client_AddressableDevices;
  f[20] = (void *)Client_Compile; f[22] = (void *)BufferFromHost;
  f[31] = (void *)Device_LocalHardwareId; f[34] = (void *)Device_MemoryStats;
  f[40] = (void *)Executable_Destroy; f[41] = (void *)Executable_Name; f[44] = (void *)Executable_NumOutputs;
  f[50] = (void *)LoadedExecutable_Destroy; f[51] = (void *)LoadedExecutable_GetExecutable;
  f[52] = (void *)LoadedExecutable_AddressableDevices; f[55] = (void *)Execute;
  f[56] = (void *)DeserializeAndLoad; f[57] = (void *)LoadedExecutable_Fingerprint;
  f[58] = (void *)Buffer_Destroy; f[64] = (void *)Buffer_OnDeviceSizeInBytes; f[65] = (void *)Buffer_Device;
  f[67] = (void *)Buffer_Delete; f[69] = (void *)Buffer_CopyToDevice; f[72] = (void *)Buffer_ReadyEvent;
  f[94] = (void *)Executable_Fingerprint; f[96] = (void *)Executable_GetCompiledMemoryStats;
  for (int i = 0; i < nslots; i++) {
    if (!f[i] && i >= 90 && i - 90 < (int)(sizeof sentinels / sizeof *sentinels)) f[i] = (void *)sentinels[i - 90];
    api.fn[i] = f[i];
  }
  return &api;
}
