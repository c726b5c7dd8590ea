//! The Machine's `spec.sysctls`: which /proc/sys files to write, and
//! writing them.
//!
//! [`decide_sysctls`] turns the map into [`Action`]s purely, refusing
//! any key or value that could reach outside /proc/sys or be read by the
//! kernel as more than one value; [`apply`] carries the writes out
//! through [`SysctlWriter`], going on past failures so one bad key does
//! not cost the others.
//!
//! A key is a dotted path (`net.ipv4.ip_forward`) or, as sysctl(8)
//! also accepts, a slashed one (`net/ipv4/conf/eth0.100/forwarding`);
//! a key with a slash keeps its dots, since interface names may hold
//! them.

use std::collections::BTreeMap;
use std::io;
use std::path::{Component, Path, PathBuf};

use liken_api::Machine;

use crate::console::Outcome;
use crate::sys::sysctl::SysctlWriter;

/// Where the kernel's parameters are.
pub const PROC_SYS: &str = "/proc/sys";

/// One parameter to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    /// The key as the Machine document spells it, for messages.
    pub key: String,
    /// Its file, under [`PROC_SYS`].
    pub path: PathBuf,
    /// The value, without the trailing newline the writer adds.
    pub value: String,
}

/// What to do for one `spec.sysctls` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write the parameter.
    Write(Write),
    /// An entry that cannot be carried out, and why.
    Problem(String),
}

/// The writes `sysctls` asks for, in key order.
pub fn decide_sysctls(sysctls: &BTreeMap<String, String>) -> Vec<Action> {
    sysctls
        .iter()
        .map(|(key, value)| match decide_one(key, value) {
            Ok(w) => Action::Write(w),
            Err(why) => Action::Problem(why),
        })
        .collect()
}

fn decide_one(key: &str, value: &str) -> Result<Write, String> {
    let refuse = |why: &str| {
        Err(format!(
            "refused sysctl {key:?}: {why}; name it by its dotted path, as net.ipv4.ip_forward"
        ))
    };
    if key.is_empty() {
        return refuse("the name is empty");
    }
    if key.starts_with('/') {
        return refuse("an absolute path could name a file outside /proc/sys");
    }
    if key.contains('\0') {
        return refuse("the name holds a NUL byte");
    }
    let separator = if key.contains('/') { '/' } else { '.' };
    let parts: Vec<&str> = key.split(separator).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return refuse("the name has an empty component");
    }
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return refuse("a . or .. component could leave /proc/sys");
    }
    let relative: PathBuf = parts.iter().collect();
    // Belt and braces: whatever the splitting above let through, only
    // plain names may follow /proc/sys.
    if !relative
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        return refuse("the name does not stay under /proc/sys");
    }
    if value.contains(['\n', '\0']) {
        return Err(format!(
            "refused sysctl {key}: its value holds a newline or NUL byte, which the kernel would read as \
             several writes; put the value on one line"
        ));
    }
    Ok(Write {
        key: key.to_owned(),
        path: Path::new(PROC_SYS).join(relative),
        value: value.to_owned(),
    })
}

/// Carries out `actions`: `Ok` with the count written, or `Err` naming
/// each key that failed, why, and what to do.
pub fn apply(actions: &[Action], writer: &dyn SysctlWriter) -> Result<usize, String> {
    let mut applied: usize = 0;
    let mut failed = Vec::new();
    for action in actions {
        match action {
            Action::Write(w) => match writer.write(&w.path, &w.value) {
                Ok(()) => applied = applied.saturating_add(1),
                Err(e) => failed.push(describe_failure(w, &e)),
            },
            Action::Problem(p) => failed.push(p.clone()),
        }
    }
    if failed.is_empty() {
        Ok(applied)
    } else {
        Err(format!(
            "{applied} of {} applied; {}",
            actions.len(),
            failed.join("; ")
        ))
    }
}

