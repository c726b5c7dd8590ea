//! The `liken` command: a thin dispatcher over the modules that own each
//! capability.
//!
//! The shape: [`run`] takes the first word, and one match arm per command
//! hands the remaining words to that command's module. The module parses
//! them with [`args::parse`] against its entry in [`usage`] (the table that
//! is also the help text and the completion vocabulary) and returns its
//! own error enum, which [`Error`] wraps with `From`. A first word that
//! names no command goes to the plugin walk ([`plugin`]).
//!
//! Commands that are not built yet are absent from the table, the help
//! text and completion, rather than present as stubs.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

pub mod args;
pub mod cluster;
pub mod completion;
pub mod deployment;
pub use liken_releases::files;
pub mod identity;
pub mod layer;
pub mod media;
pub mod plugin;
pub mod plugins;
pub mod releases;
pub mod scaffold;
pub mod secureboot;
pub mod signing;
#[cfg(test)]
pub(crate) mod testdir;
pub mod usage;

/// The streams a command reads and writes. Tests give buffers; `main`
/// gives the process's own.
pub struct Io<'a> {
    /// Answers to questions (`new`), lists (`index`).
    pub stdin: &'a mut dyn BufRead,
    /// What the command produces, and its questions.
    pub out: &'a mut dyn Write,
    /// Progress and notes that are not the command's output.
    pub err: &'a mut dyn Write,
}

