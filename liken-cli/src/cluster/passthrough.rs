//! `liken kubectl|stern|flux [-server URL] <deployment-dir> [args...]`:
//! run a tool the person already uses against the deployment's cluster.
//!
//! liken does not reimplement kubectl, and does not ship these tools
//! either: the command resolves the credential ([`super::credential`]),
//! sets `KUBECONFIG` to it (replacing any value the variable had, never
//! appending: with a list, which file wins is kubectl's merge rules, and a
//! stale context elsewhere could point the tool at another cluster), and
//! replaces this process with the tool from PATH (exec), so the tool owns
//! the terminal and the signals, and its exit status is the command's.
//!
//! liken's own flags come before the deployment directory; every word
//! after it goes to the tool untouched, flags included
//! ([`crate::args::split_at_first_positional`]). As with plugins, only
//! absolute PATH entries are searched.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use super::{ClusterError, credential};
use crate::usage::Entry;
use crate::{Io, args, plugin};

/// How to install a tool that is not on PATH.
pub fn install_hint(tool: &str) -> &'static str {
    match tool {
        "kubectl" => {
            "on Debian: apt-get install kubernetes-client; elsewhere see \
             https://kubernetes.io/docs/tasks/tools/"
        }
        "stern" => "see https://github.com/stern/stern#installation",
        "flux" => "see https://fluxcd.io/flux/installation/",
        _ => "see the tool's documentation",
    }
}

/// The first executable named `tool` in PATH's absolute directories.
pub fn find_tool(search: &plugin::Search, tool: &str) -> Option<PathBuf> {
    search
        .path
        .iter()
        .map(|dir| dir.join(tool))
        .find(|p| plugin::is_executable_file(p))
}

/// Runs one passthrough: `tool` is the entry's name (kubectl, stern or
/// flux). Returns only on failure; on success this process has become the
/// tool.
pub fn command(
    entry: &'static Entry,
    tool: &'static str,
    words: Vec<std::ffi::OsString>,
    io: &mut Io,
) -> Result<(), crate::Error> {
    let (ours, theirs) = args::split_at_first_positional(entry, words);
    let parsed = args::parse(entry, ours)?;
    let [dir] = parsed.paths()?;
    let Some(path) = find_tool(&plugin::Search::from_env(), tool) else {
        return Err(ClusterError::ToolMissing { tool }.into());
    };
    let kubeconfig = credential(&dir, parsed.value("server"))?;
    io.out.flush()?;
    let source = std::process::Command::new(&path)
        .arg0(tool)
        .args(theirs)
        .env("KUBECONFIG", &kubeconfig)
        .exec();
    Err(ClusterError::ToolExec { path, source }.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_tool_is_found_in_absolute_path_entries_only() {
        let tmp = crate::testdir::TestDir::new("passthrough-find");
        let bin = tmp.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let kubectl = bin.join("kubectl");
        std::fs::write(&kubectl, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([std::path::Path::new("relative"), &bin]).unwrap();
        let search = plugin::Search::new(Some(&path), None);
        assert_eq!(find_tool(&search, "kubectl"), Some(kubectl));
        assert_eq!(find_tool(&search, "stern"), None);
        assert!(install_hint("kubectl").contains("kubernetes-client"));
    }
}
