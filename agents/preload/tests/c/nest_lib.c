/* A library a program links against (NEEDED) whose constructor loads a plug-in with
 * dlopen ($NEST_PLUGIN). Constructors of linked libraries run before the preloaded
 * shim's own: when the plug-in's constructor thread ends the process, the shim has not
 * looked anything up yet, and the loader's lock is held. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void load_plugin(void) {
    const char *p = getenv("NEST_PLUGIN");
    if (p && !dlopen(p, RTLD_NOW)) fprintf(stderr, "dlopen: %s\n", dlerror());
}
