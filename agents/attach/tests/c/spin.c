/* Test target: prints a deterministic line per iteration, mixing sleeping (system calls)
 * and pure computation, then exits with code 7. argv[1]: iterations, argv[2]: "busy" to
 * spin in user code without system calls between prints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int busy = argc > 2 && strcmp(argv[2], "busy") == 0;
    unsigned long long acc = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < n; i++) {
        if (busy) {
            for (volatile long k = 0; k < 20000000; k++) acc = acc * 6364136223846793005ULL + 1;
        } else {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
            acc = acc * 6364136223846793005ULL + (unsigned)i;
        }
        printf("iter %d\n", i);
    }
    printf("done %llu\n", busy ? 0ULL : acc);
    return 7;
}
