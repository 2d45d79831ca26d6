/* GOT-patching fixture: calls mw_target_fn through its PLT/GOT, and also keeps a
 * function pointer taken at load time (GLOB_DAT), which the patch also redirects. */
int mw_target_fn(int x);
int (*volatile mw_taken)(int) = mw_target_fn;
int mw_call_plt(int x) { return mw_target_fn(x); }
int mw_call_taken(int x) { return mw_taken(x); }
