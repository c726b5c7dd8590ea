//! A real node on liken: one machine whose k3s is the upstream node
//! launcher (`liken-upstream-k3s`, `make upstream-images`), joined as a
//! follower with its agent token to a control plane on the host, whose
//! real kubelet registers the Node and reports it Ready, and whose init
//! blesses the boot from the real kubectl's answer to its own health
//! query.
//!
//! The host is the fleet harness's (`qemu_tests::fleet::host`): `liken
//! mint` and `liken new` (node-1 a leader the test never boots, whose
//! control plane the host plays; node-2 the follower booted here),
//! liken-testenv's etcd, kube-apiserver, kube-controller-manager (with
//! k3s's pod subnets) and kube-scheduler on the minted identity. In
//! place of the leader's k3s supervisor, the host registers the agent
//! token's bootstrap token and lets `system:bootstrappers` ask for
//! kubelet certificates (what the node stand-in's server does), and
//! binds `system:node-proxier` to `system:nodes` for kube-proxy.
//!
//! The machine boots an installed disk made with the real tools (as
//! `tests/slots.rs` does; no install from a stick) under OVMF: slot A
//! holds the upstream system image on trial (`liken-a+3.conf`), the ESP
//! the host deployment's layer packed by `liken layer`.
//!
//! Checked from signals the launcher does not produce: the Node as the
//! host's apiserver stores it, read by testenv's kubectl on the host,
//! Ready, with the kubelet's and containerd's own versions in its
//! nodeInfo and the pod subnet kube-controller-manager allocated; init's
//! `bless: ok` line. The launcher's `start times` line (what each
//! component took under TCG) and the test's own wall times are printed.
//!
//! A leader runs the control plane itself
//! ([`a_leader_runs_the_control_plane_and_its_own_node`]): one machine,
//! the only one of its deployment, boots `k3s server`; the launcher
//! starts etcd, kube-apiserver, kube-controller-manager and
//! kube-scheduler on the identity init seeded, and its own kubelet joins
//! that API through the bootstrap token the launcher registered. The
//! host has no control plane: it reaches the guest's 6443 only through
//! QEMU's forwarded port, with an admin kubeconfig `liken kubeconfig`
//! derives from the deployment's identity, and testenv's kubectl must
//! see the Node Ready (the kubelet's and containerd's versions, a pod
//! subnet, k3s's control-plane label), an approved bootstrap CSR, and the
//! Machine CRD that the deploy controller applied from init's seeded
//! manifests; init must bless the boot from `k3s kubectl` with k3s.yaml.
//! Each component's start time and the leader's memory in use once the
//! control plane settles are printed.
//!
//! Pods, on the same machine: the release's own manifests (read out of
//! its system image) applied from the host, since no leader runs here to
//! apply them, put the machine operator's DaemonSet pod on the node, and
//! a Deployment of two replicas of the release's workload image beside
//! it; every sandbox is the pause image the launcher pins, and every
//! image comes from the release's airgap archives. They pass as the
//! kubelet reports them to the host's apiserver: Running and Ready,
//! containers started with `containerd://` IDs, and again in new
//! containers after the reboot. The time from the apply to each is
//! printed.
//!
//! What the node's programs cost a release is measured too
//! ([`the_upstream_image_costs_its_slot_write`]): one machine on slot A
//! has init write the stand-in channel's newest release and then the
//! upstream channel's into slot B over its control socket, as the
//! machine operator asks for a downloaded release, and the test times
//! each write from the stand-in's request to init's answer.
//!
//! `#[ignore]`d: they need `make upstream-images` (which needs `make
//! testenv-node`) and take minutes under TCG; run them with
//! `make test-upstream-node`.

use std::process::Command;
use std::time::{Duration, Instant};

