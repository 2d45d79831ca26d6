# memwatch attach: gdb batch script that loads the memwatch shim into the process gdb is
# attached to, calls one of its entry points, puts the thread back as it was and detaches.
#
# memwatch fills in the placeholders before running `gdb -nx -batch -p PID -x THIS`:
#   @SHIM@ / @SHIM_N@    absolute path of libmemwatch_preload.so / its length + 1
#   @ENTRY@ / @ENTRY_N@  memwatch_attach_start or memwatch_attach_stop / length + 1
#   @ARG@ / @ARG_N@      the entry's argument (e.g. the sink unix:/tmp/.../agent.sock)
# memwatch reads the lines starting with "MEMWATCH " from gdb's output.
#
# The calls are made by hand (registers + a return address that traps) instead of with
# gdb's `call`: gdb's inferior calls save and restore the whole
# extended (AVX) register state, which some kernels refuse ("Couldn't write extended state
# status"), and they copy string literals into the process with its malloc. Here only the
# general registers of the stopped thread change, strings go below its stack pointer, and
# every clobbered general register is restored before detaching.
#
# Vector registers are not: after a dlopen, kernels refuse gdb's write of the extended
# register state ("Couldn't write extended state status: Bad address", seen on Linux
# 6.18), so they cannot be put back through gdb. The script therefore injects only into a
# thread stopped inside a system call, where the program has called a libc wrapper and,
# by the x86-64 calling convention, holds nothing in vector registers across it. A thread
# stopped in its own code is left untouched and memwatch says so (`--method ptrace`
# saves and restores the whole XSAVE area and can inject anywhere). While the script runs, SIGSEGV is
# not passed to the program (our returns to address 0 raise it); a genuine fault in another
# thread in that window re-executes and faults again after detach. The thread is usually inside a
# system call (gdb stops all threads with SIGSTOP); restoring $orig_rax lets the kernel
# restart that call.
set language c
set confirm off
set pagination off
set print thread-events off
set $mw_pc = (unsigned long) $pc
set $mw_sp = (unsigned long) $sp
set $mw_rax = $rax
set $mw_orig = $orig_rax
set $mw_rdi = $rdi
set $mw_rsi = $rsi
set $mw_rdx = $rdx
set $mw_rcx = $rcx
set $mw_r8 = $r8
set $mw_r9 = $r9
set $mw_r10 = $r10
set $mw_r11 = $r11
set $mw_eflags = $eflags
if $mw_orig == -1
  printf "MEMWATCH not-in-syscall\n"
  detach
  quit
end
# Scratch: strings 1 KiB below the red zone, the call frame below them.
set $mw_shim = ($mw_sp - 1024) & ~15
set $mw_entry_name = ($mw_shim - @SHIM_N@ - 16) & ~15
set $mw_arg = ($mw_entry_name - @ENTRY_N@ - 16) & ~15
set $mw_frame = (($mw_arg - @ARG_N@ - 256) & ~15) - 8
set {char[@SHIM_N@]} $mw_shim = "@SHIM@"
set {char[@ENTRY_N@]} $mw_entry_name = "@ENTRY@"
set {char[@ARG_N@]} $mw_arg = "@ARG@"
handle SIGSEGV stop print nopass

# mw_call FUNC A1 A2: FUNC(A1, A2) in the stopped thread with return address 0, so that
# returning traps with SIGSEGV at pc 0 (handled without passing it to the program); the
# result is left in $rax. $rip is written first: with pc at 0 gdb cannot make sense of
# frame 0 and drops a write of $rsp.
define mw_call
  set {unsigned long} $mw_frame = 0
  set $rip = $arg0
  set $rsp = $mw_frame
  set $rdi = $arg1
  set $rsi = $arg2
  set $orig_rax = -1
  continue
end

set $mw_f_dlopen = (unsigned long) &dlopen
set $mw_f_dlerror = (unsigned long) &dlerror
set $mw_f_dlsym = (unsigned long) &dlsym
mw_call $mw_f_dlopen $mw_shim 2
set $mw_handle = $rax
if $mw_handle == 0
  mw_call $mw_f_dlerror 0 0
  if $rax == 0
    printf "MEMWATCH dlopen-failed (no reason given)\n"
  else
    printf "MEMWATCH dlopen-failed %s\n", (char *) $rax
  end
else
  printf "MEMWATCH dlopen-ok %p\n", $mw_handle
  mw_call $mw_f_dlsym $mw_handle $mw_entry_name
  set $mw_fn = $rax
  if $mw_fn == 0
    printf "MEMWATCH entry-missing\n"
  else
    mw_call $mw_fn $mw_arg 0
    printf "MEMWATCH entry-result %d\n", (int) $rax
  end
end

set $rip = $mw_pc
set $rsp = $mw_sp
set $rax = $mw_rax
set $orig_rax = $mw_orig
set $rdi = $mw_rdi
set $rsi = $mw_rsi
set $rdx = $mw_rdx
set $rcx = $mw_rcx
set $r8 = $mw_r8
set $r9 = $mw_r9
set $r10 = $mw_r10
set $r11 = $mw_r11
set $eflags = $mw_eflags
printf "MEMWATCH restored\n"
detach
quit
