//! `memwatch attach` end to end: a running C program that allocates through the shim's
//! simulated HIP runtime (libmemwatch_testrt.so), attached via gdb and via the built-in
//! ptrace injector. The capture must hold exactly the iterations made while attached;
//! the program's output and exit code must not change. Also: re-attach, a second
//! concurrent attach refused, a process that exits while attached, --all-children, and
//! the error paths (no such process, static binary).
//!
//! One test binary: `harness` builds and drives the programs, each other module one
//! theme.

mod errors;
mod exact;
mod harness;
mod sessions;
