/* Target for the `memwatch attach` tests: linked directly against the test runtime
 * (libmemwatch_testrt.so, simulated HIP), it allocates 4096+i bytes on device 0,
 * prints "iter i size r", sleeps, frees, N times, then prints a checksum and exits with
 * code 3. The size identifies the iteration, so a capture shows exactly which
 * iterations happened while memwatch was attached. argv[1]: iterations, argv[2]: ms. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int hipMalloc(void **p, size_t size);
int hipFree(void *p);

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int ms = argc > 2 ? atoi(argv[2]) : 10;
    unsigned long long sum = 0;
    void *keep = NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Allocated before anyone attaches: part of the pre-attach baseline. */
    if (hipMalloc(&keep, 1 << 20) != 0) return 9;
    for (int i = 0; i < n; i++) {
        void *p = NULL;
        size_t size = 4096 + (size_t)i;
        int r = hipMalloc(&p, size);
        printf("iter %d size %zu r %d\n", i, size, r);
        sum = sum * 31 + (unsigned long long)size + (unsigned long long)r;
        struct timespec ts = {0, (long)ms * 1000000L};
        nanosleep(&ts, NULL);
        if (r == 0) hipFree(p);
    }
    hipFree(keep);
    printf("done %llu\n", sum);
    return 3;
}
