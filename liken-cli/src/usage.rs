//! The command table: each command's synopsis, help paragraph and flags,
//! in the order `liken help` prints them.
//!
//! One table serves three readers: the usage text ([`text`]), each
//! command's flag parsing ([`crate::args::parse`] takes the command's
//! entry), and shell completion (which offers the names and flags listed
//! here). It lists only commands this build has; a command that is not
//! built yet has no entry, so neither help nor completion offers it.
//!
//! To add a command: write a `pub const NAME: Entry`, add it to
//! [`ENTRIES`] where it belongs in the help order, and add its match arm in
//! `lib.rs`.

/// One flag a command accepts.
#[derive(Debug)]
pub struct Opt {
    /// The name without dashes; both `-name` and `--name` work.
    pub name: &'static str,
    /// The placeholder for the value the flag reads (`URL`), or `None`
    /// for a switch.
    pub value: Option<&'static str>,
    /// Whether the flag may be given more than once.
    pub repeatable: bool,
}

impl Opt {
    /// A flag that reads one value and may be given once.
    pub const fn value(name: &'static str, placeholder: &'static str) -> Opt {
        Opt {
            name,
            value: Some(placeholder),
            repeatable: false,
        }
    }

    /// A flag that reads a value and may be repeated.
    pub const fn repeated(name: &'static str, placeholder: &'static str) -> Opt {
        Opt {
            name,
            value: Some(placeholder),
            repeatable: true,
        }
    }

    /// A flag that reads no value.
    pub const fn switch(name: &'static str) -> Opt {
        Opt {
            name,
            value: None,
            repeatable: false,
        }
    }
}

/// One command's entry in the table.
#[derive(Debug)]
pub struct Entry {
    /// The word that names the command.
    pub name: &'static str,
    /// The usage line(s), starting with `liken`.
    pub synopsis: &'static str,
    /// The help paragraph, without indentation (it is indented when
    /// printed).
    pub about: &'static str,
    /// The flags the command accepts.
    pub options: &'static [Opt],
    /// Hidden entries (the shell's `__complete`) parse like the others but
    /// are left out of the usage text and completion.
    pub hidden: bool,
}

/// `liken new`.
pub const NEW: Entry = Entry {
    name: "new",
    synopsis: "liken new [-name NAME -endpoint URL -machine NAME=ROLE ...] <directory>",
    about: "\
Start a deployment: answer a few questions (the cluster's name, the
address machines join through, the machines and their roles) and get a
directory with cluster.yaml and machines/<name>.yaml, commented so that
every field explains itself. Give -name, -endpoint and one -machine per
machine (ROLE is leader or follower) to answer from a script instead.
Existing files are never overwritten.",
    options: &[
        Opt::value("name", "NAME"),
        Opt::value("endpoint", "URL"),
        Opt::repeated("machine", "NAME=ROLE"),
    ],
    hidden: false,
};

/// `liken mint`.
pub const MINT: Entry = Entry {
    name: "mint",
    synopsis: "liken mint <identity-dir>",
    about: "\
Create a new cluster identity: the certificate authorities, the
service-account signing key, the server token that leaders join with and
the agent token that followers join with, in the file layout k3s reads.
It refuses to write over an identity that is already there.",
    options: &[],
    hidden: false,
};

/// `liken adopt`.
pub const ADOPT: Entry = Entry {
    name: "adopt",
    synopsis: "liken adopt <harvest-dir> <identity-dir>",
    about: "\
Arrange identity files copied off an existing k3s server (its
server/tls directory, server/token and server/agent-token when it has
one, under <harvest-dir>) as an identity directory. Without an agent
token of its own, a new one is minted. Any k3s cluster can be adopted,
so liken machines can join a cluster you already run.",
    options: &[],
    hidden: false,
};

