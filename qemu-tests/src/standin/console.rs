//! The stand-in's lines: each printed on stdout, where init copies it to
//! the console (and its bounded k3s log), prefixed with the stand-in's
//! name so no line is taken for real k3s's.
//!
//! A module of its own, below the node's modules that print, so they do
//! not reach up into the binary's root for it.

/// Prints one line.
pub fn say(text: &str) {
    println!("liken-standin-k3s: {text}");
}
