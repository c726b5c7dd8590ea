//! The supervised service's output: every line goes to the console and
//! to a bounded log in /run/liken, from a worker thread per run so a
//! slow console never stalls the supervisor loop.
//!
//! The log is bounded so a chatty k3s cannot fill the tmpfs under /run:
//! when the file passes [`LOG_LIMIT`] it becomes `<name>.1` (replacing
//! the previous one) and a new file starts, so at most twice the limit
//! is kept and the newest lines are always there.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use crate::console;

/// Where a log file starts over.
pub const LOG_LIMIT: u64 = 1024 * 1024;

/// A size-bounded log file.
pub struct BoundedLog {
    path: PathBuf,
    limit: u64,
    file: Option<File>,
    written: u64,
}

impl BoundedLog {
    /// A log at `path`, rotated past `limit` bytes. Nothing is opened
    /// until the first line.
    pub fn new(path: PathBuf, limit: u64) -> BoundedLog {
        BoundedLog {
            path,
            limit,
            file: None,
            written: 0,
        }
    }

    /// Appends one line (a newline is added). Errors lose the line from
    /// the file only; the console still has it.
    pub fn append(&mut self, line: &[u8]) -> io::Result<()> {
        if self.file.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)?;
            self.written = f.metadata().map(|m| m.len()).unwrap_or(0);
            self.file = Some(f);
        }
        if self.written >= self.limit {
            self.file = None;
            let mut old = self.path.clone().into_os_string();
            old.push(".1");
            std::fs::rename(&self.path, &old)?;
            self.file = Some(
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&self.path)?,
            );
            self.written = 0;
        }
        if let Some(f) = &mut self.file {
            f.write_all(line)?;
            f.write_all(b"\n")?;
            let n = u64::try_from(line.len())
                .unwrap_or(u64::MAX)
                .saturating_add(1);
            self.written = self.written.saturating_add(n);
        }
        Ok(())
    }
}

/// Copies `reader` line by line to the console and the log until it
/// ends (the service exited and closed its end of the pipe).
pub fn copy_lines(reader: impl Read, log: &mut BoundedLog) {
    let mut failed = false;
    for line in BufReader::new(reader).split(b'\n') {
        let Ok(line) = line else { break };
        console::raw_line(&line);
        if let Err(e) = log.append(&line)
            && !failed
        {
            failed = true;
            console::line(&format!(
                "k3s log: cannot write {} ({e}); its output still goes to the console",
                log.path.display()
            ));
        }
    }
}

/// Starts the worker that copies one run's output.
pub fn spawn_copier(reader: io::PipeReader, log_path: &Path) -> io::Result<()> {
    let mut log = BoundedLog::new(log_path.to_owned(), LOG_LIMIT);
    std::thread::Builder::new()
        .name("k3s-output".into())
        .spawn(move || copy_lines(reader, &mut log))
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_rotates_at_its_limit() {
        let dir = std::env::temp_dir().join(format!("liken-init-out-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k3s.log");
        let mut log = BoundedLog::new(path.clone(), 10);
        copy_lines(&b"one\ntwo\nthree\nfour"[..], &mut log);
        // "one\ntwo\nthree\n" passed 10 bytes, so "four" began a new file.
        assert_eq!(
            std::fs::read_to_string(dir.join("k3s.log.1")).unwrap(),
            "one\ntwo\nthree\n"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "four\n");
        let mut bad = BoundedLog::new(dir.join("none/k3s.log"), 10);
        assert!(bad.append(b"x").is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
