/* A library whose constructor starts a worker thread and joins it; the worker ends the
 * process with _exit(3). The constructor runs inside dlopen, which holds the dynamic
 * loader's lock until it returns: the shim's _exit wrapper must not need that lock. */
#include <pthread.h>
#include <unistd.h>
static void *worker(void *a) { (void)a; _exit(3); }
__attribute__((constructor)) static void start(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) == 0) pthread_join(t, NULL);
}
