//! The usage text. It lists only the commands this build has; each issue
//! that builds a command adds its entry here.

/// What `liken help` prints.
pub const USAGE: &str = "\
liken: the toolkit for setting up and running a liken cluster

usage:

  liken version
      Print this toolkit's version.

  liken help
      Print this text.
";
