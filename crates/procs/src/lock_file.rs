//! Lock files (`flock`): a running node holds its own for its whole life, which is how a
//! command tells whether it runs, whatever its pid says.

use std::fs::File;
use std::os::fd::AsRawFd;

/// Takes `file`'s lock without waiting (shared or exclusive): `Ok(false)` if another holds it
/// in a way that conflicts. A lock taken is let go when `file` closes.
pub fn try_lock(file: &File, exclusive: bool) -> std::io::Result<bool> {
    let kind = if exclusive { libc::LOCK_EX } else { libc::LOCK_SH };
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(file.as_raw_fd(), kind | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}
