//! The machine operator's flags, and the configuration they give.

use std::path::PathBuf;
use std::time::Duration;

use crate::machine::host::HostPaths;
use crate::runtime::flags::{Flag, FlagError, Program, Values};
use crate::runtime::start::{KUBECONFIG_FLAG, METRICS_ADDRESS_FLAG, listen_address};

/// The flag table.
pub const PROGRAM: Program = Program {
    name: "liken-machine-operator",
    about: "liken-machine-operator runs on every machine (a DaemonSet pod) and turns its Machine's \
            spec into a staged, approved, coordinated change: it stages what differs for init, \
            asks the cluster for a reboot turn, drains the node and asks init to reboot, and \
            downloads the Cluster's target release into the inactive slot. It writes only its own \
            Machine's status, its Node and its heartbeat Lease.",
    flags: &[
        KUBECONFIG_FLAG,
        Flag {
            name: "node",
            value: Some("NAME"),
            default: None,
            env: Some("NODE_NAME"),
            help: "this machine's Node (the DaemonSet passes spec.nodeName)",
        },
        Flag {
            name: "machine",
            value: Some("NAME"),
            default: None,
            env: None,
            help: "this machine's Machine; by default the one init booted with",
        },
        Flag {
            name: "run-dir",
            value: Some("DIR"),
            default: Some("/run/liken"),
            env: None,
            help: "init's run directory: facts/, documents/, init.sock",
        },
        Flag {
            name: "var-dir",
            value: Some("DIR"),
            default: Some("/var/lib/liken"),
            env: None,
            help: "liken's state on the data partition: staged/, rejected/, releases/",
        },
        Flag {
            name: "proc",
            value: Some("DIR"),
            default: Some("/proc"),
            env: None,
            help: "the host's /proc (sysctls, the kernel command line)",
        },
        Flag {
            name: "sys",
            value: Some("DIR"),
            default: Some("/sys"),
            env: None,
            help: "the host's /sys (loaded modules)",
        },
        METRICS_ADDRESS_FLAG,
        Flag {
            name: "resync",
            value: Some("DURATION"),
            default: Some("30s"),
            env: None,
            help: "how often a settled machine looks again without a wake-up",
        },
        Flag {
            name: "busy-interval",
            value: Some("DURATION"),
            default: Some("2s"),
            env: None,
            help: "how often it looks during a turn or a download",
        },
        Flag {
            name: "heartbeat-interval",
            value: Some("DURATION"),
            default: Some("10s"),
            env: None,
            help: "how often the heartbeat Lease is renewed",
        },
        Flag {
            name: "drain-timeout",
            value: Some("DURATION"),
            default: Some("5m"),
            env: None,
            help: "how long a drain runs before the status names what blocks it",
        },
        Flag {
            name: "shutdown-flush",
            value: Some("DURATION"),
            default: Some("5s"),
            env: None,
            help: "how long SIGTERM waits for queued Events to be posted",
        },
        Flag {
            name: "once",
            value: None,
            default: None,
            env: None,
            help: "one pass, then exit (no heartbeat, no download thread)",
        },
    ],
};

/// The operator's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// The Node's name.
    pub node: String,
    /// The Machine's name, when given.
    pub machine: Option<String>,
    /// The host's paths.
    pub paths: HostPaths,
    /// Where metrics are served, if anywhere.
    pub metrics_address: Option<String>,
    /// The idle pass interval.
    pub resync: Duration,
    /// The busy pass interval.
    pub busy_interval: Duration,
    /// The heartbeat interval.
    pub heartbeat: Duration,
    /// The drain timeout.
    pub drain_timeout: Duration,
    /// The Events flush on SIGTERM.
    pub shutdown_flush: Duration,
    /// One pass and exit.
    pub once: bool,
}

fn path(values: &Values, name: &str) -> PathBuf {
    PathBuf::from(values.get(name).unwrap_or_default())
}

fn duration(values: &Values, name: &str) -> Result<Duration, FlagError> {
    values
        .duration(name)?
        .ok_or_else(|| FlagError(format!("--{name} needs a value")))
}

impl Config {
    /// The configuration the flags give.
    pub fn from_values(values: &Values) -> Result<Config, FlagError> {
        let node = values.get("node").map(str::to_owned).ok_or_else(|| {
            FlagError(
                "no node name: pass --node NAME, or set NODE_NAME (the DaemonSet passes it \
                 from spec.nodeName)"
                    .into(),
            )
        })?;
        Ok(Config {
            kubeconfig: values.get("kubeconfig").map(PathBuf::from),
            node,
            machine: values.get("machine").map(str::to_owned),
            paths: HostPaths {
                run: path(values, "run-dir"),
                var: path(values, "var-dir"),
                proc_: path(values, "proc"),
                sys: path(values, "sys"),
            },
            metrics_address: listen_address(values.get("metrics-address")),
            resync: duration(values, "resync")?,
            busy_interval: duration(values, "busy-interval")?,
            heartbeat: duration(values, "heartbeat-interval")?,
            drain_timeout: duration(values, "drain-timeout")?,
            shutdown_flush: duration(values, "shutdown-flush")?,
            once: values.switch("once"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::flags::{Parsed, parse};
    use std::ffi::OsString;

    fn config(args: &[&str], env: &[(&str, &str)]) -> Result<Config, FlagError> {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        let lookup = move |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match parse(&PROGRAM, args.iter().map(OsString::from).collect(), &lookup)? {
            Parsed::Run(v) => Config::from_values(&v),
            Parsed::Help(h) => panic!("{h}"),
        }
    }

    #[test]
    fn defaults_are_the_real_paths_and_the_node_comes_from_the_downward_api() {
        let c = config(&[], &[("NODE_NAME", "node-1")]).unwrap();
        assert_eq!(c.node, "node-1");
        assert_eq!(c.paths.run, PathBuf::from("/run/liken"));
        assert_eq!(c.paths.var, PathBuf::from("/var/lib/liken"));
        assert_eq!(c.paths.socket(), PathBuf::from("/run/liken/init.sock"));
        assert_eq!(c.metrics_address.as_deref(), Some("0.0.0.0:9200"));
        assert_eq!(c.heartbeat, Duration::from_secs(10));
        assert_eq!(c.drain_timeout, Duration::from_secs(300));
        let c = config(
            &["-node=n2", "-run-dir", "/tmp/r", "-metrics-address="],
            &[("NODE_NAME", "node-1")],
        )
        .unwrap();
        assert_eq!(c.node, "n2");
        assert_eq!(
            c.paths.boot_record(),
            PathBuf::from("/tmp/r/facts/boot.json")
        );
        assert_eq!(c.metrics_address, None);
        let e = config(&[], &[]).unwrap_err();
        assert!(e.0.contains("NODE_NAME"), "{e}");
    }
}
