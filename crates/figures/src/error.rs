//! The one error type of this crate: every variant names the file or directory concerned, since
//! a benchmark writes many of them and "permission denied" alone does not say which.

use std::io;
use std::path::PathBuf;

/// Why an output directory or a figure could not be made.
#[derive(Debug, thiserror::Error)]
pub enum FigureError {
    /// The output directory (or one of its parents) could not be created.
    #[error("cannot create output directory {}: {source}", path.display())]
    CreateDir {
        /// The directory asked for.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// The output path exists and is a file, not a directory.
    #[error("output path {} exists and is not a directory", path.display())]
    NotADirectory {
        /// The path asked for.
        path: PathBuf,
    },
    /// The output directory exists but a file cannot be written in it.
    #[error("output directory {} is not writable: {source}", path.display())]
    NotWritable {
        /// The directory asked for.
        path: PathBuf,
        /// What the operating system said when a file was written there.
        source: io::Error,
    },
    /// The figure was drawn but its file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// What the operating system said.
        source: io::Error,
    },
    /// After leaving out what cannot be drawn, nothing was left.
    #[error("figure {title:?} ({}) has nothing to draw: {reason}", path.display())]
    NoData {
        /// The file that would have been written.
        path: PathBuf,
        /// The figure's title.
        title: String,
        /// What was missing, such as "every value is NaN".
        reason: String,
    },
    /// The figure's description contradicts itself, such as a bar series with more points than
    /// there are categories.
    #[error("figure {title:?} ({}) is malformed: {problem}", path.display())]
    Malformed {
        /// The file that would have been written.
        path: PathBuf,
        /// The figure's title.
        title: String,
        /// What is wrong.
        problem: String,
    },
    /// The drawing library reported an error.
    #[error("drawing figure {} failed: {message}", path.display())]
    Draw {
        /// The file being drawn.
        path: PathBuf,
        /// The drawing library's message.
        message: String,
    },
}
