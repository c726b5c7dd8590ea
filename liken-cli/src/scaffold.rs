//! `liken new`: a deployment directory that teaches its own fields.
//!
//! Three answers make a fleet: the cluster's name, its machines with their
//! roles, and the endpoint machines join through. `new` asks for them on
//! standard input (one line each, the default in brackets, a bad answer
//! asked again with the reason), or takes them from `-name`, `-endpoint`
//! and repeated `-machine NAME=ROLE` for scripts. The machines come before
//! the endpoint so the endpoint's default can name the first leader.
//!
//! The files it writes carry a comment on every field the API has, and
//! commented-out examples of every optional one. The templates are data
//! ([`Block`]): each block is a doc comment plus YAML that is either live
//! or commented out. A test renders them with every example switched on
//! and reads the result with the strict decoder, so an example can never
//! teach a field that does not parse.
//!
//! Nothing is overwritten: existing files are refused, all of them named,
//! before anything is written; each file is then created exclusively.

use std::fmt;
use std::path::{Path, PathBuf};

use liken_api::meta::is_dns_subdomain;
use liken_api::{Role, decode};

use crate::deployment::{CLUSTER_FILE, MACHINES_DIR, endpoint_problem};
use crate::{Io, args::Parsed};

/// The answers a deployment is made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answers {
    /// The Cluster's name.
    pub name: String,
    /// spec.endpoint.
    pub endpoint: String,
    /// Each machine and its role, in the order given.
    pub machines: Vec<(String, Role)>,
}

/// Why `new` wrote nothing.
#[derive(Debug)]
pub enum ScaffoldError {
    /// Files that would be overwritten.
    Exists(Vec<PathBuf>),
    /// The flag form's answers are wrong or incomplete.
    Flags(Vec<String>),
    /// Standard input ended before every question was answered.
    InputEnded(&'static str),
    /// Reading answers or writing files failed.
    Io {
        /// The file, or `-` for standard input.
        path: PathBuf,
        /// The system's reason.
        source: std::io::Error,
    },
    /// A rendered file failed the strict decoder (a bug in the templates).
    Template(decode::DecodeError),
}

impl fmt::Display for ScaffoldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScaffoldError::Exists(paths) => {
                write!(f, "these files exist and would be overwritten:")?;
                for p in paths {
                    write!(f, "\n  {}", p.display())?;
                }
                write!(
                    f,
                    "\nnothing was written; choose a new directory, or move these files away"
                )
            }
            ScaffoldError::Flags(problems) => {
                write!(f, "the flags do not describe a fleet:")?;
                for p in problems {
                    write!(f, "\n  {p}")?;
                }
                write!(
                    f,
                    "\nexample: liken new -name home -endpoint https://10.0.0.10:6443 \
                     -machine node-1=leader -machine node-2=follower <directory>"
                )
            }
            ScaffoldError::InputEnded(question) => write!(
                f,
                "standard input ended at the question {question:?}; answer every question \
                 (an empty line takes the default), or pass -name, -endpoint and -machine"
            ),
            ScaffoldError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ScaffoldError::Template(e) => write!(
                f,
                "the generated manifest does not parse ({e}); this is a bug in liken, \
                 please report it"
            ),
        }
    }
}

impl std::error::Error for ScaffoldError {}

/// Runs `liken new`.
pub fn command(parsed: Parsed, io: &mut Io) -> Result<(), crate::Error> {
    let [dir] = parsed.paths()?;
    // Refuse at once when the directory already holds a deployment, so
    // nobody answers questions for nothing.
    let cluster_path = dir.join(CLUSTER_FILE);
    if cluster_path.symlink_metadata().is_ok() {
        return Err(ScaffoldError::Exists(vec![cluster_path]).into());
    }
    let machines = parsed.values("machine");
    let scripted = parsed.value("name").is_some()
        || parsed.value("endpoint").is_some()
        || !machines.is_empty();
    let answers = if scripted {
        decide_flags(
            parsed.value("name"),
            parsed.value("endpoint"),
            &machines,
            &dir,
        )
        .map_err(ScaffoldError::Flags)?
    } else {
        ask(&dir, io)?
    };
    let files = render(&answers, false)?;
    write_files(&dir, &files)?;
    for (rel, _) in &files {
        writeln!(io.out, "wrote {}", dir.join(rel).display())?;
    }
    writeln!(
        io.out,
        "next: read the comments in those files, then `liken mint {}`",
        dir.join(crate::deployment::IDENTITY_DIR).display()
    )?;
    Ok(())
}

