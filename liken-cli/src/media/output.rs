//! The output file of `stick` and `media`: written under a temporary
//! name beside the final one, fsynced, then renamed, so a crash or an
//! error leaves either no output or the previous one, never half an
//! image under the name a person will `dd` onto a stick.
//!
//! An existing output is replaced only with `-force`, and without it the
//! rename itself refuses to replace (RENAME_NOREPLACE), so a file that
//! appears meanwhile is not lost. The output must be a regular file (or
//! absent): an image is written to a file and copied onto a device
//! afterwards, never renamed over `/dev/sdX`. The image holds the
//! deployment layer, and so the cluster's private keys: it is created
//! 0600.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::MediaError;
use crate::files;

/// An output being written.
pub struct Output {
    path: PathBuf,
    tmp: PathBuf,
    file: File,
    force: bool,
    committed: bool,
}

impl Output {
    /// Checks `path` and creates the temporary file beside it.
    pub fn create(path: &Path, force: bool) -> Result<Output, MediaError> {
        match std::fs::symlink_metadata(path) {
            Ok(m) if !m.file_type().is_file() => {
                return Err(MediaError::NotAFile(path.to_owned()));
            }
            Ok(_) if !force => return Err(MediaError::Exists(path.to_owned())),
            _ => {}
        }
        let name = path
            .file_name()
            .ok_or_else(|| MediaError::NotAFile(path.to_owned()))?
            .to_string_lossy()
            .into_owned();
        let tmp = files::parent(path).join(format!(".{name}.tmp-{}", std::process::id()));
        // A temporary left by a crashed run under a reused pid is ours.
        let _ = std::fs::remove_file(&tmp);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(files::PRIVATE)
            .open(&tmp)
            .map_err(|error| MediaError::Io {
                doing: format!("creating {}", tmp.display()),
                error,
            })?;
        Ok(Output {
            path: path.to_owned(),
            tmp,
            file,
            force,
            committed: false,
        })
    }

    /// The file being written.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// fsyncs the data and gives it the final name.
    pub fn commit(mut self) -> Result<(), MediaError> {
        let io = |doing: String| move |error| MediaError::Io { doing, error };
        self.file
            .sync_all()
            .map_err(io(format!("syncing {}", self.tmp.display())))?;
        let renamed = if self.force {
            std::fs::rename(&self.tmp, &self.path)
        } else {
            files::rename_noreplace(&self.tmp, &self.path)
        };
        match renamed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(MediaError::Exists(self.path.clone()));
            }
            Err(e) => return Err(io(format!("renaming to {}", self.path.display()))(e)),
        }
        self.committed = true;
        files::sync_dir(files::parent(&self.path)).map_err(io(format!(
            "syncing {}",
            files::parent(&self.path).display()
        )))
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;
    use std::io::Write;

    #[test]
    fn an_existing_output_needs_force_and_failures_leave_nothing() {
        let dir = TestDir::new("media-output");
        let p = dir.path().join("stick.img");
        let mut o = Output::create(&p, false).unwrap();
        o.file().write_all(b"one").unwrap();
        o.commit().unwrap();
        assert!(matches!(
            Output::create(&p, false),
            Err(MediaError::Exists(_))
        ));
        let mut o = Output::create(&p, true).unwrap();
        o.file().write_all(b"two").unwrap();
        drop(o);
        assert_eq!(
            std::fs::read(&p).unwrap(),
            b"one",
            "an abandoned write changes nothing"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary is left");
        let mut o = Output::create(&p, true).unwrap();
        o.file().write_all(b"two").unwrap();
        o.commit().unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert!(matches!(
            Output::create(dir.path(), true),
            Err(MediaError::NotAFile(_))
        ));
    }
}
