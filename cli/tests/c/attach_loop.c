/* Target for the `memwatch attach` tests: allocates 4096+i bytes on device 0 of the test
 * runtime (libmemwatch_testrt.so, simulated HIP), prints "iter i size r", sleeps, frees,
 * N times, then prints a checksum and exits with code 3. The size identifies the
 * iteration, so a capture shows exactly which iterations happened while attached.
 * argv[1]: iterations, argv[2]: ms per iteration, argv[3]: how hipMalloc/hipFree are
 * reached: "direct" (linked, through the GOT; default), "dlsym" (looked up with dlsym in
 * every iteration), "cached" (looked up with dlsym once before the loop and kept in local
 * variables), "stub" (each call goes through a stub function that looks the real one up
 * on first use and keeps it in a function-local static, as XLA's driver stubs do),
 * "fork" (direct; at iteration 30 forks a child that runs the remaining iterations with
 * sizes 65536+i, the parent going on with its own; the parent reaps it at the end),
 * "zombie" (direct; first forks a child that exits at once and is reaped only at the
 * end, so it stays a zombie meanwhile). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

int hipMalloc(void **p, size_t size);
int hipFree(void *p);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

/* XLA / TensorFlow driver-stub style: `static auto func_ptr = LoadSymbol(...)`. */
__attribute__((noinline)) static int stub_malloc(void **p, size_t size) {
    static malloc_fn fn;
    if (!fn) fn = (malloc_fn)dlsym(RTLD_DEFAULT, "hipMalloc");
    return fn ? fn(p, size) : 8;
}
__attribute__((noinline)) static int stub_free(void *p) {
    static free_fn fn;
    if (!fn) fn = (free_fn)dlsym(RTLD_DEFAULT, "hipFree");
    return fn ? fn(p) : 8;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int ms = argc > 2 ? atoi(argv[2]) : 10;
    const char *mode = argc > 3 ? argv[3] : "direct";
    unsigned long long sum = 0;
    void *keep = NULL;
    int forking = strcmp(mode, "fork") == 0;
    int zombie = strcmp(mode, "zombie") == 0;
    int direct = strcmp(mode, "direct") == 0 || forking || zombie;
    pid_t other = -1;
    size_t base = 4096;
    if (zombie) {
        other = fork();
        if (other == 0) _exit(0);
    }
    malloc_fn m = NULL;
    free_fn f = NULL;
    if (strcmp(mode, "stub") == 0) {
        m = stub_malloc;
        f = stub_free;
        (void)f(NULL); /* both stubs have looked their function up before anyone attaches */
    } else if (!direct) {
        m = (malloc_fn)dlsym(RTLD_DEFAULT, "hipMalloc");
        f = (free_fn)dlsym(RTLD_DEFAULT, "hipFree");
        if (!m || !f) return 8;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Allocated before anyone attaches: part of the pre-attach baseline. */
    if ((direct ? hipMalloc(&keep, 1 << 20) : m(&keep, 1 << 20)) != 0) return 9;
    for (int i = 0; i < n; i++) {
        if (forking && i == 30 && other < 0) {
            other = fork();
            if (other == 0) {
                base = 65536;
                other = 0; /* the child forks no further */
            }
        }
        if (strcmp(mode, "dlsym") == 0) {
            m = (malloc_fn)dlsym(RTLD_DEFAULT, "hipMalloc");
            f = (free_fn)dlsym(RTLD_DEFAULT, "hipFree");
        }
        void *p = NULL;
        size_t size = base + (size_t)i;
        /* direct: a call through the PLT/GOT each time (no function pointer kept). */
        int r = direct ? hipMalloc(&p, size) : m(&p, size);
        printf("iter %d size %zu r %d\n", i, size, r);
        sum = sum * 31 + (unsigned long long)size + (unsigned long long)r;
        struct timespec ts = {0, (long)ms * 1000000L};
        nanosleep(&ts, NULL);
        if (r == 0) (void)(direct ? hipFree(p) : f(p));
    }
    (void)(direct ? hipFree(keep) : f(keep));
    if (other > 0) waitpid(other, NULL, 0);
    printf("done %llu\n", sum);
    return 3;
}