/// The cluster name offered by default: the directory's name when it is a
/// valid one, else `home`.
pub fn default_name(dir: &Path) -> String {
    dir.file_name()
        .and_then(|n| n.to_str())
        .filter(|n| is_dns_subdomain(n))
        .unwrap_or("home")
        .to_owned()
}

/// The endpoint offered by default: the first leader's name on k3s's port.
pub fn default_endpoint(machines: &[(String, Role)]) -> String {
    let leader = machines
        .iter()
        .find(|(_, r)| *r == Role::Leader)
        .map_or("node-1", |(n, _)| n.as_str());
    format!("https://{leader}:6443")
}

fn parse_role(text: &str) -> Option<Role> {
    match text.trim().to_ascii_lowercase().as_str() {
        "leader" => Some(Role::Leader),
        "follower" => Some(Role::Follower),
        _ => None,
    }
}

fn name_problem(name: &str, what: &str) -> Option<String> {
    (!is_dns_subdomain(name)).then(|| {
        format!("{name:?} is not a valid {what}: use lower-case letters, digits, '-' and '.'")
    })
}

/// The answers from the flag form, or every problem with them.
pub fn decide_flags(
    name: Option<&str>,
    endpoint: Option<&str>,
    machines: &[&str],
    dir: &Path,
) -> Result<Answers, Vec<String>> {
    let mut problems = Vec::new();
    let name = name.map_or_else(|| default_name(dir), str::to_owned);
    problems.extend(name_problem(&name, "cluster name"));
    let mut parsed: Vec<(String, Role)> = Vec::new();
    for m in machines {
        let Some((n, r)) = m.split_once('=') else {
            problems.push(format!(
                "-machine {m:?} must be NAME=ROLE, as node-1=leader"
            ));
            continue;
        };
        let role = parse_role(r);
        if role.is_none() {
            problems.push(format!(
                "-machine {m:?}: the role must be leader or follower"
            ));
        }
        if let Some(p) = name_problem(n, "machine name") {
            problems.push(p);
        } else if parsed.iter().any(|(o, _)| o == n) {
            problems.push(format!("machine {n:?} is given twice"));
        } else if let Some(role) = role {
            parsed.push((n.to_owned(), role));
        }
    }
    if machines.is_empty() {
        problems.push("give at least one -machine NAME=leader".into());
    } else if !parsed.iter().any(|(_, r)| *r == Role::Leader) {
        problems.push("no machine is a leader; a cluster needs at least one".into());
    }
    match endpoint {
        None => problems.push("give -endpoint https://<address>:6443".into()),
        Some(e) => problems.extend(endpoint_problem(e)),
    }
    if problems.is_empty() {
        Ok(Answers {
            name,
            endpoint: endpoint.unwrap_or_default().to_owned(),
            machines: parsed,
        })
    } else {
        Err(problems)
    }
}

/// Asks one question; returns the trimmed answer or the default.
fn question(
    io: &mut Io,
    prompt: &str,
    default: Option<&str>,
    label: &'static str,
) -> Result<String, ScaffoldError> {
    let stdio = |source| ScaffoldError::Io {
        path: PathBuf::from("-"),
        source,
    };
    match default {
        Some(d) => write!(io.out, "{prompt} [{d}]: "),
        None => write!(io.out, "{prompt}: "),
    }
    .and_then(|()| io.out.flush())
    .map_err(stdio)?;
    let mut line = String::new();
    if io.stdin.read_line(&mut line).map_err(stdio)? == 0 {
        writeln!(io.out).map_err(stdio)?;
        return Err(ScaffoldError::InputEnded(label));
    }
    let answer = line.trim();
    Ok(match (answer.is_empty(), default) {
        (true, Some(d)) => d.to_owned(),
        _ => answer.to_owned(),
    })
}

fn complain(io: &mut Io, problem: &str) -> Result<(), ScaffoldError> {
    writeln!(io.out, "  {problem}; try again").map_err(|source| ScaffoldError::Io {
        path: PathBuf::from("-"),
        source,
    })
}

