//! Fleets under QEMU: several machines installed from one `liken
//! stick` image and run against a control plane on the host, for the
//! end-to-end tests and the demo.
//!
//! - [`host`]: the deployment, the control plane on its identity, the
//!   release channel (`liken serve`), the cluster operator.
//! - [`machine`]: one machine: installed from the stick, then run on its
//!   own disk, its console in its own log.
//! - [`history`]: every watch event of the Machines, the Cluster and
//!   the Nodes.
//! - [`rollout`]: each machine's turn to a release, read from that
//!   history and timed.
//! - [`downtime`]: each machine's downtime from its own console and its
//!   Node's bootID, and the budget judged on it, independently of the
//!   status the operators write.
//! - [`reboots`]: each reboot's path (kexec or firmware) and its times,
//!   from the console as the host timed it.
//! - [`hold`]: a wait held over a window (no grant, no reboot, no slot
//!   armed).
//! - [`progress`]: what is building, booting or awaited, as it happens.
//!
//! Under TCG on two cores the expensive part is the machines, so a
//! fleet installs them one at a time while the ones already installed
//! boot, and every wait has a deadline; a missed one fails the test with
//! what was awaited, the last answer, and the last console lines of the
//! machine concerned (or of every machine). Machines are killed when the
//! fleet is dropped, and with the test process if it is killed
//! (liken-testenv's spawner).

pub mod downtime;
pub mod history;
pub mod hold;
pub mod host;
pub mod machine;
pub mod progress;
pub mod reboots;
pub mod rollout;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use downtime::{Judgment, Sign};
use history::Record;
use host::{Host, MachineSpec};
use machine::Machine;
use progress::step;

/// How often a wait polls.
const POLL: Duration = Duration::from_secs(2);

/// A fleet: the host and its machines.
pub struct Fleet {
    /// The host's side.
    pub host: Host,
    /// The machines, in the deployment's order.
    pub machines: Vec<Machine>,
    /// The fleet's name (logs are named after it).
    pub name: String,
}

impl Fleet {
    /// Writes the install stick for the fleet from `release` (with the
    /// kernel arguments the installed machines keep), installs every
    /// machine from it and boots each as soon as it is installed, the
    /// leaders first.
    pub fn install(
        name: &str,
        host: Host,
        release: &Path,
        version: &str,
        dir: &Path,
        kernel_args: &[&str],
    ) -> Fleet {
        step(&format!(
            "writing the install stick for {} machines from release {version}",
            host.machines.len()
        ));
        let stick = crate::install::stick(
            &crate::images().liken,
            dir,
            release,
            &host.deployment,
            kernel_args,
        );
        let specs: Vec<MachineSpec> = host.machines.clone();
        let mut machines = Vec::new();
        for spec in &specs {
            let mut m = Machine::install(name, spec, dir, &stick, version);
            m.boot();
            machines.push(m);
        }
        Fleet {
            host,
            machines,
            name: name.to_owned(),
        }
    }

    /// The machine named `name`.
    pub fn machine(&mut self, name: &str) -> &mut Machine {
        self.machines
            .iter_mut()
            .find(|m| m.spec.name == name)
            .unwrap_or_else(|| panic!("the fleet has no machine {name}"))
    }

    /// Fails the test: `message`, then the last console lines of
    /// `machine` (or of every machine).
    pub fn fail(&mut self, machine: Option<&str>, message: &str) -> ! {
        let tails: Vec<String> = self
            .machines
            .iter_mut()
            .filter(|m| machine.is_none_or(|n| m.spec.name == n))
            .map(|m| m.tail(40))
            .collect();
        panic!(
            "{message}\n{}\nhost logs: {} and the control plane's in {}",
            tails.join("\n"),
            self.host.logs().display(),
            self.host.cp.dir().display()
        )
    }

