//! Command-line flags from one table per program.
//!
//! Each binary declares its flags once, as a [`Program`]: name, value
//! name, default, an environment variable that stands in for it (the
//! DaemonSet passes the node name through the downward API as
//! `NODE_NAME`), and help. The parser, `--help` and the defaults all read
//! that table, so a flag cannot be parsed but undocumented.
//!
//! Both spellings work, `--metrics-address :9200` and
//! `-metrics-address=:9200`, because Kubernetes manifests and Go
//! programs use both; lexopt reads long options, and a single-dash word
//! of two or more letters is rewritten to its double-dash form first.
//! Durations are written like Go's (`500ms`, `10s`, `5m`, `6h`, `1h30m`).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::time::Duration;

/// One flag.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// Its name, without dashes.
    pub name: &'static str,
    /// The name of its value in the help (`ADDR`, `DURATION`), or `None`
    /// for a switch that takes no value.
    pub value: Option<&'static str>,
    /// The value when neither the flag nor its variable is given.
    pub default: Option<&'static str>,
    /// An environment variable read when the flag is absent.
    pub env: Option<&'static str>,
    /// What it does, one line.
    pub help: &'static str,
}

/// A program's flag table.
#[derive(Clone, Copy, Debug)]
pub struct Program {
    /// The binary's name.
    pub name: &'static str,
    /// One paragraph on what it is.
    pub about: &'static str,
    /// Its flags (`help` is implicit).
    pub flags: &'static [Flag],
}

/// What the command line asked for.
#[derive(Debug)]
pub enum Parsed {
    /// `--help` or `-h`: print this and exit 0.
    Help(String),
    /// Run with these values.
    Run(Values),
}

/// The values of a program's flags, after defaults and variables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Values(BTreeMap<&'static str, String>);

/// A command line the table does not allow, or a value that does not
/// parse. The message names the flag and says what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlagError(pub String);

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FlagError {}

