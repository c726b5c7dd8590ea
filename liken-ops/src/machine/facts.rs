//! What the machine says about itself this pass, as plain data: the
//! answers read from init and the host, before any judgement.
//!
//! Reading is [`crate::machine::host`]'s job; judging is the pass's.
//! Between them sit these values, so the pass is a pure function that
//! tests drive with tables, and every unreadable fact is a value (an
//! `Err` with the reason) rather than a crash.

use std::collections::BTreeMap;

use liken_api::control::InitStatus;
use liken_api::machine::MachineSpec;
use liken_api::{BootRecord, Cluster, Machine, Sha256Hex};

use crate::machine::turn::Asked;

/// Everything read from the host for one pass.
#[derive(Clone, Debug)]
pub struct Facts {
    /// init's answer to a status request, or why there was none (no
    /// socket, a dead init, a malformed answer).
    pub init: Result<InitStatus, String>,
    /// /run/liken/facts/boot.json: `None` before init publishes it.
    pub record: Result<Option<BootRecord>, String>,
    /// /run/liken/documents/machine.yaml, strictly decoded.
    pub running_machine: Result<Option<Machine>, String>,
    /// /run/liken/documents/cluster.yaml, strictly decoded.
    pub running_cluster: Result<Option<Cluster>, String>,
    /// The kernel's side of the running Machine.
    pub kernel: KernelFacts,
    /// /run/liken/facts/network.json: `None` when init publishes none (an older
    /// init), `Err` when it does not parse.
    pub network: Option<Result<liken_api::network::NetworkFacts, String>>,
    /// SHA-256 of the bytes of each document now staged, by file name.
    pub staged: BTreeMap<String, Sha256Hex>,
    /// SHA-256 of the bytes of each document init refused, by its name
    /// in rejected/.
    pub rejected: BTreeMap<String, Sha256Hex>,
    /// What init was asked this boot ([`Asked`]).
    pub asked: Option<Asked>,
    /// The release written into the other slot this boot.
    pub written: Option<Written>,
}

/// A release written into the inactive slot, recorded for the rest of
/// the boot (on /run, so a reboot forgets it).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Written {
    /// The boot it was written in.
    pub boot: Sha256Hex,
    /// The release.
    pub version: Option<liken_api::Version>,
    /// Its release.yaml's SHA-256.
    pub release_sha256: Sha256Hex,
}

/// The kernel's state for what the running Machine asks of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFacts {
    /// Each sysctl the running Machine sets, as /proc/sys reads it.
    pub sysctls: BTreeMap<String, Result<String, String>>,
    /// Each module the running Machine lists: whether /sys/module has it.
    pub modules: BTreeMap<String, bool>,
    /// The running kernel command line.
    pub cmdline: Result<String, String>,
}

impl Default for KernelFacts {
    fn default() -> Self {
        KernelFacts {
            sysctls: BTreeMap::new(),
            modules: BTreeMap::new(),
            cmdline: Ok(String::new()),
        }
    }
}

/// The name /sys/module uses for a module: `-` is `_` there.
pub fn sysfs_module_name(name: &str) -> String {
    name.replace('-', "_")
}

/// Sysctl values compare by their words: the kernel separates the fields
/// of a multi-value sysctl with tabs, a person with spaces.
fn same_value(a: &str, b: &str) -> bool {
    a.split_whitespace().eq(b.split_whitespace())
}

/// What the kernel does not hold of the running Machine's sysctls,
/// modules and kernel arguments: one sentence per thing, by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelGaps {
    /// Sysctls that read otherwise.
    pub sysctls: Vec<String>,
    /// Modules that are not loaded.
    pub modules: Vec<String>,
    /// Kernel arguments missing from the command line.
    pub kernel_args: Vec<String>,
}

/// Compares the running Machine's kernel settings with what the kernel
/// reports.
pub fn decide_kernel_gaps(spec: &MachineSpec, kernel: &KernelFacts) -> KernelGaps {
    let mut gaps = KernelGaps::default();
    for (key, want) in &spec.sysctls {
        match kernel.sysctls.get(key) {
            Some(Ok(got)) if same_value(got, want) => {}
            Some(Ok(got)) => gaps
                .sysctls
                .push(format!("{key} is {:?}, not {want:?}", got.trim())),
            Some(Err(e)) => gaps.sysctls.push(format!("{key} cannot be read: {e}")),
            None => gaps.sysctls.push(format!("{key} was not read")),
        }
    }
    for m in &spec.modules {
        if kernel.modules.get(m) != Some(&true) {
            gaps.modules.push(format!("{m} is not loaded"));
        }
    }
    match &kernel.cmdline {
        Ok(line) => {
            let words: Vec<&str> = line.split_whitespace().collect();
            for arg in &spec.kernel_args {
                if !words.contains(&arg.as_str()) {
                    gaps.kernel_args
                        .push(format!("{arg} is not on the running command line"));
                }
            }
        }
        Err(e) if !spec.kernel_args.is_empty() => gaps
            .kernel_args
            .push(format!("the command line cannot be read: {e}")),
        Err(_) => {}
    }
    gaps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_gaps_compare_words_and_name_each_miss() {
        let spec = MachineSpec {
            sysctls: [
                ("vm.swappiness".into(), "10".into()),
                ("net.ipv4.ip_local_port_range".into(), "32768 60999".into()),
                ("kernel.panic".into(), "10".into()),
                ("fs.missing".into(), "1".into()),
            ]
            .into(),
            modules: vec!["br_netfilter".into(), "wireguard".into()],
            kernel_args: vec!["quiet".into(), "mitigations=off".into()],
            ..MachineSpec::default()
        };
        let kernel = KernelFacts {
            sysctls: [
                ("vm.swappiness".into(), Ok("10\n".into())),
                (
                    "net.ipv4.ip_local_port_range".into(),
                    Ok("32768\t60999\n".into()),
                ),
                ("kernel.panic".into(), Ok("0\n".into())),
                ("fs.missing".into(), Err("No such file or directory".into())),
            ]
            .into(),
            modules: [("br_netfilter".into(), true), ("wireguard".into(), false)].into(),
            cmdline: Ok("BOOT_IMAGE=/vmlinuz quiet console=ttyS0\n".into()),
        };
        let gaps = decide_kernel_gaps(&spec, &kernel);
        assert_eq!(
            gaps.sysctls,
            [
                "fs.missing cannot be read: No such file or directory",
                "kernel.panic is \"0\", not \"10\"",
            ]
        );
        assert_eq!(gaps.modules, ["wireguard is not loaded"]);
        assert_eq!(
            gaps.kernel_args,
            ["mitigations=off is not on the running command line"]
        );
        assert_eq!(sysfs_module_name("nf-conntrack"), "nf_conntrack");
        assert_eq!(
            decide_kernel_gaps(&MachineSpec::default(), &KernelFacts::default()),
            KernelGaps::default()
        );
    }
}
