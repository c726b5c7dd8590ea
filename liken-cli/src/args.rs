//! The words after a command's name: both flag spellings, and one small
//! declarative parser every command shares.
//!
//! The usage text spells flags with one dash (`-server URL`), as the Go
//! toolkit before this one did, and scripts written for either spelling
//! must keep working. lexopt reads `-server` as the short flags
//! `s e r v e r`, so [`normalise`] first rewrites a single-dash word whose
//! name has two or more characters into its `--name` form. It leaves alone
//! what must stay as it is: `-` (standard input by convention), a one-letter
//! short flag such as `-h`, negative numbers, and everything after `--`.
//!
//! Each command describes its flags in its [`usage::Entry`] (the same table
//! the usage text and shell completion read), and [`parse`] turns the words
//! into a [`Parsed`] the command reads by name. Adding a flag is one line
//! in the entry.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::Error;
use crate::usage::{Entry, Opt};

/// Rewrites `-name` and `-name=value` into `--name` and `--name=value`,
/// up to a bare `--`.
pub fn normalise(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut rest_are_values = false;
    for arg in args {
        if rest_are_values {
            out.push(arg);
            continue;
        }
        if arg == "--" {
            rest_are_values = true;
            out.push(arg);
            continue;
        }
        match arg.to_str() {
            Some(word) if is_single_dash_long(word) => out.push(format!("-{word}").into()),
            _ => out.push(arg),
        }
    }
    out
}

