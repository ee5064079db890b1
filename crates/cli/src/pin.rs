//! Pinning a process to one CPU, so that benchmark figures measure the interconnect between two
//! cores rather than the scheduler.

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask filled in by the kernel; its size is passed along.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// Pins the calling thread (and the threads it starts later) to `cpu`.
pub fn pin_to(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("cpu {cpu} does not exist (at most {} cpus)", libc::CPU_SETSIZE));
    }
    // SAFETY: builds a bitmask with one CPU set and passes its size along.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("pinning to cpu {cpu}: {}", std::io::Error::last_os_error()))
    }
}
