//! Seeding k3s: everything k3s reads at start, written from the running
//! Machine and Cluster, the deployment layer's identity and the system
//! image, before init starts it (SPEC.md's step 7).
//!
//! - **config.yaml** ([`render_k3s_config`]): k3s reads
//!   /etc/rancher/k3s/config.yaml, and the system image makes
//!   /etc/rancher a link to /run/rancher, so it is written at
//!   [`CONFIG`] on every boot from the documents this boot runs.
//! - **Identity**: on a leader whose k3s has no `server/tls` yet, the
//!   layer's CAs and service-account key are copied there, so k3s uses
//!   the cluster's identity instead of minting a new one.
//! - **Tokens**: leaders keep the server token at `server/token` and the
//!   agent token at `server/agent-token`, where k3s itself keeps them
//!   (config.yaml's `token-file` and `agent-token-file` name them);
//!   followers hold only the agent token, at [`FOLLOWER_TOKEN`] (their
//!   `token-file`): it joins agents and nothing else. All 0600, so no
//!   secret is on a command line.
//! - **Manifests** (leaders): the CRDs and the operators' manifests from
//!   `/usr/share/liken/manifests`, and each declared feature's from
//!   `/usr/share/liken/features/<slug>`, into k3s's auto-deploy directory.
//! - **The deployment's Cluster** (leaders): [`CLUSTER_MANIFEST`], the
//!   ConfigMap liken-system/liken-cluster holding the Cluster document
//!   this boot runs and the layer's trust.yaml, when it has one
//!   ([`render_cluster_config_map`]). The cluster
//!   operator mounts it: the Cluster's name is the one both operators
//!   act on, and the cluster operator creates the Cluster from it when
//!   the API has none. Not the Cluster object itself: k3s re-applies
//!   every auto-deploy file at each start (k3s-io/k3s
//!   pkg/deploy/controller.go, `listFilesIn` with `force`), which would
//!   undo a person's edits to the Cluster; a ConfigMap re-applied is
//!   harmless. No machine operator may create a Cluster, so no machine
//!   can name the fleet's.
//! - **Airgap images**: the archives in /usr/share/liken/images (the
//!   operators' images, and k3s's own airgap archive when the image was
//!   built with `K3S_AIRGAP_IMAGES=`), linked into k3s's agent images
//!   directory, in every form k3s imports ([`AIRGAP_SUFFIXES`]).
//!
//! Every write is atomic and happens only when the bytes (or mode, or
//! link) differ, so a reboot with the same documents and image writes
//! nothing. What init places in the auto-deploy directory is named
//! `liken-...` and owned by it: a `liken-` manifest that is no longer
//! wanted (a feature retracted from the Cluster, a manifest dropped from
//! the image) is removed. Removing a file deletes nothing in the cluster
//! (k3s never reconciles a vanished addon file); the cluster operator's
//! feature janitor deletes a retracted feature's workloads. The airgap
//! links point into the running system image, so after an upgrade they
//! name the new release's tarballs without being rewritten.
//!
//! The k3s settings, and the field each comes from:
//!
//! | k3s setting | from |
//! | --- | --- |
//! | `node-name` | the Machine's hostname (`spec.hostname`, else its name) |
//! | `data-dir` | [`DATA_DIR`], on the data partition |
//! | `token-file` | the layer's `identity/server/token` on leaders, its `identity/server/agent-token` on followers |
//! | `agent-token-file` | on leaders whose layer has `identity/server/agent-token` |
//! | `cluster-init: true` | the first name in the Cluster's `spec.leaders`, on this machine: it starts the embedded etcd |
//! | `server` | the Cluster's `spec.endpoint`, on the other leaders (they join the etcd cluster) and on followers |
//! | `tls-san` | the host of `spec.endpoint`, on leaders, so the API server's certificate names the address machines and people use |
//! | `node-ip` | the Machine's first static IPv4 and first static IPv6 address (`spec.network.interfaces[].addresses`, in order, without the prefix length); both when both families are set (dual-stack), none when the machine only takes DHCP or SLAAC addresses, so k3s picks the default route's address |
//! | `node-label` | the Machine's `spec.k3s.nodeLabels`, as `key=value` |
//! | `node-taint` | the Machine's `spec.k3s.nodeTaints`, as written |
//!
//! Neither document declares anything for k3s's `disable` list or for
//! kubelet arguments, so config.yaml has neither; they arrive with the
//! fields that would ask for them. One kubelet setting follows from
//! liken itself: its FlexVolume directory, moved off the read-only /usr
//! by a KubeletConfiguration drop-in beside k3s's own
//! ([`KUBELET_DROP_IN`], [`VOLUME_PLUGIN_DIR`]), which the kubelet reads
//! with no flag from k3s.
//!
//! One known limit of `cluster-init` on the first leader: a first
//! leader reinstalled while the other leaders still run starts a new
//! etcd of its own rather than joining theirs. Reorder `spec.leaders`
//! (put a running leader first) before reinstalling it.
//!
//! Seeding needs the data partition: on a boot where /var is not it
//! (the initramfs, install media) the step is skipped, as k3s's state
//! there would vanish with the boot.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io;
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use liken_api::signing::MAX_SMALL_DOCUMENT;
use liken_api::{Cluster, Machine, Role};

use crate::console::{self, Outcome};
use crate::context::{Boot, Paths};
use crate::fsutil::{self, sync_dir, temp_beside, write_atomic};

/// The system image's liken data: `manifests/`, `features/`, `images/`.
pub const SHARE_LIKEN: &str = "/usr/share/liken";
/// k3s's data directory, on the data partition.
pub const DATA_DIR: &str = "/var/lib/rancher/k3s";
/// k3s's configuration: /etc/rancher/k3s/config.yaml through the image's
/// /etc/rancher -> /run/rancher link.
pub const CONFIG: &str = "/run/rancher/k3s/config.yaml";
/// The Pod Security Admission configuration on leaders, beside
/// config.yaml, which names it to the apiserver
/// (`kube-apiserver-arg: admission-control-config-file=...`, as k3s's
/// hardening guide does).
pub const POD_SECURITY: &str = "/run/rancher/k3s/pod-security.yaml";
/// The leader election a leader's kube-controller-manager and
/// kube-scheduler run with (config.yaml's `kube-controller-manager-arg`
/// and `kube-scheduler-arg`): a 60 s lease renewed within 40 s, four
/// times Kubernetes' 15 s and 10 s. k3s ends its whole process when
/// either loses its lease, and the controller manager loses it whenever
/// the API server cannot answer a renewal within the renew deadline: on a
/// small or busy machine (an SD card, a slow disk, a starved CPU) that
/// turns k3s into a restart loop (k3s-io/k3s issue 8956, whose answer is
/// these two flags). Measured here: a leader under TCG with the default
/// timings restarted k3s every two to five minutes after each boot, each
/// restart taking the API away for a minute or more. The price is a
/// slower takeover when a second server must take over from a dead one.
pub const LEADER_ELECTION_ARGS: [&str; 2] = [
    "leader-elect-lease-duration=60s",
    "leader-elect-renew-deadline=40s",
];
/// The namespaces Pod Security exempts: k3s's own and liken's (the
/// machine operator mounts host paths and uses the host's network).
pub const POD_SECURITY_EXEMPT: [&str; 2] = ["kube-system", "liken-system"];

/// The token on a leader, where k3s keeps it itself.
pub const LEADER_TOKEN: &str = "/var/lib/rancher/k3s/server/token";
/// The token on a follower (the agent token), in liken's own state.
pub const FOLLOWER_TOKEN: &str = "/var/lib/liken/k3s-token";
/// The agent token on a leader, where k3s keeps it (k3s-io/k3s
/// pkg/server/server.go, printTokens), named by config.yaml's
/// `agent-token-file` so k3s makes the supervisor's `node` password from
/// it (pkg/daemons/control/deps/deps.go, genUsers) rather than from the
/// server token.
pub const LEADER_AGENT_TOKEN: &str = "/var/lib/rancher/k3s/server/agent-token";
/// The start of every file name init places among k3s's manifests.
pub const MANIFEST_PREFIX: &str = "liken-";
/// The deployment's Cluster among k3s's manifests (its own k3s Addon).
pub const CLUSTER_MANIFEST: &str = "liken-deployment-cluster.yaml";
/// The ConfigMap that carries it, in liken-system.
pub const CLUSTER_CONFIG_MAP: &str = liken_api::coordination::DEPLOYMENT_CONFIG_MAP;
/// The layer's identity, below /etc/liken (as `liken layer` packs it).
pub const LAYER_IDENTITY: &str = "identity/server";

/// The identity's files below `server/tls`, with whether each is a
/// secret. The same layout as liken-cli's `identity` module, which is
/// k3s's own.
pub const IDENTITY_FILES: [(&str, bool); 11] = [
    ("client-ca.crt", false),
    ("client-ca.key", true),
    ("server-ca.crt", false),
    ("server-ca.key", true),
    ("request-header-ca.crt", false),
    ("request-header-ca.key", true),
    ("etcd/server-ca.crt", false),
    ("etcd/server-ca.key", true),
    ("etcd/peer-ca.crt", false),
    ("etcd/peer-ca.key", true),
    ("service.key", true),
];

