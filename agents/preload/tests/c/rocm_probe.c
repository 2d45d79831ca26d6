/* rocm_probe.c - the real ROCm runtime (Debian libamdhip64, ROCm 5.2) under the shim.
 * Linked with -lamdhip64; prints every result so runs with and without the shim can be
 * compared, and one E line per recorded call (same format as mwtest.c). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include <hip/hip_runtime_api.h>

int main(void) {
    int n = -1;
    void *p = (void *)0x1; /* sentinel: the out-pointer must be left exactly as the runtime leaves it */
    hipError_t c = hipGetDeviceCount(&n);
    printf("N hipGetDeviceCount r=%d n=%d\n", (int)c, n);
    hipError_t r = hipMalloc(&p, 1 << 20);
    int e = errno;
    int kind = r == hipSuccess ? 1 : 3;
    printf("E hipMalloc %d 1 %d 0x%llx %d %d errno=%d\n", kind, (int)r, r == hipSuccess ? (unsigned long long)(uintptr_t)p : 0ull,
           1 << 20, 0, e);
    printf("N out=%p name=%s\n", p, hipGetErrorName(r));
    /* The identity calls the shim makes to describe device 0, made here too: their
     * results (an error without an AMD GPU) say what the shim got. */
    char bus[64] = "";
    hipError_t b = hipDeviceGetPCIBusId(bus, sizeof bus, 0);
    hipUUID uuid;
    hipError_t u = hipDeviceGetUuid(&uuid, 0);
    printf("I bus r=%d %s uuid r=%d\n", (int)b, b == hipSuccess ? bus : "-", (int)u);
    /* Time for the shim's flusher to see the hipMalloc and describe its device. */
    usleep(200000);
    if (r == hipSuccess) {
        r = hipFree(p);
        printf("E hipFree 2 1 %d 0x%llx 0 0\n", (int)r, (unsigned long long)(uintptr_t)p);
    }
    return 0;
}
