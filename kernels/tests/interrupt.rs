//! A real SIGINT (raised in this test process) sets the runner's interrupt flag instead of
//! killing the process, so the runner can stop between events and free its memory.

#[test]
fn sigint_sets_the_flag_and_does_not_kill_the_process() {
    let flag = memwatch_kernels::interrupt::install().unwrap();
    assert!(!flag.load(std::sync::atomic::Ordering::SeqCst));
    signal_hook::low_level::raise(signal_hook::consts::SIGINT).unwrap();
    assert!(flag.load(std::sync::atomic::Ordering::SeqCst));
}
