//! A fleet of real nodes: a leader and a follower on one network
//! segment, both running the upstream node launcher
//! (`liken-upstream-k3s`, `make upstream-images`) at k3s's path. The API
//! lives in the leader: its launcher runs etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler on the identity init
//! seeded, and applies init's manifests (the CRDs, the Cluster, both
//! operators). The follower joins that API across the segment with the
//! agent token alone. The host has no control plane; it reaches the
//! leader's 6443 only through a port QEMU forwards.
//!
//! The topology: each machine has two cards. The first is on QEMU's
//! user network (DHCP, the default route: the way to the host). The
//! second is on the segment the two share, a QEMU `-netdev dgram` link
//! between their two UDP ends on the host's loopback, with the static
//! addresses the Machine documents give (192.168.77.1 and .2). The
//! Cluster's endpoint is the leader's segment address, so init writes it
//! as the follower's `server` and the leader's `tls-san`, and the segment
//! addresses are each node's `node-ip` (init's seed: the first static
//! IPv4 address), which the kubelets report and the apiserver advertises.
//!
//! Checked from signals neither liken nor the launcher produce:
//! - both Nodes Ready as their real kubelets report them to the leader's
//!   apiserver, read by testenv's kubectl on the host through the
//!   forwarded port, with the segment addresses as their InternalIPs and
//!   the pod subnets kube-controller-manager allocated;
//! - init's `bless: ok` on both consoles (init asks its own health
//!   question through `k3s kubectl`, the real kubectl);
//! - the shipped operators as containers from the release's airgap
//!   images: the machine operator's DaemonSet pod on each node, the
//!   cluster operator's two replicas on the leader (its affinity), all
//!   Running and Ready with containerd IDs that the guests' own `ctr`
//!   lists; each machine operator holds its heartbeat Lease from inside
//!   its container, the follower's across the segment through the
//!   kubernetes Service that the real kube-proxy carries to the leader;
//! - a workload of two replicas with a PodDisruptionBudget (minAvailable
//!   1), Ready as the kubelets' HTTP probes find them;
//! - what each host gives its kubelet and containerd, as a privileged pod
//!   on the node reads it (`qemu_tests::node_facts`): `/` shared,
//!   containerd's snapshots on /var, the pod's cgroup with the cpu,
//!   memory and pids controllers and the limits the kubelet wrote through
//!   them, bridge-nf-call-iptables and forwarding on, the machine-id the
//!   kubelet reports, the node password k3s's agent keeps.
//!
//! The second test brings up the same fleet and then rolls it out from
//! N to N+1 of the upstream channel (`make upstream-images`, signed by
//! the key the deployment trusts), which [`roll_out`] describes and
//! judges: the leader's turn first, taking the API away, then the
//! follower's, with a probe on the host asking each node's workload
//! replica every second.
//!
//! The times under TCG (each machine's QEMU start to its Node Ready, to
//! its blessing; the apply to the pods; each turn's shutdown, blessing
//! and Ready) and the leader's memory in use once its control plane
//! settles are printed.
//!
//! Both are `#[ignore]`d: they need `make upstream-images` (which needs
//! `make testenv-node`) and two machines under TCG; `make
//! test-upstream-fleet` runs the first (part of `make test`), `make
//! test-upstream-rollout` the second (about 56 minutes, not part of it).

use std::ffi::OsString;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qemu_tests::availability::{Prober, decide_gaps, decide_stopped};
use qemu_tests::deployment;
use qemu_tests::fleet::host::serve_channel;
use qemu_tests::fleet::machine::{begin_install, finish_install, installed_ovmf};
use qemu_tests::fleet::{Release, release_key};
use qemu_tests::install::blank_disk;
use qemu_tests::node_facts::{NodeFacts, node_facts};
use qemu_tests::real_node::{
    K3S_SERVER_MINIMUM_MB, Kubectl, ctr_lists, free_port, free_udp_port, internal_ip, ready,
    upstream_channel, workload_yaml,
};
use qemu_tests::{Launch, Stamped, Timeline, Vm, drives, images, run, scratch};

/// Up to the launcher's first line: OVMF, systemd-boot, the kernel,
/// init's steps (two machines share the host's CPUs).
const BOOT: Duration = Duration::from_secs(900);
/// From the launcher's start to the API or the Node Ready.
const READY: Duration = Duration::from_secs(1500);
/// From the apply (or the start of the control plane's own) to pods
/// Running and Ready.
const PODS: Duration = Duration::from_secs(900);
/// One machine's turn to N+1 under TCG, the other machine running:
/// download (270 MB through QEMU's user network), init's slot write
/// and its signature check, the drain, the reboot.
const TURN: Duration = Duration::from_secs(1500);
/// The workload's port on each node (its pods' hostPort), which QEMU
/// forwards from a port on the host's loopback for the availability
/// probe.
const WEB_HOST_PORT: u16 = 30080;