const MANIFEST_EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// The names k3s imports from agent/images: image archives, plain or
/// compressed, and `.txt` lists of images to pull. k3s's watcher takes
/// wharfie's `tarfile.SupportedExtensions` plus `.txt`
/// (k3s-io/k3s pkg/agent/containerd/watcher.go, `isFileSupported`), and
/// `preloadFile` opens each by its suffix, case-insensitively
/// (pkg/agent/containerd/containerd.go; rancher/wharfie pkg/tarfile).
pub const AIRGAP_SUFFIXES: [&str; 9] = [
    ".tar", ".tar.lz4", ".tar.bz2", ".tbz", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".txt",
];

/// Whether k3s imports a file of this name from agent/images (and init
/// links it there): a supported suffix, and not a dot file.
pub fn is_airgap_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.starts_with('.') && AIRGAP_SUFFIXES.iter().any(|s| lower.ends_with(s))
}
/// How deep below a manifest directory files are looked for.
pub const MAX_DEPTH: u32 = 4;

/// A YAML double-quoted scalar: JSON's string syntax is a subset of it.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

/// The host part of an `https://host[:port][/]` endpoint, without the
/// brackets of an IPv6 literal.
pub fn endpoint_host(endpoint: &str) -> Option<&str> {
    let rest = endpoint.strip_prefix("https://")?;
    let host_port = rest.strip_suffix('/').unwrap_or(rest);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split_once(']')?.0
    } else {
        host_port.split_once(':').map_or(host_port, |(h, _)| h)
    };
    (!host.is_empty()).then_some(host)
}

/// How this machine's k3s finds its cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Join {
    /// Start the embedded etcd (the first leader).
    InitCluster,
    /// Join through this URL.
    Server(String),
}

/// The first leader starts the cluster; everyone else joins through the
/// endpoint.
pub fn decide_join(machine: &Machine, cluster: &Cluster, role: Role) -> Join {
    let first = cluster.spec.leaders.first().map(String::as_str);
    if role == Role::Leader && first == Some(machine.metadata.name.as_str()) {
        return Join::InitCluster;
    }
    let url = cluster.spec.endpoint.trim_end_matches('/');
    Join::Server(url.to_owned())
}

/// The manifest of the ConfigMap liken-system/liken-cluster: the
/// Cluster's name and spec (its canonical form, as JSON, which YAML
/// reads) under the key `cluster.yaml`, where the cluster operator's
/// Deployment mounts it (images/manifests/cluster-operator.yaml), and
/// the layer's trust root (`trust`: trust.yaml's exact bytes, public
/// keys only) under `trust.yaml`, where the operators can read it to
/// check signatures before downloading; init's own check at write time
/// stays the last word.
pub fn render_cluster_config_map(cluster: &Cluster, trust: Option<&str>) -> String {
    let document = serde_json::to_string(&cluster.canonical()).unwrap_or_default();
    let trust = trust.map_or_else(String::new, |t| {
        format!("  {}: {}\n", liken_api::signing::TRUST_FILE, quote(t))
    });
    format!(
        "# Written by liken-init from the Cluster document this leader boots with.\n\
         apiVersion: v1\n\
         kind: ConfigMap\n\
         metadata:\n  name: {CLUSTER_CONFIG_MAP}\n  namespace: liken-system\n\
         \x20 labels:\n    app.kubernetes.io/part-of: liken\n\
         data:\n  cluster.yaml: {}\n{trust}",
        quote(&format!("{document}\n"))
    )
}

/// The apiserver's admission configuration: the PodSecurity plugin with
/// `baseline` enforced and `restricted` warned and audited in every
/// namespace but [`POD_SECURITY_EXEMPT`] (a namespace's own
/// `pod-security.kubernetes.io/` labels still override the defaults).
/// So no workload outside them can mount init's socket or any host path,
/// share the host's namespaces, or run privileged.
pub fn render_pod_security() -> String {
    let mut out = String::from(
        "# Written by liken-init on every leader boot; the apiserver reads it\n\
         # (config.yaml's kube-apiserver-arg admission-control-config-file).\n\
         apiVersion: apiserver.config.k8s.io/v1\n\
         kind: AdmissionConfiguration\n\
         plugins:\n\
         \x20 - name: PodSecurity\n\
         \x20   configuration:\n\
         \x20     apiVersion: pod-security.admission.config.k8s.io/v1\n\
         \x20     kind: PodSecurityConfiguration\n\
         \x20     defaults:\n\
         \x20       enforce: baseline\n\
         \x20       enforce-version: latest\n\
         \x20       audit: restricted\n\
         \x20       audit-version: latest\n\
         \x20       warn: restricted\n\
         \x20       warn-version: latest\n\
         \x20     exemptions:\n\
         \x20       usernames: []\n\
         \x20       runtimeClasses: []\n\
         \x20       namespaces:\n",
    );
    for ns in POD_SECURITY_EXEMPT {
        let _ = writeln!(out, "          - {ns}");
    }
    out
}

/// The kubelet's drop-in liken writes, below the data directory: k3s
/// starts the kubelet with `--config-dir` on `agent/etc/kubelet.conf.d`
/// and writes its own defaults there as `00-k3s-defaults.conf`
/// (k3s-io/k3s pkg/daemons/agent/agent.go, `writeKubeletConfig`); the
/// kubelet merges every `*.conf` of the directory in name order, so this
/// one, sorting after k3s's, adds to it.
pub const KUBELET_DROP_IN: &str = "agent/etc/kubelet.conf.d/50-liken.conf";
/// Where the kubelet looks for FlexVolume drivers on liken. Its default,
/// /usr/libexec/kubernetes/kubelet-plugins/volume/exec, is on the
/// read-only system image, so the kubelet fails to make it and logs an
/// error on every start; k3s passes no flag for it (k3s-io/k3s issue
/// 1683, on read-only /usr). Drivers installed by a DaemonSet must land
/// on the data partition, below the kubelet's root directory.
pub const VOLUME_PLUGIN_DIR: &str = "/var/lib/kubelet/volumeplugins";

/// The kubelet drop-in ([`KUBELET_DROP_IN`]): a KubeletConfiguration
/// holding only what liken's read-only /usr changes.
pub fn render_kubelet_drop_in() -> String {
    format!(
        "# Written by liken-init at every boot; the kubelet merges it after k3s's\n\
         # 00-k3s-defaults.conf. /usr is read-only on liken, so FlexVolume drivers\n\
         # live on the data partition.\n\
         apiVersion: kubelet.config.k8s.io/v1beta1\n\
         kind: KubeletConfiguration\n\
         volumePluginDir: {VOLUME_PLUGIN_DIR}\n"
    )
}

/// The token file config.yaml names, for a role.
pub fn token_file(role: Role) -> &'static str {
    match role {
        Role::Leader => LEADER_TOKEN,
        Role::Follower => FOLLOWER_TOKEN,
    }
}

/// The addresses k3s advertises for the node (its `node-ip`): the first
/// static address of each family, IPv4 first, in the order the Machine
/// lists its interfaces and addresses. k3s takes `node-ip` as a string
/// slice (k3s-io/k3s pkg/cli/cmds/agent.go, `NodeIPFlag`), and one
/// address of each family is what its dual-stack node needs. Without
/// static addresses k3s chooses the default route's address itself,
/// which is the right choice for DHCP and SLAAC.
pub fn decide_node_ips(machine: &Machine) -> Vec<String> {
    let (mut v4, mut v6) = (None, None);
    let interfaces = machine.spec.network.iter().flat_map(|n| &n.interfaces);
    for cidr in interfaces.flat_map(|i| &i.addresses) {
        match liken_api::validate::parse_cidr(cidr) {
            Some((ip @ IpAddr::V4(_), _)) if v4.is_none() => v4 = Some(ip),
            Some((ip @ IpAddr::V6(_), _)) if v6.is_none() => v6 = Some(ip),
            _ => {}
        }
    }
    v4.into_iter().chain(v6).map(|ip| ip.to_string()).collect()
}

