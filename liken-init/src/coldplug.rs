//! Coldplug: which kernel modules this computer's devices need, and the
//! order to load them in.
//!
//! Without udev, init does what udev's coldplug does at boot: every
//! device the kernel found before init ran has a `modalias` file under
//! /sys/devices; depmod's `modules.alias` maps those strings (through
//! shell globs) to module names, and `modules.dep` lists each module's
//! dependencies. Loading a module can reveal new devices (virtio_pci
//! finds the virtio devices behind it), so the scan repeats until a
//! round loads nothing new.
//!
//! This module is pure: it parses the index files and plans the loads.
//! [`crate::sys::modules`] carries a plan out with finit_module.
//!
//! The dependency order is computed here from each module's own entry
//! rather than trusted from the order modules.dep happens to list, and
//! `modules.softdep` "pre:" modules are loaded first, resolved through
//! the alias table: ext4 needs crc32c at mount time and, with no
//! modprobe on the machine, the kernel cannot fetch it on demand.
//!
//! A full module tree has some 26,000 aliases and a machine a hundred
//! or more modaliases, each rescanned after every round of loads, so
//! globbing every alias against every modalias is millions of matches:
//! seconds under QEMU's TCG, on the boot's critical path. kmod keeps a
//! trie (modules.alias.bin) for the same reason. Here the aliases are
//! sorted by their literal prefix (the bytes before the first glob
//! character), and a modalias is globbed only against the aliases whose
//! prefix is one of its own prefixes: a few binary searches, then a
//! handful of real matches.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

/// The module tree's indexes, parsed.
#[derive(Debug, Default)]
pub struct ModuleIndex {
    /// Module name → its file (relative to the tree) and dependencies.
    modules: HashMap<String, Entry>,
    /// modules.alias's entries for modules in the tree, sorted by
    /// [`Alias::prefix`].
    aliases: Vec<Alias>,
    /// Module → modules to load before it (softdep pre:).
    softdeps: HashMap<String, Vec<String>>,
    /// Modules built into the kernel (nothing to load).
    builtin: HashSet<String>,
}

#[derive(Debug)]
struct Entry {
    path: String,
    deps: Vec<String>,
}

/// One modules.alias line.
#[derive(Debug)]
struct Alias {
    pattern: String,
    /// How many leading bytes of `pattern` are literal.
    literal: usize,
    module: String,
}

impl Alias {
    fn new(pattern: &str, module: String) -> Alias {
        let literal = pattern
            .bytes()
            .position(|b| matches!(b, b'*' | b'?' | b'['))
            .unwrap_or(pattern.len());
        Alias {
            pattern: pattern.to_owned(),
            literal,
            module,
        }
    }

    /// The bytes every text this alias matches starts with.
    fn prefix(&self) -> &[u8] {
        self.pattern
            .as_bytes()
            .get(..self.literal)
            .unwrap_or_default()
    }
}

/// The name the kernel knows a module by: file name without `.ko`
/// (and any compression suffix), with `-` read as `_`.
pub fn module_name(path_or_name: &str) -> String {
    let base = path_or_name.rsplit('/').next().unwrap_or(path_or_name);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

/// A module that a plan needs but the tree does not hold.
#[derive(Debug, PartialEq, Eq)]
pub struct Missing(pub String);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module {} is not in this image's module tree; \
             add it to the image build (images/) or drop it from the Machine's spec.modules",
            self.0
        )
    }
}

