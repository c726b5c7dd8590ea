//! Shell completion: the hidden `__complete` verb and the bash script that
//! calls it.
//!
//! The verb speaks cobra's completion protocol, because that is what
//! kubectl speaks to its plugins: for `kubectl liken <TAB>` kubectl runs an
//! executable named `kubectl_complete-liken` from PATH with the words
//! after `liken` and the word under the cursor, and reads back one
//! candidate per line and a last line `:N`, where N is a bitmask of
//! ShellCompDirective bits. This binary answers under that name too (a
//! link to it), and `liken completion bash` prints a script that gives a
//! direct `liken` or `kubectl-liken` call the same answers.
//!
//! Commands, flags and plugin domains are answered from static tables (the
//! command table in [`crate::usage`] and the known plugin domains). The
//! machine argument of `approve-reboot` and `request-reboot` is answered
//! with the Machines of the deployment's cluster, asked with a
//! [`CLUSTER_TIMEOUT`] of 1.5 s so a dead or distant cluster never stalls
//! the shell; when it does not answer in time, the names come from the
//! deployment's machines/ directory. `plugins remove` offers the installed
//! CLIs. What to look up is decided by a pure function
//! ([`decide_completion`]); only [`complete_command`] looks. A request the
//! verb cannot make sense of gets no candidates, never an error message,
//! because stray output would land on the command line being edited.

use std::ffi::OsString;
use std::io::Write;

use crate::usage::{self, Entry};

/// cobra's ShellCompDirectiveDefault: no candidates of ours, so the shell
/// falls back to file names.
pub const DIRECTIVE_DEFAULT: u32 = 0;
/// cobra's ShellCompDirectiveNoFileComp: the candidates are the whole
/// answer, do not add file names.
pub const DIRECTIVE_NO_FILE_COMP: u32 = 4;

/// The plugin domains whose CLIs the walk reaches. Completion offers them
/// whether or not the plugin is installed, so the answer never depends on
/// the state of one workstation.
pub const PLUGIN_DOMAINS: &[&str] = &["audio", "bluetooth", "display", "library", "media"];

/// Commands that serve the shell or print text, never offered as a first
/// word.
const NOT_OFFERED: &[&str] = &["completion", "help"];

/// What a completion request needs: a fixed answer, or names only the
/// deployment's cluster (or this workstation) knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// These candidates, with this directive.
    Words(Vec<String>, u32),
    /// Machine names starting with `prefix`, from the cluster of the
    /// deployment at `dir` (through `server` when the line gives
    /// `-server`), else from the deployment's machines/ directory.
    Machines {
        /// The deployment directory typed on the line.
        dir: String,
        /// The `-server` value typed on the line.
        server: Option<String>,
        /// The word under the cursor.
        prefix: String,
    },
    /// Installed plugin domains starting with `prefix`.
    InstalledPlugins {
        /// The word under the cursor.
        prefix: String,
    },
}

/// What one request asks for. `words` are the words after the program
/// name; the last is the one under the cursor (possibly empty).
pub fn decide_completion(words: &[String]) -> Completion {
    let no_files = |c: Vec<String>| Completion::Words(c, DIRECTIVE_NO_FILE_COMP);
    let Some((current, before)) = words.split_last() else {
        return no_files(first_words(""));
    };
    let Some((command, after)) = before.split_first() else {
        if current.starts_with('-') {
            return no_files(Vec::new());
        }
        return no_files(first_words(current));
    };
    let Some(entry) = usage::find(command).filter(|e| !e.hidden) else {
        // A plugin domain: the plugin knows its own words.
        return Completion::Words(Vec::new(), DIRECTIVE_DEFAULT);
    };
    let walked = walk(entry, after);
    if walked.pending_value {
        return no_files(Vec::new());
    }
    let n = walked.positionals.len();
    if walked.after_dash_dash || (n >= 1 && is_passthrough(entry)) {
        // The tool's own words: its completion, not ours.
        return Completion::Words(Vec::new(), DIRECTIVE_DEFAULT);
    }
    if current.starts_with('-') {
        let flags = entry
            .options
            .iter()
            .map(|o| format!("-{}", o.name))
            .filter(|f| {
                f.starts_with(current.as_str()) || format!("-{f}").starts_with(current.as_str())
            })
            .collect();
        return no_files(flags);
    }
    let name = entry.name;
    if name == usage::COMPLETION.name {
        let shells = if n == 0 { vec!["bash"] } else { vec![] };
        return no_files(filter(&shells, current));
    }
    if name == usage::VERSION.name || name == usage::HELP.name {
        return no_files(Vec::new());
    }
    if name == usage::PLUGINS.name {
        return match walked.positionals.first().map(String::as_str) {
            None => no_files(filter(&["list", "remove", "sync"], current)),
            Some("remove") if n == 1 => Completion::InstalledPlugins {
                prefix: current.clone(),
            },
            Some("sync" | "list") if n == 1 => Completion::Words(Vec::new(), DIRECTIVE_DEFAULT),
            _ => no_files(Vec::new()),
        };
    }
    if name == usage::APPROVE_REBOOT.name || name == usage::REQUEST_REBOOT.name {
        return match n {
            0 => Completion::Words(Vec::new(), DIRECTIVE_DEFAULT),
            1 if !walked.switches.iter().any(|s| s == "all") => Completion::Machines {
                dir: walked.positionals[0].clone(),
                server: walked.server,
                prefix: current.clone(),
            },
            _ => no_files(Vec::new()),
        };
    }
    // Every other command's positionals are paths: let the shell offer
    // file names.
    Completion::Words(Vec::new(), DIRECTIVE_DEFAULT)
}

