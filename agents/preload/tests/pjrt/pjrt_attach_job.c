/* A framework-like job for the `memwatch attach` PJRT tests (cli/tests/attach.rs): it
 * loads the plugin and takes its table before anyone attaches, then runs in phases
 * that a test steps through with files in DIR, printing only what does not depend on
 * timing (so an attached and a plain run print the same):
 *   1. client, two executables (jit_step; jit_leak_step, 64 MiB out per device) and
 *      three parameter buffers (8 MiB each) made; prints "ready";
 *   2. until DIR/go exists: jit_step executes with the parameters as arguments (not
 *      printed: their count depends on timing);
 *   3. leak: jit_leak_step executes every 20 ms (a step's time on a device), each
 *      step's outputs kept, until the device limit makes one fail (RESOURCE_EXHAUSTED,
 *      printed with its step);
 *   4. the leaked outputs are destroyed; until DIR/detached exists, jit_step again;
 *   5. five more printed steps, everything destroyed, the client too; whether any entry
 *      of the table differs from what it held before phase 1 (a detach must have put
 *      every entry back); exit 5.
 *   pjrt_attach_job PLUGIN DIR */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef void *(*Fn)(void *);
typedef struct { size_t struct_size; void *ext; size_t vsize; void *vext; int major, minor; void *fn[]; } Api;
static const Api *api;
static Fn F(int s) { return (Fn)api->fn[s]; }

typedef struct { size_t ss; void *ext; void *error; int code; } CodeA;
typedef struct { size_t ss; void *ext; void *error; } ErrA;
typedef struct { size_t ss; void *ext; void *opts; size_t nopts; void *g, *gu, *p, *pu; void *client; } CreateA;
typedef struct { size_t ss; void *ext; void *client; void **devices; size_t n; } DevsA;
typedef struct { size_t ss; void *ext; char *code; size_t code_size; const char *fmt; size_t fmt_size; } Program;
typedef struct { size_t ss; void *ext; void *client; Program *program; const char *opts; size_t opts_size; void *exe; } CompileA;
typedef struct { size_t ss; void *ext; void *client; const void *data; int type; const int64_t *dims; size_t num_dims;
  const int64_t *strides; size_t nstrides; int sem; void *device; void *memory; void *layout; void *done; void *buffer; } FromHostA;
typedef struct { size_t ss; void *ext; void *exe; void *opts; void ***args; size_t ndev; size_t nargs; void ***outs; void **events; void *exec_dev; } ExecA;
typedef struct { size_t ss; void *ext; void *b; } BufA;
typedef struct { size_t ss; void *ext; void *exe; } ExeA;

static void *client, **devices;
static const char *dir;

/* The error's code (0 for none); destroys it. */
static int code_of(void *err) {
  if (!err) return 0;
  CodeA c = {sizeof c, 0, err, 0}; F(2)(&c);
  ErrA d = {sizeof d, 0, err}; ((void (*)(void *))api->fn[0])(&d);
  return c.code;
}
static int exists(const char *name) {
  char p[4096]; snprintf(p, sizeof p, "%s/%s", dir, name);
  return access(p, F_OK) == 0;
}
static void *compile(const char *prog) {
  Program p = {sizeof p, 0, (char *)prog, strlen(prog), "hlo", 3};
  CompileA a = {sizeof a, 0, client, &p, "", 0, 0};
  return code_of(F(20)(&a)) ? NULL : a.exe;
}
static void *param(int dev) {
  int64_t dims[2] = {2048, 1024}; /* 8 MiB of f32 */
  FromHostA a; memset(&a, 0, sizeof a); a.ss = sizeof a; a.client = client; a.type = 11;
  a.dims = dims; a.num_dims = 2; a.device = devices[dev];
  return code_of(F(22)(&a)) ? NULL : a.buffer;
}
static void destroy(void *b) { BufA a = {sizeof a, 0, b}; code_of(F(58)(&a)); }

/* One execute on both devices with `args` (per device) as arguments; outputs kept in
 * `keep` (2 per call) or destroyed. Returns the error code. */
static int run(void *exe, void **args0, void **args1, size_t nargs, void **keep) {
  void *o0[1] = {0}, *o1[1] = {0};
  void **outl[2] = {o0, o1};
  void **argl[2] = {args0, args1};
  ExecA a; memset(&a, 0, sizeof a); a.ss = sizeof a; a.exe = exe; a.ndev = 2;
  a.args = argl; a.nargs = nargs; a.outs = outl;
  int code = code_of(F(55)(&a));
  for (int d = 0; d < 2; d++) {
    if (!outl[d][0]) continue;
    if (keep && !code) keep[d] = outl[d][0]; else destroy(outl[d][0]);
  }
  return code;
}

int main(int argc, char **argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s PLUGIN DIR\n", argv[0]); return 2; }
  dir = argv[2];
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  const void *(*get)(void) = (const void *(*)(void))dlsym(h, "GetPjrtApi");
  if (!get) { fprintf(stderr, "no GetPjrtApi\n"); return 2; }
  api = get();
  size_t nslots = (api->struct_size - 40) / sizeof(void *);
  void **before = malloc(nslots * sizeof(void *));
  memcpy(before, api->fn, nslots * sizeof(void *));
  CreateA c; memset(&c, 0, sizeof c); c.ss = sizeof c;
  if (code_of(F(10)(&c))) return 1;
  client = c.client;
  DevsA d = {sizeof d, 0, client, 0, 0};
  if (code_of(F(16)(&d))) return 1;
  devices = d.devices;
  void *step = compile("name=jit_step;arg=8388608;out=4096;temp=1048576;outs=1");
  void *leak = compile("name=jit_leak_step;arg=8388608;out=67108864;temp=0;outs=1");
  void *p0[3] = {param(0), param(0), param(0)};
  void *p1[3] = {param(1), param(1), param(1)};
  printf("ready\n");
  fflush(stdout);
  while (!exists("go")) { run(step, p0, p1, 3, NULL); usleep(5000); }
  void *kept[64][2];
  int n = 0, code = 0;
  for (; n < 64; n++) {
    code = run(leak, p0, p1, 3, kept[n]);
    if (code) break;
    printf("leak %d kept=%d\n", n, 2 * (n + 1));
    usleep(20000);
  }
  printf("oom at step %d code=%d\n", n, code);
  fflush(stdout);
  for (int i = 0; i < n; i++) { destroy(kept[i][0]); destroy(kept[i][1]); }
  while (!exists("detached")) { run(step, p0, p1, 3, NULL); usleep(5000); }
  for (int i = 0; i < 5; i++) printf("after %d code=%d\n", i, run(step, p0, p1, 3, NULL));
  for (int i = 0; i < 3; i++) { destroy(p0[i]); destroy(p1[i]); }
  ExeA x1 = {sizeof x1, 0, step}, x2 = {sizeof x2, 0, leak};
  F(50)(&x1); F(50)(&x2);
  typedef struct { size_t ss; void *ext; void *client; } CdA;
  CdA cd = {sizeof cd, 0, client};
  printf("client_destroy code=%d\n", code_of(F(11)(&cd)));
  size_t changed = 0;
  for (size_t i = 0; i < nslots; i++) changed += api->fn[i] != before[i];
  printf("table entries changed=%zu\n", changed);
  printf("done\n");
  return 5;
}
