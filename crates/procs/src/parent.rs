//! Child processes that do not outlive the process that started them.

/// Makes the kernel kill this process when its parent (`parent_pid`) exits, so that a benchmark
/// killed without a chance to clean up leaves no process behind.
pub fn die_with_parent(parent_pid: u32) -> Result<(), String> {
    // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number and no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) };
    if rc != 0 {
        return Err(format!("PR_SET_PDEATHSIG: {}", std::io::Error::last_os_error()));
    }
    // The parent may have exited before the prctl: we were then handed to another process.
    // SAFETY: getppid has no preconditions and cannot fail.
    if unsafe { libc::getppid() } as u32 != parent_pid {
        return Err("the benchmark that started this process has exited".into());
    }
    Ok(())
}