/// Whether `word` is `-name` or `-name=value` with a name of at least two
/// characters that starts with a letter. Digits first (`-1`, `-5s`) mean a
/// negative value, not a flag.
fn is_single_dash_long(word: &str) -> bool {
    let Some(body) = word.strip_prefix('-') else {
        return false;
    };
    if body.starts_with('-') {
        return false;
    }
    let name = body.split('=').next().unwrap_or("");
    name.len() >= 2
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// One command's words, read against its entry.
#[derive(Debug)]
pub struct Parsed {
    entry: &'static Entry,
    values: Vec<(&'static str, String)>,
    switches: Vec<&'static str>,
    positionals: Vec<OsString>,
}

/// Reads `args` (the words after the command name) against `entry`'s
/// flags. `-h`, `-help` and `--help` ask for the entry's own help.
pub fn parse(entry: &'static Entry, args: Vec<OsString>) -> Result<Parsed, Error> {
    use lexopt::Arg;
    let mut parser = lexopt::Parser::from_args(normalise(args));
    let mut parsed = Parsed {
        entry,
        values: Vec::new(),
        switches: Vec::new(),
        positionals: Vec::new(),
    };
    while let Some(arg) = parser.next()? {
        match arg {
            Arg::Value(v) => parsed.positionals.push(v),
            Arg::Short('h') | Arg::Long("help") => return Err(Error::Help(entry)),
            Arg::Long(name) => {
                let Some(opt) = entry.options.iter().find(|o| o.name == name) else {
                    return Err(Error::UnknownFlag {
                        flag: format!("-{name}"),
                        entry,
                    });
                };
                record(&mut parsed, opt, &mut parser)?;
            }
            Arg::Short(c) => {
                return Err(Error::UnknownFlag {
                    flag: format!("-{c}"),
                    entry,
                });
            }
        }
    }
    Ok(parsed)
}

fn record(
    parsed: &mut Parsed,
    opt: &'static Opt,
    parser: &mut lexopt::Parser,
) -> Result<(), Error> {
    let seen =
        parsed.values.iter().any(|(n, _)| *n == opt.name) || parsed.switches.contains(&opt.name);
    if seen && !opt.repeatable {
        return Err(Error::RepeatedFlag {
            flag: opt.name,
            entry: parsed.entry,
        });
    }
    if opt.value.is_some() {
        let value = parser
            .value()?
            .into_string()
            .map_err(|v| Error::NonUtf8Flag {
                flag: opt.name,
                value: v.to_string_lossy().into_owned(),
            })?;
        parsed.values.push((opt.name, value));
    } else {
        parsed.switches.push(opt.name);
    }
    Ok(())
}

impl Parsed {
    /// The value of a flag given at most once.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of a repeatable flag, in the order given.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.values
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// Whether a flag without a value was given.
    pub fn switch(&self, name: &str) -> bool {
        self.switches.contains(&name)
    }

    /// The positional words, in order.
    pub fn positionals(&self) -> &[OsString] {
        &self.positionals
    }

    /// Exactly `N` positional words as paths, or the entry's usage error.
    pub fn paths<const N: usize>(&self) -> Result<[PathBuf; N], Error> {
        if self.positionals.len() != N {
            return Err(self.usage());
        }
        Ok(std::array::from_fn(|i| PathBuf::from(&self.positionals[i])))
    }

    /// The error that prints this command's usage line.
    pub fn usage(&self) -> Error {
        Error::Usage(self.entry)
    }
}

/// Splits a passthrough's words after its first positional: the words up
/// to and including it are liken's (flags and the deployment directory),
/// the rest go to another program untouched, flags and `--` included. A
/// flag that reads a value takes the next word with it, so
/// `-server URL dir get pods -n x` splits after `dir`.
pub fn split_at_first_positional(
    entry: &Entry,
    words: Vec<OsString>,
) -> (Vec<OsString>, Vec<OsString>) {
    let mut ours = Vec::new();
    let mut rest = words.into_iter();
    while let Some(word) = rest.next() {
        let text = word.to_str().unwrap_or("");
        let flag = text.strip_prefix("--").or_else(|| text.strip_prefix('-'));
        match flag {
            Some(name) if !text.is_empty() && text != "-" && text != "--" => {
                let takes_value = !name.contains('=')
                    && entry
                        .options
                        .iter()
                        .any(|o| o.name == name && o.value.is_some());
                ours.push(word);
                if takes_value && let Some(value) = rest.next() {
                    ours.push(value);
                }
            }
            _ => {
                ours.push(word);
                break;
            }
        }
    }
    (ours, rest.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(w: &[&str]) -> Vec<OsString> {
        w.iter().map(OsString::from).collect()
    }

    #[test]
    fn single_dash_long_flags_become_double_dash() {
        assert_eq!(
            normalise(words(&["-server", "https://x", "-name=home", "dir"])),
            words(&["--server", "https://x", "--name=home", "dir"])
        );
    }

    #[test]
    fn what_is_not_a_long_flag_is_left_alone() {
        let kept = ["-", "-h", "-1", "-5s", "--server", "dir", "-x", "-é"];
        assert_eq!(normalise(words(&kept)), words(&kept));
        assert_eq!(
            normalise(words(&["--", "-server", "-name"])),
            words(&["--", "-server", "-name"])
        );
    }

    static ENTRY: Entry = Entry {
        name: "demo",
        synopsis: "liken demo [-server URL] [-machine NAME=ROLE ...] [-yes] <dir>",
        about: "",
        options: &[
            Opt::value("server", "URL"),
            Opt::repeated("machine", "NAME=ROLE"),
            Opt::switch("yes"),
        ],
        hidden: false,
    };

    #[test]
    fn both_spellings_parse_the_same() {
        for spelling in [
            &[
                "-server",
                "u",
                "-machine",
                "a=leader",
                "--machine=b=follower",
                "-yes",
                "d",
            ][..],
            &[
                "--server=u",
                "d",
                "--machine",
                "a=leader",
                "-machine=b=follower",
                "--yes",
            ][..],
        ] {
            let p = parse(&ENTRY, words(spelling)).unwrap();
            assert_eq!(p.value("server"), Some("u"));
            assert_eq!(p.values("machine"), ["a=leader", "b=follower"]);
            assert!(p.switch("yes"));
            let [dir] = p.paths::<1>().unwrap();
            assert_eq!(dir, PathBuf::from("d"));
        }
    }

    #[test]
    fn bad_words_say_what_to_do() {
        let e = parse(&ENTRY, words(&["-bogus", "d"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown flag -bogus; usage: liken demo [-server URL] [-machine NAME=ROLE ...] [-yes] <dir>"
        );
        let e = parse(&ENTRY, words(&["-server", "a", "-server", "b"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("-server was given twice; give it once"),
            "{e}"
        );
        let e = parse(&ENTRY, words(&["-server"])).unwrap_err();
        assert!(e.to_string().contains("--server"), "{e}");
        let p = parse(&ENTRY, words(&["a", "b"])).unwrap();
        assert!(
            p.paths::<1>()
                .unwrap_err()
                .to_string()
                .starts_with("usage: liken demo")
        );
        assert!(matches!(
            parse(&ENTRY, words(&["-help"])),
            Err(Error::Help(_))
        ));
        assert!(matches!(parse(&ENTRY, words(&["-h"])), Err(Error::Help(_))));
    }

    #[test]
    fn a_dash_dash_makes_dash_words_positional() {
        let p = parse(&ENTRY, words(&["--", "-server"])).unwrap();
        assert_eq!(p.positionals(), words(&["-server"]).as_slice());
    }
    #[test]
    fn a_passthrough_splits_after_its_first_positional() {
        let (ours, theirs) = split_at_first_positional(
            &ENTRY,
            words(&[
                "-server", "u", "dir", "get", "pods", "-n", "x", "--", "-server",
            ]),
        );
        assert_eq!(ours, words(&["-server", "u", "dir"]));
        assert_eq!(theirs, words(&["get", "pods", "-n", "x", "--", "-server"]));
        let (ours, theirs) = split_at_first_positional(&ENTRY, words(&["--server=u", "-yes", "d"]));
        assert_eq!(ours, words(&["--server=u", "-yes", "d"]));
        assert!(theirs.is_empty());
        let (ours, theirs) = split_at_first_positional(&ENTRY, words(&["-h"]));
        assert_eq!((ours, theirs), (words(&["-h"]), vec![]));
    }
}
