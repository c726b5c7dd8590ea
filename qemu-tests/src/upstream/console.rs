//! The launcher's lines: every one says it is not k3s, so a console or a
//! log never passes it off as the real thing. The components it runs
//! print through [`relay`], which puts the same words before each of
//! their lines.
//!
//! A module of its own, below every module that prints, so none reaches
//! up into the binary's root for it.

use std::io::{BufRead, BufReader, Read};

/// What starts every line.
pub const PREFIX: &str = "liken-upstream-k3s (not k3s):";

/// Prints one line on stdout, where init copies it to the console.
pub fn say(text: &str) {
    println!("{PREFIX} {text}");
}

/// Copies `from` to stdout line by line, each line as
/// `<PREFIX> <name>: <line>`, until it ends (a thread per stream).
pub fn relay(name: &'static str, from: impl Read + Send + 'static) {
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            match line {
                Ok(l) => say(&format!("{name}: {l}")),
                Err(_) => break,
            }
        }
    });
}