impl Values {
    /// The flag's value, if it has one.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// Whether a switch was given.
    pub fn switch(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// The flag's value as a duration.
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, FlagError> {
        self.get(name)
            .map(|v| parse_duration(v).map_err(|e| FlagError(format!("--{name} {v:?}: {e}"))))
            .transpose()
    }
}

/// Parses the arguments after the program name. `env` reads a variable
/// (the process environment, or a table in tests).
pub fn parse(
    program: &Program,
    args: Vec<OsString>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed, FlagError> {
    let mut given: BTreeMap<&'static str, String> = BTreeMap::new();
    let mut parser = lexopt::Parser::from_args(normalise(args));
    while let Some(arg) = parser.next().map_err(|e| FlagError(e.to_string()))? {
        let name = match arg {
            lexopt::Arg::Short('h') => return Ok(Parsed::Help(usage(program))),
            lexopt::Arg::Long("help") => return Ok(Parsed::Help(usage(program))),
            lexopt::Arg::Long(name) => name.to_owned(),
            lexopt::Arg::Short(c) => {
                return Err(FlagError(format!(
                    "unknown flag -{c}; run {} --help",
                    program.name
                )));
            }
            lexopt::Arg::Value(v) => {
                return Err(FlagError(format!(
                    "unexpected argument {:?}: {} takes flags only; run {} --help",
                    v.to_string_lossy(),
                    program.name,
                    program.name
                )));
            }
        };
        let Some(flag) = program.flags.iter().find(|f| f.name == name) else {
            return Err(FlagError(format!(
                "unknown flag --{name}; run {} --help",
                program.name
            )));
        };
        let value = match flag.value {
            Some(_) => parser
                .value()
                .map_err(|e| FlagError(format!("--{name}: {e}")))?
                .into_string()
                .map_err(|v| FlagError(format!("--{name}: {v:?} is not UTF-8")))?,
            None => String::new(),
        };
        given.insert(flag.name, value);
    }
    for flag in program.flags {
        if given.contains_key(flag.name) {
            continue;
        }
        if let Some(v) = flag.env.and_then(env).filter(|v| !v.is_empty()) {
            given.insert(flag.name, v);
        } else if let Some(d) = flag.default {
            given.insert(flag.name, d.to_owned());
        }
    }
    Ok(Parsed::Run(Values(given)))
}

/// Rewrites `-name` and `-name=value` (two or more letters) into their
/// `--` forms, up to a bare `--`.
fn normalise(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut rest = false;
    for arg in args {
        let rewritten = match arg.to_str() {
            _ if rest => None,
            Some("--") => {
                rest = true;
                None
            }
            Some(word) => word.strip_prefix('-').and_then(|body| {
                let name = body.split('=').next().unwrap_or("");
                let long = !body.starts_with('-')
                    && name.len() >= 2
                    && name.starts_with(|c: char| c.is_ascii_alphabetic());
                long.then(|| OsString::from(format!("-{word}")))
            }),
            None => None,
        };
        out.push(rewritten.unwrap_or(arg));
    }
    out
}

/// The `--help` text.
pub fn usage(program: &Program) -> String {
    let mut out = format!(
        "{}\n\nUsage: {} [flags]\n\nFlags:\n",
        program.about, program.name
    );
    let rows: Vec<(String, &Flag)> = program
        .flags
        .iter()
        .map(|f| {
            let left = match f.value {
                Some(v) => format!("--{} {v}", f.name),
                None => format!("--{}", f.name),
            };
            (left, f)
        })
        .collect();
    let width = rows.iter().map(|(l, _)| l.len()).max().unwrap_or(0).max(6);
    for (left, f) in &rows {
        out.push_str(&format!("  {left:width$}  {}", f.help));
        match (f.default, f.env) {
            (Some(d), Some(e)) => out.push_str(&format!(" (default {d:?}; env {e})")),
            (Some(d), None) => out.push_str(&format!(" (default {d:?})")),
            (None, Some(e)) => out.push_str(&format!(" (env {e})")),
            (None, None) => {}
        }
        out.push('\n');
    }
    out.push_str(&format!("  {:width$}  this text\n", "--help"));
    out
}

/// Parses a Go-style duration: one or more `<number><unit>` with units
/// `ms`, `s`, `m`, `h` (`500ms`, `10s`, `1h30m`). Fractions are allowed
/// (`1.5s`); zero is `0` or `0s`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty; write it like 500ms, 10s, 5m or 6h".into());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{text:?} has a number without a unit (ms, s, m, h)"))?;
        let (number, after) = rest.split_at(digits);
        let n: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: {number:?} is not a number"))?;
        let (scale, after) = if let Some(a) = after.strip_prefix("ms") {
            (0.001, a)
        } else if let Some(a) = after.strip_prefix('s') {
            (1.0, a)
        } else if let Some(a) = after.strip_prefix('m') {
            (60.0, a)
        } else if let Some(a) = after.strip_prefix('h') {
            (3600.0, a)
        } else {
            return Err(format!("{text:?}: units are ms, s, m and h"));
        };
        total += n * scale;
        rest = after;
    }
    if !total.is_finite() || total > 10.0 * 365.0 * 86_400.0 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROGRAM: Program = Program {
        name: "liken-test-operator",
        about: "A test program.",
        flags: &[
            Flag {
                name: "metrics-address",
                value: Some("ADDR"),
                default: Some(":9200"),
                env: None,
                help: "where /metrics is served",
            },
            Flag {
                name: "node",
                value: Some("NAME"),
                default: None,
                env: Some("NODE_NAME"),
                help: "this machine's node",
            },
            Flag {
                name: "sweep-interval",
                value: Some("DURATION"),
                default: Some("10s"),
                env: None,
                help: "how often to sweep",
            },
            Flag {
                name: "once",
                value: None,
                default: None,
                env: None,
                help: "one pass, then exit",
            },
        ],
    };

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Values, FlagError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match parse(&PROGRAM, args.iter().map(OsString::from).collect(), &lookup)? {
            Parsed::Run(v) => Ok(v),
            Parsed::Help(h) => panic!("unexpected help: {h}"),
        }
    }

    #[test]
    fn flags_defaults_and_variables() {
        let v = run(&[], &[]).unwrap();
        assert_eq!(v.get("metrics-address"), Some(":9200"));
        assert_eq!(v.get("node"), None);
        assert!(!v.switch("once"));
        assert_eq!(
            v.duration("sweep-interval").unwrap(),
            Some(Duration::from_secs(10))
        );

        let v = run(
            &[
                "-metrics-address=127.0.0.1:0",
                "--sweep-interval",
                "500ms",
                "-once",
            ],
            &[("NODE_NAME", "node-1")],
        )
        .unwrap();
        assert_eq!(v.get("metrics-address"), Some("127.0.0.1:0"));
        assert_eq!(v.get("node"), Some("node-1"));
        assert!(v.switch("once"));
        assert_eq!(
            v.duration("sweep-interval").unwrap(),
            Some(Duration::from_millis(500))
        );

        // The flag beats the variable; an empty variable is absent.
        let v = run(&["--node", "node-2"], &[("NODE_NAME", "node-1")]).unwrap();
        assert_eq!(v.get("node"), Some("node-2"));
        let v = run(&[], &[("NODE_NAME", "")]).unwrap();
        assert_eq!(v.get("node"), None);
    }

    #[test]
    fn what_the_table_does_not_allow_is_refused_by_name() {
        for (args, want) in [
            (&["--nope"][..], "unknown flag --nope"),
            (&["-x"][..], "unknown flag -x"),
            (&["stray"][..], "unexpected argument \"stray\""),
            (&["--node"][..], "--node"),
        ] {
            let e = run(args, &[]).unwrap_err();
            assert!(e.0.contains(want), "{args:?}: {e}");
        }
        let v = run(&["--sweep-interval", "10"], &[]).unwrap();
        let e = v.duration("sweep-interval").unwrap_err();
        assert!(e.0.contains("--sweep-interval \"10\""), "{e}");
    }

    #[test]
    fn help_lists_every_flag_with_its_default_and_variable() {
        let Parsed::Help(text) = parse(&PROGRAM, vec!["--help".into()], &|_| None).unwrap() else {
            panic!("no help");
        };
        for want in [
            "Usage: liken-test-operator [flags]",
            "--metrics-address ADDR",
            "(default \":9200\")",
            "--node NAME",
            "(env NODE_NAME)",
            "--once",
            "--help",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
    }

    #[test]
    fn durations_read_like_go() {
        for (text, want) in [
            ("0", 0.0),
            ("0s", 0.0),
            ("500ms", 0.5),
            ("10s", 10.0),
            ("1.5s", 1.5),
            ("5m", 300.0),
            ("6h", 21_600.0),
            ("1h30m", 5_400.0),
        ] {
            assert_eq!(
                parse_duration(text).unwrap(),
                Duration::from_secs_f64(want),
                "{text}"
            );
        }
        for bad in ["", "10", "s", "10x", "1..5s", "-1s", "99999999h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
