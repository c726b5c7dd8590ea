//! `make demo NODE=upstream`: the demo's one machine as a real node,
//! with the API inside it, as a k3s leader has it.
//!
//! The machine's /usr/bin/k3s is the upstream node launcher
//! (`liken-upstream-k3s`, which says on every line that it is not k3s),
//! from the upstream channel's release N (`make upstream-images`): as
//! `k3s server` it runs etcd, kube-apiserver, kube-controller-manager
//! and kube-scheduler on the identity liken-init seeded from the layer,
//! then containerd, runc, the kubelet and kube-proxy, and applies init's
//! manifests, so both operators run as containers from the release's
//! airgap images. Nothing runs on this workstation but QEMU and `liken
//! serve`.
//!
//! The Cluster's endpoint is this workstation's own address and a free
//! port, which QEMU forwards to the machine's 6443: `liken kubectl home`
//! reaches the API the way a person reaches a real k3s leader, with the
//! admin credential `liken kubeconfig` derives from the identity (init
//! puts the endpoint's host in the API server's certificate through
//! config.yaml's `tls-san`). A workstation with no address but loopback
//! gets 127.0.0.1.
//!
//! The machine's disk is prepared as an installed one (slot A holding N
//! on trial, the layer on the ESP), not installed from a stick as the
//! stand-in demo's is: the stick's install of a 300 MB system image
//! would add minutes under TCG to a start that already takes ten.

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{Duration, Instant};

use liken_api::Slot;
use liken_testenv::spawn::Proc;
use qemu_tests::deployment;
use qemu_tests::disk::{Installed, SlotFiles, installed_disk_layered};
use qemu_tests::firmware::Ovmf;
use qemu_tests::fleet::host::{MachineSpec, Reach, machine_yaml, serve_channel};
use qemu_tests::fleet::progress::{poll, step};
use qemu_tests::fleet::{Release, release_key};
use qemu_tests::real_node::{Kubectl, upstream_channel, upstream_release_files};
use qemu_tests::{Launch, Vm, drives, run};

use super::names::{CLUSTER, MACHINE, console_log, link};

/// The leader's memory and CPUs: two, as k3s recommends for a server
/// (with one, under TCG, the controllers lost their leases; see
/// docs/testing.md, A fleet of real nodes).
const MEMORY_MIB: u32 = 3072;
const CPUS: u32 = 2;
/// How often a wait asks again.
const POLL: Duration = Duration::from_secs(3);

/// What runs while the demo is up: the machine and `liken serve`.
/// Dropping it stops both.
pub struct Running {
    /// The machine (QEMU ends when this is dropped).
    pub vm: Vm,
    /// `liken serve` of the upstream channel, for the upgrade hint.
    _serve: Proc,
}