/// The `sysctls` boot step: skipped without a valid Machine, else every
/// entry of its `spec.sysctls` written through `writer`.
pub fn step(machine: Option<&Machine>, writer: &dyn SysctlWriter) -> Outcome {
    let Some(machine) = machine else {
        return Outcome::Skipped("no valid Machine document".to_owned());
    };
    if machine.spec.sysctls.is_empty() {
        return Outcome::ok_with("none listed");
    }
    match apply(&decide_sysctls(&machine.spec.sysctls), writer) {
        Ok(n) => Outcome::ok_with(format!("{n} applied")),
        Err(text) => Outcome::Failed(text),
    }
}

fn describe_failure(w: &Write, e: &io::Error) -> String {
    let key = &w.key;
    match e.raw_os_error() {
        Some(nix::libc::ENOENT) => format!(
            "no such sysctl {key}: check the name against /proc/sys on this kernel, \
             or list the module that provides it in spec.modules"
        ),
        Some(nix::libc::EINVAL) | Some(nix::libc::ERANGE) => format!(
            "the kernel refused {:?} for {key} ({e}): correct the value in the Machine document",
            w.value
        ),
        Some(nix::libc::EACCES) | Some(nix::libc::EPERM) => format!(
            "{key} cannot be written ({e}): it is read-only on this kernel, remove it from the Machine document"
        ),
        _ => format!("cannot write {} for {key}: {e}", w.path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::sysctl::FakeSysctl;
    use liken_api::machine::MachineSpec;

    fn machine(entries: &[(&str, &str)]) -> Machine {
        Machine::new(
            "web-1",
            MachineSpec {
                sysctls: map(entries),
                ..Default::default()
            },
        )
    }

    #[test]
    fn step_says_how_many_it_applied() {
        let fake = FakeSysctl::default();
        let m = machine(&[("net.ipv4.ip_forward", "1"), ("vm.swappiness", "10")]);
        assert_eq!(step(Some(&m), &fake), Outcome::ok_with("2 applied"));
        assert_eq!(fake.written().len(), 2);
    }

    #[test]
    fn step_names_the_failing_key() {
        let fake = FakeSysctl {
            fail: vec![(PathBuf::from("/proc/sys/net/foo/bar"), nix::libc::ENOENT)],
            ..Default::default()
        };
        let m = machine(&[("net.foo.bar", "1"), ("vm.swappiness", "10")]);
        assert_eq!(
            step(Some(&m), &fake),
            Outcome::Failed(
                "1 of 2 applied; no such sysctl net.foo.bar: check the name against /proc/sys \
                 on this kernel, or list the module that provides it in spec.modules"
                    .to_owned()
            )
        );
    }

    #[test]
    fn step_refuses_an_escape_without_writing_it() {
        let fake = FakeSysctl::default();
        let m = machine(&[("net/../../../etc/passwd", "x")]);
        let got = step(Some(&m), &fake);
        assert!(
            matches!(&got, Outcome::Failed(t) if t.starts_with("0 of 1 applied; refused sysctl")),
            "{got:?}"
        );
        assert!(fake.written().is_empty());
    }

    #[test]
    fn step_without_machine_or_sysctls() {
        let fake = FakeSysctl::default();
        assert_eq!(
            step(None, &fake),
            Outcome::Skipped("no valid Machine document".to_owned())
        );
        assert_eq!(
            step(Some(&machine(&[])), &fake),
            Outcome::ok_with("none listed")
        );
        assert!(fake.written().is_empty());
    }

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn write(key: &str, path: &str, value: &str) -> Action {
        Action::Write(Write {
            key: key.to_owned(),
            path: PathBuf::from(path),
            value: value.to_owned(),
        })
    }

    #[test]
    fn dots_become_slashes_and_slashed_keys_keep_their_dots() {
        let got = decide_sysctls(&map(&[
            ("net.ipv4.ip_forward", "1"),
            ("net/ipv4/conf/eth0.100/forwarding", "1"),
            ("vm.swappiness", "10"),
            ("net.ipv4.ip_local_port_range", "32768 60999"),
        ]));
        assert_eq!(
            got,
            vec![
                write("net.ipv4.ip_forward", "/proc/sys/net/ipv4/ip_forward", "1"),
                write(
                    "net.ipv4.ip_local_port_range",
                    "/proc/sys/net/ipv4/ip_local_port_range",
                    "32768 60999"
                ),
                write(
                    "net/ipv4/conf/eth0.100/forwarding",
                    "/proc/sys/net/ipv4/conf/eth0.100/forwarding",
                    "1"
                ),
                write("vm.swappiness", "/proc/sys/vm/swappiness", "10"),
            ]
        );
    }

    #[test]
    fn escapes_are_problems_not_writes() {
        for key in [
            "",
            "/etc/passwd",
            "../../etc/shadow",
            "net/../../etc/shadow",
            "net/./x",
            "net..ipv4",
            ".net.ipv4",
            "net.ipv4.",
            "net//ipv4",
            "net\0x",
        ] {
            let got = decide_sysctls(&map(&[(key, "1")]));
            assert_eq!(got.len(), 1, "{key:?}");
            match &got[0] {
                Action::Problem(p) => {
                    assert!(p.contains("refused sysctl"), "{key:?}: {p}");
                    assert!(p.contains("net.ipv4.ip_forward"), "{key:?}: {p}");
                }
                other => panic!("{key:?} became {other:?}"),
            }
        }
    }

    #[test]
    fn a_value_with_a_newline_is_refused() {
        let got = decide_sysctls(&map(&[("vm.swappiness", "10\n60")]));
        assert!(matches!(&got[..], [Action::Problem(p)] if p.contains("one line")));
    }

    #[test]
    fn every_write_applied_in_order() {
        let fake = FakeSysctl::default();
        let actions = decide_sysctls(&map(&[
            ("vm.swappiness", "10"),
            ("net.ipv4.ip_forward", "1"),
        ]));
        assert_eq!(apply(&actions, &fake), Ok(2));
        assert_eq!(
            fake.written(),
            vec![
                (
                    PathBuf::from("/proc/sys/net/ipv4/ip_forward"),
                    "1".to_owned()
                ),
                (PathBuf::from("/proc/sys/vm/swappiness"), "10".to_owned()),
            ]
        );
    }

    #[test]
    fn a_failing_key_is_named_and_the_rest_still_written() {
        let fake = FakeSysctl {
            fail: vec![
                (PathBuf::from("/proc/sys/net/foo/bar"), nix::libc::ENOENT),
                (PathBuf::from("/proc/sys/vm/swappiness"), nix::libc::EINVAL),
            ],
            ..Default::default()
        };
        let actions = decide_sysctls(&map(&[
            ("net.foo.bar", "1"),
            ("net.ipv4.ip_forward", "1"),
            ("vm.swappiness", "lots"),
        ]));
        let err = apply(&actions, &fake).unwrap_err();
        assert!(err.starts_with("1 of 3 applied; "), "{err}");
        assert!(
            err.contains(
                "no such sysctl net.foo.bar: check the name against /proc/sys on this kernel"
            ),
            "{err}"
        );
        assert!(err.contains("refused \"lots\" for vm.swappiness"), "{err}");
        assert_eq!(fake.written().len(), 3);
    }

    #[test]
    fn an_escape_attempt_is_reported_and_never_written() {
        let fake = FakeSysctl::default();
        let actions = decide_sysctls(&map(&[
            ("../../etc/shadow", "x"),
            ("net.ipv4.ip_forward", "1"),
        ]));
        let err = apply(&actions, &fake).unwrap_err();
        assert!(
            err.starts_with("1 of 2 applied; refused sysctl \"../../etc/shadow\""),
            "{err}"
        );
        assert_eq!(
            fake.written(),
            vec![(
                PathBuf::from("/proc/sys/net/ipv4/ip_forward"),
                "1".to_owned()
            )]
        );
    }
}
