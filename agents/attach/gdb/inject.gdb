# memwatch attach: gdb batch script that loads the memwatch shim into the process gdb is
# attached to and calls one of its entry points, then detaches.
#
# memwatch fills in the placeholders before running `gdb -p PID -batch -nx -x THIS`:
#   @SHIM@   absolute path of libmemwatch_preload.so
#   @ENTRY@  memwatch_attach_start or memwatch_attach_stop
#   @ARG@    the entry's argument (the sink, e.g. unix:/tmp/memwatch-attach-1234/sock)
# memwatch reads the lines starting with "MEMWATCH " from gdb's output.
#
# Casts are needed because libc usually has no debug information. dlopen lives in libc
# from glibc 2.34 on; string literals are copied into the process with its own malloc
# (gdb's usual way).
set confirm off
set pagination off
set print thread-events off
set $mw_handle = ((void *(*)(const char *, int)) dlopen)("@SHIM@", 2)
if $mw_handle == 0
  printf "MEMWATCH dlopen-failed %s\n", ((char *(*)(void)) dlerror)()
else
  printf "MEMWATCH dlopen-ok %p\n", $mw_handle
  set $mw_entry = ((void *(*)(void *, const char *)) dlsym)($mw_handle, "@ENTRY@")
  if $mw_entry == 0
    printf "MEMWATCH entry-missing\n"
  else
    printf "MEMWATCH entry-result %d\n", ((int (*)(const char *)) $mw_entry)("@ARG@")
  end
end
detach
quit