impl ModuleIndex {
    /// Parses modules.dep, modules.alias, modules.softdep and
    /// modules.builtin (any may be empty). Malformed lines are skipped:
    /// these files are written by depmod, not by people.
    pub fn parse(dep: &str, alias: &str, softdep: &str, builtin: &str) -> ModuleIndex {
        let mut idx = ModuleIndex::default();
        for line in dep.lines() {
            let Some((path, deps)) = line.split_once(':') else {
                continue;
            };
            let path = path.trim();
            if path.is_empty() {
                continue;
            }
            idx.modules.insert(
                module_name(path),
                Entry {
                    path: path.to_owned(),
                    deps: deps.split_whitespace().map(module_name).collect(),
                },
            );
        }
        for line in alias.lines() {
            let mut words = line.split_whitespace();
            if let (Some("alias"), Some(pattern), Some(module)) =
                (words.next(), words.next(), words.next())
            {
                // An alias for a module the tree lacks can never be
                // loaded; dropping it here keeps matching from asking.
                let module = module_name(module);
                if idx.modules.contains_key(&module) {
                    idx.aliases.push(Alias::new(pattern, module));
                }
            }
        }
        // Stable, so aliases sharing a prefix keep their file order.
        idx.aliases.sort_by(|a, b| a.prefix().cmp(b.prefix()));
        for line in softdep.lines() {
            let mut words = line.split_whitespace();
            if let (Some("softdep"), Some(module)) = (words.next(), words.next()) {
                let mut pre = false;
                let mut list = Vec::new();
                for w in words {
                    match w {
                        "pre:" => pre = true,
                        "post:" => pre = false,
                        w if pre => list.push(w.to_owned()),
                        _ => {}
                    }
                }
                if !list.is_empty() {
                    idx.softdeps.insert(module_name(module), list);
                }
            }
        }
        for line in builtin.lines() {
            let line = line.trim();
            if !line.is_empty() {
                idx.builtin.insert(module_name(line));
            }
        }
        idx
    }

    /// How many loadable modules the tree holds.
    pub fn len(&self) -> usize {
        self.modules.len()
    }

    /// Whether the tree holds no loadable modules.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty()
    }

    /// The module file's path relative to the tree.
    pub fn path(&self, module: &str) -> Option<&str> {
        self.modules.get(module).map(|e| e.path.as_str())
    }

    /// Whether the module is built into the kernel.
    pub fn is_builtin(&self, module: &str) -> bool {
        self.builtin.contains(module)
    }

    /// The modules whose aliases match a device's modalias, in the
    /// tree (aliases naming absent modules are left out).
    pub fn matching(&self, modalias: &str) -> BTreeSet<String> {
        let text = modalias.as_bytes();
        let mut out = BTreeSet::new();
        // Every alias that can match has a literal prefix that is some
        // prefix of the text: look each of those up in the sorted list.
        for len in 0..=text.len() {
            let Some(head) = text.get(..len) else {
                break;
            };
            let start = self.aliases.partition_point(|a| a.prefix() < head);
            for alias in self.aliases.get(start..).unwrap_or_default() {
                if alias.prefix() != head {
                    break;
                }
                if glob_match(alias.pattern.as_bytes(), text) {
                    out.insert(alias.module.clone());
                }
            }
        }
        out
    }

    /// A name as a softdep or a person writes it: a module, or an alias
    /// (`crc32c` names crc32c_generic or an accelerated variant).
    fn resolve_name(&self, name: &str) -> Option<String> {
        let n = module_name(name);
        if self.modules.contains_key(&n) || self.builtin.contains(&n) {
            return Some(n);
        }
        self.matching(name).into_iter().next()
    }

    /// The modules to load, dependencies first, each once, leaving out
    /// the ones in `done` (already loaded or built in). Names that are
    /// neither in the tree nor built in are returned as missing; the rest
    /// of the plan still stands.
    pub fn plan<'a>(
        &self,
        wanted: impl IntoIterator<Item = &'a str>,
        done: &HashSet<String>,
    ) -> (Vec<String>, Vec<Missing>) {
        let mut plan = Vec::new();
        let mut seen: HashSet<String> = done.clone();
        let mut missing = Vec::new();
        for name in wanted {
            match self.resolve_name(name) {
                Some(n) => self.visit(&n, &mut plan, &mut seen, 0),
                None => missing.push(Missing(name.to_owned())),
            }
        }
        (plan, missing)
    }

    fn visit(&self, name: &str, plan: &mut Vec<String>, seen: &mut HashSet<String>, depth: u32) {
        // The depth cap ends a dependency cycle in a corrupt index rather
        // than recursing until the stack is gone.
        if depth > 64 || self.builtin.contains(name) || !seen.insert(name.to_owned()) {
            return;
        }
        let next = depth.saturating_add(1);
        if let Some(pre) = self.softdeps.get(name) {
            for p in pre {
                if let Some(n) = self.resolve_name(p) {
                    self.visit(&n, plan, seen, next);
                }
            }
        }
        if let Some(entry) = self.modules.get(name) {
            for d in &entry.deps {
                self.visit(d, plan, seen, next);
            }
            plan.push(name.to_owned());
        }
    }
}

