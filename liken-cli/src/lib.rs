//! The `liken` command: a thin dispatcher over the domains that own each
//! capability. The command list is a table of names; each command's logic
//! lives in a module of its own with its own tests.
//!
//! Commands that are not built yet are absent from the usage text rather
//! than present as stubs; the README says which ones exist.

use std::ffi::OsString;
use std::fmt;
use std::io::Write;

pub mod usage;

/// Why a command failed; its Display is what follows `liken: `.
#[derive(Debug)]
pub enum Error {
    /// No command was given.
    NoCommand,
    /// The first argument names no command.
    UnknownCommand(String),
    /// The command's arguments are wrong; carries the usage line.
    Usage(&'static str),
    /// An argument could not be parsed.
    Args(lexopt::Error),
    /// Writing the output failed (a closed pipe, a full disk).
    Output(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoCommand => write!(f, "a command is required; run `liken help` for the list"),
            Error::UnknownCommand(c) => {
                write!(f, "unknown command {c:?}; run `liken help` for the list")
            }
            Error::Usage(line) => write!(f, "usage: {line}"),
            Error::Args(e) => write!(f, "{e}"),
            Error::Output(e) => write!(f, "writing output: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<lexopt::Error> for Error {
    fn from(e: lexopt::Error) -> Error {
        Error::Args(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Output(e)
    }
}

/// Runs one invocation; `args` excludes the program name.
pub fn run(args: Vec<OsString>, out: &mut dyn Write) -> Result<(), Error> {
    let mut parser = lexopt::Parser::from_args(args);
    let Some(first) = parser.next()? else {
        eprint!("{}", usage::USAGE);
        return Err(Error::NoCommand);
    };
    let command = match first {
        lexopt::Arg::Value(v) => v
            .into_string()
            .map_err(|v| Error::UnknownCommand(v.to_string_lossy().into_owned()))?,
        lexopt::Arg::Long("help") | lexopt::Arg::Short('h') => "help".to_owned(),
        other => return Err(other.unexpected().into()),
    };
    match command.as_str() {
        "version" => {
            no_more_args(&mut parser, "liken version")?;
            writeln!(out, "{}", liken_api::BUILD_VERSION)?;
            Ok(())
        }
        "help" => {
            out.write_all(usage::USAGE.as_bytes())?;
            Ok(())
        }
        other => {
            eprint!("{}", usage::USAGE);
            Err(Error::UnknownCommand(other.to_owned()))
        }
    }
}

fn no_more_args(parser: &mut lexopt::Parser, line: &'static str) -> Result<(), Error> {
    match parser.next()? {
        None => Ok(()),
        Some(_) => Err(Error::Usage(line)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> (Result<(), Error>, String) {
        let mut out = Vec::new();
        let r = run(args.iter().map(OsString::from).collect(), &mut out);
        (r, String::from_utf8(out).unwrap())
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
            "unknown command \"frobnicate\"; run `liken help` for the list"
        );
        let (r, _) = run_args(&["version", "extra"]);
        assert_eq!(r.unwrap_err().to_string(), "usage: liken version");
    }

    #[test]
    fn help_lists_only_built_commands() {
        let (r, out) = run_args(&["--help"]);
        r.unwrap();
        assert!(out.contains("liken version"));
        assert!(
            !out.contains("liken stick"),
            "unbuilt commands stay out of the usage text"
        );
    }
}
