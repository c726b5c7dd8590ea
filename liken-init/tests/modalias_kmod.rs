//! The coldplug's modalias index against kmod: for the image's real
//! module tree (Debian's kernel as `images/kernel.sh` unpacks it, with
//! depmod's indexes, the tree the system image carries), every modalias
//! resolves to the same modules through `ModuleIndex::matching` as
//! through `modprobe -R`, which reads depmod's binary trie
//! (modules.alias.bin) with kmod's own matcher.
//!
//! The modaliases are this machine's devices (every
//! /sys/devices/**/modalias) and a text made from each of the tree's
//! 26,000 alias patterns (each `*` as nothing in one pattern and as "Z9"
//! in the next, each `?` as "0", each bracket as a character it admits),
//! so every alias and every glob form is matched at least once, and many
//! texts match several aliases. Only device modaliases (`bus:...`) are compared:
//! a bare word is a module name to modprobe before it is an alias.
//!
//! kmod's answer leaves out modules built into the kernel (init has
//! nothing to load for them) and reads no modprobe.d configuration
//! (`-C` an empty directory): the machine has none.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use liken_init::coldplug::{ModuleIndex, module_name};

/// The kernel cache directory `images/kernel.sh` prints (it downloads
/// the kernel once).
fn kernel_dir() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../images/kernel.sh");
    let out = Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed; run scripts/setup.sh (apt lists, kmod):\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A text `pattern` matches: `*` as `star`, `?` as "0", a bracket as its
/// first admitted character ('Z' when negated and 'Z' is not listed).
fn instance(pattern: &str, star: &str) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' => out.push_str(star),
            '?' => out.push('0'),
            '[' => {
                let mut class = String::new();
                for c in chars.by_ref() {
                    if c == ']' && !class.is_empty() {
                        break;
                    }
                    class.push(c);
                }
                match class.strip_prefix('!') {
                    Some(not) => out.push(if not.contains('Z') { '~' } else { 'Z' }),
                    None => out.push(class.chars().next().unwrap_or('x')),
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// The host's device modaliases.
fn host_modaliases() -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![PathBuf::from("/sys/devices")];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if t.is_dir() && !t.is_symlink() {
                dirs.push(e.path());
            } else if e.file_name() == "modalias"
                && let Ok(text) = std::fs::read_to_string(e.path())
            {
                let text = text.trim();
                if !text.is_empty() {
                    out.push(text.to_owned());
                }
            }
        }
    }
    out
}

#[test]
fn every_modalias_resolves_as_kmod_resolves_it() {
    let kernel = kernel_dir();
    let kver = read(&kernel.join("kernel-release")).trim().to_owned();
    let root = kernel.join("modules");
    let tree = root.join("lib/modules").join(&kver);
    let (dep, alias) = (
        read(&tree.join("modules.dep")),
        read(&tree.join("modules.alias")),
    );
    let builtin = read(&tree.join("modules.builtin"));
    let index = ModuleIndex::parse(&dep, &alias, &read(&tree.join("modules.softdep")), &builtin);
    let builtins: BTreeSet<String> = builtin.lines().map(module_name).collect();

    let patterns: Vec<(&str, &str)> = alias
        .lines()
        .filter_map(|l| {
            let mut f = l.strip_prefix("alias ")?.split_whitespace();
            Some((f.next()?, f.next()?))
        })
        .collect();
    assert!(
        patterns.len() > 20_000,
        "{} holds {} aliases; is it the full tree?",
        tree.display(),
        patterns.len()
    );
    let mut texts: BTreeSet<String> = host_modaliases().into_iter().collect();
    let from_host = texts.len();
    for (i, (p, _)) in patterns.iter().enumerate() {
        texts.insert(instance(p, if i % 2 == 0 { "" } else { "Z9" }));
    }
    texts.retain(|t| t.contains(':') && !t.contains(char::is_whitespace));
    let texts: Vec<String> = texts.into_iter().collect();

    // modprobe -a takes many names; a module no alias names separates
    // one text's answer from the next.
    let aliased: BTreeSet<&str> = patterns.iter().map(|(_, m)| *m).collect();
    let sentinel = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(path, _)| module_name(path))
        .filter(|m| !aliased.contains(m.as_str()))
        .min()
        .expect("a module without aliases");
    let no_config = std::env::temp_dir().join(format!("liken-kmod-conf-{}", std::process::id()));
    std::fs::create_dir_all(&no_config).unwrap();
    let mut kmod: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for batch in texts.chunks(1000) {
        let mut cmd = Command::new("modprobe");
        cmd.arg("-C")
            .arg(&no_config)
            .arg("-d")
            .arg(&root)
            .arg("-S")
            .arg(&kver)
            .args(["-a", "-R"]);
        for t in batch {
            cmd.arg(t).arg(&sentinel);
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run modprobe: {e}; scripts/setup.sh installs kmod"));
        // Exit status 1 when some text resolves to nothing (a warning
        // each); the answers are still printed.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let separator = format!("{sentinel}\n");
        let mut answers = stdout.split(separator.as_str());
        for t in batch {
            let names = answers.next().unwrap_or_else(|| {
                panic!(
                    "modprobe stopped early ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            });
            let set: BTreeSet<String> = names
                .lines()
                .map(module_name)
                .filter(|m| !builtins.contains(m))
                .collect();
            kmod.insert(t, set);
        }
    }
    let _ = std::fs::remove_dir_all(&no_config);

    let mut differ = Vec::new();
    let mut matched = 0;
    for t in &texts {
        let ours = index.matching(t);
        matched += usize::from(!ours.is_empty());
        if ours != kmod[t.as_str()] {
            differ.push(format!(
                "{t}: liken-init {ours:?}, modprobe -R {:?}",
                kmod[t.as_str()]
            ));
        }
    }
    println!(
        "{} modaliases ({from_host} from this machine's devices), {matched} resolving to modules, \
         compared with modprobe -R on {}",
        texts.len(),
        tree.display()
    );
    assert!(
        differ.is_empty(),
        "{} of {} modaliases resolve differently, e.g.:\n{}",
        differ.len(),
        texts.len(),
        differ[..differ.len().min(20)].join("\n")
    );
    assert!(matched > 15_000, "only {matched} texts matched an alias");
}