/// Shell-glob matching as modules.alias uses it: `*`, `?` and bracket
/// classes (`[Ll]`, `[a-z]`, `[!x]`).
pub fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    // Where the last `*` was, and the text position it is trying.
    let mut star: Option<(usize, usize)> = None;
    loop {
        match pattern.get(p) {
            Some(b'*') => {
                p = p.saturating_add(1);
                star = Some((p, t));
                continue;
            }
            Some(_) => {
                if let Some(&c) = text.get(t)
                    && let Some(used) = match_one(pattern.get(p..).unwrap_or_default(), c)
                {
                    p = p.saturating_add(used);
                    t = t.saturating_add(1);
                    continue;
                }
            }
            None if t == text.len() => return true,
            None => {}
        }
        match star {
            Some((sp, st)) if st < text.len() => {
                let st = st.saturating_add(1);
                star = Some((sp, st));
                p = sp;
                t = st;
            }
            _ => return false,
        }
    }
}

/// Matches one text byte against the pattern element at the start of
/// `pattern`; returns how many pattern bytes the element took.
fn match_one(pattern: &[u8], c: u8) -> Option<usize> {
    match pattern.split_first()? {
        (b'?', _) => Some(1),
        (b'[', rest) => match bracket(rest, c) {
            Some((matched, used)) => matched.then_some(used.saturating_add(1)),
            // An unterminated bracket is a literal '['.
            None => (c == b'[').then_some(1),
        },
        (&l, _) => (l == c).then_some(1),
    }
}

