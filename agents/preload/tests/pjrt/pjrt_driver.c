/* Drives a PJRT plugin the way a framework does: dlopen + dlsym("GetPjrtApi"), then only
 * calls through the returned table. Prints what it observes ("R ..." lines) so a test
 * can compare runs with and without the shim.
 *   pjrt_driver PLUGIN table        -> struct size/version seen, and per slot whether the
 *                                      entry equals the plugin's own ("same"/"wrapped")
 *   pjrt_driver PLUGIN run          -> buffers, two executables, executes, an OOM
 *   pjrt_driver PLUGIN ready        -> executes without completion events whose outputs
 *                                      are then awaited (ready events: Await, Error,
 *                                      OnReady), one of them failing on the device
 *   pjrt_driver PLUGIN bench N [1]  -> ns per execute of a tiny executable (with 1: one
 *                                      output buffer per device, destroyed after) */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef void *(*Fn)(void *);
typedef struct { size_t struct_size; void *ext; size_t vsize; void *vext; int major, minor; void *fn[]; } Api;
static const Api *api;
static Fn F(int s) { return (Fn)api->fn[s]; }

typedef struct { size_t ss; void *ext; void *error; int code; } CodeA;
typedef struct { size_t ss; void *ext; void *error; const char *m; size_t n; } MsgA;
typedef struct { size_t ss; void *ext; void *error; } ErrA;

static int check(void *err, const char *what) {
  if (!err) return 0;
  CodeA c = {sizeof c, 0, err, 0}; F(2)(&c);
  MsgA m = {sizeof m, 0, err, 0, 0}; ((void (*)(void *))api->fn[1])(&m);
  printf("R error %s code=%d msg=%.*s\n", what, c.code, (int)m.n, m.m);
  ErrA d = {sizeof d, 0, err}; ((void (*)(void *))api->fn[0])(&d);
  return c.code;
}

typedef struct { size_t ss; void *ext; void *opts; size_t nopts; void *g, *gu, *p, *pu; void *client; } CreateA;
typedef struct { size_t ss; void *ext; void *client; void **devices; size_t n; } DevsA;
typedef struct { size_t ss; void *ext; char *code; size_t code_size; const char *fmt; size_t fmt_size; } Program;
typedef struct { size_t ss; void *ext; void *client; Program *program; const char *opts; size_t opts_size; void *exe; } CompileA;
typedef struct { size_t ss; void *ext; void *client; const char *ser; size_t n; void *exe; } DeserA;
typedef struct { size_t ss; void *ext; void *client; const void *data; int type; const int64_t *dims; size_t num_dims;
  const int64_t *strides; size_t nstrides; int sem; void *device; void *memory; void *layout; void *done; void *buffer; } FromHostA;
typedef struct { size_t ss; void *ext; void *exe; void *opts; void ***args; size_t ndev; size_t nargs; void ***outs; void **events; void *exec_dev; } ExecA;
typedef struct { size_t ss; void *ext; void *b; } BufA;
typedef struct { size_t ss; void *ext; void *b; size_t n; } BufSizeA;
typedef struct { size_t ss; void *ext; void *b; void *dst; void *out; } CopyA;
typedef struct { size_t ss; void *ext; void *event; } EvA;
typedef struct { size_t ss; void *ext; void *exe; } ExeA;

typedef struct { size_t ss; void *ext; void *b; void *event; } ReadyA;
typedef struct { size_t ss; void *ext; void *event; void (*cb)(void *, void *); void *user; } OnReadyA;

