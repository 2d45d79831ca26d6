/* GOT-patching and pointer-scan fixture: the "real" function, and a copy of its address
 * in the defining library's own data, which the pointer scan must leave alone (a runtime
 * calling itself through its own table must not be sent back into the wrapper). */
int mw_target_fn(int x) { return x * 2; }
int (*volatile mw_self)(int) = mw_target_fn;
int mw_call_self(int x) { return mw_self(x); }