/// The interactive form.
pub fn ask(dir: &Path, io: &mut Io) -> Result<Answers, ScaffoldError> {
    let out_err = |source| ScaffoldError::Io {
        path: PathBuf::from("-"),
        source,
    };
    writeln!(
        io.out,
        "A new liken deployment in {}. Press Enter to take the default in brackets.",
        dir.display()
    )
    .map_err(out_err)?;
    let name = loop {
        let n = question(io, "Cluster name", Some(&default_name(dir)), "cluster name")?;
        match name_problem(&n, "cluster name") {
            None => break n,
            Some(p) => complain(io, &p)?,
        }
    };

    writeln!(
        io.out,
        "Name each machine and give its role: a leader runs the control plane \
         (k3s server), a follower runs workloads (k3s agent)."
    )
    .map_err(out_err)?;
    let mut machines: Vec<(String, Role)> = Vec::new();
    loop {
        let n = machines.len() + 1;
        let (prompt, default) = if machines.is_empty() {
            ("Machine 1 name".to_owned(), Some("node-1".to_owned()))
        } else {
            (format!("Machine {n} name (empty when done)"), None)
        };
        let m = question(io, &prompt, default.as_deref(), "machine name")?;
        if m.is_empty() {
            if machines.iter().any(|(_, r)| *r == Role::Leader) {
                break;
            }
            complain(
                io,
                "no machine is a leader yet; a cluster needs at least one",
            )?;
            continue;
        }
        if let Some(p) = name_problem(&m, "machine name") {
            complain(io, &p)?;
            continue;
        }
        if machines.iter().any(|(o, _)| *o == m) {
            complain(io, &format!("{m:?} is already listed"))?;
            continue;
        }
        let default_role = if machines.is_empty() {
            "leader"
        } else {
            "follower"
        };
        let role = loop {
            let r = question(
                io,
                &format!("Role of {m}, leader or follower"),
                Some(default_role),
                "role",
            )?;
            match parse_role(&r) {
                Some(role) => break role,
                None => complain(io, &format!("{r:?} is neither leader nor follower"))?,
            }
        };
        machines.push((m, role));
    }

    let endpoint = loop {
        let e = question(
            io,
            "API server endpoint, the URL machines join through",
            Some(&default_endpoint(&machines)),
            "endpoint",
        )?;
        match endpoint_problem(&e) {
            None => break e,
            Some(p) => complain(io, &p)?,
        }
    };
    Ok(Answers {
        name,
        endpoint,
        machines,
    })
}

/// One piece of a template: a doc comment and YAML, live or an example.
#[derive(Debug, Clone)]
pub struct Block {
    /// The comment above the field (one or more lines, without `#`).
    pub doc: String,
    /// The field's YAML, relative to the block's indentation.
    pub yaml: String,
    /// Whether the YAML is written commented out (an optional field).
    pub example: bool,
}

fn live(doc: &str, yaml: String) -> Block {
    Block {
        doc: doc.to_owned(),
        yaml,
        example: false,
    }
}

fn example(doc: &str, yaml: &str) -> Block {
    Block {
        doc: doc.to_owned(),
        yaml: yaml.to_owned(),
        example: true,
    }
}

fn push_blocks(out: &mut String, blocks: &[Block], indent: &str, examples_live: bool) {
    for (i, b) in blocks.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        for line in b.doc.lines() {
            out.push_str(indent);
            out.push_str("# ");
            out.push_str(line);
            out.push('\n');
        }
        for line in b.yaml.lines() {
            out.push_str(indent);
            if b.example && !examples_live {
                out.push_str("# ");
            }
            out.push_str(line);
            out.push('\n');
        }
    }
}

/// A YAML scalar for a user-given string (quoted when YAML needs it).
fn scalar(s: &str) -> String {
    serde_yaml::to_string(s)
        .map(|y| y.trim_end().to_owned())
        .unwrap_or_else(|_| format!("{s:?}"))
}

