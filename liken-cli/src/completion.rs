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
//! Everything is answered from static tables (the command table in
//! [`crate::usage`] and the known plugin domains), because completion runs
//! on every key press and must never wait for a cluster. A request the
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

/// The candidates and directive for one request. `words` are the words
/// after the program name; the last is the one under the cursor (possibly
/// empty).
pub fn decide_completion(words: &[String]) -> (Vec<String>, u32) {
    let Some((current, before)) = words.split_last() else {
        return (first_words(""), DIRECTIVE_NO_FILE_COMP);
    };
    let Some((command, after)) = before.split_first() else {
        if current.starts_with('-') {
            return (Vec::new(), DIRECTIVE_NO_FILE_COMP);
        }
        return (first_words(current), DIRECTIVE_NO_FILE_COMP);
    };
    let Some(entry) = usage::find(command).filter(|e| !e.hidden) else {
        // A plugin domain: the plugin knows its own words.
        return (Vec::new(), DIRECTIVE_DEFAULT);
    };
    let walked = walk(entry, after);
    if walked.pending_value {
        return (Vec::new(), DIRECTIVE_NO_FILE_COMP);
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
        return (flags, DIRECTIVE_NO_FILE_COMP);
    }
    if entry.name == usage::COMPLETION.name {
        let shells = if walked.positionals == 0 {
            vec!["bash"]
        } else {
            vec![]
        };
        return (filter(&shells, current), DIRECTIVE_NO_FILE_COMP);
    }
    if entry.name == usage::VERSION.name || entry.name == usage::HELP.name {
        return (Vec::new(), DIRECTIVE_NO_FILE_COMP);
    }
    // Every other command's positionals are paths: let the shell offer
    // file names.
    (Vec::new(), DIRECTIVE_DEFAULT)
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

struct Walked {
    positionals: usize,
    pending_value: bool,
}

/// Reads the typed words after the command: how many positionals, and
/// whether the last one is a flag still waiting for its value.
fn walk(entry: &Entry, words: &[String]) -> Walked {
    let mut positionals = 0;
    let mut i = 0;
    let mut dash_dash = false;
    while i < words.len() {
        let w = &words[i];
        if !dash_dash && w == "--" {
            dash_dash = true;
        } else if !dash_dash && w.len() > 1 && w.starts_with('-') {
            let name = w.trim_start_matches('-');
            let takes_value = !name.contains('=')
                && entry
                    .options
                    .iter()
                    .any(|o| o.name == name && o.value.is_some());
            if takes_value {
                if i + 1 == words.len() {
                    return Walked {
                        positionals,
                        pending_value: true,
                    };
                }
                i += 1;
            }
        } else {
            positionals += 1;
        }
        i += 1;
    }
    Walked {
        positionals,
        pending_value: false,
    }
}

/// Runs the `__complete` verb: writes the protocol to `out`.
pub fn complete_command(words: Vec<OsString>, out: &mut dyn Write) -> std::io::Result<()> {
    let words: Vec<String> = words
        .into_iter()
        .map(|w| w.to_string_lossy().into_owned())
        .collect();
    let (candidates, directive) = decide_completion(&words);
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

    fn ask(words: &[&str]) -> (Vec<String>, u32) {
        decide_completion(&words.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>())
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
        for never in ["__complete", "completion", "help", "approve-reboot"] {
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
        assert_eq!(ask(&["kubeconfig", "-"]), (vec!["-server".to_owned()], 4));
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
}