    /// Polls `check` every two seconds until it gives a value, saying
    /// what it waits for every 30 s; after `within`, fails the test with
    /// the last reason `check` gave and the consoles of `machine` (or of
    /// every machine).
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        machine: Option<&str>,
        within: Duration,
        mut check: impl FnMut(&mut Fleet) -> Result<T, String>,
    ) -> T {
        match progress::poll(what, within, POLL, || check(self)) {
            Ok(v) => v,
            Err(why) => self.fail(machine, &why),
        }
    }

    /// Each machine's signs for the downtime judge: its console's and
    /// the test's power actions ([`Machine::signs`]) merged in time order
    /// with its Node's bootID and readiness from `records`.
    pub fn signs(&self, records: &[Record]) -> Vec<(String, Vec<(Instant, Sign)>)> {
        self.machines
            .iter()
            .map(|m| {
                let mut signs = m.signs();
                signs.extend(history::node_signs(records, &m.spec.name));
                // Stable: a console line and a watch event at the same
                // instant keep their sources' order.
                signs.sort_by_key(|(at, _)| *at);
                (m.spec.name.clone(), signs)
            })
            .collect()
    }

    /// The independent judgment of the budget over `[from, now)`: each
    /// machine's downtime from its own console and its Node
    /// ([`downtime`]), and where more than `max_unavailable` were down
    /// at once.
    pub fn judge(&self, records: &[Record], max_unavailable: usize, from: Instant) -> Judgment {
        Judgment::of(&self.signs(records), max_unavailable, from, Instant::now())
    }

    /// Every reboot each machine made, and its path, judged from its
    /// console as the host timed it ([`reboots`]).
    pub fn reboots(&self) -> Vec<reboots::Reboot> {
        self.machines
            .iter()
            .flat_map(|m| {
                let console = m.console.lock().map(|l| l.clone()).unwrap_or_default();
                reboots::decide_reboots(&m.spec.name, &reboots::timeline(&console, &m.power))
            })
            .collect()
    }

    /// `kubectl get <args> -o json` as the admin, parsed.
    pub fn get_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let out = self
            .host
            .kubectl()
            .arg("get")
            .args(args)
            .args(["-o", "json"])
            .output()
            .map_err(|e| format!("kubectl: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
        }
        serde_json::from_slice(&out.stdout).map_err(|e| format!("kubectl's JSON: {e}"))
    }
}

/// The scratch directory of a fleet test.
pub fn dir(name: &str) -> PathBuf {
    crate::scratch(name)
}

/// The static operator binary `make images` built for its OPERATORS
/// image (the bytes the releases' `liken.sh/<name>` images carry), which
/// the host runs as the cluster operator.
pub fn operator_binary(name: &str) -> PathBuf {
    crate::target_dir()
        .join("x86_64-unknown-linux-gnu/release-abort")
        .join(name)
}

/// A release of the end-to-end channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Release {
    /// Its version.
    pub version: String,
    /// `sha256:<hex>` of its release.yaml, as a Cluster's catalog pins it.
    pub digest: String,
    /// Its directory in the channel.
    pub dir: PathBuf,
}

/// The public key the end-to-end channel's releases and channel.yaml
/// are signed with (`make e2e-images` makes the pair once with `liken
/// keygen`, beside the channel): the fleets' deployments trust it.
pub fn release_key() -> PathBuf {
    crate::images()
        .dir
        .join("e2e-release-key")
        .join("release.pub")
}

/// The releases in the channel `dir`, oldest first, each with the digest
/// a Cluster's catalog pins it by.
pub fn releases_in(dir: &Path) -> Vec<Release> {
    crate::channel_releases(dir)
        .into_iter()
        .map(|d| {
            let yaml = std::fs::read(d.join("release.yaml"))
                .unwrap_or_else(|e| panic!("{}: {e}", d.display()));
            Release {
                version: d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                digest: format!("sha256:{}", liken_api::hash::sha256(&yaml)),
                dir: d,
            }
        })
        .collect()
}

/// The end-to-end channel `make e2e-images` builds
/// (`$IMAGES_OUT/channel-e2e`): N, N+1 and N+2, built once per test
/// process after [`crate::images`] (unless [`crate::images_just_built`]),
/// or the test fails with make's output.
pub fn channel() -> &'static (PathBuf, Vec<Release>) {
    static CHANNEL: std::sync::OnceLock<(PathBuf, Vec<Release>)> = std::sync::OnceLock::new();
    CHANNEL.get_or_init(|| {
        let images = crate::images();
        if !crate::images_just_built() {
            step("building the end-to-end channel (make e2e-images: three test releases)");
        }
        crate::make_images("e2e-images", &images.dir, "");
        let dir = images.dir.join("channel-e2e");
        let releases = releases_in(&dir);
        assert_eq!(
            releases.len(),
            3,
            "{} should hold N, N+1 and N+2: {releases:?}",
            dir.display()
        );
        (dir, releases)
    })
}