/// cluster.yaml's text.
pub fn cluster_text(a: &Answers, examples_live: bool) -> String {
    let leaders: String = a
        .machines
        .iter()
        .filter(|(_, r)| *r == Role::Leader)
        .map(|(n, _)| format!("  - {}\n", scalar(n)))
        .collect();
    let mut s = String::from(
        "# The Cluster: one per fleet. It says where the API server answers, which\n\
         # machines run the control plane, which release the fleet runs and where\n\
         # releases come from. `liken layer` reads it strictly: a misspelt or\n\
         # unknown field is an error, never silently dropped.\n\
         # Lines starting with `# ` below a comment are optional fields: remove the\n\
         # `# ` to use one.\n\
         apiVersion: liken.sh/v1alpha1\n\
         kind: Cluster\n\
         metadata:\n",
    );
    push_blocks(
        &mut s,
        &[live(
            "The cluster's name: lower-case letters, digits, '-' and '.'. kubeconfig\n\
             entries are named after it.",
            format!("name: {}", scalar(&a.name)),
        )],
        "  ",
        examples_live,
    );
    s.push_str("spec:\n");
    push_blocks(
        &mut s,
        &[
            live(
                "The API server's URL as machines reach it: followers join through it,\n\
                 and `liken kubeconfig` points kubectl at it (-server overrides that\n\
                 when your workstation reaches the cluster another way).",
                format!("endpoint: {}", scalar(&a.endpoint)),
            ),
            live(
                "The machines that run the control plane (k3s server); every other\n\
                 machine is a follower (k3s agent). Each name needs its file\n\
                 machines/<name>.yaml. An odd number (1, 3, 5) keeps etcd's quorum.",
                format!("leaders:\n{}", leaders.trim_end()),
            ),
            example(
                "The release the fleet should run (yyyy.mm.dd-nnn). Machines download it\n\
                 from releases.source and move to it one reboot turn at a time. It must\n\
                 be listed in releases.catalog when the catalog is not empty.",
                "version: 2026.07.11-001",
            ),
            example(
                "Where releases come from, and which ones this fleet trusts. source is the\n\
                 channel's base URL (what `liken serve` or any web server shares); each\n\
                 catalog entry pins a release by the sha256 of its release.yaml, and a\n\
                 machine downloads only a release listed here.",
                "releases:\n  source: https://releases.example/stable\n  catalog:\n    \
                 - version: 2026.07.11-001\n      \
                 digest: sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            example(
                "Optional features, by name, each with its own settings; a name with no\n\
                 value turns a feature on with its defaults. flux keeps the cluster in\n\
                 step with a git repository: url (SSH), branch (main when empty), path\n\
                 (the repository's root when empty) and knownHosts (the forge's SSH host\n\
                 keys, in known_hosts form). The cluster makes the deploy key and shows\n\
                 its public half in `kubectl get cluster -o yaml`.",
                "features:\n  flux:\n    url: ssh://git@forge.example/fleet.git\n    \
                 branch: main\n    path: clusters/home\n    \
                 knownHosts: forge.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample",
            ),
            example(
                "How many machines planned reboots (updates, approved changes) may take\n\
                 down at once; 1 when absent.",
                "disruptionBudget:\n  maxUnavailable: 1",
            ),
            example(
                "How machines reboot into a release or on request: kexec (the default)\n\
                 starts the next kernel without the firmware and keeps the A/B try\n\
                 counting; firmware goes through the firmware every time. A Machine may\n\
                 choose for itself.",
                "reboot: kexec",
            ),
        ],
        "  ",
        examples_live,
    );
    s
}