/// The Cluster's name.
const CLUSTER: &str = "upstream";

/// One machine of the fleet: its name, its cards' MAC addresses (the
/// user network's, the segment's) and its address on the segment.
struct Member {
    name: &'static str,
    leader: bool,
    user_mac: &'static str,
    segment_mac: &'static str,
    address: &'static str,
}

const LEADER: Member = Member {
    name: "node-1",
    leader: true,
    user_mac: "52:54:00:00:00:01",
    segment_mac: "52:54:00:00:77:01",
    address: "192.168.77.1",
};
const FOLLOWER: Member = Member {
    name: "node-2",
    leader: false,
    user_mac: "52:54:00:00:00:02",
    segment_mac: "52:54:00:00:77:02",
    address: "192.168.77.2",
};

/// The segment's prefix length.
const SEGMENT_PREFIX: u8 = 24;

/// The Machine document for `m`: DHCP on the user network's card (the
/// first entry, so its default route is the machine's), the static
/// segment address on the other.
fn machine_yaml(m: &Member) -> String {
    format!(
        "apiVersion: liken.sh/v1alpha1\nkind: Machine\nmetadata:\n  name: {name}\nspec:\n  \
         rebootPolicy: Auto\n  network:\n    interfaces:\n      - mac: \"{user}\"\n        \
         dhcp: true\n      - mac: \"{segment}\"\n        addresses:\n          - \
         \"{address}/{SEGMENT_PREFIX}\"\n",
        name = m.name,
        user = m.user_mac,
        segment = m.segment_mac,
        address = m.address,
    )
}

/// QEMU's arguments for `m`'s two cards: the user network (with the
/// leader's 6443 forwarded to `api_port` on the host's loopback, and
/// the workload's hostPort to `web_port`), and its end of the segment,
/// a UDP datagram link from `local` to `remote` on the loopback.
fn cards(m: &Member, api_port: u16, web_port: u16, local: u16, remote: u16) -> Vec<OsString> {
    let web = format!("hostfwd=tcp:127.0.0.1:{web_port}-:{WEB_HOST_PORT}");
    let user = if m.leader {
        format!("user,id=user,hostfwd=tcp:127.0.0.1:{api_port}-:6443,{web}")
    } else {
        format!("user,id=user,{web}")
    };
    [
        "-netdev".to_owned(),
        user,
        "-device".to_owned(),
        format!("virtio-net-pci,netdev=user,mac={}", m.user_mac),
        "-netdev".to_owned(),
        format!(
            "dgram,id=segment,local.type=inet,local.host=127.0.0.1,local.port={local},\
             remote.type=inet,remote.host=127.0.0.1,remote.port={remote}"
        ),
        "-device".to_owned(),
        format!("virtio-net-pci,netdev=segment,mac={}", m.segment_mac),
        "-device".to_owned(),
        "virtio-rng-pci".to_owned(),
    ]
    .map(OsString::from)
    .to_vec()
}