static void *client, **devices;
static int cb_code = -1;
static void on_ready(void *err, void *user) {
  cb_code = err ? check(err, (const char *)user) : 0; /* check() destroys the error */
}
/* Waits for `buf` the three ways a framework can; prints each result. */
static void await_output(void *buf, const char *what) {
  ReadyA r = {sizeof r, 0, buf, 0};
  if (check(F(72)(&r), "ready_event")) return;
  EvA e = {sizeof e, 0, r.event};
  printf("R %s await code=%d\n", what, check(F(8)(&e), what));
  printf("R %s error code=%d\n", what, check(F(7)(&e), what));
  F(5)(&e);
  ReadyA r2 = {sizeof r2, 0, buf, 0};
  if (check(F(72)(&r2), "ready_event")) return;
  OnReadyA o = {sizeof o, 0, r2.event, on_ready, (void *)what};
  cb_code = -1;
  check(F(9)(&o), "on_ready");
  printf("R %s on_ready code=%d user_kept=%d\n", what, cb_code, o.user == (void *)what && o.cb == on_ready);
  EvA e2 = {sizeof e2, 0, r2.event};
  F(5)(&e2);
}
static void *compile(const char *prog) {
  Program p = {sizeof p, 0, (char *)prog, strlen(prog), "hlo", 3};
  CompileA a = {sizeof a, 0, client, &p, "", 0, 0};
  if (check(F(20)(&a), "compile")) return NULL;
  return a.exe;
}
static void *from_host(int dev, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  FromHostA a; memset(&a, 0, sizeof a); a.ss = sizeof a; a.client = client; a.type = 11;
  a.dims = dims; a.num_dims = 2; a.device = devices[dev];
  if (check(F(22)(&a), "from_host")) return NULL;
  BufSizeA s = {sizeof s, 0, a.buffer, 0}; F(64)(&s);
  printf("R buffer dev=%d size=%zu\n", dev, s.n);
  return a.buffer;
}
static void destroy_buffer(void *b) { BufA a = {sizeof a, 0, b}; check(F(58)(&a), "buffer_destroy"); }