use liken_api::Slot;
use qemu_tests::deployment;
use qemu_tests::disk::{Installed, SlotFiles, installed_disk, installed_disk_layered};
use qemu_tests::firmware::Ovmf;
use qemu_tests::fleet::host::{Host, HostSpec, MachineSpec, Reach};
use qemu_tests::real_node::{
    K3S_SERVER_MINIMUM_MB, Kubectl, ctr_lists, free_port, ready, release_manifests,
    upstream_channel, upstream_system_image, workload_yaml,
};
use qemu_tests::{Launch, Vm, drives, images, run, scratch};

/// Up to the launcher's first line: OVMF, systemd-boot, the kernel,
/// init's steps.
const BOOT: Duration = Duration::from_secs(600);
/// From the launcher's start to the Node Ready.
const READY: Duration = Duration::from_secs(1500);

/// testenv's kubectl as the host's control plane's admin.
fn admin(host: &Host) -> Kubectl {
    Kubectl::new(&host.kubeconfig)
}

/// In place of the leader's k3s supervisor (see the module docs): the
/// agent token's bootstrap token and the roles of Kubernetes' TLS
/// bootstrap, and kube-proxy's role for the nodes.
fn let_agents_join(host: &Host) {
    let token = std::fs::read_to_string(host.deployment.join("identity/server/agent-token"))
        .unwrap_or_else(|e| panic!("the deployment's agent token: {e}"));
    let secret = token
        .trim()
        .rsplit_once(':')
        .map(|(_, s)| s.to_owned())
        .unwrap_or_else(|| panic!("the agent token {token:?} has no secret"));
    let hex = liken_api::hash::sha256(secret.as_bytes()).to_string();
    let hex = hex.trim_start_matches("sha256:");
    let (id, sec) = (&hex[..6], &hex[6..22]);
    let yaml = format!(
        "apiVersion: v1\nkind: Secret\ntype: bootstrap.kubernetes.io/token\nmetadata:\n  name: \
         bootstrap-token-{id}\n  namespace: kube-system\nstringData:\n  token-id: {id}\n  \
         token-secret: {sec}\n  usage-bootstrap-authentication: \"true\"\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: \
         upstream-node:bootstrapper\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: \
         ClusterRole\n  name: system:node-bootstrapper\nsubjects:\n- apiGroup: \
         rbac.authorization.k8s.io\n  kind: Group\n  name: system:bootstrappers\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: \
         upstream-node:autoapprove\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: \
         ClusterRole\n  name: system:certificates.k8s.io:certificatesigningrequests:nodeclient\n\
         subjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n  name: \
         system:bootstrappers\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: \
         upstream-node:proxier\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: \
         ClusterRole\n  name: system:node-proxier\nsubjects:\n- apiGroup: \
         rbac.authorization.k8s.io\n  kind: Group\n  name: system:nodes\n"
    );
    let file = host.logs().join("let-agents-join.yaml");
    std::fs::write(&file, yaml).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let out = admin(host)
        .command()
        .args(["apply", "-f"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("kubectl: {e}"));
    assert!(
        out.status.success(),
        "kubectl apply: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// From the manifests' apply to every pod Running and Ready.
const PODS: Duration = Duration::from_secs(600);

#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-node"]
fn a_real_kubelet_registers_the_node_and_init_blesses_it() {
    let began = Instant::now();
    let images = images();
    let system = upstream_system_image(images);
    println!(
        "upstream system image: {} bytes (the stand-in's: {} bytes)",
        std::fs::metadata(&system).map(|m| m.len()).unwrap_or(0),
        std::fs::metadata(&images.system_standin)
            .map(|m| m.len())
            .unwrap_or(0)
    );

    let dir = scratch("upstream-node");
    let leader = MachineSpec::numbered(1, true, false);
    let follower = MachineSpec::numbered(2, false, false);
    let host = Host::start(&HostSpec {
        dir: &dir,
        liken: &images.liken,
        reach: Reach::Slirp,
        cluster: "upstream",
        machines: &[leader, follower.clone()],
        channel: &images.dir.join("channel-standin"),
        release: None,
        trusted: None,
        node_cidrs: true,
    });
    let_agents_join(&host);
    let admin = admin(&host);

    let layer = host.layer(&dir.join("layer.cpio"));
    let files = SlotFiles {
        vmlinuz: images.vmlinuz.clone(),
        boot_cpio: images.boot_cpio.clone(),
        system: system.clone(),
    };
    let t = Instant::now();
    let disk = installed_disk_layered(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a+3.conf",
            version: "2026.12.07-001",
            extra: &["liken.machine=node-2", "liken.bless-deadline=1800"],
            files: &files,
            verity: None,
        }],
        None,
        &layer,
    );
    println!(
        "installed disk made in {:.1} s (slot A written on the host, not under TCG)",
        t.elapsed().as_secs_f64()
    );

    let ovmf = Ovmf::fresh(&dir);
    let mut args = ovmf.args();
    args.extend(drives::virtio("disk", &disk.path, Some(0), false));
    args.extend(
        [
            "-netdev",
            "user,id=n0",
            "-device",
            &format!("virtio-net-pci,netdev=n0,mac={}", follower.mac),
            "-device",
            "virtio-rng-pci",
        ]
        .map(std::ffi::OsString::from),
    );
    let started = Instant::now();
    let mut vm = Vm::start(
        "upstream-node",
        &args,
        &Launch {
            memory_mib: 2048,
            reboot_in_place: true,
            ..Launch::default()
        },
    );
    vm.expect(
        "liken-upstream-k3s (not k3s): the upstream node launcher",
        BOOT,
    );
    let launcher_at = started.elapsed();
    let times = vm.expect("liken-upstream-k3s (not k3s): start times:", READY);
    let in_guest = started.elapsed();

    // The Node as the host's apiserver has it, written by the kubelet.
    let deadline = Instant::now() + Duration::from_secs(120);
    let n = loop {
        if let Some(n) = admin.node("node-2").filter(ready) {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "node-2 is not Ready on the host's apiserver: {:?}\n{}",
            admin
                .node("node-2")
                .map(|n| n["status"]["conditions"].clone()),
            vm.tail(40)
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let host_ready = started.elapsed();
    let info = &n["status"]["nodeInfo"];
    assert_eq!(info["kubeletVersion"], "v1.36.3", "{info}");
    assert!(
        info["containerRuntimeVersion"].as_str().is_some_and(|v| v
            .starts_with("containerd://v2.4.2")
            || v.starts_with("containerd://2.4.2")),
        "{info}"
    );
    assert!(
        n["spec"]["podCIDR"]
            .as_str()
            .is_some_and(|c| c.starts_with("10.42.")),
        "{}",
        n["spec"]
    );
    let address = n["status"]["addresses"]
        .as_array()
        .and_then(|a| a.iter().find(|a| a["type"] == "InternalIP"))
        .map(|a| a["address"].clone());
    assert_eq!(
        address,
        Some(serde_json::json!("10.0.2.15")),
        "{}",
        n["status"]
    );

    // Init asks its own question (the Node Ready with a heartbeat from
    // this boot) and may bless before the launcher's watch prints its
    // `start times` line, so the line is looked for anywhere.
    let blessed = vm.expect_unordered("liken: bless: ok", Duration::from_secs(300));
    let bless_at = started.elapsed();

    // Pods: the release's own manifests (the CRDs, liken-system, the
    // machine operator's RBAC, admission policy and DaemonSet), applied
    // from the host as the leader's k3s would apply them from init's
    // seed, and the workload. Their sandboxes and containers come from
    // the release's airgap images alone (the pinned pause image, the
    // operator's, the workload's) and run under the real containerd and
    // runc; whether they run is read from the pod status the kubelet
    // reports to the host's apiserver.
    let manifests = release_manifests(&system, &dir);
    let applied = Instant::now();
    admin.apply(&manifests.join("crds"));
    admin.apply(&manifests.join("liken-system.yaml"));
    admin.apply(&manifests.join("machine-operator.yaml"));
    let workload = dir.join("workload.yaml");
    std::fs::write(&workload, workload_yaml(2, None))
        .unwrap_or_else(|e| panic!("{}: {e}", workload.display()));
    admin.apply(&workload);
    let operator = admin.wait_pods("node-2", &["liken-machine-operator-"], 1, &[], PODS, &vm);
    let operator_at = applied.elapsed();
    let web = admin.wait_pods("node-2", &["web-"], 2, &[], PODS, &vm);
    let pods_at = applied.elapsed();
    // The operator in its container reaches the API as a pod does (its
    // bound ServiceAccount token, the kubernetes Service carried by the
    // real kube-proxy): it seeds its Machine and renews its heartbeat
    // Lease, which the admission policy lets it hold only under the
    // token's node. Nothing else in this test writes either.
    admin.wait_heartbeat("node-2", Duration::from_secs(180));
    println!(
        "the machine operator's heartbeat Lease is held by node-2, {:.0} s after the apply",
        applied.elapsed().as_secs_f64()
    );
    // containerd holds the same containers, as the real ctr lists them
    // in the guest (the launcher prints the list when it changes).
    for (pod, ids) in operator.iter().chain(&web) {
        for id in ids {
            ctr_lists(&mut vm, id.trim_start_matches("containerd://"), pod);
        }
    }
    // The kubelet read init's drop-in (liken-init seed.rs,
    // KUBELET_DROP_IN): it no longer tries to make its default FlexVolume
    // directory on the read-only /usr, which it logs as an error when
    // it fails.
    vm.drain();
    let flex: Vec<&String> = vm
        .seen
        .iter()
        .filter(|l| l.contains("/usr/libexec/kubernetes"))
        .collect();
    assert!(
        flex.is_empty(),
        "the kubelet still uses /usr/libexec/kubernetes: {flex:?}"
    );
    println!(
        "pods on node-2 from the apply (TCG): the machine operator Running and Ready in \
         {:.0} s, both workload replicas in {:.0} s: {operator:?} {web:?}",
        operator_at.as_secs_f64(),
        pods_at.as_secs_f64()
    );

    // A reboot (Ctrl-Alt-Del: init's orderly shutdown, then the
    // firmware): the next boot finds the programs unpacked and the
    // kubelet's certificate kept on /var, and the real kubelet reports
    // the Node Ready from the new boot (its bootID, which the kubelet
    // reads from the kernel, changes).
    let old_boot = info["bootID"].clone();
    vm.ctrl_alt_del();
    vm.expect("liken: shutdown: ok", Duration::from_secs(120));
    let rebooted = Instant::now();
    vm.expect("liken: cmdline: ok", BOOT);
    vm.expect(
        "liken-upstream-k3s (not k3s): the node's programs are unpacked in",
        BOOT,
    );
    let again = vm.expect("liken-upstream-k3s (not k3s): start times:", READY);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(n) = admin.node("node-2").filter(ready)
            && n["status"]["nodeInfo"]["bootID"] != old_boot
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node-2 is not Ready from its new boot on the host's apiserver: {:?}\n{}",
            admin.node("node-2").map(|n| n["status"].clone()),
            vm.tail(40)
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let reboot_ready = rebooted.elapsed();
    // The pods come back on the new boot: the kubelet finds their
    // sandboxes gone with the old boot and starts new ones, so every
    // container ID is new.
    let before: Vec<String> = operator
        .iter()
        .chain(&web)
        .flat_map(|(_, ids)| ids.clone())
        .collect();
    let prefixes = ["liken-machine-operator-", "web-"];
    let back = admin.wait_pods("node-2", &prefixes, 3, &before, PODS, &vm);
    let pods_back = rebooted.elapsed();
    println!(
        "after the reboot, the three pods run again in new containers {:.0} s after init's \
         shutdown: {back:?}",
        pods_back.as_secs_f64()
    );
    println!("{times}");
    println!("{blessed}");
    println!("after the reboot: {again}");
    println!(
        "wall: QEMU start to the launcher {:.0} s, to its Node Ready {:.0} s, Ready on the \
         host {:.0} s, blessed {:.0} s; init's shutdown to Ready from the new boot on the host \
         {:.0} s; the whole test {:.0} s",
        launcher_at.as_secs_f64(),
        in_guest.as_secs_f64(),
        host_ready.as_secs_f64(),
        bless_at.as_secs_f64(),
        reboot_ready.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}

/// The leader's whole control plane in the guest: `k3s server` on the
/// identity init seeded, its own kubelet joining its own API, and the
/// host reaching that API only through QEMU's forwarded port.
#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-node"]
fn a_leader_runs_the_control_plane_and_its_own_node() {
    let began = Instant::now();
    let images = images();
    let system = upstream_system_image(images);

    // A deployment of one leader, made with the real CLI; its endpoint
    // is the address the guest has on QEMU's user network.
    let dir = scratch("upstream-leader");
    let deployment = dir.join("deployment");
    let d = deployment.to_string_lossy().into_owned();
    let liken = images.liken.to_string_lossy().into_owned();
    let leader = MachineSpec::numbered(1, true, false);
    let made = deployment::make(&deployment::Spec {
        liken: &images.liken,
        dir: &deployment,
        cluster: "upstream",
        endpoint: "https://10.0.2.15:6443",
        machines: &[deployment::Machine {
            name: leader.name.clone(),
            leader: true,
            document: Some(qemu_tests::fleet::host::machine_yaml(&leader)),
        }],
        trusted: &[],
        target: None,
    });
    let layer = made.layer(&dir.join("layer.cpio"));
    let files = SlotFiles {
        vmlinuz: images.vmlinuz.clone(),
        boot_cpio: images.boot_cpio.clone(),
        system,
    };
    let disk = installed_disk_layered(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a+3.conf",
            version: "2026.12.07-001",
            extra: &["liken.machine=node-1", "liken.bless-deadline=1800"],
            files: &files,
            verity: None,
        }],
        None,
        &layer,
    );

    // The only way in from the host: a port QEMU forwards to the
    // guest's 6443.
    let port = free_port();
    let ovmf = Ovmf::fresh(&dir);
    let mut args = ovmf.args();
    args.extend(drives::virtio("disk", &disk.path, Some(0), false));
    args.extend(
        [
            "-netdev",
            &format!("user,id=n0,hostfwd=tcp:127.0.0.1:{port}-:6443"),
            "-device",
            &format!("virtio-net-pci,netdev=n0,mac={}", leader.mac),
            "-device",
            "virtio-rng-pci",
        ]
        .map(std::ffi::OsString::from),
    );
    let memory_mib = 3072;
    let started = Instant::now();
    let mut vm = Vm::start(
        "upstream-leader",
        &args,
        &Launch {
            memory_mib,
            ..Launch::default()
        },
    );
    vm.expect(
        "liken-upstream-k3s (not k3s): the upstream node launcher, started as k3s server",
        BOOT,
    );
    let launcher_at = started.elapsed();
    vm.expect(
        "liken-upstream-k3s (not k3s): kube-apiserver answers ready",
        READY,
    );
    let api_at = started.elapsed();
    // The two lines come from two threads, in either order.
    let times = vm.expect_unordered(
        "liken-upstream-k3s (not k3s): control plane start times:",
        READY,
    );
    let node_times = vm.expect_unordered("liken-upstream-k3s (not k3s): start times:", READY);
    let in_guest = started.elapsed();

    // The host's view, through the forwarded port, with an admin
    // credential `liken kubeconfig` derives from the deployment's
    // identity (the CAs the leader's API trusts because init seeded
    // them) and testenv's kubectl.
    run(
        &liken,
        &[
            "kubeconfig",
            "-server",
            &format!("https://127.0.0.1:{port}"),
            &d,
        ],
    );
    let kubeconfig = deployment.join("identity/kubeconfig");
    let leader_api = Kubectl::new(&kubeconfig);
    let kubectl = |args: &[&str]| leader_api.text(args);
    let version: serde_json::Value = kubectl(&["get", "--raw", "/version"])
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_else(|| panic!("the leader's API did not answer /version through port {port}"));
    assert_eq!(version["gitVersion"], "v1.36.3", "{version}");
    let deadline = Instant::now() + Duration::from_secs(180);
    let n = loop {
        if let Some(n) = kubectl(&["get", "node", "node-1", "-o", "json"])
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .filter(ready)
        {
            break n;
        }
        assert!(
            Instant::now() < deadline,
            "node-1 is not Ready as the host sees it through port {port}\n{}",
            vm.tail(60)
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let host_ready = started.elapsed();
    let info = &n["status"]["nodeInfo"];
    assert_eq!(info["kubeletVersion"], "v1.36.3", "{info}");
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .is_some_and(|v| v.contains("2.4.2")),
        "{info}"
    );
    assert!(
        n["spec"]["podCIDR"]
            .as_str()
            .is_some_and(|c| c.starts_with("10.42.")),
        "{}",
        n["spec"]
    );
    assert_eq!(
        n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"], "true",
        "{}",
        n["metadata"]
    );
    // The kubelet's client certificate came through the TLS bootstrap
    // the launcher registered: kube-controller-manager approved and
    // signed its request.
    let csrs = kubectl(&["get", "csr", "-o", "json"]).unwrap_or_default();
    assert!(
        csrs.contains("system:bootstrap:") && csrs.contains("\"Approved\""),
        "no approved bootstrap CSR: {csrs}"
    );
    // The deploy controller applied init's seeded manifests: the CRDs.
    let deadline = Instant::now() + Duration::from_secs(180);
    while kubectl(&["get", "crd", "machines.liken.sh", "-o", "name"]).is_none() {
        assert!(
            Instant::now() < deadline,
            "the Machine CRD from server/manifests never reached the API\n{}",
            vm.tail(60)
        );
        std::thread::sleep(Duration::from_secs(3));
    }
    let blessed = vm.expect_unordered("liken: bless: ok", Duration::from_secs(300));
    let bless_at = started.elapsed();
    let settled = vm.expect_unordered(
        "liken-upstream-k3s (not k3s): control plane settled",
        Duration::from_secs(300),
    );
    println!("{times}");
    println!("{node_times}");
    println!("{blessed}");
    println!(
        "{settled} (the guest has {memory_mib} MiB; k3s documents {K3S_SERVER_MINIMUM_MB} MB as \
         a server's minimum)"
    );
    println!(
        "wall: QEMU start to the launcher {:.0} s, to the API ready {:.0} s, to its Node Ready \
         in the guest {:.0} s, Ready on the host through the forwarded port {:.0} s, blessed \
         {:.0} s; the whole test {:.0} s",
        launcher_at.as_secs_f64(),
        api_at.as_secs_f64(),
        in_guest.as_secs_f64(),
        host_ready.as_secs_f64(),
        bless_at.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}

/// A FAT disk (no partition table) holding `dirs` as `<name>/` and a
/// `script` of `<name> <name>` lines for the stand-in's `write-script`.
fn releases_disk(path: &std::path::Path, dirs: &[(&str, &std::path::Path)]) {
    let _ = std::fs::remove_file(path);
    let f = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    f.set_len(1 << 30)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    drop(f);
    let p = path.to_string_lossy().into_owned();
    run("mkfs.vfat", &["-F", "32", "-n", "RELEASES", &p]);
    let script = path.with_extension("script");
    let text: String = dirs.iter().map(|(n, _)| format!("{n} {n}\n")).collect();
    std::fs::write(&script, text).unwrap_or_else(|e| panic!("{}: {e}", script.display()));
    run("mcopy", &["-i", &p, &script.to_string_lossy(), "::script"]);
    for (name, dir) in dirs {
        run("mmd", &["-i", &p, &format!("::{name}")]);
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let e = e.unwrap_or_else(|e| panic!("{e}"));
            let file = e.file_name().to_string_lossy().into_owned();
            run(
                "mcopy",
                &[
                    "-i",
                    &p,
                    &e.path().to_string_lossy(),
                    &format!("::{name}/{file}"),
                ],
            );
        }
    }
}

#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-node"]
fn the_upstream_image_costs_its_slot_write() {
    let images = images();
    let (_, releases) = upstream_channel(images);
    let standin = images
        .standin_releases()
        .last()
        .cloned()
        .unwrap_or_else(|| panic!("no stand-in release (make qemu-images)"));
    let upstream = releases
        .last()
        .map(|r| r.dir.clone())
        .unwrap_or_else(|| panic!("no upstream release (make upstream-images)"));
    let size = |dir: &std::path::Path| {
        std::fs::metadata(dir.join("liken.sqfs"))
            .map(|m| m.len())
            .unwrap_or(0)
    };
    let dir = scratch("upstream-slot-write");
    // Slot A blessed (a write is refused while the boot is on trial),
    // older than both releases.
    let disk = installed_disk(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a.conf",
            version: "2026.12.01-001",
            extra: &["liken.standin=write-script:/dev/vdb"],
            files: &SlotFiles::standin(),
            verity: None,
        }],
    );
    let rel = dir.join("releases.img");
    releases_disk(&rel, &[("standin", &standin), ("upstream", &upstream)]);
    let ovmf = Ovmf::fresh(&dir);
    let mut args = ovmf.args();
    args.extend(drives::virtio("disk", &disk.path, Some(0), false));
    args.extend(drives::virtio("release", &rel, None, true));
    let began = Instant::now();
    let mut vm = Vm::launch("upstream-slot-write", &args);
    let mut figures = Vec::new();
    for (label, dir) in [("standin", &standin), ("upstream", &upstream)] {
        vm.expect(
            &format!("liken-standin-k3s: attempt {label}: asking init to write"),
            BOOT,
        );
        let asked = Instant::now();
        let answer = vm.expect(
            &format!("liken-standin-k3s: attempt {label} answered"),
            Duration::from_secs(1800),
        );
        let took = asked.elapsed().as_secs_f64();
        assert!(answer.contains("releaseWritten"), "{answer}");
        figures.push(format!(
            "{label}: {} bytes of system image (with its dm-verity tree), written into slot B \
             by init in {took:.0} s",
            size(dir)
        ));
    }
    for f in &figures {
        println!("{f}");
    }
    println!(
        "the whole test {:.0} s (the stand-in stages each release on /var before it asks)",
        began.elapsed().as_secs_f64()
    );
}

/// Sends `signal` to `child` with kill(1), as the runtime signals a
/// container, and waits up to 10 s for it to end; returns its status.
fn signal_and_wait(child: &mut std::process::Child, signal: &str) -> std::process::ExitStatus {
    run("kill", &["-s", signal, &child.id().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap_or_else(|e| panic!("waiting: {e}")) {
            return status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still running 10 s after SIG{signal}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The pause program waits until the runtime stops it, and then ends
/// with status 0 on SIGTERM and on SIGINT, as the kernel reports it.
#[test]
fn the_pause_program_waits_and_stops_on_term_or_int() {
    for signal in ["TERM", "INT"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_liken-pause"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("liken-pause: {e}"));
        std::thread::sleep(Duration::from_millis(300));
        // A child's end (SIGCHLD, here a stray one) is reaped, not an end.
        run("kill", &["-s", "CHLD", &child.id().to_string()]);
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            child.try_wait().ok().flatten().is_none(),
            "liken-pause ended before it was stopped"
        );
        let status = signal_and_wait(&mut child, signal);
        assert_eq!(status.code(), Some(0), "SIG{signal}: {status}");
    }
}

/// The workload answers HTTP with its host's name and ends with status
/// 0 on SIGTERM, checked by a TCP client and the kernel's exit status.
#[test]
fn the_workload_answers_and_stops_on_term() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port: {e}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_liken-workload"))
        .arg(port.to_string())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("liken-workload: {e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        use std::io::{Read, Write};
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "liken-workload did not listen on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer:?}");
    assert!(
        answer.ends_with(&format!("liken-workload on {}\n", host.trim())),
        "{answer:?}"
    );
    let status = signal_and_wait(&mut child, "TERM");
    assert_eq!(status.code(), Some(0), "{status}");
}
