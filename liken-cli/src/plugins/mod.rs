//! `liken plugins sync|list|remove`: the CLIs of the operators a cluster
//! runs.
//!
//! Each operator that ships a workstation CLI publishes it as an image
//! beside its own (`<repository>-cli`, the same tag), whose entrypoint is
//! the program `kubectl-liken-<domain>`. `sync` reads which operators the
//! cluster runs ([`workloads`]), pulls each CLI for this workstation's OS
//! and architecture through the OCI distribution API ([`registry`],
//! [`pull`]) and installs it into `~/.liken/plugins/bin`, where both the
//! plugin walk and (once that directory is on PATH) kubectl find it.
//! `list` puts each installed CLI's `--version` beside its operator's
//! image tag and marks drift; `remove` deletes one.
//!
//! One failing plugin does not stop the others from syncing; the command
//! still fails at the end, naming each one that did not install.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{self, ClusterError};
use crate::{Io, args, plugin, usage};

pub mod extract;
pub mod oci;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod workloads;

/// Why a plugins command failed.
#[derive(Debug)]
pub enum PluginsError {
    /// HOME is not set, so there is no plugin directory.
    NoHome,
    /// Reaching the cluster failed.
    Cluster(ClusterError),
    /// Some CLIs did not install: (domain, why) for each.
    Sync(Vec<(String, String)>),
    /// `remove` was given something that is not a domain.
    BadDomain(String),
    /// `remove` of a CLI that is not installed.
    NotInstalled {
        /// The file that is not there.
        path: PathBuf,
    },
    /// A local file operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl fmt::Display for PluginsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PluginsError::NoHome => write!(
                f,
                "HOME is not set, so there is no ~/.liken/plugins/bin; set HOME and run this again"
            ),
            PluginsError::Cluster(e) => write!(f, "{e}"),
            PluginsError::Sync(failed) => {
                let n = failed.len();
                write!(
                    f,
                    "{n} {} not installed:",
                    if n == 1 { "CLI was" } else { "CLIs were" }
                )?;
                for (domain, why) in failed {
                    write!(f, "\n  {}{domain}: {why}", plugin::PREFIX)?;
                }
                Ok(())
            }
            PluginsError::BadDomain(d) => write!(
                f,
                "{d:?} is not a plugin domain (letters, digits, - and _); `liken plugins list` \
                 shows the installed ones"
            ),
            PluginsError::NotInstalled { path } => write!(
                f,
                "{} is not installed; `liken plugins list` shows what is",
                path.display()
            ),
            PluginsError::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for PluginsError {}

impl From<ClusterError> for PluginsError {
    fn from(e: ClusterError) -> PluginsError {
        PluginsError::Cluster(e)
    }
}

/// The file a domain's CLI installs under.
pub fn cli_name(domain: &str) -> String {
    format!("{}{domain}", plugin::PREFIX)
}

