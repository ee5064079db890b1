//! Pid files, and processes to signal by pidfd so that a signal cannot reach another process
//! that got the pid after the one meant had exited.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a replica writes into its pid file: its pid, and the cluster it serves, so that a
/// command given another cluster's configuration with the same run directory leaves it alone.
pub fn pid_file_text(pid: u32, cluster_id: u64) -> String {
    format!("{pid}\ncluster {cluster_id:#x}\n")
}

/// A pid file's contents: the pid, and the cluster if the file names one (a file written
/// before the cluster line existed does not).
pub struct PidText {
    pub pid: u32,
    pub cluster: Option<u64>,
}

/// What a pid file holds: `Ok(None)` if there is none, `Ok(Some(Err(why)))` if it holds
/// something other than a pid file's lines.
pub fn read_pid(path: &Path) -> Result<Option<Result<PidText, String>>, String> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(match String::from_utf8(bytes) {
            Ok(text) => parse_pid_text(&text),
            Err(_) => Err("it holds bytes that are not text, not a pid".to_string()),
        })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

pub fn parse_pid_text(text: &str) -> Result<PidText, String> {
    let garbled = || format!("it holds {:?}, not a pid", text.trim());
    let mut lines = text.lines();
    let pid = lines
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
        // Pids are positive `pid_t`s (at most 2^22 on Linux); a larger number is not one.
        .filter(|&p| p > 0 && i32::try_from(p).is_ok())
        .ok_or_else(garbled)?;
    let cluster = match lines.next().map(str::trim) {
        None | Some("") => None,
        Some(line) => Some(
            line.strip_prefix("cluster ")
                .and_then(|c| c.strip_prefix("0x"))
                .and_then(|c| u64::from_str_radix(c, 16).ok())
                .ok_or_else(garbled)?,
        ),
    };
    Ok(PidText { pid, cluster })
}

/// The pid a pid file names, if it names one.
pub fn pid_in(path: &Path) -> Option<u32> {
    read_pid(path).ok().flatten().and_then(Result::ok).map(|t| t.pid)
}

/// A process to signal: by pidfd where the kernel has them, so that a signal cannot reach
/// another process that got the pid after this one exited; by pid otherwise.
pub struct Target {
    pub pid: u32,
    pidfd: Option<OwnedFd>,
}

impl Target {
    /// `None` if no process has this pid.
    pub fn open(pid: u32) -> Result<Option<Target>, String> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no memory
        // is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd >= 0 {
            // SAFETY: the descriptor was just returned to us and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            return Ok(Some(Target { pid, pidfd: Some(fd) }));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ESRCH) => Ok(None),
            // No pidfds here (an old kernel, or a sandbox that forbids them): by pid.
            Some(libc::ENOSYS | libc::EPERM) => Ok(Path::new(&format!("/proc/{pid}"))
                .exists()
                .then_some(Target { pid, pidfd: None })),
            _ => Err(format!("pidfd_open({pid}): {err}")),
        }
    }

    pub fn signal(&self, signal: libc::c_int) -> Result<(), String> {
        let rc = match &self.pidfd {
            // SAFETY: sends a signal through a pidfd we own; no memory is passed (info is null).
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0u32,
                ) as i32
            },
            // SAFETY: kill takes a pid and a signal number, no memory.
            None => unsafe { libc::kill(self.pid as libc::pid_t, signal) },
        };
        if rc == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ESRCH) {
            return Ok(()); // it exited meanwhile: what the signal was for
        }
        Err(format!("signal {signal} to pid {}: {err}", self.pid))
    }

    /// Whether the process has exited.
    pub fn exited(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut poll =
                    libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: polls one pollfd that we own, without waiting.
                let rc = unsafe { libc::poll(&mut poll, 1, 0) };
                rc > 0 && poll.revents & libc::POLLIN != 0
            }
            None => !Path::new(&format!("/proc/{}", self.pid)).exists(),
        }
    }

    /// Waits until the process has exited or `deadline` passed; whether it exited.
    pub fn wait_exit(&self, deadline: Instant) -> bool {
        loop {
            if self.exited() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What a pid file says about the process it names.
pub enum PidFile {
    Missing,
    /// It names no running process of ours (why).
    Stale(String),
    Running(Target),
    /// It names a running process of ours that serves another cluster (its id), which shares
    /// the run directory: left alone.
    Foreign(Target, u64),
}

/// The command line a pid file's process must have to be ours: `mu <words...> ... --id <id>`.
pub struct OurCommand<'a> {
    /// The words after the program's name, in order (`["replica"]`, `["ukharon", "node"]`).
    pub words: &'a [&'a str],
    pub id: u16,
}