fn is_passthrough(entry: &Entry) -> bool {
    [&usage::KUBECTL, &usage::STERN, &usage::FLUX]
        .iter()
        .any(|e| e.name == entry.name)
}

fn first_words(prefix: &str) -> Vec<String> {
    let mut all: Vec<&str> = usage::ENTRIES
        .iter()
        .filter(|e| !e.hidden && !NOT_OFFERED.contains(&e.name))
        .map(|e| e.name)
        .chain(PLUGIN_DOMAINS.iter().copied())
        .collect();
    all.sort_unstable();
    all.dedup();
    filter(&all, prefix)
}

fn filter(items: &[&str], prefix: &str) -> Vec<String> {
    items
        .iter()
        .filter(|i| i.starts_with(prefix))
        .map(|i| (*i).to_owned())
        .collect()
}

#[derive(Default)]
struct Walked {
    positionals: Vec<String>,
    switches: Vec<String>,
    server: Option<String>,
    pending_value: bool,
    after_dash_dash: bool,
}

/// Reads the typed words after the command: the positionals, the
/// switches, the `-server` value, and whether the last word is a flag
/// still waiting for its value.
fn walk(entry: &Entry, words: &[String]) -> Walked {
    let mut walked = Walked::default();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if !walked.after_dash_dash && w == "--" {
            walked.after_dash_dash = true;
        } else if !walked.after_dash_dash && w.len() > 1 && w.starts_with('-') {
            let body = w.trim_start_matches('-');
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            let takes_value = entry
                .options
                .iter()
                .any(|o| o.name == name && o.value.is_some());
            if takes_value && inline.is_none() {
                if i + 1 == words.len() {
                    walked.pending_value = true;
                    return walked;
                }
                i += 1;
                if name == "server" {
                    walked.server = Some(words[i].clone());
                }
            } else if takes_value {
                if name == "server" {
                    walked.server = inline;
                }
            } else {
                walked.switches.push(name.to_owned());
            }
        } else {
            walked.positionals.push(w.clone());
        }
        i += 1;
    }
    walked
}

/// How long completion waits for the cluster before it answers from the
/// deployment's files: short, because a person is waiting on the key.
pub const CLUSTER_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1500);

/// The names `Completion::Machines` offers: the cluster's Machines when it
/// answers within [`CLUSTER_TIMEOUT`], else the deployment's
/// machines/*.yaml file names.
pub fn machine_names(dir: &std::path::Path, server: Option<&str>) -> Vec<String> {
    let from_cluster = crate::cluster::machine_names(dir, server, CLUSTER_TIMEOUT);
    let mut names = from_cluster.unwrap_or_else(|| {
        std::fs::read_dir(dir.join(crate::deployment::MACHINES_DIR))
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()
                            .and_then(|n| n.strip_suffix(".yaml"))
                            .filter(|n| !n.is_empty() && !n.starts_with('.'))
                            .map(str::to_owned)
                    })
                    .collect()
            })
            .unwrap_or_default()
    });
    names.sort();
    names
}