/// Why a command failed; its Display is what follows `liken: `.
#[derive(Debug)]
pub enum Error {
    /// No command was given.
    NoCommand,
    /// The first word names no command and no plugin.
    UnknownCommand(String),
    /// The command's words do not fit its usage line.
    Usage(&'static usage::Entry),
    /// `-h` or `--help` after a command: not a failure, [`run`] prints the
    /// entry and succeeds.
    Help(&'static usage::Entry),
    /// A flag the command does not have.
    UnknownFlag {
        /// The flag as typed (single-dash spelling).
        flag: String,
        /// The command it was given to.
        entry: &'static usage::Entry,
    },
    /// A flag that may be given once was given again.
    RepeatedFlag {
        /// The flag's name.
        flag: &'static str,
        /// The command it was given to.
        entry: &'static usage::Entry,
    },
    /// A flag's value is not UTF-8.
    NonUtf8Flag {
        /// The flag's name.
        flag: &'static str,
        /// The value, lossily decoded for the message.
        value: String,
    },
    /// lexopt could not read the words (a flag missing its value).
    Args(lexopt::Error),
    /// Writing the output failed (a closed pipe, a full disk).
    Output(std::io::Error),
    /// A plugin was found but could not be run.
    PluginExec {
        /// The plugin's path.
        path: std::path::PathBuf,
        /// Why exec failed.
        source: std::io::Error,
    },
    /// `completion` was asked for a shell it has no script for.
    UnsupportedShell(String),
    /// `new` failed.
    Scaffold(scaffold::ScaffoldError),
    /// `mint` or `adopt` failed.
    Identity(identity::IdentityError),
    /// `kubeconfig` failed.
    Kubeconfig(identity::kubeconfig::KubeconfigError),
    /// `layer` failed.
    Layer(layer::LayerError),
    /// `bundle`, `fetch`, `serve` or `index` failed.
    Releases(releases::Error),
    /// `stick` or `media` failed.
    Media(media::MediaError),
    /// `approve-reboot`, `request-reboot` or a passthrough failed.
    Cluster(cluster::ClusterError),
    /// `plugins` failed.
    Plugins(plugins::PluginsError),
    /// `keygen`, `trust` or `sign` failed.
    Signing(signing::SigningError),
    /// `keygen -secureboot` failed.
    SecureBoot(secureboot::SecureBootError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoCommand => write!(f, "a command is required; run `liken help` for the list"),
            Error::UnknownCommand(c) => write!(
                f,
                "unknown command {c:?}, and no plugin kubectl-liken-{c} on PATH or in \
                 ~/.liken/plugins/bin; run `liken help` for the list"
            ),
            Error::Usage(entry) => write!(f, "usage: {}", entry.synopsis),
            Error::Help(entry) => write!(f, "usage: {}", entry.synopsis),
            Error::UnknownFlag { flag, entry } => {
                write!(f, "unknown flag {flag}; usage: {}", entry.synopsis)
            }
            Error::RepeatedFlag { flag, entry } => write!(
                f,
                "-{flag} was given twice; give it once (usage: {})",
                entry.synopsis
            ),
            Error::NonUtf8Flag { flag, value } => {
                write!(
                    f,
                    "the value of -{flag} ({value:?}) is not UTF-8; retype it"
                )
            }
            Error::Args(e) => write!(f, "{e}; run `liken help` for the usage"),
            Error::Output(e) => write!(f, "writing output: {e}"),
            Error::PluginExec { path, source } => write!(
                f,
                "running the plugin {}: {source}; check that it is an executable for this machine",
                path.display()
            ),
            Error::UnsupportedShell(s) => write!(
                f,
                "there is no completion script for {s:?}; the supported shell is bash"
            ),
            Error::Releases(e) => write!(f, "{e}"),
            Error::Scaffold(e) => write!(f, "new: {e}"),
            Error::Identity(e) => write!(f, "{e}"),
            Error::Kubeconfig(e) => write!(f, "kubeconfig: {e}"),
            Error::Layer(e) => write!(f, "layer: {e}"),
            Error::Media(e) => write!(f, "{e}"),
            Error::Cluster(e) => write!(f, "{e}"),
            Error::Plugins(e) => write!(f, "plugins: {e}"),
            Error::Signing(e) => write!(f, "{e}"),
            Error::SecureBoot(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<lexopt::Error> for Error {
    fn from(e: lexopt::Error) -> Error {
        Error::Args(e)
    }
}

impl From<releases::Error> for Error {
    fn from(e: releases::Error) -> Error {
        Error::Releases(e)
    }
}

impl From<scaffold::ScaffoldError> for Error {
    fn from(e: scaffold::ScaffoldError) -> Error {
        Error::Scaffold(e)
    }
}

impl From<identity::IdentityError> for Error {
    fn from(e: identity::IdentityError) -> Error {
        Error::Identity(e)
    }
}

impl From<identity::kubeconfig::KubeconfigError> for Error {
    fn from(e: identity::kubeconfig::KubeconfigError) -> Error {
        Error::Kubeconfig(e)
    }
}

impl From<layer::LayerError> for Error {
    fn from(e: layer::LayerError) -> Error {
        Error::Layer(e)
    }
}

impl From<media::MediaError> for Error {
    fn from(e: media::MediaError) -> Error {
        Error::Media(e)
    }
}

impl From<cluster::ClusterError> for Error {
    fn from(e: cluster::ClusterError) -> Error {
        Error::Cluster(e)
    }
}

impl From<plugins::PluginsError> for Error {
    fn from(e: plugins::PluginsError) -> Error {
        Error::Plugins(e)
    }
}

impl From<signing::SigningError> for Error {
    fn from(e: signing::SigningError) -> Error {
        Error::Signing(e)
    }
}

impl From<secureboot::SecureBootError> for Error {
    fn from(e: secureboot::SecureBootError) -> Error {
        Error::SecureBoot(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Output(e)
    }
}

/// The name kubectl runs for `kubectl liken <TAB>`; when this binary is
/// invoked under it (a link), it answers as `__complete`.
pub const COMPLETE_SHIM_NAME: &str = "kubectl_complete-liken";

/// The command words for a whole argv: drops the program name, and turns
/// a call through the completion shim name into `__complete`. The
/// `liken` and `kubectl-liken` names behave the same.
pub fn command_words(argv: Vec<OsString>) -> Vec<OsString> {
    let mut it = argv.into_iter();
    let program = it.next().unwrap_or_default();
    let rest: Vec<OsString> = it.collect();
    let base = std::path::Path::new(&program)
        .file_name()
        .unwrap_or_default();
    if base == COMPLETE_SHIM_NAME {
        std::iter::once(OsString::from(usage::COMPLETE.name))
            .chain(rest)
            .collect()
    } else {
        rest
    }
}

/// Runs one invocation; `args` excludes the program name.
pub fn run(args: Vec<OsString>, io: &mut Io) -> Result<(), Error> {
    let mut words = args.into_iter();
    let Some(first) = words.next() else {
        io.err.write_all(usage::text().as_bytes())?;
        return Err(Error::NoCommand);
    };
    let rest: Vec<OsString> = words.collect();
    match dispatch(&first, rest, io) {
        Err(Error::Help(entry)) => {
            io.out.write_all(usage::entry_text(entry).as_bytes())?;
            Ok(())
        }
        other => other,
    }
}

fn dispatch(first: &OsStr, rest: Vec<OsString>, io: &mut Io) -> Result<(), Error> {
    // Commands plug in here: one arm per command, which parses `rest`
    // against the command's usage entry and calls its module. Keep the
    // arms in the help order of `usage::ENTRIES`.
    match first.to_str().unwrap_or("") {
        "new" => scaffold::command(args::parse(&usage::NEW, rest)?, io),
        "mint" => identity::mint::command(args::parse(&usage::MINT, rest)?, io),
        "adopt" => identity::adopt::command(args::parse(&usage::ADOPT, rest)?, io),
        "kubeconfig" => identity::kubeconfig::command(args::parse(&usage::KUBECONFIG, rest)?, io),
        "approve-reboot" => {
            cluster::reboot::approve_command(args::parse(&usage::APPROVE_REBOOT, rest)?, io)
        }
        "request-reboot" => {
            cluster::reboot::request_command(args::parse(&usage::REQUEST_REBOOT, rest)?, io)
        }
        "kubectl" => cluster::passthrough::command(&usage::KUBECTL, "kubectl", rest, io),
        "stern" => cluster::passthrough::command(&usage::STERN, "stern", rest, io),
        "flux" => cluster::passthrough::command(&usage::FLUX, "flux", rest, io),
        "plugins" => plugins::command(rest, io),
        "layer" => layer::command(args::parse(&usage::LAYER, rest)?, io),
        "keygen" => {
            let parsed = args::parse(&usage::KEYGEN, rest)?;
            let [dir] = parsed.paths()?;
            if parsed.switch("secureboot") {
                Ok(secureboot::keygen_command(&dir, io.out)?)
            } else {
                Ok(signing::keygen_command(&dir, io.out)?)
            }
        }
        "trust" => {
            let parsed = args::parse(&usage::TRUST, rest)?;
            let words: Vec<PathBuf> = parsed.positionals().iter().map(PathBuf::from).collect();
            match words.split_first() {
                Some((out, keys)) if !keys.is_empty() => Ok(signing::trust_command(
                    out,
                    keys,
                    parsed.value("sign").map(Path::new),
                    io.out,
                )?),
                _ => Err(parsed.usage()),
            }
        }
        "sign" => {
            let parsed = args::parse(&usage::SIGN, rest)?;
            let [file] = parsed.paths()?;
            let key = parsed.value("key").ok_or_else(|| parsed.usage())?;
            let rollback = parsed
                .value("allow-rollback")
                .map(|version| signing::PermitWords {
                    version,
                    cluster: parsed.value("cluster"),
                    machines: parsed.values("machine"),
                    expires: parsed.value("expires"),
                });
            let days = match parsed.value("channel-days") {
                Some(text) => Some(signing::channel_days(text)?),
                None => None,
            };
            Ok(signing::sign_command(
                &file,
                Path::new(key),
                rollback,
                days,
                io.out,
            )?)
        }
        "fetch" => releases::cli::fetch(&args::parse(&usage::FETCH, rest)?, io),
        "bundle" => releases::cli::bundle(&args::parse(&usage::BUNDLE, rest)?, io),
        "serve" => releases::cli::serve(&args::parse(&usage::SERVE, rest)?, io),
        "index" => releases::cli::index(&args::parse(&usage::INDEX, rest)?, io),
        "stick" => media::stick_command(args::parse(&usage::STICK, rest)?, io),
        "media" => media::media_command(args::parse(&usage::MEDIA, rest)?, io),
        "completion" => {
            let parsed = args::parse(&usage::COMPLETION, rest)?;
            match parsed.positionals() {
                [shell] if shell == "bash" => {
                    io.out.write_all(completion::BASH_SCRIPT.as_bytes())?;
                    Ok(())
                }
                [shell] => Err(Error::UnsupportedShell(
                    shell.to_string_lossy().into_owned(),
                )),
                _ => Err(parsed.usage()),
            }
        }
        // The shell's words go through untouched: they are a command line
        // being typed, not flags for this verb.
        "__complete" => Ok(completion::complete_command(rest, io.out)?),
        "version" => {
            let parsed = args::parse(&usage::VERSION, rest)?;
            parsed.paths::<0>()?;
            writeln!(io.out, "{}", liken_api::BUILD_VERSION)?;
            Ok(())
        }
        "help" | "-h" | "-help" | "--help" => {
            io.out.write_all(usage::text().as_bytes())?;
            Ok(())
        }
        _ => {
            let mut words = vec![first.to_owned()];
            words.extend(rest);
            if let Some(found) = plugin::find(&plugin::Search::from_env(), &words) {
                let source = plugin::exec(&found);
                return Err(Error::PluginExec {
                    path: found.path,
                    source,
                });
            }
            io.err.write_all(usage::text().as_bytes())?;
            Err(Error::UnknownCommand(first.to_string_lossy().into_owned()))
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Runs `args` with `stdin` as input; returns the result, stdout and
    /// stderr.
    pub(crate) fn run_with(args: &[&str], stdin: &str) -> (Result<(), Error>, String, String) {
        let mut input = std::io::Cursor::new(stdin.as_bytes().to_vec());
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let r = run(
            args.iter().map(OsString::from).collect(),
            &mut Io {
                stdin: &mut input,
                out: &mut out,
                err: &mut err,
            },
        );
        (
            r,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    fn run_args(args: &[&str]) -> (Result<(), Error>, String) {
        let (r, out, _) = run_with(args, "");
        (r, out)
    }

    #[test]
    fn version_prints_the_build_version() {
        let (r, out) = run_args(&["version"]);
        r.unwrap();
        assert_eq!(out, format!("{}\n", liken_api::BUILD_VERSION));
    }

    #[test]
    fn errors_say_what_to_do() {
        let (r, _) = run_args(&[]);
        assert_eq!(
            r.unwrap_err().to_string(),
            "a command is required; run `liken help` for the list"
        );
        let (r, _) = run_args(&["frobnicate"]);
        assert_eq!(
            r.unwrap_err().to_string(),
            "unknown command \"frobnicate\", and no plugin kubectl-liken-frobnicate on PATH or \
             in ~/.liken/plugins/bin; run `liken help` for the list"
        );
        let (r, _) = run_args(&["version", "extra"]);
        assert_eq!(r.unwrap_err().to_string(), "usage: liken version");
        let (r, _) = run_args(&["completion", "zsh"]);
        assert!(r.unwrap_err().to_string().contains("bash"));
    }

    #[test]
    fn help_lists_only_built_commands() {
        for spelling in ["help", "--help", "-help", "-h"] {
            let (r, out) = run_args(&[spelling]);
            r.unwrap();
            assert!(out.contains("liken version"));
            assert!(out.contains("liken approve-reboot"));
            assert!(out.contains("liken plugins remove <domain>"));
        }
    }

    #[test]
    fn a_command_with_help_prints_its_own_entry() {
        let (r, out) = run_args(&["version", "-help"]);
        r.unwrap();
        assert_eq!(out, usage::entry_text(&usage::VERSION));
    }

    #[test]
    fn the_shim_name_means_complete() {
        let w = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            command_words(w(&["/usr/local/bin/kubectl_complete-liken", "m"])),
            w(&["__complete", "m"])
        );
        assert_eq!(command_words(w(&["kubectl-liken", "new"])), w(&["new"]));
        assert_eq!(command_words(w(&["liken"])), w(&[]));
    }
}