/// k3s's config.yaml for this machine (see the module's table);
/// `agent_token`: a leader has an agent token to name.
pub fn render_k3s_config(
    machine: &Machine,
    cluster: &Cluster,
    role: Role,
    agent_token: bool,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# k3s configuration for Machine {} ({}) of Cluster {},\n\
         # written by liken-init from the running documents at every boot.\n\
         # Edit the documents, not this file: changes here are lost.",
        machine.metadata.name,
        role.as_str(),
        cluster.metadata.name
    );
    let list = |out: &mut String, key: &str, items: &[String]| {
        if items.is_empty() {
            return;
        }
        let _ = writeln!(out, "{key}:");
        for item in items {
            let _ = writeln!(out, "  - {}", quote(item));
        }
    };
    let _ = writeln!(out, "node-name: {}", quote(machine.hostname()));
    list(&mut out, "node-ip", &decide_node_ips(machine));
    let _ = writeln!(out, "data-dir: {}", quote(DATA_DIR));
    let _ = writeln!(out, "token-file: {}", quote(token_file(role)));
    if role == Role::Leader && agent_token {
        let _ = writeln!(out, "agent-token-file: {}", quote(LEADER_AGENT_TOKEN));
    }
    match decide_join(machine, cluster, role) {
        Join::InitCluster => {
            let _ = writeln!(out, "cluster-init: true");
        }
        Join::Server(url) => {
            let _ = writeln!(out, "server: {}", quote(&url));
        }
    }
    if role == Role::Leader
        && let Some(host) = endpoint_host(&cluster.spec.endpoint)
    {
        list(&mut out, "tls-san", &[host.to_owned()]);
    }
    if role == Role::Leader {
        list(
            &mut out,
            "kube-apiserver-arg",
            &[format!("admission-control-config-file={POD_SECURITY}")],
        );
        let election = LEADER_ELECTION_ARGS.map(str::to_owned);
        list(&mut out, "kube-controller-manager-arg", &election);
        list(&mut out, "kube-scheduler-arg", &election);
    }
    let k3s = machine.spec.k3s.clone().unwrap_or_default();
    let labels: Vec<String> = k3s
        .node_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    list(&mut out, "node-label", &labels);
    list(&mut out, "node-taint", &k3s.node_taints);
    out
}

/// A token file's token: one word on one line.
pub fn decide_token(text: &str) -> Result<String, String> {
    let token = text.trim();
    if token.is_empty() {
        return Err("it is empty".into());
    }
    if token.contains(char::is_whitespace) {
        return Err("it must hold one token on one line".into());
    }
    Ok(token.to_owned())
}

/// The auto-deploy file name for a manifest: `liken-` and `prefix`, then
/// its path below its directory without the extension, lower-cased, with
/// anything but letters and digits (`/` and `.` included) as `-`, then
/// the extension. So the name has one period, before the extension.
///
/// k3s names the Addon that applies a file after everything before the
/// file's first period (`basename` in k3s-io/k3s pkg/deploy/controller.go),
/// and two files that share that name share one Addon, each pruning the
/// other's objects on every apply. With one period the Addon is named
/// after the whole path ([`addon_name`]), and [`decide_manifests`] checks
/// the names on that shortened form. The Addon name must be a DNS
/// subdomain, so trailing dashes are trimmed.
pub fn manifest_name(prefix: &str, rel: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_string_lossy().into_owned()),
            _ => return None,
        }
    }
    let file = parts.pop()?;
    let (stem, ext) = file.rsplit_once('.')?;
    let ext = ext.to_ascii_lowercase();
    if !MANIFEST_EXTENSIONS.contains(&ext.as_str()) {
        return None;
    }
    parts.push(stem.to_owned());
    let joined = format!("{MANIFEST_PREFIX}{prefix}{}", parts.join("-"));
    let name: String = joined
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() { c } else { '-' }
        })
        .collect();
    let name = name.trim_end_matches('-');
    (name.len() > MANIFEST_PREFIX.len()).then(|| format!("{name}.{ext}"))
}

/// The Addon k3s makes for a manifest file: its name up to the first
/// period (k3s-io/k3s pkg/deploy/controller.go, `basename`).
pub fn addon_name(file: &str) -> &str {
    file.split('.').next().unwrap_or(file)
}

fn is_manifest(name: &str) -> bool {
    Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MANIFEST_EXTENSIONS.contains(&e))
}

/// A manifest file found in the image: its path, and its path below the
/// directory it was found in.
pub type Found = (PathBuf, PathBuf);

/// What to do in the auto-deploy directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ManifestPlan {
    /// Files to place: the source, and the name to give it.
    pub place: Vec<(PathBuf, String)>,
    /// init's own files that are no longer wanted.
    pub remove: Vec<String>,
    /// Declared features the image has no directory for.
    pub missing_features: Vec<String>,
    /// Sources that cannot be placed, and why.
    pub problems: Vec<String>,
}

/// Decides the auto-deploy directory: `base` from the image's manifests
/// directory, each declared feature's files (`None`: the image lacks the
/// feature), and the names already there.
pub fn decide_manifests(
    base: &[Found],
    features: &BTreeMap<String, Option<Vec<Found>>>,
    existing: &[String],
) -> ManifestPlan {
    let mut plan = ManifestPlan::default();
    // Checked on k3s's shortened name: two files with one Addon would
    // prune each other's objects.
    let mut addons = BTreeSet::new();
    let mut add = |plan: &mut ManifestPlan, prefix: &str, (from, rel): &Found| match manifest_name(
        prefix, rel,
    ) {
        Some(name) if addons.insert(addon_name(&name).to_owned()) => {
            plan.place.push((from.clone(), name));
        }
        Some(name) => plan.problems.push(format!(
            "{} would be placed as {name}, whose k3s Addon {} another manifest already has; \
             rename one",
            from.display(),
            addon_name(&name)
        )),
        None => plan
            .problems
            .push(format!("{} has no usable name", from.display())),
    };
    for f in base {
        add(&mut plan, "", f);
    }
    for (slug, files) in features {
        match files {
            Some(files) => {
                for f in files {
                    add(&mut plan, &format!("feature-{slug}-"), f);
                }
            }
            None => plan.missing_features.push(slug.clone()),
        }
    }
    // A search of the short list of placed names (a set collected here
    // would be one more copy of std's sort in init's binary).
    let wanted = |n: &String| plan.place.iter().any(|(_, w)| w == n);
    plan.remove = existing
        .iter()
        .filter(|n| n.starts_with(MANIFEST_PREFIX) && is_manifest(n) && !wanted(n))
        .cloned()
        .collect();
    plan
}

/// What to do in the airgap images directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImagePlan {
    /// Links to make or correct: the name, and the tarball it points at.
    pub link: Vec<(String, PathBuf)>,
    /// Links already right.
    pub unchanged: usize,
    /// init's links to tarballs the image no longer has.
    pub remove: Vec<String>,
}

/// Decides the airgap links: `tarballs` are the names in the image's
/// images directory `share_images`, `existing` each entry of k3s's
/// images directory with its link target (`None`: not a link).
pub fn decide_images(
    tarballs: &[String],
    share_images: &Path,
    existing: &[(String, Option<PathBuf>)],
) -> ImagePlan {
    let mut plan = ImagePlan::default();
    for name in tarballs {
        let target = share_images.join(name);
        let current = existing
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, t)| t.as_ref());
        if current == Some(&target) {
            plan.unchanged = plan.unchanged.saturating_add(1);
        } else {
            plan.link.push((name.clone(), target));
        }
    }
    plan.remove = existing
        .iter()
        .filter(|(n, t)| {
            !tarballs.contains(n) && t.as_ref().is_some_and(|t| t.starts_with(share_images))
        })
        .map(|(n, _)| n.clone())
        .collect();
    plan
}

/// Where seeding reads and writes.
#[derive(Clone, Debug)]
pub struct SeedPaths {
    /// The deployment layer (/etc/liken, or its copy in /run/liken).
    pub layer: PathBuf,
    /// /usr/share/liken.
    pub share: PathBuf,
    /// k3s's data directory.
    pub k3s_data: PathBuf,
    /// config.yaml.
    pub config: PathBuf,
    /// /var/lib/liken, for a follower's token and the machine ID.
    pub var_liken: PathBuf,
    /// /var, the data partition (for /var/run and the node password).
    pub var: PathBuf,
    /// /run/rancher, which the image's /etc/rancher links to.
    pub rancher_run: PathBuf,
}

impl SeedPaths {
    /// The seeding paths of a boot's paths.
    pub fn of(paths: &Paths) -> SeedPaths {
        SeedPaths {
            layer: paths.etc_liken.clone(),
            share: paths.share_liken.clone(),
            k3s_data: paths.k3s_data.clone(),
            config: paths.k3s_config.clone(),
            var_liken: paths.var_liken.clone(),
            var: paths.var.clone(),
            rancher_run: paths
                .k3s_config
                .parent()
                .and_then(Path::parent)
                .map_or_else(|| PathBuf::from("/run/rancher"), Path::to_path_buf),
        }
    }
}

/// What seeding did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Files and links written or corrected.
    pub written: Vec<PathBuf>,
    /// Files and links already right.
    pub unchanged: usize,
    /// init's files removed.
    pub removed: Vec<PathBuf>,
    /// What people should know that is not a failure.
    pub notes: Vec<String>,
    /// What failed.
    pub failures: Vec<String>,
    /// Set when k3s must not start: it would make a cluster of its own
    /// or fail to join (no token, no identity, no configuration).
    pub block: Option<String>,
}

impl Report {
    fn wrote(&mut self, path: &Path, changed: bool) {
        if changed {
            self.written.push(path.to_owned());
        } else {
            self.unchanged = self.unchanged.saturating_add(1);
        }
    }

    fn fail(&mut self, why: String, blocks: bool) {
        if blocks && self.block.is_none() {
            self.block = Some(why.clone());
        }
        self.failures.push(why);
    }
}

