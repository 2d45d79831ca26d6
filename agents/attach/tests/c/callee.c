/* GOT-patching fixture: the "real" function. */
int mw_target_fn(int x) { return x * 2; }