/// machines/<name>.yaml's text.
pub fn machine_text(name: &str, role: Role, examples_live: bool) -> String {
    let role_line = match role {
        Role::Leader => "It is a leader: cluster.yaml's spec.leaders lists it.",
        Role::Follower => "It is a follower: cluster.yaml's spec.leaders does not list it.",
    };
    let mut s = format!(
        "# A Machine: one computer of the fleet. The file is named after it, and\n\
         # init picks it at boot by the liken.machine= argument, else by a MAC\n\
         # address listed below.\n\
         # {role_line}\n\
         # Lines starting with `# ` below a comment are optional fields: remove the\n\
         # `# ` to use one.\n\
         apiVersion: liken.sh/v1alpha1\n\
         kind: Machine\n\
         metadata:\n"
    );
    push_blocks(
        &mut s,
        &[live(
            "The machine's name: it is the Kubernetes node's name too.",
            format!("name: {}", scalar(name)),
        )],
        "  ",
        examples_live,
    );
    s.push_str("spec:\n");
    push_blocks(
        &mut s,
        &[
            live(
                "How the machine takes a reboot that a change needs. Auto asks the\n\
                 cluster for a turn at once; Manual stages the change and waits until\n\
                 the liken.sh/approve-disruption annotation names the staged change.",
                "rebootPolicy: Auto".to_owned(),
            ),
            example(
                "The hostname to set; the machine's name when absent.",
                &format!("hostname: {name}.lan"),
            ),
            example(
                "Kernel parameters by their dotted name. Values are strings.",
                "sysctls:\n  net.ipv4.ip_forward: \"1\"\n  vm.swappiness: \"10\"",
            ),
            example(
                "Kernel modules to load at boot, after the hardware's own.",
                "modules:\n  - br_netfilter\n  - wireguard",
            ),
            example(
                "Extra kernel command-line arguments, one per item (liken.* are liken's).",
                "kernelArgs:\n  - mitigations=auto",
            ),
            example(
                "The network. Each interface is found by its kernel name, its MAC\n\
                 address, or both; it takes DHCP (dhcp: true), static addresses in CIDR\n\
                 form (IPv4 and IPv6), or both, with optional static routes, DNS servers\n\
                 and an mtu. IPv6 router advertisements (SLAAC and a default route) are\n\
                 accepted where slaac: true, which follows dhcp when absent. bonds join\n\
                 interfaces into one link (mode active-backup or 802.3ad, miimon in ms);\n\
                 vlans tag a link on a parent interface or bond; an interfaces entry with\n\
                 the bond's or VLAN's name gives it addresses. ntp lists time servers;\n\
                 the clock is set from the first that answers at boot.",
                "network:\n  interfaces:\n    - name: eth0\n      mac: \"52:54:00:12:34:56\"\n      \
                 dhcp: true\n    - name: eth1\n      addresses:\n        - 192.168.1.10/24\n        \
                 - fd00:1::10/64\n      routes:\n        - to: 10.20.0.0/16\n          via: 192.168.1.1\n        \
                 - to: \"::/0\"\n          via: fd00:1::1\n      dns:\n        - 192.168.1.1\n      \
                 mtu: 9000\n    - name: bond0\n      addresses:\n        - 10.30.0.10/24\n    \
                 - name: vlan42\n      dhcp: true\n  bonds:\n    - name: bond0\n      \
                 members: [eth2, eth3]\n      mode: active-backup\n      miimon: 100\n  \
                 vlans:\n    - name: vlan42\n      parent: eth1\n      id: 42\n  ntp:\n    - pool.ntp.org",
            ),
            example(
                "The disk an install writes (everything on it is replaced).",
                "installDisk: /dev/vda",
            ),
            example(
                "What k3s registers the node with: labels, and taints written\n\
                 key[=value]:Effect (NoSchedule, PreferNoSchedule or NoExecute).",
                "k3s:\n  nodeLabels:\n    topology.kubernetes.io/zone: rack-1\n  \
                 nodeTaints:\n    - dedicated=storage:NoSchedule",
            ),
            example(
                "How this machine reboots (kexec or firmware), in place of the cluster's\n\
                 reboot.",
                "reboot: firmware",
            ),
        ],
        "  ",
        examples_live,
    );
    s
}

/// Every file, relative to the deployment directory, checked with the
/// strict decoder.
pub fn render(a: &Answers, examples_live: bool) -> Result<Vec<(String, String)>, ScaffoldError> {
    let mut files = vec![(CLUSTER_FILE.to_owned(), cluster_text(a, examples_live))];
    for (name, role) in &a.machines {
        files.push((
            format!("{MACHINES_DIR}/{name}.yaml"),
            machine_text(name, *role, examples_live),
        ));
    }
    for (rel, text) in &files {
        if rel == CLUSTER_FILE {
            decode::strict::<liken_api::Cluster>(text, rel).map_err(ScaffoldError::Template)?;
        } else {
            decode::strict::<liken_api::Machine>(text, rel).map_err(ScaffoldError::Template)?;
        }
    }
    Ok(files)
}