/* Executes `exe` (outs outputs) on both devices; keeps outputs when keep != NULL. */
static int execute(void *exe, int outs, int with_events, void **keep) {
  void *o0[8] = {0}, *o1[8] = {0};
  void **outl[2] = {o0, o1};
  void *events[2] = {0, 0};
  ExecA a; memset(&a, 0, sizeof a); a.ss = sizeof a; a.exe = exe; a.ndev = 2; a.outs = outl;
  a.events = with_events ? events : NULL;
  int code = check(F(55)(&a), "execute");
  if (code) return code;
  for (int d = 0; d < 2; d++) {
    if (events[d]) { EvA e = {sizeof e, 0, events[d]}; F(5)(&e); }
    for (int i = 0; i < outs; i++) {
      if (keep) keep[d * outs + i] = outl[d][i]; else destroy_buffer(outl[d][i]);
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s PLUGIN table|run|bench N\n", argv[0]); return 2; }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  const void *(*get)(void) = (const void *(*)(void))dlsym(h, "GetPjrtApi");
  const Api *(*real_api)(void) = (const Api *(*)(void))dlsym(h, "fake_pjrt_real_api");
  if (!get || !real_api) { fprintf(stderr, "dlsym failed\n"); return 2; }
  api = get();
  const Api *real = real_api();
  if (!strcmp(argv[2], "table")) {
    printf("T size=%zu major=%d minor=%d copy=%d\n", api->struct_size, api->major, api->minor, api != real);
    size_t n = (api->struct_size - 40) / 8;
    for (size_t i = 0; i < n; i++)
      printf("T slot %zu %s\n", i, api->fn[i] == real->fn[i] ? "same" : "wrapped");
    return 0;
  }
  CreateA c; memset(&c, 0, sizeof c); c.ss = sizeof c;
  if (check(F(10)(&c), "client_create")) return 1;
  client = c.client;
  DevsA d = {sizeof d, 0, client, 0, 0};
  if (check(F(16)(&d), "devices")) return 1;
  devices = d.devices;
  printf("R devices %zu\n", d.n);
  if (!strcmp(argv[2], "bench")) {
    long n = argc > 3 ? atol(argv[3]) : 10000;
    int outs = argc > 4 ? atoi(argv[4]) : 0; /* 1: one output buffer, destroyed, as a jax.jit call */
    void *exe = compile(outs ? "name=jit_tiny;arg=0;out=32;temp=0;outs=1" : "name=jit_tiny;arg=0;out=0;temp=0;outs=0");
    struct timespec t0, t1;
    for (int i = 0; i < 1000; i++) execute(exe, outs, 0, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) execute(exe, outs, 0, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / n;
    printf("B ns_per_execute %.1f\n", ns);
    return 0;
  }
  if (!strcmp(argv[2], "ready")) {
    void *ok = compile("name=jit_fine;arg=0;out=4096;temp=1024;outs=1");
    void *bad = compile("name=jit_oom_later;arg=0;out=4096;temp=3221225472;outs=1;async=1");
    void *k1[2], *k2[2];
    printf("R execute jit_fine code=%d\n", execute(ok, 1, 0, k1));
    printf("R execute jit_oom_later code=%d\n", execute(bad, 1, 0, k2));
    for (int d = 0; d < 2; d++) { await_output(k1[d], "jit_fine"); await_output(k2[d], "jit_oom_later"); }
    for (int d = 0; d < 2; d++) { destroy_buffer(k1[d]); destroy_buffer(k2[d]); }
    ExeA x1 = {sizeof x1, 0, ok}, x2 = {sizeof x2, 0, bad};
    F(50)(&x1); F(50)(&x2);
    return 0;
  }
  /* run: parameters on both devices, a training step, an inference step, an OOM. */
  void *w0 = from_host(0, 1024, 1024); /* 4 MiB */
  void *w1 = from_host(1, 1024, 1024);
  CopyA cp = {sizeof cp, 0, w0, devices[1], 0};
  if (!check(F(69)(&cp), "copy")) printf("R copied\n");
  void *step = compile("name=jit_model;arg=8388608;out=8388608;temp=268435456;outs=2");
  const char *ser = "name=jit_small;arg=4096;out=4096;temp=1048576;outs=1";
  DeserA ds = {sizeof ds, 0, client, ser, strlen(ser), 0};
  void *small = check(F(56)(&ds), "deserialize") ? NULL : ds.exe;
  void *keep[4];
  for (int i = 0; i < 3; i++) printf("R execute jit_model code=%d\n", execute(step, 2, 1, i == 2 ? keep : NULL));
  printf("R execute jit_small code=%d\n", execute(small, 1, 0, NULL));
  usleep(150000); /* let the flusher sample at its configured rate */
  void *oom = compile("name=jit_oom;arg=0;out=4096;temp=2147483648;outs=1");
  printf("R execute jit_oom code=%d\n", execute(oom, 1, 1, NULL));
  /* an OOM that Execute does not return: it comes with the completion event */
  void *aoom = compile("name=jit_oom_async;arg=0;out=4096;temp=3221225472;outs=1;async=1");
  printf("R execute jit_oom_async code=%d\n", execute(aoom, 1, 1, NULL));
  for (int i = 0; i < 4; i++) destroy_buffer(keep[i]);
  BufA del = {sizeof del, 0, w1}; check(F(67)(&del), "delete");
  destroy_buffer(w0); destroy_buffer(w1); destroy_buffer(cp.out);
  ExeA x1 = {sizeof x1, 0, step}, x2 = {sizeof x2, 0, small}, x3 = {sizeof x3, 0, oom};
  ExeA x4 = {sizeof x4, 0, aoom};
  F(50)(&x1); F(50)(&x2); F(50)(&x3); F(50)(&x4);
  typedef struct { size_t ss; void *ext; void *client; } CdA;
  CdA cd = {sizeof cd, 0, client};
  check(F(11)(&cd), "client_destroy");
  long (*calls)(int) = (long (*)(int))dlsym(h, "fake_pjrt_calls");
  printf("R calls execute=%ld compile=%ld destroy=%ld\n", calls(55), calls(20), calls(58));
  return 0;
}
