/* GOT-patching and pointer-scan fixture: calls mw_target_fn through its PLT/GOT, and
 * through three copies of its address kept in this library's static data, which GOT
 * patching does not see and the pointer scan redirects: one stored by a relocation at
 * load time in writable data (.data.rel), one in a const pointer (.data.rel.ro: read-only
 * after load under full RELRO), and one looked up with dlsym on first use and kept in a
 * function-local static (.bss), as XLA's and TensorFlow's driver stubs do. */
#define _GNU_SOURCE
#include <dlfcn.h>

int mw_target_fn(int x);
int (*volatile mw_taken)(int) = mw_target_fn;
int (*const volatile mw_taken_ro)(int) = mw_target_fn;
int mw_call_plt(int x) { return mw_target_fn(x); }
int mw_call_taken(int x) { return mw_taken(x); }
int mw_call_taken_ro(int x) { return mw_taken_ro(x); }
int mw_call_stub(int x) {
    static int (*volatile fp)(int);
    if (!fp) fp = (int (*)(int))dlsym(RTLD_DEFAULT, "mw_target_fn");
    return fp ? fp(x) : -1;
}