/// Reads the pid file at `path` and finds out whether it names a running process of `ours`
/// that serves `cluster`. The process is believed only once `/proc` shows it runs `ours`,
/// read through a pidfd taken first, so that a reused pid is not taken for it.
pub fn inspect(path: &Path, cluster: u64, ours: &OurCommand) -> Result<PidFile, String> {
    let PidText { pid, cluster: named } = match read_pid(path)? {
        None => return Ok(PidFile::Missing),
        Some(Err(why)) => return Ok(PidFile::Stale(why)),
        Some(Ok(text)) => text,
    };
    let Some(target) = Target::open(pid)? else {
        return Ok(PidFile::Stale(format!("pid {pid} is not running")));
    };
    match runs(pid, ours) {
        // `/proc/<pid>` was read while the pidfd was open: if its process is still alive now,
        // the pid was not reused in between, and what was read is that process.
        Some(true) if !target.exited() => match named {
            Some(other) if other != cluster => Ok(PidFile::Foreign(target, other)),
            _ => Ok(PidFile::Running(target)),
        },
        Some(false) => {
            Ok(PidFile::Stale(format!("pid {pid} is another program, which was left alone")))
        }
        _ => Ok(PidFile::Stale(format!("pid {pid} is not running"))),
    }
}

/// Whether process `pid` runs `ours`; `None` if it is gone.
fn runs(pid: u32, ours: &OurCommand) -> Option<bool> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold anything.
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
    if matches!(state, Some('Z' | 'X') | None) {
        return None;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    let id = ours.id.to_string();
    let words = ours.words.iter().enumerate().all(|(i, w)| argv.get(i + 1) == Some(&w.as_bytes()));
    Some(words && argv.windows(2).any(|w| w[0] == b"--id" && w[1] == id.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_files_name_the_pid_and_the_cluster() {
        let text = parse_pid_text(&pid_file_text(4242, 0x6a01)).unwrap();
        assert_eq!((text.pid, text.cluster), (4242, Some(0x6a01)));
        // A file written before the cluster line existed.
        let text = parse_pid_text("77\n").unwrap();
        assert_eq!((text.pid, text.cluster), (77, None));
        for garbled in [
            "",
            "0\n",
            "x\n",
            "77\ncluster 12\n",
            "77\nclusters 0x1\n",
            "2147483648\n",
            "4294967295\n",
        ] {
            assert!(parse_pid_text(garbled).is_err(), "{garbled:?} was taken");
        }
        // Bytes that are not text are a garbled file (stale), not an error that stops commands.
        let path = std::env::temp_dir().join(format!("mu-pid-test-{}.pid", std::process::id()));
        std::fs::write(&path, [0xff, 0xfe, b'\n']).unwrap();
        assert!(matches!(read_pid(&path), Ok(Some(Err(_)))));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn only_a_process_running_our_command_counts_as_ours() {
        // This test process runs neither command.
        for words in [&["replica"][..], &["ukharon", "node"][..]] {
            assert_eq!(runs(std::process::id(), &OurCommand { words, id: 0 }), Some(false));
        }
        let target = Target::open(std::process::id()).unwrap().expect("we run");
        assert!(!target.exited());
        // A pid file naming this process is stale: it is another program.
        let path = std::env::temp_dir().join(format!("mu-pid-ours-{}.pid", std::process::id()));
        std::fs::write(&path, pid_file_text(std::process::id(), 7)).unwrap();
        let ours = OurCommand { words: &["replica"], id: 0 };
        assert!(matches!(inspect(&path, 7, &ours), Ok(PidFile::Stale(_))));
        let _ = std::fs::remove_file(&path);
        assert!(matches!(inspect(&path, 7, &ours), Ok(PidFile::Missing)));
    }
}