/// Waits until every one of `names`' Nodes is Ready as its kubelet
/// reports it, polling all of them each round so each one's time is its
/// own; the Nodes and when each was first seen Ready, after `started`.
fn wait_ready(
    api: &Kubectl,
    names: &[&str],
    started: Instant,
    within: Duration,
    vms: &[&Vm],
) -> Vec<(serde_json::Value, Duration)> {
    let deadline = Instant::now() + within;
    let mut seen: Vec<Option<(serde_json::Value, Duration)>> = vec![None; names.len()];
    loop {
        for (name, slot) in names.iter().zip(seen.iter_mut()) {
            if slot.is_none() {
                *slot = api.node(name).filter(ready).map(|n| (n, started.elapsed()));
            }
        }
        if seen.iter().all(Option::is_some) {
            return seen.into_iter().flatten().collect();
        }
        let waiting: Vec<_> = names
            .iter()
            .zip(&seen)
            .filter(|(_, s)| s.is_none())
            .map(|(n, _)| *n)
            .collect();
        assert!(
            Instant::now() < deadline,
            "{waiting:?} not Ready on the leader's API within {} s: {:?}\n{}",
            within.as_secs(),
            waiting
                .iter()
                .map(|n| api.node(n).map(|n| n["status"]["conditions"].clone()))
                .collect::<Vec<_>>(),
            vms.iter()
                .map(|v| v.tail(40))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// The PodDisruptionBudget over the workload: one replica always
/// available, so a drain may evict only one of the two.
fn budget_yaml() -> String {
    "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: web\n  namespace: \
     default\nspec:\n  minAvailable: 1\n  selector:\n    matchLabels:\n      app: web\n"
        .to_owned()
}

/// A running fleet, as [`bring_up`] leaves it: the workload Ready on
/// both nodes, the operators in their containers, both boots blessed.
struct Up {
    /// The leader's API through the forwarded port.
    api: Kubectl,
    leader: Vm,
    follower: Vm,
    /// Each machine's console lines as the host stamped them (the
    /// leader's first).
    timelines: [Timeline; 2],
    /// The host's ports forwarded to each node's workload hostPort.
    web_ports: [u16; 2],
    /// The upstream channel and its releases N and N+1.
    channel: PathBuf,
    releases: Vec<Release>,
    /// Each host as its facts pod read it before the rollout (the
    /// leader's first).
    facts: [NodeFacts; 2],
    /// The test's scratch directory.
    dir: PathBuf,
    began: Instant,
}

#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-fleet"]
fn a_leader_and_a_follower_on_one_segment_run_real_nodes_and_the_operators_as_containers() {
    let up = bring_up("upstream-fleet");
    println!("the whole test {:.0} s", up.began.elapsed().as_secs_f64());
}

#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-rollout"]
fn a_fleet_of_real_nodes_rolls_out_n_plus_1_with_the_api_in_the_leader() {
    let mut up = bring_up("upstream-rollout");
    roll_out(
        &up.api,
        [&mut up.leader, &mut up.follower],
        &up.timelines,
        up.web_ports,
        &up.channel,
        &up.dir,
        [&up.releases[0], &up.releases[1]],
    );
    // Each host on N+1, as its facts pod reads it: every promise holds
    // again, and the machine-id and node password are the ones N had.
    for (m, before) in [&LEADER, &FOLLOWER].into_iter().zip(&up.facts) {
        let after = node_facts(
            &up.api,
            &up.dir,
            &format!("facts-after-{}", m.name),
            m.name,
            PODS,
        );
        assert_eq!(
            (&after.machine_id, &after.password_sha256),
            (&before.machine_id, &before.password_sha256),
            "{}'s machine-id or node password changed across the upgrade",
            m.name
        );
    }
    println!("the whole test {:.0} s", up.began.elapsed().as_secs_f64());
}

/// Both machines installed with N and switched on together, checked as
/// the module's first part says; `name` names the scratch directory and
/// the consoles' logs.
fn bring_up(name: &str) -> Up {
    let began = Instant::now();
    let images = images();
    let (channel, releases) = upstream_channel(images);
    let n = &releases[0];

    // The deployment, made with the real CLI: the endpoint is the
    // leader's address on the segment; the trust root is the key the
    // upstream channel is signed with, so init writes N+1 only once its
    // signature checks out.
    let dir = scratch(name);
    let deployment = dir.join("deployment");
    let d = deployment.to_string_lossy().into_owned();
    let liken = images.liken.to_string_lossy().into_owned();
    let made = deployment::make(&deployment::Spec {
        liken: &images.liken,
        dir: &deployment,
        cluster: CLUSTER,
        endpoint: &format!("https://{}:6443", LEADER.address),
        machines: &[&LEADER, &FOLLOWER].map(|m| deployment::Machine {
            name: m.name.to_owned(),
            leader: m.leader,
            document: Some(machine_yaml(m)),
        }),
        trusted: &[&release_key()],
        target: None,
    });

    // Both installed from one `liken stick` image at once, as a person
    // installs a fleet: each picks its own entry in the stick's menu,
    // and install mode writes N into slot A (its dm-verity root hash on
    // the entry), the layer's part for its role onto the ESP and the
    // 30-minute blessing deadline onto its entries. The install VMs
    // overlap: the second boots while the first writes. Each has its own
    // copy of the image, as a person installing two machines at once
    // writes two sticks (QEMU locks an image a VM may write, and
    // systemd-boot writes its random seed to the ESP it boots from).
    let stick = qemu_tests::install::stick(
        &images.liken,
        &dir,
        &n.dir,
        &made.dir,
        &["liken.bless-deadline=1800"],
    );
    let installing = Instant::now();
    let mut installs: Vec<(&Member, PathBuf, Vm)> = [&LEADER, &FOLLOWER]
        .into_iter()
        .map(|m| {
            let mdir = dir.join(m.name);
            std::fs::create_dir_all(&mdir).unwrap_or_else(|e| panic!("{}: {e}", mdir.display()));
            let disk = mdir.join("disk.img");
            blank_disk(&disk);
            let own = mdir.join("stick.img");
            std::fs::copy(&stick, &own).unwrap_or_else(|e| {
                panic!("copying {} to {}: {e}", stick.display(), own.display())
            });
            let vm = begin_install(
                &format!("{name}-{}", m.name),
                &mdir,
                &own,
                &disk,
                m.name,
                &n.version,
            );
            (m, disk, vm)
        })
        .collect();
    for (m, _, vm) in &mut installs {
        finish_install(vm, m.name);
    }
    let installed = installing.elapsed();
    let disks: Vec<PathBuf> = installs.into_iter().map(|(_, disk, _)| disk).collect();

    // Both machines at once, as a fleet's machines are switched on.
    let api_port = free_port();
    let web_ports = [free_port(), free_port()];
    let (leader_end, follower_end) = (free_udp_port(), free_udp_port());
    let timelines: [Timeline; 2] = Default::default();
    let start = |m: &Member, local: u16, remote: u16, memory_mib: u32, cpus: u32| {
        let i = usize::from(!m.leader);
        let mut args = installed_ovmf(&dir.join(m.name)).args();
        args.extend(drives::virtio("disk", &disks[i], Some(0), false));
        args.extend(cards(m, api_port, web_ports[i], local, remote));
        Vm::start(
            &format!("{name}-{}", m.name),
            &args,
            &Launch {
                memory_mib,
                cpus,
                reboot_in_place: true,
                timeline: Some(Arc::clone(&timelines[i])),
                ..Launch::default()
            },
        )
    };
    let started = Instant::now();
    // The leader has two CPUs, as k3s recommends for a server: on one,
    // under TCG, etcd, the API server and the kubelets' first requests
    // starved the controller manager's and scheduler's lease renewals
    // (5 s request timeouts), each lost its lease, and the launcher
    // exited as k3s does, five times in 20 minutes.
    let mut leader = start(&LEADER, leader_end, follower_end, 3072, 2);
    let mut follower = start(&FOLLOWER, follower_end, leader_end, 2048, 1);

    leader.expect(
        "liken-upstream-k3s (not k3s): the upstream node launcher, started as k3s server",
        BOOT,
    );
    follower.expect(
        "liken-upstream-k3s (not k3s): the upstream node launcher, started as k3s agent",
        BOOT,
    );
    leader.expect(
        "liken-upstream-k3s (not k3s): kube-apiserver answers ready",
        READY,
    );
    let api_at = started.elapsed();

    // The host's view: an admin credential `liken kubeconfig` derives
    // from the deployment's identity, through the forwarded port.
    run(
        &liken,
        &[
            "kubeconfig",
            "-server",
            &format!("https://127.0.0.1:{api_port}"),
            &d,
        ],
    );
    let api = Kubectl::new(&deployment.join("identity/kubeconfig"));
    let readies = wait_ready(
        &api,
        &[LEADER.name, FOLLOWER.name],
        started,
        READY,
        &[&leader, &follower],
    );
    let at: Vec<Duration> = readies.iter().map(|(_, at)| *at).collect();
    let mut nodes = Vec::new();
    for (m, (n, _)) in [&LEADER, &FOLLOWER].into_iter().zip(&readies) {
        assert_eq!(n["status"]["nodeInfo"]["kubeletVersion"], "v1.36.3");
        assert_eq!(
            internal_ip(n).as_deref(),
            Some(m.address),
            "{}'s kubelet does not report its segment address: {}",
            m.name,
            n["status"]["addresses"]
        );
        let cidr = n["spec"]["podCIDR"].as_str().unwrap_or_default().to_owned();
        assert!(cidr.starts_with("10.42."), "{}: {}", m.name, n["spec"]);
        let control_plane = &n["metadata"]["labels"]["node-role.kubernetes.io/control-plane"];
        assert_eq!(
            control_plane.as_str() == Some("true"),
            m.leader,
            "{}'s control-plane label: {control_plane}",
            m.name
        );
        nodes.push(cidr);
    }
    assert_ne!(nodes[0], nodes[1], "both Nodes have one pod subnet");
    // The follower joined through Kubernetes' TLS bootstrap with the
    // bootstrap token the leader's launcher registered from the agent
    // token: kube-controller-manager in the leader approved its request.
    let csrs = api.json(&["get", "csr", "-o", "json"]).unwrap_or_default();
    let bootstrapped = csrs["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|c| {
                    c["spec"]["username"]
                        .as_str()
                        .is_some_and(|u| u.starts_with("system:bootstrap:"))
                        && c["status"]["conditions"].as_array().is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c["type"] == "Approved" && c["status"] == "True")
                        })
                })
                .count()
        })
        .unwrap_or(0);
    assert!(
        bootstrapped >= 2,
        "not both kubelets' bootstrap requests were approved: {csrs}"
    );

    // Init blesses each boot from its own health question, which it asks
    // through the real kubectl.
    let leader_blessed = leader.expect_unordered("liken: bless: ok", Duration::from_secs(600));
    let leader_bless_at = started.elapsed();
    let follower_blessed = follower.expect_unordered("liken: bless: ok", Duration::from_secs(600));
    let follower_bless_at = started.elapsed();

    // The operators, as the leader's k3s deploys them from init's seeded
    // manifests (nothing here applies them): containers from the
    // release's airgap images, run by the guests' containerd and runc.
    let machine_ops: Vec<_> = [&LEADER, &FOLLOWER]
        .iter()
        .zip([&leader, &follower])
        .map(|(m, vm)| api.wait_pods(m.name, &["liken-machine-operator-"], 1, &[], PODS, vm))
        .collect();
    let cluster_ops = api.wait_pods(
        LEADER.name,
        &["liken-cluster-operator-"],
        2,
        &[],
        PODS,
        &leader,
    );
    let operators_at = started.elapsed();
    for m in [&LEADER, &FOLLOWER] {
        api.wait_heartbeat(m.name, Duration::from_secs(300));
    }
    let heartbeats_at = started.elapsed();
    // Each machine operator seeded its Machine's status from its node.
    let machines = api
        .json(&["get", "machines", "-o", "json"])
        .unwrap_or_default();
    for m in [&LEADER, &FOLLOWER] {
        let found = machines["items"]
            .as_array()
            .and_then(|items| items.iter().find(|i| i["metadata"]["name"] == m.name));
        assert!(
            found.is_some_and(|i| !i["status"].is_null()),
            "the Machine {} has no status from its operator: {machines}",
            m.name
        );
    }

    // The workload and its budget, from the host. Its pods claim a
    // hostPort, which the Pod Security level liken enforces by default
    // (baseline) refuses, so its namespace opts out as a person's would.
    let labelled = api.text(&[
        "label",
        "namespace",
        "default",
        "pod-security.kubernetes.io/enforce=privileged",
        "--overwrite",
    ]);
    assert!(labelled.is_some(), "kubectl label namespace default failed");

    // Each host as a pod on it reads it (privileged, so after the label),
    // both at once.
    let facts_began = Instant::now();
    let facts: [NodeFacts; 2] = std::thread::scope(|s| {
        let read = |m: &'static Member| {
            let (api, dir) = (api.clone(), dir.clone());
            s.spawn(move || node_facts(&api, &dir, &format!("facts-{}", m.name), m.name, PODS))
        };
        let (l, f) = (read(&LEADER), read(&FOLLOWER));
        [l, f].map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
    });
    for ((m, f), (node, _)) in [&LEADER, &FOLLOWER].iter().zip(&facts).zip(&readies) {
        assert_eq!(
            node["status"]["nodeInfo"]["machineID"].as_str(),
            Some(f.machine_id.as_str()),
            "{}'s kubelet reports another machine-id than its host's /etc/machine-id",
            m.name
        );
        println!(
            "{}'s host, from its facts pod: / {}, containerd's snapshots on {}, the pod's \
             cgroup with {} and its limits, bridge-nf-call-iptables and ip_forward 1 \
             (br_netfilter {}), machine-id {}, node password sha256 {}…",
            m.name,
            f.root_propagation,
            f.snapshots_on,
            qemu_tests::node_facts::POD_CONTROLLERS.join(", "),
            f.br_netfilter,
            f.machine_id,
            &f.password_sha256[..12.min(f.password_sha256.len())]
        );
    }
    let facts_at = facts_began.elapsed();
    let applied = Instant::now();
    let workload = dir.join("workload.yaml");
    std::fs::write(
        &workload,
        format!(
            "{}---\n{}",
            workload_yaml(2, Some(WEB_HOST_PORT)),
            budget_yaml()
        ),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", workload.display()));
    api.apply(&workload);
    let deadline = Instant::now() + PODS;
    let web = loop {
        let on_leader = api.pods_on(LEADER.name, &["web-"]);
        let on_follower = api.pods_on(FOLLOWER.name, &["web-"]);
        let running: Vec<_> = on_leader
            .iter()
            .chain(&on_follower)
            .filter_map(|p| {
                qemu_tests::real_node::decide_pod(p)
                    .ok()
                    .map(|ids| (p["spec"]["nodeName"].clone(), ids))
            })
            .collect();
        if running.len() == 2 {
            break running;
        }
        assert!(
            Instant::now() < deadline,
            "the workload's two replicas are not Running and Ready within {} s\nevents:\n{}",
            PODS.as_secs(),
            api.events()
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let web_at = applied.elapsed();
    let budget = api
        .json(&["get", "pdb", "web", "-o", "json"])
        .unwrap_or_default();
    assert_eq!(
        budget["status"]["disruptionsAllowed"], 1,
        "the budget over two Ready replicas allows one disruption: {}",
        budget["status"]
    );

    // The runtimes hold those containers, as each guest's ctr lists them.
    for (m, pods) in [(&LEADER, &machine_ops[0]), (&FOLLOWER, &machine_ops[1])] {
        let vm = if m.leader { &mut leader } else { &mut follower };
        for (pod, ids) in pods {
            for id in ids {
                ctr_lists(vm, id.trim_start_matches("containerd://"), pod);
            }
        }
    }
    for (pod, ids) in &cluster_ops {
        for id in ids {
            ctr_lists(&mut leader, id.trim_start_matches("containerd://"), pod);
        }
    }
    for (node, ids) in &web {
        let vm = if node == LEADER.name {
            &mut leader
        } else {
            &mut follower
        };
        for id in ids {
            ctr_lists(vm, id.trim_start_matches("containerd://"), "web");
        }
    }

    let settled = leader.expect_unordered(
        "liken-upstream-k3s (not k3s): control plane settled",
        Duration::from_secs(600),
    );
    println!("{leader_blessed}");
    println!("{follower_blessed}");
    println!(
        "{settled} (the leader has 3072 MiB; k3s documents {K3S_SERVER_MINIMUM_MB} MB as a \
         server's minimum)"
    );
    println!(
        "wall (TCG, two machines sharing the host's CPUs): both installed from the stick \
         in {:.0} s; then QEMU start to the leader's API ready {:.0} s; to node-1 Ready {:.0} s, node-2 Ready {:.0} s; blessed {:.0} s and \
         {:.0} s; the operators' pods Running and Ready {:.0} s, both heartbeats held {:.0} s; \
         both facts pods done in {:.0} s; the workload's two replicas Ready {:.0} s after its \
         apply ({web:?}); the test so far {:.0} s",
        installed.as_secs_f64(),
        api_at.as_secs_f64(),
        at[0].as_secs_f64(),
        at[1].as_secs_f64(),
        leader_bless_at.as_secs_f64(),
        follower_bless_at.as_secs_f64(),
        operators_at.as_secs_f64(),
        heartbeats_at.as_secs_f64(),
        facts_at.as_secs_f64(),
        web_at.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
    Up {
        api,
        leader,
        follower,
        timelines,
        web_ports,
        channel,
        releases,
        facts,
        dir,
        began,
    }
}

/// What a Node said about its machine before the rollout: the
/// kubelet's machine-id and boot id, and the workload pod on it.
struct Before {
    machine_id: String,
    boot_id: String,
    web_pod: String,
}

/// The rollout N -> N+1 on the running fleet, judged from the host.
///
/// The Cluster's target moves to N+1 in a catalog served by `liken
/// serve` on the host (the machines reach it at 10.0.2.2 through QEMU's
/// user network), with a budget of one machine. The leader goes first:
/// the machine operator DaemonSet's template still names N, and the
/// cluster operator grants leaders first while it lags (the seed's
/// rule), so the leader's turn takes the API away while the follower's
/// operator waits, and the leader's own k3s, back on N+1, brings back
/// the API, the cluster operator and the new template, whose pods the
/// steward refreshes on each machine once it runs N+1. Then the
/// follower's turn.
///
/// Checked from signals liken does not produce:
/// - each machine's console, as the host stamped its lines: init's
///   orderly shutdown, the trial boot of slot B, the blessing; the two
///   machines' downtimes (shutdown to blessing) never overlap;
/// - the workload, asked over HTTP every second from the host on each
///   node's hostPort: at every moment at least one replica answered, and
///   each node's replica stopped answering (its container stopped by the
///   drain's eviction) before that node's shutdown began;
/// - each Node as its kubelet reports it after the reboot: Ready, a new
///   boot id, the same machine-id.
fn roll_out(
    api: &Kubectl,
    vms: [&mut Vm; 2],
    timelines: &[Timeline; 2],
    web_ports: [u16; 2],
    channel: &Path,
    dir: &Path,
    [n, n1]: [&Release; 2],
) {
    let members = [&LEADER, &FOLLOWER];
    let before: Vec<Before> = members
        .iter()
        .map(|m| {
            let node = api
                .node(m.name)
                .unwrap_or_else(|| panic!("no Node {}", m.name));
            let info = &node["status"]["nodeInfo"];
            let web = api.pods_on(m.name, &["web-"]);
            Before {
                machine_id: info["machineID"].as_str().unwrap_or_default().to_owned(),
                boot_id: info["bootID"].as_str().unwrap_or_default().to_owned(),
                web_pod: web
                    .first()
                    .and_then(|p| p["metadata"]["name"].as_str())
                    .unwrap_or_else(|| panic!("no workload pod on {}", m.name))
                    .to_owned(),
            }
        })
        .collect();

    // The witness starts first and must hear both replicas before the
    // rollout starts, so a gap it reports is the rollout's.
    let prober = Prober::start(&web_ports);
    let deadline = Instant::now() + Duration::from_secs(120);
    while (0..2).any(|t| {
        !prober
            .samples()
            .iter()
            .any(|s| s.target == t && s.answer.is_some())
    }) {
        assert!(
            Instant::now() < deadline,
            "the workload does not answer on both nodes' hostPort {WEB_HOST_PORT} from the host \
             within 120 s: {:?}",
            prober.samples().last()
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    let logs = dir.join("host-logs");
    std::fs::create_dir_all(&logs).unwrap_or_else(|e| panic!("{}: {e}", logs.display()));
    let liken = &qemu_tests::images().liken;
    let (_serve, serve_port) = serve_channel(liken, channel, Ipv4Addr::LOCALHOST, &logs);
    let began = Instant::now();
    let catalog: Vec<serde_json::Value> = [n, n1]
        .iter()
        .map(|r| serde_json::json!({"version": r.version, "digest": r.digest}))
        .collect();
    let patch = serde_json::json!({"spec": {
        "version": n1.version,
        "disruptionBudget": {"maxUnavailable": 1},
        "releases": {
            "source": format!("http://10.0.2.2:{serve_port}"),
            "catalog": catalog,
        },
    }});
    let patched = api.text(&[
        "patch",
        "cluster",
        CLUSTER,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    assert!(patched.is_some(), "kubectl patch cluster {CLUSTER} failed");
    println!(
        "the Cluster's target is now {} (from {})",
        n1.version, n.version
    );

    // Each machine's turn, the leader's first: its orderly shutdown, the
    // trial boot of slot B, its blessing, its Node Ready again on a new
    // boot as its kubelet reports it.
    let [leader, follower] = vms;
    let mut turns = Vec::new();
    for (m, vm) in members.iter().zip([leader, follower]) {
        let shutdown = vm.expect("liken: shutdown: ok (reboot requested)", TURN);
        let assessed = vm.expect("liken: assess: ok (slot B on trial", BOOT);
        let blessed = vm.expect("liken: bless: ok", READY);
        let deadline = Instant::now() + READY;
        let i = usize::from(!m.leader);
        let node = loop {
            if let Some(node) = api.node(m.name).filter(|n| {
                ready(n) && n["status"]["nodeInfo"]["bootID"].as_str() != Some(&before[i].boot_id)
            }) {
                break node;
            }
            assert!(
                Instant::now() < deadline,
                "{} not Ready on a new boot within {} s after its blessing ({blessed}): {:?}\n{}",
                m.name,
                READY.as_secs(),
                api.node(m.name).map(|n| n["status"]["conditions"].clone()),
                vm.tail(40)
            );
            std::thread::sleep(Duration::from_secs(2));
        };
        let ready_at = began.elapsed();
        assert_eq!(
            node["status"]["nodeInfo"]["machineID"].as_str(),
            Some(before[i].machine_id.as_str()),
            "{}'s machine-id changed across the upgrade",
            m.name
        );
        println!(
            "{}: {shutdown}\n{}: {assessed}\n{}: {blessed}",
            m.name, m.name, m.name
        );
        turns.push(ready_at);
    }

    // The rollout as liken reports it, for the record: both Machines on
    // N+1 in slot B, the Cluster's rollout complete.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let machines = api
            .json(&["get", "machines", "-o", "json"])
            .unwrap_or_default();
        let on_target = members
            .iter()
            .filter(|m| {
                machines["items"].as_array().is_some_and(|items| {
                    items.iter().any(|i| {
                        i["metadata"]["name"] == m.name
                            && i["status"]["boot"]["version"] == n1.version.as_str()
                            && i["status"]["boot"]["slot"] == "B"
                    })
                })
            })
            .count();
        let cluster = api
            .json(&["get", "cluster", CLUSTER, "-o", "json"])
            .unwrap_or_default();
        let complete = cluster["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Progressing" && c["reason"] == "RolloutComplete")
            });
        if on_target == 2 && complete {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the rollout is not complete within 600 s of the follower's return: {on_target}/2 \
             Machines on {} in slot B; the Cluster's conditions: {}",
            n1.version,
            cluster["status"]["conditions"]
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    let complete_at = began.elapsed();

    // The operators from N+1's images: the cluster operator's Deployment
    // as the leader's k3s applied N+1's manifests, and each machine's
    // operator pod refreshed by the steward once its machine ran N+1.
    let wanted = |op: &str| format!("liken.sh/{op}:{}", n1.version);
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let images_of = |prefix: &str| -> Vec<String> {
            members
                .iter()
                .flat_map(|m| api.pods_on(m.name, &[prefix]))
                .filter(|p| qemu_tests::real_node::decide_pod(p).is_ok())
                .filter_map(|p| {
                    p["spec"]["containers"][0]["image"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect()
        };
        let machine_ops = images_of("liken-machine-operator-");
        let cluster_ops = images_of("liken-cluster-operator-");
        let refreshed = machine_ops.len() == 2
            && machine_ops
                .iter()
                .all(|i| *i == wanted("liken-machine-operator"))
            && !cluster_ops.is_empty()
            && cluster_ops
                .iter()
                .all(|i| *i == wanted("liken-cluster-operator"));
        if refreshed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the operators do not all run N+1's images within 600 s: machine operators \
             {machine_ops:?}, cluster operators {cluster_ops:?}"
        );
        std::thread::sleep(Duration::from_secs(3));
    }

    // The workload, as its clients saw it.
    let samples = prober.finish();
    let gaps = decide_gaps(&samples, 2);
    assert!(
        gaps.is_empty(),
        "no replica of the workload answered on either node for {} span(s): {:?}",
        gaps.len(),
        gaps.iter()
            .map(|g| format!(
                "from {:.0} s to {:.0} s after the target moved",
                g.from.saturating_duration_since(began).as_secs_f64(),
                g.to.saturating_duration_since(began).as_secs_f64()
            ))
            .collect::<Vec<_>>()
    );
    let mut downtimes = Vec::new();
    for (i, m) in members.iter().enumerate() {
        let shutdown = stamped(&timelines[i], "liken: shutdown: ok (reboot requested)");
        let blessed = stamped_after(&timelines[i], "liken: bless: ok", shutdown);
        let stopped = decide_stopped(&samples, i, &before[i].web_pod, began, shutdown);
        assert!(
            stopped.is_ok(),
            "{}: {}",
            m.name,
            stopped.err().unwrap_or_default()
        );
        downtimes.push((shutdown, blessed));
    }
    let (l, f) = (downtimes[0], downtimes[1]);
    assert!(
        l.1 <= f.0 || f.1 <= l.0,
        "both machines were down at once: the leader from {:.0} s to {:.0} s, the follower from \
         {:.0} s to {:.0} s after the target moved",
        l.0.saturating_duration_since(began).as_secs_f64(),
        l.1.saturating_duration_since(began).as_secs_f64(),
        f.0.saturating_duration_since(began).as_secs_f64(),
        f.1.saturating_duration_since(began).as_secs_f64()
    );
    let since = |t: Instant| t.saturating_duration_since(began).as_secs_f64();
    println!(
        "rollout to {} (TCG, seconds after the target moved): node-1 down {:.0}-{:.0} (shutdown \
         to blessing), Ready {:.0}; node-2 down {:.0}-{:.0}, Ready {:.0}; rollout complete {:.0}; \
         the workload answered throughout ({} probes, no gap)",
        n1.version,
        since(l.0),
        since(l.1),
        turns[0].as_secs_f64(),
        since(f.0),
        since(f.1),
        turns[1].as_secs_f64(),
        complete_at.as_secs_f64(),
        samples.len()
    );
}

/// When the first console line containing `needle` arrived at the host.
fn stamped(timeline: &Timeline, needle: &str) -> Instant {
    stamped_where(timeline, |s| s.text.contains(needle))
        .unwrap_or_else(|| panic!("no console line {needle:?}"))
}

/// When the first line containing `needle` after `after` arrived.
fn stamped_after(timeline: &Timeline, needle: &str, after: Instant) -> Instant {
    stamped_where(timeline, |s| s.at > after && s.text.contains(needle))
        .unwrap_or_else(|| panic!("no console line {needle:?} after the shutdown"))
}

fn stamped_where(timeline: &Timeline, want: impl Fn(&Stamped) -> bool) -> Option<Instant> {
    let lines = timeline.lock().unwrap_or_else(|e| e.into_inner());
    lines.iter().find(|s| want(s)).map(|s| s.at)
}