fn create_dir(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
}

/// Writes `bytes` to `path` with `mode` unless it already holds them
/// with that mode; returns whether anything changed.
pub fn write_if_changed(path: &Path, bytes: &[u8], mode: u32) -> io::Result<bool> {
    if let Ok(meta) = std::fs::symlink_metadata(path)
        && meta.is_file()
        && std::fs::read(path)? == bytes
    {
        if meta.permissions().mode() & 0o7777 == mode {
            return Ok(false);
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        return Ok(true);
    }
    write_atomic(path, bytes, mode)?;
    Ok(true)
}

/// Points `link` at `target`, replacing whatever is there atomically.
fn link_atomic(link: &Path, target: &Path) -> io::Result<()> {
    let (dir, tmp) = temp_beside(link)?;
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    if let Err(e) = std::fs::rename(&tmp, link) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    sync_dir(dir)
}

/// The manifest files below `dir` (which may be absent: `Ok(None)`),
/// sorted, at most [`MAX_DEPTH`] directories down.
pub fn find_manifests(dir: &Path) -> io::Result<Option<Vec<Found>>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    let mut out = Vec::new();
    walk(dir, Path::new(""), 0, &mut out)?;
    crate::order::by_key(&mut out, |f| crate::order::path_key(&f.1));
    Ok(Some(out))
}

fn walk(dir: &Path, rel: &Path, depth: u32, out: &mut Vec<Found>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let rel = rel.join(entry.file_name());
        // Follows links: the image's own files may be links, and the
        // image is what liken trusts.
        let meta = std::fs::metadata(&path)?;
        if meta.is_dir() {
            if depth < MAX_DEPTH {
                walk(&path, &rel, depth.saturating_add(1), out)?;
            }
        } else if meta.is_file() && is_manifest(&entry.file_name().to_string_lossy()) {
            out.push((path, rel));
        }
    }
    Ok(())
}

fn list_names(dir: &Path) -> io::Result<Vec<(String, Option<PathBuf>)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let target = std::fs::read_link(entry.path()).ok();
        out.push((name, target));
    }
    // As the tuple's own order: the name, then no target before a target.
    crate::order::by_key(&mut out, |(name, target)| {
        let mut key = crate::order::text_key(name);
        if let Some(t) = target {
            key.push(0);
            key.extend(crate::order::path_key(t));
        }
        key
    });
    Ok(out)
}

/// Copies the layer's identity into `server/tls` when k3s has none.
/// Returns whether it copied.
///
/// Never over an existing `tls` directory: once k3s has run, its CAs
/// are the cluster's (an adopted cluster's, or ones k3s rotated), every
/// certificate it issued chains to them, and replacing them from the
/// layer would cut this machine off from its own cluster. The copy is
/// made in a temporary directory renamed into place, so a power cut
/// never leaves half an identity, which k3s would complete with CAs of
/// its own.
fn copy_identity(layer_tls: &Path, server: &Path) -> Result<bool, String> {
    let tls = server.join("tls");
    if tls.symlink_metadata().is_ok() {
        return Ok(false);
    }
    let missing: Vec<&str> = IDENTITY_FILES
        .iter()
        .map(|(rel, _)| *rel)
        .filter(|rel| !layer_tls.join(rel).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the layer's identity in {} lacks {}; k3s would mint CAs of its own and this leader \
             would not be part of the cluster: rebuild the layer with `liken layer` from a \
             complete identity",
            layer_tls.display(),
            missing.join(", ")
        ));
    }
    let tmp = server.join(".tls.liken-tmp");
    let result = (|| -> io::Result<()> {
        create_dir(server, 0o700)?;
        if tmp.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&tmp)?;
        }
        create_dir(&tmp.join("etcd"), 0o700)?;
        for (rel, private) in IDENTITY_FILES {
            let bytes = std::fs::read(layer_tls.join(rel))?;
            write_atomic(&tmp.join(rel), &bytes, if private { 0o600 } else { 0o644 })?;
        }
        sync_dir(&tmp.join("etcd"))?;
        sync_dir(&tmp)?;
        std::fs::rename(&tmp, &tls)?;
        sync_dir(server)
    })();
    result.map(|()| true).map_err(|e| {
        let _ = std::fs::remove_dir_all(&tmp);
        format!(
            "cannot copy the identity into {}: {e}; k3s is not started, so it cannot mint CAs \
             of its own: free space on the data partition or replace the disk, then reboot",
            tls.display()
        )
    })
}

/// The token in a layer's token file.
fn read_token(path: &Path) -> Result<String, String> {
    let bytes = crate::fsutil::read_capped(path, 4096)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    decide_token(&String::from_utf8_lossy(&bytes))
        .map_err(|e| format!("{} is not a token: {e}", path.display()))
}

/// Writes a leader's token file `name` below `server`, 0600, unless the
/// cluster exists already (`had_tls`) and has one: like the CAs, a
/// running cluster's tokens are its own (k3s encrypts its bootstrap
/// data with the server token), and a differing one is kept and noted.
fn place_token(r: &mut Report, server: &Path, name: &str, token: &str, had_tls: bool) {
    let path = server.join(name);
    if had_tls && path.symlink_metadata().is_ok() {
        let same = crate::fsutil::read_capped(&path, 4096)
            .is_ok_and(|t| String::from_utf8_lossy(&t).trim() == token);
        if !same {
            r.notes.push(format!(
                "{} differs from the layer's and is kept: it is the running cluster's",
                path.display()
            ));
        }
        r.unchanged = r.unchanged.saturating_add(1);
        return;
    }
    let written = create_dir(server, 0o700)
        .and_then(|()| write_if_changed(&path, format!("{token}\n").as_bytes(), 0o600));
    match written {
        Ok(changed) => r.wrote(&path, changed),
        Err(e) => r.fail(format!("cannot write {}: {e}", path.display()), true),
    }
}

/// Seeds k3s for `machine` in `cluster` as `role`.
pub fn seed(p: &SeedPaths, machine: &Machine, cluster: &Cluster, role: Role) -> Report {
    let mut r = Report::default();
    let server = p.k3s_data.join("server");
    let layer_identity = p.layer.join(LAYER_IDENTITY);

    // The token: without it a leader makes a token of its own and a
    // follower cannot join, so k3s waits for a layer that has one. A
    // follower joins with the agent token alone, never the server's.
    let token_name = match role {
        Role::Leader => "token",
        Role::Follower => "agent-token",
    };
    let token = match read_token(&layer_identity.join(token_name)) {
        Ok(t) => Some(t),
        Err(e) => {
            let how = match role {
                Role::Leader => "rebuild the layer with `liken layer` from the cluster's identity",
                Role::Follower => {
                    "a follower joins with the agent token only: rebuild the layer with \
                     `liken layer` from an identity `liken mint` or `liken adopt` gave an \
                     agent token"
                }
            };
            r.fail(format!("{e}; {how}"), true);
            None
        }
    };
    let mut agent_token = false;

    match role {
        Role::Leader => {
            let had_tls = server.join("tls").symlink_metadata().is_ok();
            match copy_identity(&layer_identity.join("tls"), &server) {
                Ok(true) => {
                    r.written.push(server.join("tls"));
                    r.notes
                        .push("identity copied from the layer (first boot)".into());
                }
                Ok(false) => r.unchanged = r.unchanged.saturating_add(1),
                Err(e) => r.fail(e, true),
            }
            if let Some(token) = &token {
                place_token(&mut r, &server, "token", token, had_tls);
            }
            // An older identity has no agent token: k3s then makes the
            // agent password from the server token, as it does itself.
            let agent_path = layer_identity.join("agent-token");
            if agent_path.symlink_metadata().is_ok() {
                match read_token(&agent_path) {
                    Ok(agent) => {
                        place_token(&mut r, &server, "agent-token", &agent, had_tls);
                        agent_token = true;
                    }
                    Err(e) => r.fail(e, true),
                }
            }
            seed_manifests(p, cluster, &mut r);
        }
        Role::Follower => {
            if let Some(token) = &token {
                let path = p.var_liken.join("k3s-token");
                let written = create_dir(&p.var_liken, 0o755)
                    .and_then(|()| write_if_changed(&path, format!("{token}\n").as_bytes(), 0o600));
                match written {
                    Ok(changed) => r.wrote(&path, changed),
                    Err(e) => r.fail(format!("cannot write {}: {e}", path.display()), true),
                }
            }
        }
    }

    seed_images(p, &mut r);

    // What k3s expects of its host on the data partition: /var/run, the
    // machine ID, and /etc/rancher/node kept across reboots.
    let host = crate::k3s_host::prepare(&p.var, &p.var_liken, &p.rancher_run);
    r.written.extend(host.written);
    r.unchanged = r.unchanged.saturating_add(host.unchanged);
    for f in host.failures {
        r.fail(f, false);
    }

    if role == Role::Leader {
        let path = p.config.parent().map_or_else(
            || PathBuf::from(POD_SECURITY),
            |d| d.join("pod-security.yaml"),
        );
        let written = path
            .parent()
            .map_or(Ok(()), |d| create_dir(d, 0o755))
            .and_then(|()| write_if_changed(&path, render_pod_security().as_bytes(), 0o600));
        match written {
            Ok(changed) => r.wrote(&path, changed),
            Err(e) => r.fail(
                format!(
                    "cannot write {}: {e}; the apiserver would not start with config.yaml \
                     naming it",
                    path.display()
                ),
                true,
            ),
        }
    }
    let drop_in = p.k3s_data.join(KUBELET_DROP_IN);
    let written = drop_in
        .parent()
        .map_or(Ok(()), |d| create_dir(d, 0o755))
        .and_then(|()| write_if_changed(&drop_in, render_kubelet_drop_in().as_bytes(), 0o600));
    match written {
        Ok(changed) => r.wrote(&drop_in, changed),
        // The kubelet runs without it, logging that it cannot make its
        // default FlexVolume directory on /usr.
        Err(e) => r.fail(format!("cannot write {}: {e}", drop_in.display()), false),
    }
    let config = render_k3s_config(machine, cluster, role, agent_token);
    let written = p
        .config
        .parent()
        .map_or(Ok(()), |d| create_dir(d, 0o755))
        .and_then(|()| write_if_changed(&p.config, config.as_bytes(), 0o600));
    match written {
        Ok(changed) => r.wrote(&p.config, changed),
        Err(e) => r.fail(
            format!(
                "cannot write {}: {e}; without it k3s would not join this cluster",
                p.config.display()
            ),
            true,
        ),
    }
    r
}