/// Reads a bracket class after its `[`: whether `c` is in it and how
/// many bytes it spans including the closing `]`.
fn bracket(class: &[u8], c: u8) -> Option<(bool, usize)> {
    let (negate, mut i) = match class.first() {
        Some(b'!' | b'^') => (true, 1usize),
        _ => (false, 0usize),
    };
    let mut matched = false;
    let mut first = true;
    loop {
        let b = *class.get(i)?;
        if b == b']' && !first {
            return Some((matched != negate, i.saturating_add(1)));
        }
        first = false;
        if class.get(i.saturating_add(1)) == Some(&b'-')
            && let Some(&hi) = class.get(i.saturating_add(2))
            && hi != b']'
        {
            matched |= (b..=hi).contains(&c);
            i = i.saturating_add(3);
        } else {
            matched |= b == c;
            i = i.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let m = |p: &str, t: &str| glob_match(p.as_bytes(), t.as_bytes());
        assert!(m(
            "pci:v00001AF4d*sv*sd*bc*sc*i*",
            "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00"
        ));
        assert!(!m("pci:v00001AF4d*", "pci:v00008086d00001237"));
        assert!(m("virtio:d00000002v*", "virtio:d00000002v00001AF4"));
        assert!(m("dmi*:bvn[Ll]enovo*", "dmi:bvnlenovo:x"));
        assert!(!m("dmi*:bvn[!Ll]enovo*", "dmi:bvnLenovo:x"));
        assert!(m("a[0-9]b", "a7b"));
        assert!(!m("a[0-9]b", "axb"));
        assert!(m("a?c", "abc"));
        assert!(!m("a?c", "ac"));
        assert!(m("*", ""));
        assert!(!m("", "x"));
        assert!(m("a[b", "a[b"));
        assert!(m("*x*y", "axxbxy"));
    }

    fn index() -> ModuleIndex {
        ModuleIndex::parse(
            "kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko\n\
             kernel/fs/jbd2/jbd2.ko:\n\
             kernel/fs/mbcache.ko:\n\
             kernel/lib/crc16.ko:\n\
             kernel/crypto/crc32c_generic.ko:\n\
             kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko\n\
             kernel/drivers/virtio/virtio_pci_modern_dev.ko:\n\
             kernel/drivers/block/virtio_blk.ko:\n\
             kernel/drivers/md/dm-verity.ko: kernel/drivers/md/dm-mod.ko\n\
             kernel/drivers/md/dm-mod.ko:\n",
            "# Aliases extracted from modules themselves.\n\
             alias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\n\
             alias virtio:d00000002v* virtio_blk\n\
             alias crypto-crc32c crc32c_generic\n\
             alias crc32c crc32c_generic\n\
             alias fs-ext4 ext4\n\
             alias pci:v00008086d* e1000e\n",
            "softdep ext4 pre: crc32c\n",
            "kernel/drivers/virtio/virtio.ko\nkernel/drivers/virtio/virtio_ring.ko\n",
        )
    }

    #[test]
    fn dependencies_and_softdeps_come_first() {
        let idx = index();
        assert_eq!(idx.len(), 10);
        let (plan, missing) = idx.plan(["ext4", "dm-verity"], &HashSet::new());
        assert!(missing.is_empty());
        assert_eq!(
            plan,
            vec![
                "crc32c_generic",
                "crc16",
                "mbcache",
                "jbd2",
                "ext4",
                "dm_mod",
                "dm_verity"
            ]
        );
        let done: HashSet<String> = ["crc16".to_owned()].into();
        let (plan, _) = idx.plan(["ext4"], &done);
        assert!(!plan.contains(&"crc16".to_owned()));
        assert_eq!(
            idx.path("dm_verity"),
            Some("kernel/drivers/md/dm-verity.ko")
        );
    }

    #[test]
    fn builtins_need_nothing_and_unknowns_are_missing() {
        let idx = index();
        assert!(idx.is_builtin("virtio"));
        let (plan, missing) = idx.plan(["virtio", "nosuch"], &HashSet::new());
        assert!(plan.is_empty());
        assert_eq!(missing, vec![Missing("nosuch".into())]);
        assert!(missing[0].to_string().contains("spec.modules"));
    }

    #[test]
    fn modaliases_map_to_modules_in_the_tree() {
        let idx = index();
        let m = idx.matching("pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00");
        assert_eq!(m.into_iter().collect::<Vec<_>>(), vec!["virtio_pci"]);
        // e1000e has an alias but is not in this tree.
        assert!(
            idx.matching("pci:v00008086d000010D3sv0sd0bc02sc00i00")
                .is_empty()
        );
        assert_eq!(module_name("kernel/x/dm-verity.ko.xz"), "dm_verity");
    }

    #[test]
    fn the_prefix_index_finds_what_globbing_every_alias_finds() {
        // Aliases whose glob starts at every position, including the
        // first byte, a `?` and a bracket, and several sharing a prefix.
        let modules = [
            "m_star",
            "m_pci",
            "m_pci_all",
            "m_q",
            "m_br",
            "m_exact",
            "m_acpi",
        ];
        let dep: String = modules.iter().map(|m| format!("k/{m}.ko:\n")).collect();
        let patterns = [
            ("*", "m_star"),
            ("pci:v00001AF4d*sv*sd*bc*sc*i*", "m_pci"),
            ("pci:v*d*sv*sd*bc02sc00i*", "m_pci_all"),
            ("pci:v00001AF4d0000100?sv*", "m_q"),
            ("dmi*:bvn[Ll]enovo*", "m_br"),
            ("acpi*:PNP0A03:*", "m_acpi"),
            ("virtio:d00000001v00001AF4", "m_exact"),
            ("virtio:d00000001v0000", "m_exact"),
            ("pci:v00001AF4d*", "absent_from_the_tree"),
        ];
        let alias: String = patterns
            .iter()
            .map(|(p, m)| format!("alias {p} {m}\n"))
            .collect();
        let idx = ModuleIndex::parse(&dep, &alias, "", "");
        let texts = [
            "",
            "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00",
            "pci:v00001AF4d00001041sv00001AF4sd00000001bc01sc00i00",
            "pci:v00008086d000010D3sv0sd0bc02sc00i00",
            "dmi:bvnLenovo:bvr1",
            "dmi:bvnlenovo",
            "acpi:PNP0A08:PNP0A03:",
            "virtio:d00000001v00001AF4",
            "virtio:d00000001v0000",
            "pc",
        ];
        for text in texts {
            let brute: BTreeSet<String> = patterns
                .iter()
                .filter(|(p, m)| {
                    idx.modules.contains_key(*m) && glob_match(p.as_bytes(), text.as_bytes())
                })
                .map(|(_, m)| (*m).to_owned())
                .collect();
            assert_eq!(idx.matching(text), brute, "{text:?}");
        }
        assert_eq!(
            idx.matching("pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"),
            ["m_pci", "m_pci_all", "m_q", "m_star"]
                .map(String::from)
                .into(),
        );
    }
}
