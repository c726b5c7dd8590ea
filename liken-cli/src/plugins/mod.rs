//! `liken plugins sync|list|remove`: the CLIs of the operators a cluster
//! runs.
//!
//! Each operator that ships a workstation CLI publishes it as an image
//! beside its own (`<repository>-cli`, the same tag), whose entrypoint is
//! the program `kubectl-liken-<domain>`. `sync` reads which operators the
//! cluster runs in liken-system ([`workloads`]), pulls each CLI for this
//! workstation's OS and architecture through the OCI distribution API
//! ([`registry`], [`pull`]), by digest only: a tag is resolved once and
//! pinned in the plugin's record ([`record`]) after a question on the
//! terminal, or with `-pin` in a script, and refused otherwise. It
//! installs the CLI into `~/.liken/plugins/bin`, where both the plugin
//! walk and (once that directory is on PATH) kubectl find it. `list`
//! puts each installed CLI's recorded version beside its operator's image
//! tag and marks drift, without running any plugin; `remove` deletes
//! one.
//!
//! One failing plugin does not stop the others from syncing; the command
//! still fails at the end, naming each one that did not install.

use std::fmt;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use crate::cluster::{self, ClusterError};
use crate::{Io, args, plugin, usage};

pub mod extract;
pub mod oci;
pub mod pull;
pub mod record;
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
    /// A plugin's record could not be read or written.
    Record {
        /// The record file.
        path: PathBuf,
        /// Why.
        why: String,
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
            PluginsError::Record { path, why } => write!(f, "{}: {why}", path.display()),
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
        ("sync", [dir]) => sync(Path::new(dir), server, parsed.switch("pin"), io),
        ("list", [dir]) if !parsed.switch("pin") => list(Path::new(dir), server, io),
        ("remove", [domain]) if server.is_none() && !parsed.switch("pin") => {
            remove(&domain.to_string_lossy(), io)
        }
        _ => Err(parsed.usage()),
    }
}

/// Why a CLI reference has no pin to pull by, in a script.
fn refused_pin(image: &reference::Reference, digest: &liken_api::Digest) -> String {
    format!(
        "{image} is a tag, which its registry may move, and this workstation has not pinned \
         it (it names {digest} now); nothing was installed. Run `liken plugins sync` on a \
         terminal to be asked, or add -pin to trust that digest from now on"
    )
}