fn seed_manifests(p: &SeedPaths, cluster: &Cluster, r: &mut Report) {
    let share_manifests = p.share.join("manifests");
    let base = match find_manifests(&share_manifests) {
        Ok(Some(found)) => found,
        Ok(None) => {
            r.fail(
                format!(
                    "the system image has no {}, so the CRDs and the operators are not \
                     deployed: rebuild the image (build-system.sh installs images/manifests there)",
                    share_manifests.display()
                ),
                false,
            );
            Vec::new()
        }
        Err(e) => {
            r.fail(
                format!("cannot read {}: {e}", share_manifests.display()),
                false,
            );
            Vec::new()
        }
    };
    let mut features = BTreeMap::new();
    for slug in cluster.spec.features.keys() {
        let dir = p.share.join("features").join(slug);
        match find_manifests(&dir) {
            Ok(found) => {
                features.insert(slug.clone(), found);
            }
            Err(e) => r.fail(format!("cannot read {}: {e}", dir.display()), false),
        }
    }
    let target = p.k3s_data.join("server/manifests");
    let existing = match list_names(&target) {
        Ok(names) => names.into_iter().map(|(n, _)| n).collect::<Vec<_>>(),
        Err(e) => {
            r.fail(format!("cannot read {}: {e}", target.display()), false);
            return;
        }
    };
    let mut plan = decide_manifests(&base, &features, &existing);
    plan.remove.retain(|n| n != CLUSTER_MANIFEST);
    for slug in &plan.missing_features {
        console::line(&format!(
            "k3s-seed: the Cluster declares feature {slug:?}, but this system image has no {}; \
             the feature is not deployed (check the slug, or run a release that ships it)",
            p.share.join("features").join(slug).display()
        ));
    }
    for problem in plan.problems {
        r.fail(problem, false);
    }
    if let Err(e) = create_dir(&target, 0o700) {
        r.fail(format!("cannot create {}: {e}", target.display()), false);
        return;
    }
    for (from, name) in &plan.place {
        let to = target.join(name);
        let result = std::fs::read(from).and_then(|bytes| write_if_changed(&to, &bytes, 0o600));
        match result {
            Ok(changed) => r.wrote(&to, changed),
            Err(e) => r.fail(
                format!("cannot place {} as {}: {e}", from.display(), to.display()),
                false,
            ),
        }
    }
    let to = target.join(CLUSTER_MANIFEST);
    // A trust root that is not UTF-8 is no trust.yaml: init's write-time
    // check refuses it with the reason; the ConfigMap just goes without.
    let trust = fsutil::read_capped(
        &p.layer.join(liken_api::signing::TRUST_FILE),
        MAX_SMALL_DOCUMENT,
    )
    .ok()
    .and_then(|b| String::from_utf8(b).ok());
    match write_if_changed(
        &to,
        render_cluster_config_map(cluster, trust.as_deref()).as_bytes(),
        0o600,
    ) {
        Ok(changed) => r.wrote(&to, changed),
        Err(e) => r.fail(
            format!(
                "cannot write {}: {e}; the cluster operator does not start without it",
                to.display()
            ),
            false,
        ),
    }
    for name in &plan.remove {
        let path = target.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => r.removed.push(path),
            Err(e) => r.fail(format!("cannot remove {}: {e}", path.display()), false),
        }
    }
    if !plan.remove.is_empty() {
        let _ = sync_dir(&target);
    }
}

fn seed_images(p: &SeedPaths, r: &mut Report) {
    let share_images = p.share.join("images");
    let tarballs: Vec<String> = match std::fs::read_dir(&share_images) {
        Ok(entries) => {
            let mut names: Vec<String> = entries
                .filter_map(Result::ok)
                .filter(|e| e.path().is_file())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_airgap_file(n))
                .collect();
            crate::order::by_key(&mut names, |n| crate::order::text_key(n));
            names
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            r.fail(
                format!("cannot read {}: {e}", share_images.display()),
                false,
            );
            return;
        }
    };
    let target = p.k3s_data.join("agent/images");
    let existing = match list_names(&target) {
        Ok(e) => e,
        Err(e) => {
            r.fail(format!("cannot read {}: {e}", target.display()), false);
            return;
        }
    };
    let plan = decide_images(&tarballs, &share_images, &existing);
    if tarballs.is_empty() {
        r.notes.push(format!(
            "no images in {}: k3s pulls its own (pause, coredns, local-path) from their \
             registries, and the operators are not built yet",
            share_images.display()
        ));
    }
    r.unchanged = r.unchanged.saturating_add(plan.unchanged);
    if !plan.link.is_empty()
        && let Err(e) = create_dir(&target, 0o755)
    {
        r.fail(format!("cannot create {}: {e}", target.display()), false);
        return;
    }
    for (name, to) in &plan.link {
        let link = target.join(name);
        match link_atomic(&link, to) {
            Ok(()) => r.written.push(link),
            Err(e) => r.fail(
                format!("cannot link {} to {}: {e}", link.display(), to.display()),
                false,
            ),
        }
    }
    for name in &plan.remove {
        let path = target.join(name);
        match std::fs::remove_file(&path) {
            Ok(()) => r.removed.push(path),
            Err(e) => r.fail(format!("cannot remove {}: {e}", path.display()), false),
        }
    }
}

/// The layer's secrets: what k3s reads once, at seeding (the CA keys, the
/// service-account key, both tokens), below the layer.
pub fn layer_secrets() -> impl Iterator<Item = String> {
    IDENTITY_FILES
        .iter()
        .filter(|(_, private)| *private)
        .map(|(rel, _)| format!("{LAYER_IDENTITY}/tls/{rel}"))
        .chain(["token", "agent-token"].map(|t| format!("{LAYER_IDENTITY}/{t}")))
}

/// Removes the layer's secrets from this boot's copy of the layer once
/// k3s is seeded: k3s keeps its own copies (server/tls, its token files),
/// and nothing else on the running machine needs them, so none is left
/// in /run for anything but init and k3s to find. The certificates stay
/// (init checks the clock against them). The next boot copies the layer
/// from the initramfs again. The identity directory is kept 0700.
pub fn forget_layer_secrets(layer: &Path, r: &mut Report) {
    let identity = layer.join(crate::role_layer::IDENTITY_DIR);
    if identity.is_dir()
        && let Err(e) = std::fs::set_permissions(&identity, std::fs::Permissions::from_mode(0o700))
    {
        r.fail(format!("cannot close {}: {e}", identity.display()), false);
    }
    for rel in layer_secrets() {
        let path = layer.join(rel);
        match std::fs::remove_file(&path) {
            Ok(()) => r.removed.push(path),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => r.fail(
                format!(
                    "cannot remove {} after seeding: {e}; it stays readable by root on this \
                     machine until the next boot",
                    path.display()
                ),
                false,
            ),
        }
    }
}

/// The milestone for a report.
pub fn describe(r: &Report, role: Role, join: &Join) -> Outcome {
    let how = match join {
        Join::InitCluster => "starting the cluster".to_owned(),
        Join::Server(url) => format!("joining {url}"),
    };
    let mut text = format!(
        "{} {how}: {} written, {} unchanged",
        role.as_str(),
        r.written.len(),
        r.unchanged
    );
    if !r.removed.is_empty() {
        let _ = write!(text, ", {} removed", r.removed.len());
    }
    for note in &r.notes {
        let _ = write!(text, "; {note}");
    }
    if r.failures.is_empty() {
        return Outcome::ok_with(text);
    }
    let then = if r.block.is_some() {
        "k3s is not started"
    } else {
        "k3s starts without what failed"
    };
    Outcome::Failed(format!("{}; {then} ({text})", r.failures.join("; ")))
}

