/* A minimal library with the shim's two attach entry points, used to test the injectors
 * on their own (the end-to-end tests use the real libmemwatch_preload.so). Each call
 * appends one line to the file named by its argument; start returns 1 when already
 * started, like the shim. */
#include <stdio.h>
#include <unistd.h>

static int started;

static int note(const char *path, const char *what) {
    FILE *f = fopen(path, "a");
    if (!f) return -1;
    fprintf(f, "%s pid=%d\n", what, (int)getpid());
    fclose(f);
    return 0;
}

int memwatch_attach_start(const char *arg) {
    if (started) return 1;
    started = 1;
    return note(arg, "start");
}

int memwatch_attach_stop(const char *arg) {
    if (!started) return 1;
    started = 0;
    return note(arg, "stop");
}