/// `liken kubeconfig`.
pub const KUBECONFIG: Entry = Entry {
    name: "kubeconfig",
    synopsis: "liken kubeconfig [-server URL] [-lifetime 30d] <deployment-dir>",
    about: "\
Write an admin kubeconfig to <deployment-dir>/identity/kubeconfig: a
fresh client certificate from the identity's client CA, for kubectl,
valid for 30 days or the -lifetime given (90m, 12h, 30d; at most 365d).
Kubernetes cannot revoke it, so keep it short. The server address is
cluster.yaml's spec.endpoint; -server replaces it when that address is
not reachable from this workstation.",
    options: &[Opt::value("server", "URL"), Opt::value("lifetime", "30d")],
    hidden: false,
};

/// `liken approve-reboot`.
pub const APPROVE_REBOOT: Entry = Entry {
    name: "approve-reboot",
    synopsis: "liken approve-reboot [-server URL] <deployment-dir> <machine>\n\
liken approve-reboot [-server URL] -all [-yes] <deployment-dir>",
    about: "\
Show what a machine with rebootPolicy: Manual has staged and waits for,
and grant the disruption that applies it: the liken.sh/approve-disruption
annotation naming the staged change's hash. The grant is spent when the
change applies, and giving it twice is the same grant; a machine with
nothing waiting gets no write. -all lists every Manual machine that
waits, asks once, and approves them all; without a terminal to ask on
it refuses unless -yes is given.",
    options: &[
        Opt::value("server", "URL"),
        Opt::switch("all"),
        Opt::switch("yes"),
    ],
    hidden: false,
};

/// `liken request-reboot`.
pub const REQUEST_REBOOT: Entry = Entry {
    name: "request-reboot",
    synopsis: "liken request-reboot [-server URL] <deployment-dir> <machine>",
    about: "\
Ask a machine with nothing staged to reboot (a driver bound to the wrong
device, an experiment): the liken.sh/request-reboot annotation naming
the boot it runs now, so the request is spent when it comes back. The
machine still waits for its turn under the cluster's disruption budget,
cordons and drains; with rebootPolicy: Manual it then waits for
approve-reboot.",
    options: &[Opt::value("server", "URL")],
    hidden: false,
};

/// `liken kubectl`.
pub const KUBECTL: Entry = Entry {
    name: "kubectl",
    synopsis: "liken kubectl [-server URL] <deployment-dir> [args...]",
    about: "\
Run kubectl from PATH against the deployment's cluster: write an admin
kubeconfig whose certificate expires in an hour to
<deployment-dir>/identity/passthrough.kubeconfig, set KUBECONFIG to it
alone, and hand the terminal and the exit status to kubectl. liken's flags go
before the directory; every word after it is kubectl's.",
    options: &[Opt::value("server", "URL")],
    hidden: false,
};

/// `liken stern`.
pub const STERN: Entry = Entry {
    name: "stern",
    synopsis: "liken stern [-server URL] <deployment-dir> [args...]",
    about: "As `liken kubectl`, for stern (logs of many pods at once).",
    options: &[Opt::value("server", "URL")],
    hidden: false,
};

/// `liken flux`.
pub const FLUX: Entry = Entry {
    name: "flux",
    synopsis: "liken flux [-server URL] <deployment-dir> [args...]",
    about: "As `liken kubectl`, for the flux CLI.",
    options: &[Opt::value("server", "URL")],
    hidden: false,
};

/// `liken plugins`.
pub const PLUGINS: Entry = Entry {
    name: "plugins",
    synopsis: "liken plugins sync [-server URL] [-pin] <deployment-dir>\n\
liken plugins list [-server URL] <deployment-dir>\n\
liken plugins remove <domain>",
    about: "\
The CLIs of the operators the cluster runs. sync finds every workload
in liken-system labelled cli.liken.sh/plugin=<domain>, takes the CLI
image beside its operator's image (<repository>-cli, same tag), and
pulls it for this OS and architecture by digest only: a tag seen for the
first time is resolved once and pinned in the plugin's record under
~/.liken/plugins/records, after asking on a terminal; in a script it is
refused unless -pin is given. Every digest is checked, and the CLI is
installed as kubectl-liken-<domain> in ~/.liken/plugins/bin; sync
prints the PATH line to add when that directory is not on PATH. list
shows each installed CLI's recorded version beside its operator's and
marks drift, and never runs a plugin. remove deletes one installed CLI.",
    options: &[Opt::value("server", "URL"), Opt::switch("pin")],
    hidden: false,
};