fn sync(dir: &Path, server: Option<&str>, pin: bool, io: &mut Io) -> Result<(), crate::Error> {
    let client = cluster::connect(dir, server).map_err(PluginsError::from)?;
    let operators = workloads::list(&client).map_err(|e| PluginsError::Cluster(e.into()))?;
    let bin = bin_dir()?;
    if operators.is_empty() {
        writeln!(
            io.out,
            "the cluster runs no operator with a CLI (no Deployment, DaemonSet or StatefulSet \
             in {} is labelled {})",
            workloads::PLUGIN_NAMESPACE,
            liken_api::annotations::PLUGIN_LABEL
        )?;
        return Ok(());
    }
    crate::files::create_dirs(&bin, 0o755).map_err(|source| PluginsError::Io {
        path: bin.clone(),
        source,
    })?;
    let terminal = std::io::stdin().is_terminal();
    let platform = oci::this_platform();
    let mut session = registry::Registry::new();
    let mut failed = Vec::new();
    let record_err = |(path, why)| PluginsError::Record { path, why };
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
        let mut rec = record::read(&bin, &op.domain).map_err(record_err)?;
        let key = image.to_string();
        let decision = record::decide_pin(&rec, &key, terminal, pin);
        let digest = if let record::PinDecision::Pinned(d) = &decision {
            match liken_api::Digest::parse(d) {
                Ok(d) => d,
                Err(e) => {
                    let path = record::path(&bin, &op.domain);
                    failed.push((
                        op.domain.clone(),
                        format!("{}: the pin of {key}: {e}", path.display()),
                    ));
                    continue;
                }
            }
        } else {
            let resolved = match pull::resolve(&mut session, &image) {
                Ok(d) => d,
                Err(e) => {
                    failed.push((op.domain.clone(), e.to_string()));
                    continue;
                }
            };
            let trusted = match decision {
                record::PinDecision::Pin => true,
                record::PinDecision::Ask => {
                    write!(
                        io.out,
                        "{} comes from {key}, a tag its registry may move; it names {resolved} \
                         now. Pin it to that digest and install it? [y/N] ",
                        cli_name(&op.domain)
                    )?;
                    io.out.flush()?;
                    let mut answer = String::new();
                    io.stdin.read_line(&mut answer)?;
                    matches!(answer.trim(), "y" | "Y" | "yes" | "Yes" | "YES")
                }
                _ => false,
            };
            if !trusted {
                let why = if decision == record::PinDecision::Ask {
                    format!("{key} was not pinned, so nothing was installed")
                } else {
                    refused_pin(&image, &resolved)
                };
                failed.push((op.domain.clone(), why));
                continue;
            }
            rec.pins.insert(key.clone(), resolved.to_string());
            record::write(&bin, &op.domain, &rec).map_err(record_err)?;
            writeln!(io.out, "pinned {key} to {resolved}")?;
            resolved
        };
        let dest = bin.join(cli_name(&op.domain));
        match pull::install(&mut session, &image, &digest, &platform, &dest) {
            Ok(()) => {
                rec.installed = Some(record::Installed {
                    reference: key.clone(),
                    digest: digest.to_string(),
                });
                record::write(&bin, &op.domain, &rec).map_err(record_err)?;
                writeln!(
                    io.out,
                    "installed {} from {image}@{digest}",
                    cli_name(&op.domain)
                )?;
            }
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
    /// The installed CLI's version as its record names it: `None` when
    /// not installed, `Some(None)` when installed without a record (by
    /// hand, or by a liken before records).
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
            "\tnot installed by sync"
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

fn list(dir: &Path, server: Option<&str>, io: &mut Io) -> Result<(), crate::Error> {
    let client = cluster::connect(dir, server).map_err(PluginsError::from)?;
    let operators = workloads::list(&client).map_err(|e| PluginsError::Cluster(e.into()))?;
    let bin = bin_dir()?;
    // The record says what sync installed; the CLI itself is never run
    // (asking a program its version is running it).
    let installed = installed(&bin)?
        .into_iter()
        .map(|d| {
            let v = record::read(&bin, &d)
                .ok()
                .and_then(|r| r.installed_version().map(str::to_owned));
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
    let bin = bin_dir()?;
    let path = bin.join(cli_name(domain));
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(PluginsError::NotInstalled { path }.into());
        }
        Err(source) => return Err(PluginsError::Io { path, source }.into()),
    }
    // The pins stay: trust given once is not asked for again.
    if let Ok(mut rec) = record::read(&bin, domain)
        && rec.installed.take().is_some()
    {
        record::write(&bin, domain, &rec)
            .map_err(|(path, why)| PluginsError::Record { path, why })?;
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
             old\t?\t-\tnot installed by sync\n\
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
    fn installed_clis_are_found_without_running_them() {
        let tmp = crate::testdir::TestDir::new("plugins-installed");
        let ran = tmp.path().join("ran");
        let write = |name: &str, body: &str| {
            let p = tmp.path().join(name);
            std::fs::write(&p, body).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p
        };
        let body = format!("#!/bin/sh\ntouch {}\n", ran.display());
        write("kubectl-liken-audio", &body);
        write(".kubectl-liken-audio.tmp-1", "");
        write("unrelated", "");
        write("kubectl-liken-media", &body);
        assert_eq!(installed(tmp.path()).unwrap(), ["audio", "media"]);
        assert!(installed(&tmp.path().join("absent")).unwrap().is_empty());
        assert!(!ran.exists());
    }
}