/// Whether a domain can name a file and a kubectl plugin word.
pub fn is_domain(domain: &str) -> bool {
    !domain.is_empty()
        && !domain.starts_with('-')
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn bin_dir() -> Result<PathBuf, PluginsError> {
    plugin::Search::from_env()
        .bin_dir
        .ok_or(PluginsError::NoHome)
}

/// Runs `liken plugins <sub> ...`.
pub fn command(words: Vec<std::ffi::OsString>, io: &mut Io) -> Result<(), crate::Error> {
    let parsed = args::parse(&usage::PLUGINS, words)?;
    let (sub, rest) = match parsed.positionals().split_first() {
        Some((sub, rest)) => (sub.to_str().unwrap_or(""), rest),
        None => return Err(parsed.usage()),
    };
    let server = parsed.value("server");
    match (sub, rest) {
        ("sync", [dir]) => sync(Path::new(dir), server, io),
        ("list", [dir]) => list(Path::new(dir), server, io),
        ("remove", [domain]) if server.is_none() => remove(&domain.to_string_lossy(), io),
        _ => Err(parsed.usage()),
    }
}

fn sync(dir: &Path, server: Option<&str>, io: &mut Io) -> Result<(), crate::Error> {
    let client = cluster::connect(dir, server).map_err(PluginsError::from)?;
    let operators = workloads::list(&client).map_err(|e| PluginsError::Cluster(e.into()))?;
    let bin = bin_dir()?;
    if operators.is_empty() {
        writeln!(
            io.out,
            "the cluster runs no operator with a CLI (no Deployment, DaemonSet or StatefulSet \
             is labelled {})",
            liken_api::annotations::PLUGIN_LABEL
        )?;
        return Ok(());
    }
    crate::files::create_dirs(&bin, 0o755).map_err(|source| PluginsError::Io {
        path: bin.clone(),
        source,
    })?;
    let platform = oci::this_platform();
    let mut session = registry::Registry::new();
    let mut failed = Vec::new();
    for op in &operators {
        if !is_domain(&op.domain) {
            failed.push((
                op.domain.clone(),
                format!(
                    "{} names a domain that cannot be a command name",
                    op.workload
                ),
            ));
            continue;
        }
        let image = match reference::Reference::parse(&op.image) {
            Ok(r) => r.cli(),
            Err(e) => {
                failed.push((op.domain.clone(), format!("{}: {e}", op.workload)));
                continue;
            }
        };
        let dest = bin.join(cli_name(&op.domain));
        match pull::install(&mut session, &image, &platform, &dest) {
            Ok(()) => writeln!(io.out, "installed {} from {image}", cli_name(&op.domain))?,
            Err(e) => failed.push((op.domain.clone(), e.to_string())),
        }
    }
    if !decide_on_path(std::env::var_os("PATH").as_deref(), &bin) {
        writeln!(io.out, "export PATH=\"{}:$PATH\"", bin.display())?;
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(PluginsError::Sync(failed).into())
    }
}

/// Whether `dir` is one of PATH's entries.
pub fn decide_on_path(path: Option<&std::ffi::OsStr>, dir: &Path) -> bool {
    path.is_some_and(|p| std::env::split_paths(p).any(|d| d == dir))
}

/// One line of `plugins list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The domain.
    pub domain: String,
    /// The installed CLI's answer to `--version`: `None` when not
    /// installed, `Some(None)` when installed but it gave no version.
    pub cli: Option<Option<String>>,
    /// The operator's image tag, when the cluster runs one.
    pub operator: Option<String>,
}

impl Entry {
    /// The installed CLI answers a version other than its operator's.
    pub fn drift(&self) -> bool {
        matches!((&self.cli, &self.operator), (Some(Some(c)), Some(o)) if c != o)
    }
}

/// Puts installed CLIs and running operators side by side, by domain.
pub fn decide_entries(
    installed: Vec<(String, Option<String>)>,
    operators: Vec<(String, Option<String>)>,
) -> Vec<Entry> {
    let mut entries: Vec<Entry> = installed
        .into_iter()
        .map(|(domain, v)| Entry {
            domain,
            cli: Some(v),
            operator: None,
        })
        .collect();
    for (domain, version) in operators {
        match entries.iter_mut().find(|e| e.domain == domain) {
            Some(e) => e.operator = version,
            None => entries.push(Entry {
                domain,
                cli: None,
                operator: version,
            }),
        }
    }
    entries.sort_by(|a, b| a.domain.cmp(&b.domain));
    entries
}

/// The `plugins list` text: domain, CLI version, operator version, one
/// line each, tab-separated, with a mark on drift; then the operators that
/// have no CLI here.
pub fn render_entries(entries: &[Entry]) -> String {
    let mut s = String::new();
    let mut missing = Vec::new();
    for e in entries {
        let cli = match &e.cli {
            None => "-",
            Some(None) => "?",
            Some(Some(v)) => v,
        };
        let op = e.operator.as_deref().unwrap_or("-");
        let mark = if e.drift() {
            "\tdrift"
        } else if e.cli == Some(None) {
            "\tno --version answer"
        } else {
            ""
        };
        s.push_str(&format!("{}\t{cli}\t{op}{mark}\n", e.domain));
        if e.cli.is_none() && e.operator.is_some() {
            missing.push(e.domain.as_str());
        }
    }
    if !missing.is_empty() {
        s.push_str(&format!(
            "no local CLI for: {}; run: liken plugins sync\n",
            missing.join(", ")
        ));
    }
    s
}

/// The domains installed in `bin`, sorted (temporaries, which start with
/// a dot, and directories are skipped). A missing directory is none.
pub fn installed(bin: &Path) -> Result<Vec<String>, PluginsError> {
    let entries = match std::fs::read_dir(bin) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(PluginsError::Io {
                path: bin.to_owned(),
                source,
            });
        }
    };
    let mut domains: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(plugin::PREFIX))
                .filter(|d| is_domain(d))
                .map(str::to_owned)
        })
        .collect();
    domains.sort();
    Ok(domains)
}