/// `liken layer`.
pub const LAYER: Entry = Entry {
    name: "layer",
    synopsis: "liken layer [-unsigned] [-seal-key release.key] <manifests-dir> <identity-dir> <output.cpio>",
    about: "\
Pack the part of the operating system that is yours into one small
archive: cluster.yaml, machines/*.yaml, trust.yaml (the release keys
the fleet accepts, from `liken trust`) and the identity, under
/etc/liken/. Without a trust.yaml it refuses unless -unsigned is given,
which lets machines write any release the catalog names, signed or
not. Every manifest is checked strictly first. The same inputs always
give the same bytes. Kernel modules are not part of it: the system
image carries the kernel's whole module tree. -seal-key signs a list of
every file (seal.yaml, with seal.yaml.sig) with a release key: a
signed boot image bundled with -layer-key of that key's release.pub
refuses any layer that was changed after packing.",
    options: &[
        Opt::switch("unsigned"),
        Opt::value("seal-key", "release.key"),
    ],
    hidden: false,
};

/// `liken keygen`.
pub const KEYGEN: Entry = Entry {
    name: "keygen",
    synopsis: "liken keygen <dir>\nliken keygen -secureboot <dir>",
    about: "\
Make a release-signing key pair: <dir>/release.key (the private key,
0600: keep it off machines, offline if you can) and <dir>/release.pub
(the public key). Prints the key's id, the first 12 hex digits of the
SHA-256 of the public key. Never overwrites a key.
With -secureboot, make the fleet's own Secure Boot keys instead, with
Debian's openssl: PK, KEK and db, each an RSA-2048 key (<name>.key,
0600) and a self-signed certificate (<name>.crt), one owner GUID (GUID),
the EFI signature lists (<name>.esl) and the authenticated variables
systemd-boot enrols (<name>.auth: PK and KEK signed by PK, db by KEK).
`liken stick -secureboot <dir>` puts the .auth files on a stick.",
    options: &[Opt::switch("secureboot")],
    hidden: false,
};

/// `liken trust`.
pub const TRUST: Entry = Entry {
    name: "trust",
    synopsis: "liken trust [-sign release.key] <trust.yaml> <release.pub>...",
    about: "\
Write a trust root listing the given public keys: the release keys a
fleet accepts. Put it in the deployment directory as trust.yaml, and
`liken layer` packs it. To rotate keys on running machines, list the
new key beside the old one and -sign with the old key (trust.yaml.sig):
a machine takes a new trust root only when a key it trusts signed it.",
    options: &[Opt::value("sign", "release.key")],
    hidden: false,
};

/// `liken sign`.
pub const SIGN: Entry = Entry {
    name: "sign",
    synopsis: "liken sign -key release.key [-channel-days 14] <release.yaml|channel.yaml|trust.yaml>\n\
liken sign -key release.key -allow-rollback <version> -cluster <name> -machine <name>... [-expires <time>] <permit.yaml>",
    about: "\
Sign an existing release.yaml, channel.yaml or trust.yaml: writes the
detached signature <file>.sig (ed25519 over the file's exact bytes,
with the key's id). A channel.yaml is renewed first: the same latest,
its serial raised by one and a new expiry 14 days on (-channel-days to
change), so re-signing before it expires keeps a channel with nothing
new from reading as stopped. It prints the serial and the expiry. With
-allow-rollback, write a rollback permit to <permit.yaml> and sign it:
it lets the named machines of the named Cluster take <version> although
it is older than the newest release they ever blessed, until -expires
(an RFC 3339 time; 24 hours from now by default).",
    options: &[
        Opt::value("key", "release.key"),
        Opt::value("channel-days", "14"),
        Opt::value("allow-rollback", "version"),
        Opt::value("cluster", "name"),
        Opt::repeated("machine", "name"),
        Opt::value("expires", "time"),
    ],
    hidden: false,
};

/// `liken fetch`.
pub const FETCH: Entry = Entry {
    name: "fetch",
    synopsis: "liken fetch (-key release.pub | -trust trust.yaml | -unsigned) [-digest sha256:<hex>] [-ca ca.pem] <source-url> <version|latest> <channel-dir>",
    about: "\
Copy one release from a channel into a local channel directory,
checking every file against the release's release.yaml while it
downloads; a file gets its final name only once it matches. \"latest\"
takes the version the channel's channel.yaml names. Before anything is
downloaded, release.yaml (and for latest, channel.yaml, which must not
be past its expiry) must be signed by the publisher's key (-key, a
release.pub) or by a key of a deployment's trust root (-trust, its
trust.yaml or the deployment directory); otherwise nothing is written.
It prints the key that signed. -unsigned fetches without checking and
says what that gives up. -digest pins release.yaml itself to a catalog
entry's digest, so the whole download is checked against what your
cluster trusts. An https source is checked against the usual public
CAs, or with -ca against only the CA certificates in that PEM file (a
channel behind a private CA). An interrupted download resumes where it
stopped when run again.",
    options: &[
        Opt::value("key", "release.pub"),
        Opt::value("trust", "trust.yaml"),
        Opt::switch("unsigned"),
        Opt::value("digest", "sha256:<hex>"),
        Opt::value("ca", "ca.pem"),
    ],
    hidden: false,
};

/// `liken bundle`.
pub const BUNDLE: Entry = Entry {
    name: "bundle",
    synopsis: "liken bundle [-sign release.key] [-secureboot-key <keys-dir> -layer-key release.pub [-uki-arg ARG ...]] [-slot-size 1Gi] [-microcode microcode.cpio] [-channel-days 14] <vmlinuz> <liken.sqfs> <boot.cpio> <liken-cli> <systemd-boot.efi> <grub-boot.img> <grub-core.img> <licenses.md> <channel-dir> <version> [component=version ...]",
    about: "\
Publish a release into a channel directory: copy the files into
<channel-dir>/<version>/, append the system image's dm-verity hash
tree to its copy, write release.yaml with each file's size and sha256
and the tree's root hash, and move channel.yaml's latest to it if it is
the newest. The
version is a date and a serial (2026.07.11-001) and can be published
only once. The kernel, system image and initramfs files must fit the
boot slot (-slot-size) with 10% to spare. -microcode adds the CPU
microcode initramfs, loaded before boot.cpio; a release without it
boots on the firmware's microcode. component=version pairs
record which upstream versions went in (linux=6.1.0-28 k3s=v1.31.4+k3s1).
It prints the catalog entry for cluster.yaml. -sign signs release.yaml
and channel.yaml with that key (release.yaml.sig, channel.yaml.sig);
machines whose trust root lists the key accept nothing else. A
channel.yaml written stays current for 14 days, or -channel-days.
-secureboot-key (the directory `liken keygen -secureboot` wrote) adds a
signed unified kernel image per slot (liken-a.efi, liken-b.efi): the
kernel, initrds and command line (the slot, its root hash, then
panic=10 console=tty0 console=ttyS0,115200, or the -uki-arg arguments
instead) on systemd-boot's stub, signed with db.key by sbsign. It needs
-layer-key: the release.pub of the key that seals the fleet's layers
(`liken layer -seal-key`), named in the images' command line
(liken.layer-key=), so a machine booted from them trusts no layer that
key did not seal.",
    options: &[
        Opt::value("sign", "release.key"),
        Opt::value("secureboot-key", "keys-dir"),
        Opt::value("layer-key", "release.pub"),
        Opt::repeated("uki-arg", "ARG"),
        Opt::value("channel-days", "14"),
        Opt::value("slot-size", "1Gi"),
        Opt::value("microcode", "microcode.cpio"),
    ],
    hidden: false,
};

/// `liken serve`.
pub const SERVE: Entry = Entry {
    name: "serve",
    synopsis: "liken serve <channel-dir> [address]",
    about: "\
Share a channel directory over plain HTTP for machines and mirrors to
download from (GET, HEAD and byte ranges; no directory listings, and
nothing outside the directory). The address defaults to :8017, every
interface; give 127.0.0.1:8017 to share with this machine only.",
    options: &[],
    hidden: false,
};

/// `liken index`.
pub const INDEX: Entry = Entry {
    name: "index",
    synopsis: "liken index -source <url> <output-dir> < keys",
    about: "\
Render a channel's index: a front page of every release, newest first;
a page per release with its catalog entry and artifacts; a page on
mirroring the channel from <url>; and versions.yaml listing every
release for scripts. The channel's object keys come on standard input,
one per line (<version>/release.yaml marks a release). Each release.yaml
is read from <output-dir> (normally the channel directory itself), or
from <url> when it is not there. Rendering again repairs a stale index.",
    options: &[Opt::value("source", "url")],
    hidden: false,
};

/// `liken stick`.
pub const STICK: Entry = Entry {
    name: "stick",
    synopsis: "liken stick -output <stick.img> [-role leader|follower] [-console ttyS0,115200 ...] [-kernel-arg ARG ...] [-secureboot <keys-dir>] [-force] [-unsigned] [-seal-key release.key] <release-dir> <deployment-dir>",
    about: "\
Write a disk image for a USB stick that installs the deployment: a GPT
with a FAT32 partition (systemd-boot for UEFI, GRUB for BIOS, one menu
entry per machine, the same on both) holding the release, its kernel
and initramfs, and the deployment layer. Every file of the release is
checked against its release.yaml first. Each -console becomes a
console= argument of the installer and of the installed machine; each
-kernel-arg is added as given. No root, mounts or loop devices are
needed. An existing output is replaced only with -force. Without -role
(or with -role leader) the image holds every secret of the cluster (CA
keys, service-account key, both tokens), so that it can install any
machine (a leader): keep it private and wipe the stick afterwards.
-role follower lists only the followers and packs what a follower
keeps: no private key and no server token. The layer is packed as
`liken layer` packs it: without the deployment's trust.yaml only with
-unsigned. -secureboot puts the fleet's Secure Boot keys from
`liken keygen -secureboot` (PK.auth, KEK.auth, db.auth: public halves
only) in loader/keys/auto and sets secure-boot-enroll force: on a
machine whose firmware is in setup mode, systemd-boot enrols them and
resets it, and the disk it installs carries them too. -seal-key seals
the layer as `liken layer -seal-key` does.",
    options: &[
        Opt::value("output", "stick.img"),
        Opt::value("role", "leader|follower"),
        Opt::repeated("console", "ttyS0,115200"),
        Opt::repeated("kernel-arg", "ARG"),
        Opt::value("secureboot", "keys-dir"),
        Opt::switch("force"),
        Opt::switch("unsigned"),
        Opt::value("seal-key", "release.key"),
    ],
    hidden: false,
};

/// `liken media`.
pub const MEDIA: Entry = Entry {
    name: "media",
    synopsis: "liken media -output <install.cpio> [-role leader|follower] [-force] [-unsigned] [-seal-key release.key] <release-dir> <deployment-dir>",
    about: "\
Write one netboot initramfs that installs the deployment: the release's
boot.cpio (after its microcode.cpio, when it has one), the deployment
layer, and the release itself under /liken/release, for a PXE or iPXE
server to hand out with the release's vmlinuz and the kernel arguments
liken.install=1 liken.machine=<name>. Every file of the release is
checked against its release.yaml first. An existing output is replaced
only with -force. -role follower packs only what a follower keeps (the
manifests, the agent token and the server CA certificate): no private
key and no server token, so it is the image to hand to followers.
-role leader, or no -role, packs every secret of the cluster (CA keys,
service-account key, both tokens), so that it can install a leader (or
any machine): serve it only to the machines being installed. The layer
is packed as `liken layer` packs it: without a trust.yaml only with
-unsigned, and sealed with -seal-key.",
    options: &[
        Opt::value("output", "install.cpio"),
        Opt::value("role", "leader|follower"),
        Opt::switch("force"),
        Opt::switch("unsigned"),
        Opt::value("seal-key", "release.key"),
    ],
    hidden: false,
};

/// `liken completion`.
pub const COMPLETION: Entry = Entry {
    name: "completion",
    synopsis: "liken completion bash",
    about: "\
Print the bash completion script for liken and kubectl-liken. For
`kubectl liken <TAB>`, put a link named kubectl_complete-liken to
this binary on PATH.",
    options: &[],
    hidden: false,
};

/// `liken version`.
pub const VERSION: Entry = Entry {
    name: "version",
    synopsis: "liken version",
    about: "Print this toolkit's version.",
    options: &[],
    hidden: false,
};

/// `liken help`.
pub const HELP: Entry = Entry {
    name: "help",
    synopsis: "liken help",
    about: "Print this text.",
    options: &[],
    hidden: false,
};

/// The hidden verb shells run for completion (cobra's protocol).
pub const COMPLETE: Entry = Entry {
    name: "__complete",
    synopsis: "liken __complete <word>... <word-under-cursor>",
    about: "",
    options: &[],
    hidden: true,
};

/// Every command, in help order.
pub const ENTRIES: &[&Entry] = &[
    &NEW,
    &MINT,
    &ADOPT,
    &KUBECONFIG,
    &APPROVE_REBOOT,
    &REQUEST_REBOOT,
    &KUBECTL,
    &STERN,
    &FLUX,
    &PLUGINS,
    &LAYER,
    &KEYGEN,
    &TRUST,
    &SIGN,
    &FETCH,
    &BUNDLE,
    &SERVE,
    &INDEX,
    &STICK,
    &MEDIA,
    &COMPLETION,
    &VERSION,
    &HELP,
    &COMPLETE,
];

const HEADER: &str = "liken: the toolkit for setting up and running a liken cluster\n\nusage:\n\n";

const FOOTER: &str = "\
A deployment directory is what `liken new` writes and the other
commands read:

  <deployment-dir>/cluster.yaml         the one Cluster document
  <deployment-dir>/machines/<name>.yaml one Machine document per computer
  <deployment-dir>/identity/            from `liken mint` or `liken adopt`
  <deployment-dir>/identity/kubeconfig  from `liken kubeconfig`
  <deployment-dir>/identity/passthrough.kubeconfig
                                        from `liken kubectl|stern|flux`

An identity directory holds the certificate authorities and the tokens
that make a cluster one cluster. Some of its files are private keys:
keep it out of version control.

A deployment layer is a small archive with everything about the
operating system that is yours and not liken's. A machine boots the
generic liken release and your layer together.

This binary also runs as kubectl-liken (so `kubectl liken ...` works),
and a first word that names no command runs the plugin
kubectl-liken-<word> from PATH or ~/.liken/plugins/bin.
";

/// What `liken help` prints.
pub fn text() -> String {
    let mut s = String::from(HEADER);
    for entry in ENTRIES.iter().filter(|e| !e.hidden) {
        s.push_str(&entry_text(entry));
        s.push('\n');
    }
    s.push_str(FOOTER);
    s
}

/// One entry as `liken help` and `liken <command> -h` print it.
pub fn entry_text(entry: &Entry) -> String {
    let mut s = String::new();
    for line in entry.synopsis.lines() {
        s.push_str("  ");
        s.push_str(line);
        s.push('\n');
    }
    for line in entry.about.lines() {
        s.push_str("      ");
        s.push_str(line);
        s.push('\n');
    }
    s
}

/// The entry a command word names, hidden ones included.
pub fn find(name: &str) -> Option<&'static Entry> {
    ENTRIES.iter().copied().find(|e| e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_named_once_and_its_synopsis_starts_with_it() {
        let mut names: Vec<_> = ENTRIES.iter().map(|e| e.name).collect();
        for e in ENTRIES {
            assert!(
                e.synopsis.starts_with(&format!("liken {}", e.name)),
                "{}",
                e.synopsis
            );
            for opt in e.options {
                assert!(
                    e.synopsis.contains(&format!("-{}", opt.name)),
                    "{}'s synopsis omits -{}",
                    e.name,
                    opt.name
                );
            }
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ENTRIES.len());
    }

    #[test]
    fn the_text_lists_every_visible_command_and_no_hidden_one() {
        let t = text();
        for e in ENTRIES {
            for line in e.synopsis.lines() {
                assert_eq!(t.contains(line), !e.hidden, "{}", e.name);
            }
        }
    }
}