/// Starts the demo's upstream machine in `dir` and waits, up to `start`
/// per step, until its Machine is Ready and the Cluster counts it;
/// returns what runs and the release the upgrade hint names.
pub fn start(dir: &Path, liken: &Path, start: Duration) -> (Running, Release) {
    let images = qemu_tests::images();
    let (channel, releases) = upstream_channel(images);
    let (n, next) = match releases.as_slice() {
        [n, next, ..] => (n.clone(), next.clone()),
        _ => panic!("{} holds no N and N+1", channel.display()),
    };
    let work = dir.join("work");
    let logs = work.join("host-logs");
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("{}: {e}", logs.display()));

    let reach = Reach::workstation();
    let listen = reach.listen();
    let api_port = free_port_on(listen);
    let endpoint = format!("https://{listen}:{api_port}");
    let (serve, serve_port) = serve_channel(liken, &channel, listen, &logs);
    let channel_url = format!("http://{}:{serve_port}", reach.from_guest());
    step(&format!(
        "the machine's API will be {endpoint} (QEMU forwards it to the machine's 6443); \
         liken serve shares the upstream channel as {channel_url}"
    ));

    let spec = MachineSpec::numbered(1, true, false);
    let deployment = work.join("deployment");
    // The deployment, made with the real CLI as a person makes one: the
    // machine as the leader, the release key trusted, the Cluster
    // targeting N from the channel, and the signed layer.
    let made = deployment::make(&deployment::Spec {
        liken,
        dir: &deployment,
        cluster: CLUSTER,
        endpoint: &endpoint,
        machines: &[deployment::Machine {
            name: spec.name.clone(),
            leader: true,
            document: Some(machine_yaml(&spec)),
        }],
        trusted: &[&release_key()],
        target: Some(deployment::Target {
            version: &n.version,
            digest: &n.digest,
            source: &channel_url,
        }),
    });
    let layer = made.layer(&work.join("layer.cpio"));
    link(&deployment, &dir.join(CLUSTER));

    let (boot_cpio, system) = upstream_release_files(images, &n.version);
    let files = SlotFiles {
        vmlinuz: images.vmlinuz.clone(),
        boot_cpio,
        system,
    };
    let machine = format!("liken.machine={MACHINE}");
    let disk = installed_disk_layered(
        &work,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a+3.conf",
            version: &n.version,
            extra: &[&machine, "liken.bless-deadline=1800"],
            files: &files,
            verity: None,
        }],
        None,
        &layer,
    );
    let firmware = work.join(MACHINE);
    std::fs::create_dir_all(&firmware).unwrap_or_else(|e| panic!("{}: {e}", firmware.display()));
    let ovmf = Ovmf::fresh(&firmware);
    let mut args = ovmf.args();
    args.extend(drives::virtio("disk", &disk.path, Some(0), false));
    args.extend(
        [
            "-netdev".to_owned(),
            format!("user,id=n0,hostfwd=tcp:{listen}:{api_port}-:6443"),
            "-device".to_owned(),
            format!("virtio-net-pci,netdev=n0,mac={}", spec.mac),
            "-device".to_owned(),
            "virtio-rng-pci".to_owned(),
        ]
        .map(OsString::from),
    );
    step(&format!(
        "starting {MACHINE} ({MEMORY_MIB} MiB, {CPUS} CPUs, TCG) from {} in slot A; its console \
         is {}",
        n.version,
        console_log().display()
    ));
    let mut vm = Vm::start(
        &format!("demo-{MACHINE}"),
        &args,
        &Launch {
            memory_mib: MEMORY_MIB,
            cpus: CPUS,
            reboot_in_place: true,
            ..Launch::default()
        },
    );

    let began = Instant::now();
    wait(&mut vm, "the API server in the machine", start, |vm| {
        vm.drain();
        let ready = vm
            .seen
            .iter()
            .any(|l| l.contains("liken-upstream-k3s (not k3s): kube-apiserver answers ready"));
        if ready {
            Ok(())
        } else if vm.seen.iter().any(|l| l.contains("started as k3s server")) {
            Err("the launcher runs; kube-apiserver is not ready yet".into())
        } else {
            Err("the machine boots".into())
        }
    });
    run(liken, &["kubeconfig", &deployment.to_string_lossy()]);
    let api = Kubectl::new(&deployment.join("identity/kubeconfig"));
    wait(
        &mut vm,
        &format!("Node {MACHINE} Ready (its kubelet reports it)"),
        start,
        |_| {
            let node = api.node(MACHINE).ok_or("no Node yet")?;
            if qemu_tests::real_node::ready(&node) {
                Ok(())
            } else {
                Err("not Ready yet".into())
            }
        },
    );
    wait(
        &mut vm,
        &format!("Machine {MACHINE} Ready (from its machine operator, a container)"),
        start,
        |_| {
            let m = api
                .json(&["get", "machine", MACHINE, "-o", "json"])
                .ok_or("no Machine yet")?;
            match m["status"]["phase"].as_str() {
                Some("Ready") => Ok(()),
                other => Err(format!("phase {other:?}")),
            }
        },
    );
    wait(
        &mut vm,
        "the Cluster's tally 1/1 (from the cluster operator, a container in the machine)",
        start,
        |_| {
            let c = api
                .json(&["get", "cluster", CLUSTER, "-o", "json"])
                .ok_or("no Cluster yet")?;
            match c["status"]["machines"]["summary"].as_str() {
                Some("1/1") => Ok(()),
                other => Err(format!("tally {other:?}")),
            }
        },
    );
    step(&format!(
        "{MACHINE} is up {:.0} s after QEMU started",
        began.elapsed().as_secs_f64()
    ));
    (Running { vm, _serve: serve }, next)
}

/// A TCP port on `address` that nothing listens on now.
fn free_port_on(address: Ipv4Addr) -> u16 {
    std::net::TcpListener::bind((address, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port on {address}: {e}"))
}

/// Waits up to `within` until `check` passes, as the stand-in demo's
/// waits do ([`poll`]); fails with the last answer and the machine's last
/// console lines.
fn wait(
    vm: &mut Vm,
    what: &str,
    within: Duration,
    mut check: impl FnMut(&mut Vm) -> Result<(), String>,
) {
    if let Err(why) = poll(what, within, POLL, || check(vm)) {
        vm.drain();
        panic!("{why}\n{MACHINE}'s last console lines:\n{}", vm.tail(40));
    }
}
