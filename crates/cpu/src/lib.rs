//! CPU affinity for the replica's threads and the benchmarks' processes: which CPUs this process
//! may run on, and pinning the calling thread to one of them; and the scheduler's time slice a
//! thread asks for ([`request_slice_ns`]).
//!
//! A thread that spins on a core of its own (`Threads::Dedicated`, the Mu paper's set-up) is
//! fastest where the scheduler never moves it: a move costs the caches it warmed, and two
//! spinning threads that land on one CPU take turns by the scheduler's time slice. Pinning is
//! also what makes a benchmark's figures comparable: the fabric's floor (`mu bench fabric`) is
//! measured between pinned processes.
//!
//! Linux only (`sched_getaffinity`, `sched_setaffinity`, `sched_getattr`, `sched_setattr`), as
//! is the rest of the project. The unsafe code of the project's CPU affinity and scheduling
//! calls is here and nowhere else.

/// The CPUs the calling thread may run on, in increasing order; empty if the kernel would not
/// say. A new thread starts with its creator's set.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `set` is a plain bitmask filled in by the kernel; its size is passed along, and
    // `CPU_ISSET` reads bits below `CPU_SETSIZE` only.
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
    // SAFETY: builds a bitmask with one CPU set (below `CPU_SETSIZE`, checked above) and passes
    // its size along.
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

/// Checks that `cpu` is one the calling thread may run on, with an error that lists those.
pub fn check_allowed(cpu: usize) -> Result<(), String> {
    let allowed = allowed_cpus();
    if allowed.is_empty() {
        return Err(format!(
            "cpu {cpu}: the kernel would not say which CPUs this process may run on: {}",
            std::io::Error::last_os_error()
        ));
    }
    if allowed.contains(&cpu) {
        Ok(())
    } else {
        Err(format!("cpu {cpu} is not one this process may run on ({})", cpu_list(&allowed)))
    }
}

/// A set of CPUs as the kernel writes one (`0-3,6`).
pub fn cpu_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// The shortest time slice the kernel grants a thread that asks ([`request_slice_ns`]).
pub const SLICE_NS_MIN: u64 = 100_000;

/// Asks the scheduler to give the calling thread time slices of `slice_ns` (at least
/// [`SLICE_NS_MIN`]); returns the slice the kernel reports afterwards, or `None` if it would
/// not say or the thread is not under the normal policy (then nothing is changed).
///
/// Why: on a shared core, a thread woken by a futex or a signal waits until the running thread
/// has used up its slice, about 1.4 ms by default on two CPUs. Linux 6.12 and later (EEVDF's
/// custom slices) let a thread with a shorter slice than the running one's take the CPU sooner,
/// and a spinning thread with a short slice hands it over sooner. Older kernels keep their own
/// slice (the figure returned then is theirs, or the request is refused): nothing depends on it
/// but how soon a woken thread runs. Threads started later by this one inherit the slice.
pub fn request_slice_ns(slice_ns: u64) -> Option<u64> {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: `attr` is a plain struct of integers that the kernel fills in (at most `size`
    // bytes, passed along) for the calling thread (pid 0).
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let read = |attr: &mut libc::sched_attr| unsafe {
        libc::syscall(libc::SYS_sched_getattr, 0, attr as *mut libc::sched_attr, size, 0) == 0
    };
    if !read(&mut attr) || !matches!(attr.sched_policy, SCHED_OTHER | SCHED_BATCH) {
        return None;
    }
    attr.size = size;
    attr.sched_flags = 0;
    attr.sched_runtime = slice_ns.max(SLICE_NS_MIN);
    // SAFETY: passes a fully initialized `sched_attr` of `size` bytes for the calling thread,
    // keeping its policy and nice value; the kernel only reads it.
    unsafe {
        libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const libc::sched_attr, 0);
    }
    read(&mut attr).then_some(attr.sched_runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_may_run_on_that_cpu_only_and_its_creator_is_untouched() {
        let before = allowed_cpus();
        assert!(!before.is_empty(), "sched_getaffinity failed");
        let last = *before.last().unwrap();
        let inside = std::thread::spawn(move || {
            pin_to(last).unwrap();
            let pinned = allowed_cpus();
            // A thread the pinned one starts inherits its set.
            let child = std::thread::spawn(allowed_cpus).join().unwrap();
            (pinned, child)
        })
        .join()
        .unwrap();
        assert_eq!(inside, (vec![last], vec![last]));
        assert_eq!(allowed_cpus(), before);
    }

    #[test]
    fn cpus_outside_the_set_are_refused_with_the_set_named() {
        let allowed = allowed_cpus();
        let outside = allowed.last().unwrap() + 1;
        let e = check_allowed(outside).unwrap_err();
        assert!(e.contains(&cpu_list(&allowed)), "{e}");
        assert!(check_allowed(allowed[0]).is_ok());
        assert!(pin_to(libc::CPU_SETSIZE as usize).unwrap_err().contains("does not exist"));
    }

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list(&[]), "");
        assert_eq!(cpu_list(&[3]), "3");
        assert_eq!(cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn a_thread_asks_for_a_short_slice() {
        std::thread::spawn(|| {
            let granted = request_slice_ns(SLICE_NS_MIN + 50_000);
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
            let mut numbers = release.split(|c: char| !c.is_ascii_digit()).map(|n| n.parse());
            let version: (u32, u32) =
                (numbers.next().unwrap().unwrap(), numbers.next().unwrap().unwrap());
            if version >= (6, 12) {
                assert_eq!(granted, Some(SLICE_NS_MIN + 50_000), "kernel {release}");
                assert_eq!(request_slice_ns(1), Some(SLICE_NS_MIN), "raised to the minimum");
            } else {
                assert!(granted.is_some(), "the normal policy reports a slice");
            }
        })
        .join()
        .unwrap();
    }
}
