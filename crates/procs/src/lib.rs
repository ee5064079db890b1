//! Processes for the `mu` command's top layer: interrupts, stderr lines that never stop a
//! command, and bounded counts on the command line.

// First: its macros are used by the modules below and by the crates above.
#[macro_use]
mod say;

pub mod child;
pub mod clock;
pub mod counts;
pub mod interrupt;
pub mod lock_file;
pub mod parent;
pub mod pid_file;
pub mod poll;
pub mod run_dir;
pub mod user;