/// Writes the files, refusing (all named) if any exists.
fn write_files(dir: &Path, files: &[(String, String)]) -> Result<(), ScaffoldError> {
    let existing: Vec<PathBuf> = files
        .iter()
        .map(|(rel, _)| dir.join(rel))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    if !existing.is_empty() {
        return Err(ScaffoldError::Exists(existing));
    }
    let machines = dir.join(MACHINES_DIR);
    crate::files::create_dirs(&machines, 0o755).map_err(|source| ScaffoldError::Io {
        path: machines.clone(),
        source,
    })?;
    for (rel, text) in files {
        let path = dir.join(rel);
        crate::files::write_new(&path, text.as_bytes(), crate::files::PUBLIC).map_err(
            |source| {
                if source.kind() == std::io::ErrorKind::AlreadyExists {
                    ScaffoldError::Exists(vec![path.clone()])
                } else {
                    ScaffoldError::Io {
                        path: path.clone(),
                        source,
                    }
                }
            },
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdir::TestDir;

    fn answers() -> Answers {
        Answers {
            name: "home".into(),
            endpoint: "https://10.0.0.10:6443".into(),
            machines: vec![
                ("node-1".into(), Role::Leader),
                ("node-2".into(), Role::Follower),
            ],
        }
    }

    #[test]
    fn every_example_parses_strictly_when_switched_on() {
        let files = render(&answers(), true).unwrap();
        let cluster: liken_api::Cluster = decode::strict(&files[0].1, "cluster.yaml").unwrap();
        assert!(cluster.spec.version.is_some());
        assert!(cluster.flux_config().unwrap().is_some());
        assert_eq!(cluster.max_unavailable(), 1);
        let m: liken_api::Machine = decode::strict(&files[1].1, "node-1.yaml").unwrap();
        let net = m.spec.network.as_ref().unwrap();
        assert_eq!(net.interfaces.len(), 4);
        assert_eq!((net.bonds.len(), net.vlans.len()), (1, 1));
        assert_eq!(net.interfaces[1].mtu, Some(9000));
        assert!(m.spec.k3s.is_some() && m.spec.install_disk.is_some());
    }

    #[test]
    fn the_templates_teach_every_field() {
        let files = render(&answers(), false).unwrap();
        let cluster = &files[0].1;
        for field in [
            "name:",
            "endpoint:",
            "leaders:",
            "# version:",
            "# releases:",
            "source:",
            "catalog:",
            "digest:",
            "# features:",
            "flux:",
            "url:",
            "branch:",
            "path:",
            "knownHosts:",
            "# disruptionBudget:",
            "maxUnavailable:",
            "# reboot: kexec",
        ] {
            assert!(cluster.contains(field), "cluster.yaml lacks {field}");
        }
        let machine = &files[1].1;
        for field in [
            "rebootPolicy: Auto",
            "# hostname:",
            "# sysctls:",
            "# modules:",
            "# kernelArgs:",
            "# network:",
            "interfaces:",
            "mac:",
            "dhcp:",
            "addresses:",
            "routes:",
            "to:",
            "via:",
            "dns:",
            "mtu:",
            "slaac:",
            "bonds:",
            "members:",
            "mode:",
            "miimon:",
            "vlans:",
            "parent:",
            "id:",
            "ntp:",
            "# installDisk:",
            "# k3s:",
            "nodeLabels:",
            "nodeTaints:",
            "# reboot: firmware",
        ] {
            assert!(machine.contains(field), "machine lacks {field}");
        }
        assert!(machine.contains("It is a leader"));
        assert!(files[2].1.contains("It is a follower"));
        // The live documents are exactly the answers.
        let c: liken_api::Cluster = decode::strict(cluster, "c").unwrap();
        assert_eq!(c.spec.leaders, ["node-1"]);
        assert_eq!(c.spec.endpoint, "https://10.0.0.10:6443");
        assert!(c.spec.version.is_none() && c.spec.releases.is_none());
    }

    #[test]
    fn flags_report_every_problem() {
        let dir = Path::new("/x/Bad_Dir");
        let e = decide_flags(
            None,
            Some("http://x"),
            &["node-1", "A=leader", "n2=boss"],
            dir,
        )
        .unwrap_err();
        let all = e.join("\n");
        for want in [
            "must be NAME=ROLE",
            "\"A\" is not a valid machine name",
            "the role must be leader or follower",
            "not an https URL",
            "no machine is a leader",
        ] {
            assert!(all.contains(want), "{want} in {all}");
        }
        let a = decide_flags(
            None,
            Some("https://10.0.0.10:6443"),
            &["node-1=leader", "node-2=Follower"],
            dir,
        )
        .unwrap();
        assert_eq!(
            a.name, "home",
            "an invalid directory name falls back to home"
        );
        assert_eq!(a.machines[1], ("node-2".into(), Role::Follower));
        assert!(decide_flags(None, None, &[], dir).unwrap_err().len() >= 2);
    }

    fn run_new(args: &[&str], stdin: &str) -> (Result<(), crate::Error>, String) {
        let (r, out, _) = crate::tests::run_with(args, stdin);
        (r, out)
    }

    #[test]
    fn piped_answers_with_defaults_and_a_retry() {
        let tmp = TestDir::new("new-piped");
        let dir = tmp.path().join("lab");
        let d = dir.to_str().unwrap();
        // name: default (lab); machine 1: default node-1, role default
        // leader; machine 2: a bad name first, then worker-1 as follower;
        // done; endpoint: a bad one, then the default.
        let stdin = "\n\n\nBAD\nworker-1\nfollower\n\nhttp://nope\n\n";
        let (r, out) = run_new(&["new", d], stdin);
        r.unwrap();
        assert!(out.contains("Cluster name [lab]: "), "{out}");
        assert!(out.contains("\"BAD\" is not a valid machine name"), "{out}");
        assert!(out.contains("'.'; try again"), "{out}");
        assert!(out.contains("[https://node-1:6443]"), "{out}");
        let c: liken_api::Cluster = decode::strict(
            &std::fs::read_to_string(dir.join("cluster.yaml")).unwrap(),
            "c",
        )
        .unwrap();
        assert_eq!(c.metadata.name, "lab");
        assert_eq!(c.spec.endpoint, "https://node-1:6443");
        assert_eq!(c.spec.leaders, ["node-1"]);
        for m in ["node-1", "worker-1"] {
            let text = std::fs::read_to_string(dir.join(format!("machines/{m}.yaml"))).unwrap();
            let doc: liken_api::Machine = decode::strict(&text, m).unwrap();
            assert_eq!(doc.metadata.name, m);
        }
        crate::deployment::read_manifests(&dir).unwrap();
    }

    #[test]
    fn input_that_ends_early_writes_nothing() {
        let tmp = TestDir::new("new-eof");
        let dir = tmp.path().join("lab");
        let (r, _) = run_new(&["new", dir.to_str().unwrap()], "home\n");
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("standard input ended at the question \"machine name\""),
            "{msg}"
        );
        assert!(!dir.exists());
    }

    #[test]
    fn the_flag_form_and_refusing_to_overwrite() {
        let tmp = TestDir::new("new-flags");
        let dir = tmp.path().join("lab");
        let d = dir.to_str().unwrap();
        let args = [
            "new",
            "-name",
            "home",
            "--endpoint",
            "https://10.0.0.10:6443",
            "-machine",
            "node-1=leader",
            "-machine=node-2=follower",
            d,
        ];
        let (r, out) = run_new(&args, "");
        r.unwrap();
        assert!(out.contains("machines/node-2.yaml"), "{out}");
        let before = std::fs::read(dir.join("cluster.yaml")).unwrap();
        let (r, _) = run_new(&args, "");
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("would be overwritten") && msg.contains("cluster.yaml"),
            "{msg}"
        );
        assert_eq!(std::fs::read(dir.join("cluster.yaml")).unwrap(), before);

        // A machine file in the way is named and stops everything.
        let other = tmp.path().join("other");
        std::fs::create_dir_all(other.join("machines")).unwrap();
        std::fs::write(other.join("machines/node-2.yaml"), "mine").unwrap();
        let mut args2 = args;
        args2[8] = other.to_str().unwrap();
        let (r, _) = run_new(&args2, "");
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("machines/node-2.yaml"), "{msg}");
        assert!(!other.join("cluster.yaml").exists());
        assert_eq!(
            std::fs::read(other.join("machines/node-2.yaml")).unwrap(),
            b"mine"
        );
    }
}
