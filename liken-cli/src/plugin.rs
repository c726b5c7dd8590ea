//! The plugin walk: a first word that names no command is a plugin
//! domain, and `liken audio capture` runs `kubectl-liken-audio capture`.
//!
//! kubectl dispatches `kubectl liken audio capture` to the same binary by
//! its own rule, so this module gives the bare `liken` and `kubectl-liken`
//! names that behaviour too. Like kubectl, the walk tries the longest
//! dash-joined prefix of the leading words first (`kubectl-liken-audio-
//! capture`, then `kubectl-liken-audio`), and stops at the first flag.
//! Each name is looked up on PATH first, because a person who put the
//! plugin directory on PATH expects that copy, then in
//! `~/.liken/plugins/bin`, which `liken plugins sync` fills and which is
//! often not on PATH. Relative and empty PATH entries are skipped: running
//! a binary from whatever directory the shell is in is a trap, not a
//! convenience.
//!
//! The plugin replaces this process (exec), so it owns the terminal and
//! its exit status is the command's.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// Every plugin binary's name starts with this.
pub const PREFIX: &str = "kubectl-liken-";

/// Where plugins are looked for.
#[derive(Debug, Clone, Default)]
pub struct Search {
    /// PATH's directories, in order.
    pub path: Vec<PathBuf>,
    /// The plugin directory (`~/.liken/plugins/bin`), when HOME is set.
    pub bin_dir: Option<PathBuf>,
}

impl Search {
    /// PATH and HOME from this process's environment.
    pub fn from_env() -> Search {
        Search::new(
            std::env::var_os("PATH").as_deref(),
            std::env::var_os("HOME").as_deref(),
        )
    }

    /// The search for a given PATH value and home directory.
    pub fn new(path: Option<&OsStr>, home: Option<&OsStr>) -> Search {
        let path = path
            .map(|p| {
                std::env::split_paths(p)
                    .filter(|d| d.is_absolute())
                    .collect()
            })
            .unwrap_or_default();
        let bin_dir = home
            .filter(|h| !h.is_empty())
            .map(|h| Path::new(h).join(".liken/plugins/bin"));
        Search { path, bin_dir }
    }

    fn dirs(&self) -> impl Iterator<Item = &Path> {
        self.path
            .iter()
            .map(PathBuf::as_path)
            .chain(self.bin_dir.as_deref())
    }
}

/// A plugin the walk found, and the words it is run with.
#[derive(Debug, PartialEq, Eq)]
pub struct Found {
    /// The executable.
    pub path: PathBuf,
    /// Its file name, passed as its argv[0].
    pub name: String,
    /// The words after the ones its name consumed.
    pub args: Vec<OsString>,
}

/// The plugin names to try for `words`, longest first, each with how many
/// words it consumes. Only leading words made of letters, digits, `_` and
/// `-` can be part of a name, so no word can smuggle a path in.
pub fn decide_candidates(words: &[OsString]) -> Vec<(String, usize)> {
    let mut parts = Vec::new();
    for w in words {
        match w.to_str() {
            Some(s) if is_name_part(s) => parts.push(s),
            _ => break,
        }
    }
    (1..=parts.len())
        .rev()
        .map(|n| (format!("{PREFIX}{}", parts[..n].join("-")), n))
        .collect()
}

fn is_name_part(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('-')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Walks the candidates through the search directories.
pub fn find(search: &Search, words: &[OsString]) -> Option<Found> {
    for (name, consumed) in decide_candidates(words) {
        for dir in search.dirs() {
            let path = dir.join(&name);
            if is_executable_file(&path) {
                return Some(Found {
                    path,
                    name,
                    args: words[consumed..].to_vec(),
                });
            }
        }
    }
    None
}

/// Whether `path` is a regular file with an execute bit.
pub(crate) fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Replaces this process with the plugin; returns only if exec failed.
pub fn exec(found: &Found) -> std::io::Error {
    std::process::Command::new(&found.path)
        .arg0(&found.name)
        .args(&found.args)
        .exec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn candidates_run_longest_first_and_stop_at_a_flag() {
        assert_eq!(
            decide_candidates(&words(&["audio", "capture", "-o", "x"])),
            [
                ("kubectl-liken-audio-capture".to_owned(), 2),
                ("kubectl-liken-audio".to_owned(), 1)
            ]
        );
        assert!(decide_candidates(&words(&["-x"])).is_empty());
        assert!(decide_candidates(&words(&["../../bin/sh"])).is_empty());
        assert_eq!(
            decide_candidates(&words(&["audio", "a/b"])),
            [("kubectl-liken-audio".to_owned(), 1)]
        );
    }

    #[test]
    fn path_comes_before_the_plugin_dir_and_relative_entries_are_skipped() {
        let s = Search::new(
            Some(OsStr::new("/usr/bin::relative:/bin")),
            Some(OsStr::new("/home/u")),
        );
        let dirs: Vec<_> = s.dirs().collect();
        assert_eq!(
            dirs,
            [
                Path::new("/usr/bin"),
                Path::new("/bin"),
                Path::new("/home/u/.liken/plugins/bin")
            ]
        );
    }

    #[test]
    fn find_takes_the_longest_name_that_exists_and_is_executable() {
        let tmp = std::env::temp_dir().join(format!("liken-plugin-test-{}", std::process::id()));
        let on_path = tmp.join("path");
        let home = tmp.join("home");
        let bin = home.join(".liken/plugins/bin");
        std::fs::create_dir_all(&on_path).unwrap();
        std::fs::create_dir_all(&bin).unwrap();
        let make = |p: PathBuf, mode| {
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        make(bin.join("kubectl-liken-audio"), 0o755);
        make(on_path.join("kubectl-liken-audio-capture"), 0o644); // not executable
        let s = Search::new(Some(on_path.as_os_str()), Some(home.as_os_str()));
        let found = find(&s, &words(&["audio", "capture", "now"])).unwrap();
        assert_eq!(found.path, bin.join("kubectl-liken-audio"));
        assert_eq!(found.args, words(&["capture", "now"]));
        make(on_path.join("kubectl-liken-audio-capture"), 0o755);
        let found = find(&s, &words(&["audio", "capture", "now"])).unwrap();
        assert_eq!(found.name, "kubectl-liken-audio-capture");
        assert_eq!(found.args, words(&["now"]));
        assert_eq!(find(&s, &words(&["video"])), None);
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