/// Runs the `__complete` verb: writes the protocol to `out`.
pub fn complete_command(words: Vec<OsString>, out: &mut dyn Write) -> std::io::Result<()> {
    let words: Vec<String> = words
        .into_iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let keep = |names: Vec<String>, prefix: &str| -> Vec<String> {
        names
            .into_iter()
            .filter(|n| n.starts_with(prefix))
            .collect()
    };
    let (candidates, directive) = match decide_completion(&words) {
        Completion::Words(c, d) => (c, d),
        Completion::Machines {
            dir,
            server,
            prefix,
        } => (
            keep(
                machine_names(std::path::Path::new(&dir), server.as_deref()),
                &prefix,
            ),
            DIRECTIVE_NO_FILE_COMP,
        ),
        Completion::InstalledPlugins { prefix } => {
            let installed = crate::plugin::Search::from_env()
                .bin_dir
                .and_then(|b| crate::plugins::installed(&b).ok())
                .unwrap_or_default();
            (keep(installed, &prefix), DIRECTIVE_NO_FILE_COMP)
        }
    };
    for c in candidates {
        writeln!(out, "{c}")?;
    }
    writeln!(out, ":{directive}")
}

/// The bash script `liken completion bash` prints.
pub const BASH_SCRIPT: &str = r#"# bash completion for liken and kubectl-liken.
# Load it with: source <(liken completion bash)
# For `kubectl liken <TAB>`, kubectl asks an executable named
# kubectl_complete-liken on PATH; make it a link to this binary:
#   ln -s "$(command -v liken)" ~/.local/bin/kubectl_complete-liken
_liken_complete()
{
    local cur out directive line
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    # Ask the binary itself: the words typed so far, then the one under
    # the cursor. Its answer is one candidate a line, then ":N".
    out="$("${COMP_WORDS[0]}" __complete "${COMP_WORDS[@]:1:COMP_CWORD-1}" "$cur" 2>/dev/null)" || return
    directive="${out##*:}"
    [[ "$directive" =~ ^[0-9]+$ ]] || directive=0
    while IFS= read -r line; do
        [[ -z "$line" || "$line" == :* ]] && continue
        COMPREPLY+=("${line%%$'\t'*}")
    done <<< "$out"
    # 4 (NoFileComp): our candidates are the whole answer.
    if (( (directive & 4) == 0 && ${#COMPREPLY[@]} == 0 )); then
        compopt -o default 2>/dev/null
    fi
    # 2 (NoSpace): keep the cursor against the word.
    (( (directive & 2) != 0 )) && compopt -o nospace 2>/dev/null
    return 0
}
complete -F _liken_complete liken kubectl-liken
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(words: &[&str]) -> Completion {
        decide_completion(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
    }

    fn ask(words: &[&str]) -> (Vec<String>, u32) {
        match decide(words) {
            Completion::Words(c, d) => (c, d),
            other => panic!("{words:?} asks for a lookup: {other:?}"),
        }
    }

    #[test]
    fn the_first_word_is_a_command_or_a_plugin_domain() {
        let (c, d) = ask(&[""]);
        assert_eq!(d, DIRECTIVE_NO_FILE_COMP);
        for want in [
            "new",
            "mint",
            "adopt",
            "kubeconfig",
            "layer",
            "version",
            "audio",
        ] {
            assert!(c.contains(&want.to_owned()), "{want} in {c:?}");
        }
        for want in ["approve-reboot", "request-reboot", "kubectl", "plugins"] {
            assert!(c.contains(&want.to_owned()), "{want} in {c:?}");
        }
        for never in ["__complete", "completion", "help"] {
            assert!(!c.contains(&never.to_owned()), "{never} in {c:?}");
        }
        let mut sorted = c.clone();
        sorted.sort();
        assert_eq!(c, sorted);
        assert_eq!(ask(&["m"]).0, ["media", "mint"]);
        assert_eq!(ask(&[]).0, ask(&[""]).0);
    }

    #[test]
    fn flags_are_the_commands_own() {
        assert_eq!(
            ask(&["kubeconfig", "-"]),
            (vec!["-server".to_owned(), "-lifetime".to_owned()], 4)
        );
        assert_eq!(ask(&["kubeconfig", "--s"]), (vec!["-server".to_owned()], 4));
        assert_eq!(ask(&["new", "-m"]).0, ["-machine"]);
        assert_eq!(ask(&["mint", "-"]).0, Vec::<String>::new());
    }

    #[test]
    fn a_flag_waiting_for_its_value_gets_no_file_names() {
        assert_eq!(ask(&["kubeconfig", "-server", ""]), (vec![], 4));
        assert_eq!(ask(&["kubeconfig", "--server", ""]), (vec![], 4));
        // Once the value is typed, the directory is a path again.
        assert_eq!(
            ask(&["kubeconfig", "-server", "https://x", ""]),
            (vec![], 0)
        );
        assert_eq!(ask(&["kubeconfig", "-server=https://x", ""]), (vec![], 0));
    }

    #[test]
    fn paths_complete_as_files_and_completion_offers_bash() {
        assert_eq!(ask(&["layer", "dir", ""]), (vec![], 0));
        assert_eq!(ask(&["completion", ""]), (vec!["bash".to_owned()], 4));
        assert_eq!(ask(&["completion", "bash", ""]), (vec![], 4));
        assert_eq!(ask(&["audio", ""]), (vec![], 0));
        assert_eq!(ask(&["version", ""]), (vec![], 4));
    }

    #[test]
    fn the_protocol_ends_with_the_directive_line() {
        let mut out = Vec::new();
        complete_command(vec!["ad".into()], &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "adopt\n:4\n");
    }

    #[test]
    fn the_machine_argument_is_looked_up_with_the_typed_server() {
        assert_eq!(ask(&["approve-reboot", ""]), (vec![], 0));
        assert_eq!(
            decide(&[
                "approve-reboot",
                "-server",
                "https://127.0.0.1:1",
                "home",
                "no"
            ]),
            Completion::Machines {
                dir: "home".into(),
                server: Some("https://127.0.0.1:1".into()),
                prefix: "no".into()
            }
        );
        assert_eq!(
            decide(&["request-reboot", "home", ""]),
            Completion::Machines {
                dir: "home".into(),
                server: None,
                prefix: "".into()
            }
        );
        assert_eq!(
            decide(&["approve-reboot", "--server=https://x", "home", ""]),
            Completion::Machines {
                dir: "home".into(),
                server: Some("https://x".into()),
                prefix: "".into()
            }
        );
        assert_eq!(ask(&["approve-reboot", "-all", "home", ""]), (vec![], 4));
        assert_eq!(ask(&["request-reboot", "home", "node-1", ""]), (vec![], 4));
        assert_eq!(ask(&["approve-reboot", "-"]).0, ["-server", "-all", "-yes"]);
    }

    #[test]
    fn plugins_and_passthrough_words() {
        assert_eq!(ask(&["plugins", ""]).0, ["list", "remove", "sync"]);
        assert_eq!(ask(&["plugins", "s"]).0, ["sync"]);
        assert_eq!(ask(&["plugins", "sync", ""]), (vec![], 0));
        assert_eq!(
            decide(&["plugins", "remove", "au"]),
            Completion::InstalledPlugins {
                prefix: "au".into()
            }
        );
        assert_eq!(ask(&["plugins", "remove", "audio", ""]), (vec![], 4));
        assert_eq!(ask(&["kubectl", "-"]).0, ["-server"]);
        assert_eq!(ask(&["kubectl", "home", "get", "-"]), (vec![], 0));
    }

    #[test]
    fn a_dead_cluster_falls_back_to_the_deployments_files_in_time() {
        let tmp = crate::testdir::TestDir::new("complete-dead");
        crate::identity::mint::mint(&tmp.path().join("identity")).unwrap();
        let machines = tmp.path().join("machines");
        std::fs::create_dir(&machines).unwrap();
        for f in ["node-2.yaml", "node-1.yaml", ".hidden.yaml", "notes.txt"] {
            std::fs::write(machines.join(f), "").unwrap();
        }
        // A listener that never accepts: the TLS handshake never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = format!("https://{}", silent.local_addr().unwrap());
        let started = std::time::Instant::now();
        let names = machine_names(tmp.path(), Some(&server));
        assert!(
            started.elapsed() < CLUSTER_TIMEOUT + std::time::Duration::from_secs(2),
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(names, ["node-1", "node-2"]);
    }
}