/// How long a CLI may take to answer `--version`.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks an installed CLI for its version: the first line it prints to
/// `--version`, or `None` when it fails, prints nothing, or takes longer
/// than [`VERSION_TIMEOUT`] (then it is killed).
pub fn probe_version(path: &Path) -> Option<String> {
    let mut child = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let _ = (&mut stdout).take(64 << 10).read_to_end(&mut out);
        out
    });
    let deadline = Instant::now() + VERSION_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let out = reader.join().ok()?;
    if !status?.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out);
    let first = text.lines().next()?.trim();
    (!first.is_empty()).then(|| first.to_owned())
}

fn list(dir: &Path, server: Option<&str>, io: &mut Io) -> Result<(), crate::Error> {
    let client = cluster::connect(dir, server).map_err(PluginsError::from)?;
    let operators = workloads::list(&client).map_err(|e| PluginsError::Cluster(e.into()))?;
    let bin = bin_dir()?;
    let installed = installed(&bin)?
        .into_iter()
        .map(|d| {
            let v = probe_version(&bin.join(cli_name(&d)));
            (d, v)
        })
        .collect();
    let operators = operators
        .into_iter()
        .map(|op| {
            let tag = reference::Reference::parse(&op.image).ok().map(|r| r.tag);
            (op.domain, tag)
        })
        .collect();
    io.out
        .write_all(render_entries(&decide_entries(installed, operators)).as_bytes())?;
    Ok(())
}

fn remove(domain: &str, io: &mut Io) -> Result<(), crate::Error> {
    if !is_domain(domain) {
        return Err(PluginsError::BadDomain(domain.to_owned()).into());
    }
    let path = bin_dir()?.join(cli_name(domain));
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PluginsError::NotInstalled { path }.into());
        }
        Err(source) => return Err(PluginsError::Io { path, source }.into()),
    }
    writeln!(io.out, "removed {}", cli_name(domain))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn list_marks_drift_missing_and_silent_clis() {
        let s = |v: &str| Some(v.to_owned());
        let entries = decide_entries(
            vec![
                ("audio".into(), s("1.0")),
                ("media".into(), s("1.0")),
                ("old".into(), None),
            ],
            vec![
                ("media".into(), s("1.1")),
                ("audio".into(), s("1.0")),
                ("display".into(), s("2.0")),
            ],
        );
        assert_eq!(
            render_entries(&entries),
            "audio\t1.0\t1.0\n\
             display\t-\t2.0\n\
             media\t1.0\t1.1\tdrift\n\
             old\t?\t-\tno --version answer\n\
             no local CLI for: display; run: liken plugins sync\n"
        );
    }

    #[test]
    fn domains_are_plain_words_and_path_membership_is_exact() {
        for good in ["audio", "a-b", "x_1"] {
            assert!(is_domain(good), "{good}");
        }
        for bad in ["", "-x", "../x", "a/b", "a.b", "a b"] {
            assert!(!is_domain(bad), "{bad}");
        }
        let path = std::ffi::OsString::from("/usr/bin:/home/u/.liken/plugins/bin");
        assert!(decide_on_path(
            Some(&path),
            Path::new("/home/u/.liken/plugins/bin")
        ));
        assert!(!decide_on_path(
            Some(&path),
            Path::new("/home/u/.liken/plugins")
        ));
        assert!(!decide_on_path(None, Path::new("/usr/bin")));
    }

    #[test]
    fn installed_clis_answer_their_version_or_are_stopped() {
        let tmp = crate::testdir::TestDir::new("plugins-installed");
        let write = |name: &str, body: &str| {
            let p = tmp.path().join(name);
            std::fs::write(&p, body).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let good = write("kubectl-liken-audio", "#!/bin/sh\necho 1.2.3\necho more\n");
        write(".kubectl-liken-audio.tmp-1", "");
        write("unrelated", "");
        let failing = write("kubectl-liken-media", "#!/bin/sh\nexit 3\n");
        assert_eq!(installed(tmp.path()).unwrap(), ["audio", "media"]);
        assert_eq!(probe_version(&good).as_deref(), Some("1.2.3"));
        assert_eq!(probe_version(&failing), None);
        assert!(installed(&tmp.path().join("absent")).unwrap().is_empty());
    }
}
