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
//!   1), Ready as the kubelets' HTTP probes find them.
//!
//! The times under TCG (each machine's QEMU start to its Node Ready, to
//! its blessing; the apply to the pods) and the leader's memory in use
//! once its control plane settles are printed.
//!
//! `#[ignore]`d: it needs `make upstream-images` (which needs `make
//! testenv-node`) and two machines under TCG; run it with `make
//! test-upstream-fleet`.

use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};

use liken_api::Slot;
use qemu_tests::disk::{Disk, Installed, SlotFiles, installed_disk_layered};
use qemu_tests::firmware::Ovmf;
use qemu_tests::real_node::{
    K3S_SERVER_MINIMUM_MB, Kubectl, ctr_lists, free_port, free_udp_port, internal_ip, ready,
    upstream_system_image, workload_yaml,
};
use qemu_tests::{Launch, Vm, drives, images, run, scratch};

/// Up to the launcher's first line: OVMF, systemd-boot, the kernel,
/// init's steps (two machines share the host's CPUs).
const BOOT: Duration = Duration::from_secs(900);
/// From the launcher's start to the API or the Node Ready.
const READY: Duration = Duration::from_secs(1500);
/// From the apply (or the start of the control plane's own) to pods
/// Running and Ready.
const PODS: Duration = Duration::from_secs(900);

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
/// leader's 6443 forwarded to `api_port` on the host's loopback), and
/// its end of the segment, a UDP datagram link from `local` to `remote`
/// on the loopback.
fn cards(m: &Member, api_port: u16, local: u16, remote: u16) -> Vec<OsString> {
    let user = if m.leader {
        format!("user,id=user,hostfwd=tcp:127.0.0.1:{api_port}-:6443")
    } else {
        "user,id=user".to_owned()
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

/// `m`'s disk as install leaves it: slot A holding the upstream system
/// image on trial, the ESP the deployment's layer.
fn disk(dir: &Path, m: &Member, files: &SlotFiles, layer: &Path) -> Disk {
    let dir = dir.join(m.name);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let machine = format!("liken.machine={}", m.name);
    installed_disk_layered(
        &dir,
        &[Installed {
            slot: Slot::A,
            entry: "liken-a+3.conf",
            version: "2026.12.07-001",
            extra: &[&machine, "liken.bless-deadline=1800"],
            files,
            verity: None,
        }],
        None,
        layer,
    )
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

#[test]
#[ignore = "needs make upstream-images; run with make test-upstream-fleet"]
fn a_leader_and_a_follower_on_one_segment_run_real_nodes_and_the_operators_as_containers() {
    let began = Instant::now();
    let images = images();
    let system = upstream_system_image(images);

    // The deployment, made with the real CLI: the endpoint is the
    // leader's address on the segment.
    let dir = scratch("upstream-fleet");
    let deployment = dir.join("deployment");
    let d = deployment.to_string_lossy().into_owned();
    let liken = images.liken.to_string_lossy().into_owned();
    run(&liken, &["mint", &format!("{d}/identity")]);
    run(
        &liken,
        &[
            "new",
            "-name",
            "upstream",
            "-endpoint",
            &format!("https://{}:6443", LEADER.address),
            "-machine",
            &format!("{}=leader", LEADER.name),
            "-machine",
            &format!("{}=follower", FOLLOWER.name),
            &d,
        ],
    );
    for m in [&LEADER, &FOLLOWER] {
        let path = deployment.join(format!("machines/{}.yaml", m.name));
        std::fs::write(&path, machine_yaml(m))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let layer = dir.join("layer.cpio");
    run(
        &liken,
        &[
            "layer",
            "-unsigned",
            &d,
            &format!("{d}/identity"),
            &layer.to_string_lossy(),
        ],
    );
    let files = SlotFiles {
        vmlinuz: images.vmlinuz.clone(),
        boot_cpio: images.boot_cpio.clone(),
        system,
    };

    // Both machines at once, as a fleet's machines are switched on.
    let api_port = free_port();
    let (leader_end, follower_end) = (free_udp_port(), free_udp_port());
    let start = |m: &Member, local: u16, remote: u16, memory_mib: u32, cpus: u32| {
        let disk = disk(&dir, m, &files, &layer);
        let ovmf = Ovmf::fresh(&dir.join(m.name));
        let mut args = ovmf.args();
        args.extend(drives::virtio("disk", &disk.path, Some(0), false));
        args.extend(cards(m, api_port, local, remote));
        Vm::start(
            &format!("upstream-fleet-{}", m.name),
            &args,
            &Launch {
                memory_mib,
                cpus,
                reboot_in_place: true,
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

    // The workload and its budget, from the host.
    let applied = Instant::now();
    let workload = dir.join("workload.yaml");
    std::fs::write(
        &workload,
        format!("{}---\n{}", workload_yaml(2), budget_yaml()),
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
        "wall (TCG, two machines sharing the host's CPUs): QEMU start to the leader's API \
         ready {:.0} s; to node-1 Ready {:.0} s, node-2 Ready {:.0} s; blessed {:.0} s and \
         {:.0} s; the operators' pods Running and Ready {:.0} s, both heartbeats held {:.0} s; \
         the workload's two replicas Ready {:.0} s after its apply ({web:?}); the whole test \
         {:.0} s",
        api_at.as_secs_f64(),
        at[0].as_secs_f64(),
        at[1].as_secs_f64(),
        leader_bless_at.as_secs_f64(),
        follower_bless_at.as_secs_f64(),
        operators_at.as_secs_f64(),
        heartbeats_at.as_secs_f64(),
        web_at.as_secs_f64(),
        began.elapsed().as_secs_f64()
    );
}