/// The k3s-seed step. A failure that would let k3s start outside its
/// cluster keeps k3s from starting (through `boot.no_service`).
pub fn step(boot: &mut Boot) -> Outcome {
    let (Some(machine), Some(cluster)) = (&boot.machine, &boot.cluster) else {
        return Outcome::Skipped("no valid Machine and Cluster documents".into());
    };
    if let Err(why) = crate::staged::data_partition(&boot.paths) {
        return Outcome::Skipped(format!(
            "{why}; k3s keeps its state on the data partition, so nothing is seeded"
        ));
    }
    let role = if cluster.is_leader(&machine.metadata.name) {
        Role::Leader
    } else {
        Role::Follower
    };
    let paths = SeedPaths::of(&boot.paths);
    let mut report = seed(&paths, machine, cluster, role);
    if report.block.is_none() {
        forget_layer_secrets(&paths.layer, &mut report);
    }
    let outcome = describe(&report, role, &decide_join(machine, cluster, role));
    if let Some(why) = report.block {
        boot.no_service = Some(format!("seeding k3s failed: {why}"));
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::MachineSpec;
    use liken_api::cluster::ClusterSpec;
    use liken_api::machine::K3sSpec;
    use std::os::unix::fs::MetadataExt;

    fn cluster(leaders: &[&str]) -> Cluster {
        Cluster::new(
            "home",
            ClusterSpec {
                endpoint: "https://10.0.0.10:6443".into(),
                leaders: leaders.iter().map(|s| (*s).to_owned()).collect(),
                ..ClusterSpec::default()
            },
        )
    }

    fn machine(name: &str) -> Machine {
        Machine::new(
            name,
            MachineSpec {
                hostname: Some(format!("{name}.lan")),
                k3s: Some(K3sSpec {
                    node_labels: [
                        (
                            "topology.kubernetes.io/zone".to_owned(),
                            "hall-a".to_owned(),
                        ),
                        ("disk".to_owned(), "ssd".to_owned()),
                    ]
                    .into(),
                    node_taints: vec!["dedicated=db:NoSchedule".into()],
                }),
                ..MachineSpec::default()
            },
        )
    }

    #[test]
    fn the_first_leader_starts_the_cluster() {
        let c = cluster(&["node-1", "node-2"]);
        let got = render_k3s_config(&machine("node-1"), &c, Role::Leader, true);
        assert_eq!(
            got,
            "# k3s configuration for Machine node-1 (leader) of Cluster home,\n\
             # written by liken-init from the running documents at every boot.\n\
             # Edit the documents, not this file: changes here are lost.\n\
             node-name: \"node-1.lan\"\n\
             data-dir: \"/var/lib/rancher/k3s\"\n\
             token-file: \"/var/lib/rancher/k3s/server/token\"\n\
             agent-token-file: \"/var/lib/rancher/k3s/server/agent-token\"\n\
             cluster-init: true\n\
             tls-san:\n  - \"10.0.0.10\"\n\
             kube-apiserver-arg:\n  - \"admission-control-config-file=/run/rancher/k3s/pod-security.yaml\"\n\
             kube-controller-manager-arg:\n  - \"leader-elect-lease-duration=60s\"\n  - \
             \"leader-elect-renew-deadline=40s\"\n\
             kube-scheduler-arg:\n  - \"leader-elect-lease-duration=60s\"\n  - \
             \"leader-elect-renew-deadline=40s\"\n\
             node-label:\n  - \"disk=ssd\"\n  - \"topology.kubernetes.io/zone=hall-a\"\n\
             node-taint:\n  - \"dedicated=db:NoSchedule\"\n"
        );
    }

    /// An interface as (dhcp, static addresses).
    type Iface<'a> = (bool, &'a [&'a str]);

    fn with_interfaces(ifaces: &[Iface]) -> Machine {
        let mut m = machine("node-1");
        m.spec.network = Some(liken_api::machine::NetworkSpec {
            interfaces: ifaces
                .iter()
                .enumerate()
                .map(|(i, (dhcp, addrs))| liken_api::machine::InterfaceSpec {
                    name: Some(format!("eth{i}")),
                    dhcp: *dhcp,
                    addresses: addrs.iter().map(|a| (*a).to_owned()).collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        });
        m
    }

    #[test]
    fn node_ips_follow_the_static_addresses() {
        // (interfaces as (dhcp, addresses), the node-ip k3s is given)
        let table: &[(&[Iface], &[&str])] = &[
            (&[], &[]),
            (&[(true, &[])], &[]),
            (&[(false, &["192.168.1.10/24"])], &["192.168.1.10"]),
            (
                &[(
                    false,
                    &["fd00::10/64", "192.168.1.10/24", "192.168.1.11/24"],
                )],
                &["192.168.1.10", "fd00::10"],
            ),
            (
                &[
                    (true, &[]),
                    (false, &["2001:db8::7/64"]),
                    (false, &["10.1.0.7/16"]),
                ],
                &["10.1.0.7", "2001:db8::7"],
            ),
        ];
        for (ifaces, want) in table {
            assert_eq!(
                decide_node_ips(&with_interfaces(ifaces)),
                *want,
                "{ifaces:?}"
            );
        }
        let dual = with_interfaces(&[(false, &["fd00::10/64", "192.168.1.10/24"])]);
        let got = render_k3s_config(&dual, &cluster(&["node-1"]), Role::Leader, false);
        assert!(
            got.contains(
                "node-name: \"node-1.lan\"\nnode-ip:\n  - \"192.168.1.10\"\n  - \"fd00::10\"\ndata-dir:"
            ),
            "{got}"
        );
        // k3s reads config.yaml as YAML: the list is a sequence of two.
        let v: serde_yaml::Value = serde_yaml::from_str(&got).unwrap();
        assert_eq!(v["node-ip"].as_sequence().map(Vec::len), Some(2), "{got}");
        let plain = render_k3s_config(
            &machine("node-1"),
            &cluster(&["node-1"]),
            Role::Leader,
            false,
        );
        assert!(!plain.contains("node-ip"), "{plain}");
    }

    #[test]
    fn other_leaders_and_followers_join_through_the_endpoint() {
        let mut c = cluster(&["node-1", "node-2"]);
        c.spec.endpoint = "https://k8s.example.org:6443/".into();
        let leader = render_k3s_config(&machine("node-2"), &c, Role::Leader, false);
        assert!(
            leader.contains("\nserver: \"https://k8s.example.org:6443\"\n"),
            "{leader}"
        );
        assert!(
            leader.contains("tls-san:\n  - \"k8s.example.org\"\n"),
            "{leader}"
        );
        assert!(!leader.contains("cluster-init"), "{leader}");
        assert!(!leader.contains("agent-token-file"), "{leader}");
        let plain = Machine::new("worker-1", MachineSpec::default());
        assert_eq!(
            render_k3s_config(&plain, &c, Role::Follower, true),
            "# k3s configuration for Machine worker-1 (follower) of Cluster home,\n\
             # written by liken-init from the running documents at every boot.\n\
             # Edit the documents, not this file: changes here are lost.\n\
             node-name: \"worker-1\"\n\
             data-dir: \"/var/lib/rancher/k3s\"\n\
             token-file: \"/var/lib/liken/k3s-token\"\n\
             server: \"https://k8s.example.org:6443\"\n"
        );
    }

    #[test]
    fn the_config_is_yaml_k3s_can_read() {
        let mut m = machine("node-1");
        m.spec
            .k3s
            .as_mut()
            .unwrap()
            .node_labels
            .insert("note".into(), "a \"quoted\" # value: é".into());
        for role in Role::ALL {
            let text = render_k3s_config(&m, &cluster(&["node-1"]), role, true);
            let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
            assert_eq!(v["node-name"], "node-1.lan");
            assert_eq!(v["data-dir"], DATA_DIR);
            let labels = v["node-label"].as_sequence().unwrap();
            assert!(
                labels.contains(&"note=a \"quoted\" # value: é".into()),
                "{labels:?}"
            );
            match role {
                Role::Leader => assert_eq!(v["cluster-init"], true),
                Role::Follower => assert_eq!(v["server"], "https://10.0.0.10:6443"),
            }
        }
    }

    #[test]
    fn endpoint_hosts() {
        assert_eq!(endpoint_host("https://10.0.0.10:6443"), Some("10.0.0.10"));
        assert_eq!(endpoint_host("https://k8s.lan/"), Some("k8s.lan"));
        assert_eq!(endpoint_host("https://[fd00::1]:6443"), Some("fd00::1"));
        assert_eq!(endpoint_host("http://x"), None);
        assert_eq!(endpoint_host("https://:6443"), None);
    }

    #[test]
    fn tokens() {
        assert_eq!(
            decide_token("K10abc::server:s3cret\n").unwrap(),
            "K10abc::server:s3cret"
        );
        assert!(decide_token("\n").is_err());
        assert!(decide_token("a b").is_err());
    }

    fn found(root: &str, rel: &str) -> Found {
        (Path::new(root).join(rel), PathBuf::from(rel))
    }

    #[test]
    fn manifests_are_named_and_retracted_ones_removed() {
        let base = vec![
            found("/m", "crds/machines.liken.sh.yaml"),
            found("/m", "operators/Machine_Operator.yaml"),
        ];
        let features = BTreeMap::from([
            (
                "flux".to_owned(),
                Some(vec![found("/f/flux", "manifests/flux-system.yaml")]),
            ),
            ("nope".to_owned(), None),
        ]);
        let existing = vec![
            "liken-crds-machines.liken.sh.yaml".to_owned(),
            "liken-crds-machines-liken-sh.yaml".to_owned(),
            "liken-feature-iscsi-manifests-iscsid.yaml".to_owned(),
            "liken-feature-iscsi-manifests-iscsid.yaml.skip".to_owned(),
            "ccm.yaml".to_owned(),
            "mine.yaml".to_owned(),
        ];
        let plan = decide_manifests(&base, &features, &existing);
        let names: Vec<&str> = plan.place.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "liken-crds-machines-liken-sh.yaml",
                "liken-operators-machine-operator.yaml",
                "liken-feature-flux-manifests-flux-system.yaml"
            ]
        );
        // The names of before this naming (several periods) go.
        assert_eq!(
            plan.remove,
            [
                "liken-crds-machines.liken.sh.yaml",
                "liken-feature-iscsi-manifests-iscsid.yaml"
            ]
        );
        assert_eq!(plan.missing_features, ["nope"]);
        assert!(plan.problems.is_empty());

        let clash = vec![found("/m", "a_b.yaml"), found("/m", "a-b.yaml")];
        let plan = decide_manifests(&clash, &BTreeMap::new(), &[]);
        assert_eq!(plan.place.len(), 1);
        assert!(
            plan.problems[0].contains("liken-a-b.yaml"),
            "{:?}",
            plan.problems
        );
        // Names that differ only after a period would have shared k3s's
        // Addon (`liken-crds-machines` for both) before; now they differ
        // in it. And the same path with two extensions clashes on it.
        let dotted = vec![
            found("/m", "crds/machines.liken.sh.yaml"),
            found("/m", "crds/machines.yaml"),
            found("/m", "x.yaml"),
            found("/m", "x.json"),
        ];
        let plan = decide_manifests(&dotted, &BTreeMap::new(), &[]);
        let placed: Vec<&str> = plan.place.iter().map(|(_, n)| n.as_str()).collect();
        assert_eq!(
            placed,
            [
                "liken-crds-machines-liken-sh.yaml",
                "liken-crds-machines.yaml",
                "liken-x.yaml"
            ]
        );
        let addons: BTreeSet<&str> = placed.iter().map(|n| addon_name(n)).collect();
        assert_eq!(addons.len(), placed.len());
        assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
        assert!(
            plan.problems[0].contains("whose k3s Addon liken-x another manifest already has"),
            "{:?}",
            plan.problems
        );
    }

    #[test]
    fn manifest_names_have_one_period() {
        let name = |rel: &str| manifest_name("", Path::new(rel));
        assert_eq!(
            name("crds/clusters.liken.sh.yaml").as_deref(),
            Some("liken-crds-clusters-liken-sh.yaml")
        );
        assert_eq!(
            name("Ops/Deploy.YML").as_deref(),
            Some("liken-ops-deploy.yml")
        );
        assert_eq!(name("a_.json").as_deref(), Some("liken-a.json"));
        assert_eq!(
            addon_name("liken-crds-clusters-liken-sh.yaml"),
            "liken-crds-clusters-liken-sh"
        );
        assert_eq!(name("README.md"), None);
        assert_eq!(name("_.yaml"), None);
        assert_eq!(name("../x.yaml"), None);
    }

    #[test]
    fn every_archive_k3s_imports_is_an_airgap_file() {
        for n in [
            "k3s-airgap-images-amd64.tar",
            "k3s-airgap-images-amd64.tar.zst",
            "k3s-airgap-images-amd64.tzst",
            "a.tar.gz",
            "a.tgz",
            "a.tar.bz2",
            "a.tbz",
            "a.tar.lz4",
            "A.TAR.GZ",
            "pull-these.txt",
        ] {
            assert!(is_airgap_file(n), "{n}");
        }
        for n in [
            ".hidden.tar",
            "a.tar.xz",
            "a.zip",
            "a.zst",
            "a.gz",
            "README",
        ] {
            assert!(!is_airgap_file(n), "{n}");
        }
    }

    #[test]
    fn image_links() {
        let share = Path::new("/usr/share/liken/images");
        let existing = vec![
            ("ops.tar".to_owned(), Some(share.join("ops.tar"))),
            ("old.tar".to_owned(), Some(share.join("old.tar"))),
            ("own.tar".to_owned(), None),
            (
                "theirs.tar".to_owned(),
                Some(PathBuf::from("/elsewhere/theirs.tar")),
            ),
        ];
        let tarballs = vec!["ops.tar".to_owned(), "new.tar".to_owned()];
        let plan = decide_images(&tarballs, share, &existing);
        assert_eq!(plan.unchanged, 1);
        assert_eq!(plan.link, [("new.tar".to_owned(), share.join("new.tar"))]);
        assert_eq!(plan.remove, ["old.tar"]);
    }

    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let d =
                std::env::temp_dir().join(format!("liken-init-seed-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            std::fs::create_dir_all(&d).unwrap();
            Tree(d)
        }

        fn write(&self, rel: &str, bytes: &[u8]) {
            let p = self.0.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, bytes).unwrap();
        }

        fn read(&self, rel: &str) -> String {
            std::fs::read_to_string(self.0.join(rel)).unwrap()
        }

        fn mode(&self, rel: &str) -> u32 {
            std::fs::metadata(self.0.join(rel)).unwrap().mode() & 0o777
        }

        fn paths(&self) -> SeedPaths {
            SeedPaths {
                layer: self.0.join("layer"),
                share: self.0.join("share"),
                k3s_data: self.0.join("var/lib/rancher/k3s"),
                config: self.0.join("run/rancher/k3s/config.yaml"),
                var_liken: self.0.join("var/lib/liken"),
                var: self.0.join("var"),
                rancher_run: self.0.join("run/rancher"),
            }
        }

        /// A layer with a whole identity, and an image with the CRDs, a
        /// feature and one operator image.
        fn standard(&self) {
            for (rel, _) in IDENTITY_FILES {
                self.write(
                    &format!("layer/identity/server/tls/{rel}"),
                    format!("layer {rel}").as_bytes(),
                );
            }
            self.write("layer/identity/server/token", b"K10aa::server:secret\n");
            self.write(
                "layer/identity/server/agent-token",
                b"K10aa::node:agentsecret\n",
            );
            self.write(
                "share/manifests/crds/machines.liken.sh.yaml",
                b"kind: CustomResourceDefinition\n",
            );
            self.write(
                "share/manifests/crds/clusters.liken.sh.yaml",
                b"kind: CustomResourceDefinition\n",
            );
            self.write(
                "share/features/flux/manifests/flux-system.yaml",
                b"kind: Namespace\n",
            );
            self.write("share/images/liken-ops.tar", b"tarball");
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const K3S: &str = "var/lib/rancher/k3s";

    #[test]
    fn once_seeded_the_layer_keeps_no_secret() {
        let t = Tree::new("forget");
        t.standard();
        let c = cluster(&["node-1"]);
        let r = seed(&t.paths(), &machine("node-1"), &c, Role::Leader);
        assert_eq!(r.block, None, "{:?}", r.failures);
        let mut after = Report::default();
        forget_layer_secrets(&t.paths().layer, &mut after);
        assert!(after.failures.is_empty(), "{:?}", after.failures);
        // Nine keys (four CAs' twice over, less the certificates, and the
        // service key) and the two tokens.
        assert_eq!(after.removed.len(), 8, "{:?}", after.removed);
        for rel in layer_secrets() {
            assert!(!t.0.join("layer").join(&rel).exists(), "{rel} is left");
        }
        assert!(t.0.join("layer/identity/server/tls/server-ca.crt").exists());
        assert_eq!(t.mode("layer/identity"), 0o700);
        // k3s keeps its own copies.
        assert_eq!(
            t.read(&format!("{K3S}/server/tls/server-ca.key")),
            "layer server-ca.key"
        );
        assert_eq!(
            t.read(&format!("{K3S}/server/token")),
            "K10aa::server:secret\n"
        );
        // A second time finds nothing to remove.
        let mut again = Report::default();
        forget_layer_secrets(&t.paths().layer, &mut again);
        assert!(again.removed.is_empty() && again.failures.is_empty());
    }

    #[test]
    fn the_cluster_config_map_carries_the_document_the_operator_reads() {
        let c = cluster(&["node-1"]);
        let text = render_cluster_config_map(&c, None);
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["kind"], "ConfigMap");
        assert_eq!(v["metadata"]["name"], CLUSTER_CONFIG_MAP);
        assert_eq!(v["metadata"]["namespace"], "liken-system");
        let doc = v["data"]["cluster.yaml"].as_str().unwrap();
        let back: Cluster = liken_api::decode::strict(doc, "cluster.yaml").unwrap();
        assert_eq!(back, c.canonical());
        assert!(v["data"].get("trust.yaml").is_none(), "{text}");

        // The trust root's bytes come through exactly, quotes, colons,
        // newlines and all.
        let trust = "apiVersion: liken.sh/v1alpha1\nkind: TrustRoot\nkeys:\n- id: \"ab:c\"\n";
        let text = render_cluster_config_map(&c, Some(trust));
        let v: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(v["data"]["trust.yaml"].as_str(), Some(trust));
        assert!(v["data"]["cluster.yaml"].is_string());
    }

    #[test]
    fn a_leaders_first_boot_is_seeded_and_a_second_writes_nothing() {
        let t = Tree::new("leader");
        t.standard();
        let mut c = cluster(&["node-1"]);
        c.spec.features.insert("flux".into(), None);
        c.spec.features.insert("absent".into(), None);
        let m = machine("node-1");
        let r = seed(&t.paths(), &m, &c, Role::Leader);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.block, None);
        for (rel, private) in IDENTITY_FILES {
            let at = format!("{K3S}/server/tls/{rel}");
            assert_eq!(t.read(&at), format!("layer {rel}"));
            assert_eq!(t.mode(&at), if private { 0o600 } else { 0o644 }, "{rel}");
        }
        assert_eq!(t.mode(&format!("{K3S}/server/tls")), 0o700);
        assert_eq!(
            t.read(&format!("{K3S}/server/token")),
            "K10aa::server:secret\n"
        );
        assert_eq!(t.mode(&format!("{K3S}/server/token")), 0o600);
        assert_eq!(
            t.read(&format!("{K3S}/server/agent-token")),
            "K10aa::node:agentsecret\n"
        );
        assert_eq!(t.mode(&format!("{K3S}/server/agent-token")), 0o600);
        let manifests: Vec<String> = list_names(&t.0.join(K3S).join("server/manifests"))
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            manifests,
            [
                "liken-crds-clusters-liken-sh.yaml",
                "liken-crds-machines-liken-sh.yaml",
                "liken-deployment-cluster.yaml",
                "liken-feature-flux-manifests-flux-system.yaml"
            ]
        );
        let link = std::fs::read_link(t.0.join(K3S).join("agent/images/liken-ops.tar")).unwrap();
        assert_eq!(link, t.0.join("share/images/liken-ops.tar"));
        assert_eq!(
            t.read("run/rancher/k3s/config.yaml"),
            render_k3s_config(&m, &c, Role::Leader, true)
        );
        assert!(!t.0.join(K3S).join("server/.tls.liken-tmp").exists());
        let first = r.written.len();
        // The tls directory, both tokens, four manifests, a link,
        // /var/run, the machine ID, /etc/rancher/node, the Pod Security
        // configuration, the kubelet's drop-in, config.yaml.
        assert_eq!(first, 14, "{:?}", r.written);
        assert_eq!(
            t.read("run/rancher/k3s/pod-security.yaml"),
            render_pod_security()
        );
        assert_eq!(
            std::fs::read_link(t.0.join("run/rancher/node")).unwrap(),
            t.0.join("var/lib/rancher/node")
        );

        let again = seed(&t.paths(), &m, &c, Role::Leader);
        assert!(again.failures.is_empty(), "{:?}", again.failures);
        assert!(again.written.is_empty(), "{:?}", again.written);
        assert!(again.removed.is_empty());
        assert_eq!(again.unchanged, first);

        // Retracting the feature removes its manifest; nothing else moves
        // but the deployment's Cluster, which follows the document.
        c.spec.features.remove("flux");
        let r = seed(&t.paths(), &m, &c, Role::Leader);
        assert_eq!(
            r.removed,
            [t.0.join(K3S)
                .join("server/manifests/liken-feature-flux-manifests-flux-system.yaml")]
        );
        assert_eq!(
            r.written,
            [t.0.join(K3S)
                .join("server/manifests")
                .join(CLUSTER_MANIFEST)]
        );
    }

    #[test]
    fn an_existing_identity_and_token_are_never_overwritten() {
        let t = Tree::new("keep");
        t.standard();
        t.write(
            &format!("{K3S}/server/tls/server-ca.crt"),
            b"the cluster's own CA",
        );
        t.write(&format!("{K3S}/server/token"), b"K10bb::server:theirs\n");
        let r = seed(
            &t.paths(),
            &machine("node-1"),
            &cluster(&["node-1"]),
            Role::Leader,
        );
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(
            t.read(&format!("{K3S}/server/tls/server-ca.crt")),
            "the cluster's own CA"
        );
        assert!(!t.0.join(K3S).join("server/tls/client-ca.key").exists());
        assert_eq!(
            t.read(&format!("{K3S}/server/token")),
            "K10bb::server:theirs\n"
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("differs from the layer's and is kept")),
            "{:?}",
            r.notes
        );
        assert!(
            !format!("{r:?}").contains("secret"),
            "no token in the report"
        );
    }

    #[test]
    fn an_incomplete_identity_keeps_k3s_from_starting() {
        let t = Tree::new("partial");
        t.standard();
        std::fs::remove_file(t.0.join("layer/identity/server/tls/etcd/peer-ca.key")).unwrap();
        let r = seed(
            &t.paths(),
            &machine("node-1"),
            &cluster(&["node-1"]),
            Role::Leader,
        );
        let why = r.block.as_deref().unwrap();
        assert!(why.contains("etcd/peer-ca.key"), "{why}");
        assert!(
            !t.0.join(K3S).join("server/tls").exists(),
            "no half identity"
        );
        let o = describe(&r, Role::Leader, &Join::InitCluster);
        assert!(
            matches!(&o, Outcome::Failed(m) if m.contains("k3s is not started")),
            "{o:?}"
        );
    }

    #[test]
    fn a_follower_gets_its_token_and_images_but_no_identity_or_manifests() {
        let t = Tree::new("follower");
        t.standard();
        let m = machine("worker-1");
        let c = cluster(&["node-1"]);
        let r = seed(&t.paths(), &m, &c, Role::Follower);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        // The agent token, never the server's.
        assert_eq!(
            t.read("var/lib/liken/k3s-token"),
            "K10aa::node:agentsecret\n"
        );
        assert_eq!(t.mode("var/lib/liken/k3s-token"), 0o600);
        assert!(!t.0.join(K3S).join("server").exists());
        assert!(t.0.join(K3S).join("agent/images/liken-ops.tar").exists());
        assert!(
            t.read("run/rancher/k3s/config.yaml")
                .contains("server: \"https://10.0.0.10:6443\"")
        );
        // The kubelet's drop-in, beside k3s's own defaults.
        let drop_in = format!("{K3S}/{KUBELET_DROP_IN}");
        assert_eq!(t.read(&drop_in), render_kubelet_drop_in());
        assert!(
            render_kubelet_drop_in()
                .contains("\nvolumePluginDir: /var/lib/kubelet/volumeplugins\n")
        );
        assert_eq!(t.mode(&drop_in), 0o600);
        let again = seed(&t.paths(), &m, &c, Role::Follower);
        assert!(again.written.is_empty(), "{:?}", again.written);
    }

    #[test]
    fn no_token_blocks_and_no_images_is_a_note() {
        let t = Tree::new("bare");
        t.write("share/manifests/crds/x.yaml", b"x");
        let r = seed(
            &t.paths(),
            &machine("w"),
            &cluster(&["node-1"]),
            Role::Follower,
        );
        let why = r.block.as_deref().unwrap();
        assert!(
            why.contains("identity/server/agent-token")
                && why.contains("a follower joins with the agent token only"),
            "{r:?}"
        );
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("operators are not built yet")),
            "{r:?}"
        );
        // A follower never takes the server token, even when the layer
        // has nothing else.
        t.write("layer/identity/server/token", b"K10aa::server:secret\n");
        let r = seed(
            &t.paths(),
            &machine("w"),
            &cluster(&["node-1"]),
            Role::Follower,
        );
        assert!(r.block.is_some(), "{r:?}");
        assert!(!t.0.join("var/lib/liken/k3s-token").exists());
        // The configuration is still written, for a person to read.
        assert!(t.0.join("run/rancher/k3s/config.yaml").exists());
    }

    #[test]
    fn writes_happen_only_on_change() {
        let t = Tree::new("change");
        let p = t.0.join("f");
        assert!(write_if_changed(&p, b"a", 0o600).unwrap());
        assert!(!write_if_changed(&p, b"a", 0o600).unwrap());
        let before = std::fs::metadata(&p).unwrap().ino();
        assert!(write_if_changed(&p, b"a", 0o644).unwrap());
        assert_eq!(t.mode("f"), 0o644);
        assert_eq!(
            std::fs::metadata(&p).unwrap().ino(),
            before,
            "mode fixed in place"
        );
        assert!(write_if_changed(&p, b"b", 0o644).unwrap());
        assert_eq!(t.read("f"), "b");
    }
}
