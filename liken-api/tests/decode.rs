//! The strict and wire decoders against whole documents: round trips both
//! ways, and one test per refusal with the message a person would read.

use liken_api::cluster::FEATURE_FLUX;
use liken_api::decode::{self, DecodeError};
use liken_api::machine::{BondMode, InterfaceSpec};
use liken_api::release::{Artifact, Component};
use liken_api::{
    BootStatus, Channel, Cluster, Condition, ConditionStatus, FileName, Machine, Phase,
    RebootPolicy, RebootVia, Release, Role, Sha256Hex, Slot, Time, Version,
};

const MACHINE: &str = include_str!("fixtures/machine.yaml");
const CLUSTER: &str = include_str!("fixtures/cluster.yaml");

fn machine() -> Machine {
    decode::strict(MACHINE, "machines/node-1.yaml").unwrap()
}

fn err_text<T: std::fmt::Debug>(r: Result<T, DecodeError>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn strict_reads_every_field_of_a_machine() {
    let m = machine();
    assert_eq!(m.metadata.name, "node-1");
    assert_eq!(m.hostname(), "node-1.lan");
    assert_eq!(m.reboot_policy(), RebootPolicy::Manual);
    assert_eq!(m.spec.sysctls["vm.swappiness"], "10");
    assert_eq!(m.spec.modules, ["br_netfilter", "wireguard"]);
    let net = m.spec.network.as_ref().unwrap();
    assert_eq!(net.interfaces.len(), 4);
    assert_eq!(net.interfaces[1].routes[0].via, "192.168.10.1");
    assert_eq!(net.interfaces[1].routes[1].to, "::/0");
    assert_eq!(net.interfaces[1].mtu, Some(9000));
    assert!(!net.interfaces[1].slaac());
    assert!(net.interfaces[0].slaac(), "slaac follows dhcp when absent");
    assert_eq!(net.bonds[0].members, ["eth2", "eth3"]);
    assert_eq!(net.bonds[0].mode, BondMode::Lacp);
    assert_eq!(net.bonds[0].miimon(), 50);
    assert_eq!(
        (net.vlans[0].parent.as_str(), net.vlans[0].id),
        ("eth1", 42)
    );
    assert_eq!(net.ntp, ["pool.ntp.org", "192.168.10.1"]);
    assert_eq!(m.spec.install_disk.as_deref(), Some("/dev/vda"));
    assert_eq!(
        m.spec.k3s.as_ref().unwrap().node_taints,
        ["dedicated=storage:NoSchedule"]
    );
    assert_eq!(m.spec.reboot, Some(RebootVia::Kexec));
}

#[test]
fn strict_reads_every_field_of_a_cluster() {
    let c: Cluster = decode::strict(CLUSTER, "cluster.yaml").unwrap();
    assert_eq!(c.spec.leaders, ["node-1"]);
    assert_eq!(c.spec.version.as_ref().unwrap().as_str(), "2026.07.11-001");
    assert_eq!(c.max_unavailable(), 2);
    assert!(c.feature_enabled(FEATURE_FLUX));
    assert!(c.feature_enabled("metrics-server"));
    assert_eq!(c.spec.features["metrics-server"], None);
    assert_eq!(c.flux_config().unwrap().unwrap().branch, "main");
    assert_eq!(c.spec.reboot, Some(RebootVia::Firmware));
}

#[test]
fn yaml_round_trip_is_lossless() {
    let m = machine();
    let again: Machine = decode::strict(&decode::to_yaml(&m).unwrap(), "again").unwrap();
    assert_eq!(again, m);
    let c: Cluster = decode::strict(CLUSTER, "cluster.yaml").unwrap();
    let again: Cluster = decode::strict(&decode::to_yaml(&c).unwrap(), "again").unwrap();
    assert_eq!(again, c);
}

fn with_status(mut m: Machine) -> Machine {
    let t = Time::from_unix(1_780_000_000);
    let mut c = Condition::new("SysctlsApplied", ConditionStatus::True, "Converged", "");
    c.last_transition_time = t;
    m.status.phase = Some(Phase::Ready);
    m.status.role = Some(Role::Leader);
    m.status.conditions = vec![c];
    m.status.boot = Some(BootStatus {
        time: Some(t),
        slot: Some(Slot::A),
        version: Some(Version::parse("2026.07.11-001").unwrap()),
        via: None,
        via_reason: None,
    });
    m.status.observed_generation = 4;
    m
}

#[test]
fn wire_tolerates_what_the_server_adds_and_keeps_the_rest() {
    let m = with_status(machine());
    let mut json = serde_json::to_value(&m).unwrap();
    let meta = json["metadata"].as_object_mut().unwrap();
    meta.insert("creationTimestamp".into(), "2026-05-28T20:26:40Z".into());
    meta.insert("uid".into(), "7d3c".into());
    meta.insert("resourceVersion".into(), "1234".into());
    meta.insert("generation".into(), 4.into());
    meta.insert("labels".into(), serde_json::json!({"team": "infra"}));
    meta.insert(
        "managedFields".into(),
        serde_json::json!([{"manager": "kubectl"}]),
    );
    json["status"]["futureField"] = serde_json::json!(true);

    let bytes = serde_json::to_vec(&json).unwrap();
    let read: Machine =
        decode::wire(&bytes, "GET /apis/liken.sh/v1alpha1/machines/node-1").unwrap();
    assert_eq!(read.metadata.uid, "7d3c");
    assert_eq!(read.metadata.resource_version, "1234");
    assert_eq!(read.metadata.generation, 4);
    let mut expected = m.clone();
    expected.metadata.uid = "7d3c".into();
    expected.metadata.resource_version = "1234".into();
    expected.metadata.generation = 4;
    assert_eq!(read, expected);

    // And the round trip back out: what the wire decoder kept serializes
    // to a document it reads again unchanged.
    let out = serde_json::to_vec(&read).unwrap();
    assert_eq!(decode::wire::<Machine>(&out, "again").unwrap(), read);

    // The same object handed to the strict decoder is refused, naming
    // each field liken does not model.
    let text = err_text(decode::strict::<Machine>(
        &String::from_utf8(bytes).unwrap(),
        "m.yaml",
    ));
    assert!(text.starts_with("m.yaml: unknown fields "), "{text}");
    for f in [
        "`metadata.creationTimestamp`",
        "`metadata.labels`",
        "`metadata.managedFields`",
        "`status.futureField`",
    ] {
        assert!(text.contains(f), "{f} missing from: {text}");
    }
}

#[test]
fn wire_decodes_list_items_without_a_kind() {
    let json = br#"{"metadata":{"name":"node-2"},"spec":{}}"#;
    let m: Machine = decode::wire(json, "LIST item").unwrap();
    assert_eq!(m.metadata.name, "node-2");
}

#[test]
fn wire_refuses_the_wrong_kind() {
    let json =
        br#"{"apiVersion":"liken.sh/v1alpha1","kind":"Cluster","metadata":{"name":"x"},"spec":{}}"#;
    let text = err_text(decode::wire::<Machine>(json, "GET machines/x"));
    assert_eq!(
        text,
        "GET machines/x: kind is \"Cluster\", but a Machine belongs here"
    );
}

#[test]
fn wire_refuses_malformed_values_the_server_should_never_send() {
    let json = br#"{"metadata":{"name":"x"},"status":{"phase":"Sleepy"}}"#;
    let text = err_text(decode::wire::<Machine>(json, "watch machines"));
    assert!(
        text.starts_with("watch machines: unknown variant `Sleepy`"),
        "{text}"
    );
}

#[test]
fn strict_refuses_labels_in_metadata() {
    let doc = MACHINE.replace("metadata:\n", "metadata:\n  labels:\n    team: infra\n");
    assert_eq!(
        err_text(decode::strict::<Machine>(&doc, "machines/node-1.yaml")),
        "machines/node-1.yaml: unknown field `metadata.labels`: a Machine has no such field; \
         remove it or correct the spelling"
    );
}

#[test]
fn strict_refuses_owner_references_in_metadata() {
    let doc = MACHINE.replace("metadata:\n", "metadata:\n  ownerReferences: []\n");
    let text = err_text(decode::strict::<Machine>(&doc, "machines/node-1.yaml"));
    assert!(
        text.contains("unknown field `metadata.ownerReferences`"),
        "{text}"
    );
}

#[test]
fn strict_refuses_a_misspelled_field_deep_in_the_spec() {
    let doc = MACHINE.replacen(
        "        dhcp: true\n",
        "        dhcp: true\n        gatway: 10.0.0.1\n",
        1,
    );
    let text = err_text(decode::strict::<Machine>(&doc, "machines/node-1.yaml"));
    assert!(
        text.contains("unknown field `spec.network.interfaces[0].gatway`"),
        "{text}"
    );
}

#[test]
fn strict_refuses_unknown_top_level_and_feature_config_keys() {
    let doc = format!("{CLUSTER}extra: 1\n");
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(
        text.contains("unknown field `extra`: a Cluster has no such field"),
        "{text}"
    );

    let doc = CLUSTER.replace(
        "      branch: main\n",
        "      branch: main\n      brnach: dev\n",
    );
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(
        text.contains("spec.features.flux: unknown field `brnach`"),
        "feature configurations are checked by their feature: {text}"
    );
}

#[test]
fn strict_refuses_a_wrong_api_version() {
    let doc = MACHINE.replace("liken.sh/v1alpha1", "liken.sh/v1");
    assert_eq!(
        err_text(decode::strict::<Machine>(&doc, "m.yaml")),
        "m.yaml: apiVersion is \"liken.sh/v1\", but liken documents declare apiVersion: liken.sh/v1alpha1"
    );
    let doc = MACHINE.replace("apiVersion: liken.sh/v1alpha1\n", "");
    assert_eq!(
        err_text(decode::strict::<Machine>(&doc, "m.yaml")),
        "m.yaml: no apiVersion; liken documents begin with apiVersion: liken.sh/v1alpha1"
    );
}

#[test]
fn strict_refuses_the_wrong_kind() {
    assert_eq!(
        err_text(decode::strict::<Machine>(CLUSTER, "machines/home.yaml")),
        "machines/home.yaml: kind is \"Cluster\", but a Machine belongs here"
    );
    let doc = MACHINE.replace("kind: Machine\n", "");
    assert_eq!(
        err_text(decode::strict::<Machine>(&doc, "m.yaml")),
        "m.yaml: no kind; this file should hold a Machine, so add kind: Machine"
    );
}

#[test]
fn strict_refuses_bad_yaml_with_its_location() {
    let text = err_text(decode::strict::<Machine>("apiVersion: [\n", "m.yaml"));
    assert!(
        text.starts_with("m.yaml: ") && text.contains("line"),
        "{text}"
    );
    let text = err_text(decode::strict::<Machine>("  \n", "m.yaml"));
    assert_eq!(text, "m.yaml: the file is empty; it should hold a Machine");
}

#[test]
fn strict_refuses_a_wrongly_typed_or_missing_field() {
    let doc = MACHINE.replace(
        "  modules: [br_netfilter, wireguard]",
        "  modules: br_netfilter",
    );
    let text = err_text(decode::strict::<Machine>(&doc, "m.yaml"));
    assert!(
        text.starts_with("m.yaml: spec.modules: invalid type"),
        "{text}"
    );

    let doc = CLUSTER.replace("  endpoint: https://192.168.10.5:6443\n", "");
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(text.contains("missing field `endpoint`"), "{text}");
}

#[test]
fn strict_refuses_an_impossible_version() {
    let doc = CLUSTER.replace(
        "version: 2026.07.11-001\n  releases",
        "version: 2026.02.30-001\n  releases",
    );
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(
        text.contains("version \"2026.02.30-001\" does not name a real date"),
        "{text}"
    );
    let doc = CLUSTER.replace(
        "version: 2026.07.11-001\n  releases",
        "version: 26.7.11\n  releases",
    );
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(
        text.contains("is not yyyy.mm.dd-nnn (for example 2026.07.11-001)"),
        "{text}"
    );
}

#[test]
fn strict_refuses_an_unknown_enum_value() {
    let doc = MACHINE.replace("rebootPolicy: Manual", "rebootPolicy: Sometimes");
    let text = err_text(decode::strict::<Machine>(&doc, "m.yaml"));
    assert!(
        text.contains("unknown variant `Sometimes`, expected `Auto` or `Manual`"),
        "{text}"
    );
    // The reboot way is lowercase, as kubectl shows it.
    let doc = CLUSTER.replace("reboot: firmware", "reboot: Firmware");
    let text = err_text(decode::strict::<Cluster>(&doc, "cluster.yaml"));
    assert!(
        text.contains("unknown variant `Firmware`, expected `kexec` or `firmware`"),
        "{text}"
    );
}

#[test]
fn strict_refuses_invalid_values_listing_every_problem() {
    let doc = MACHINE
        .replace("192.168.10.5/24", "192.168.10.5")
        .replace("installDisk: /dev/vda", "installDisk: vda");
    let text = err_text(decode::strict::<Machine>(&doc, "machines/node-1.yaml"));
    assert_eq!(
        text,
        "machines/node-1.yaml: this Machine is not valid:\n  \
         spec.installDisk: \"vda\" must be a device path such as /dev/vda or /dev/disk/by-id/...\n  \
         spec.network.interfaces[1].addresses[0]: \"192.168.10.5\" is not an address with a prefix length, \
         such as 192.168.1.10/24 or fd00::10/64"
    );
}

#[test]
fn strict_refuses_a_second_document_in_one_file() {
    let doc = format!("{MACHINE}---\n{MACHINE}");
    let text = err_text(decode::strict::<Machine>(&doc, "m.yaml"));
    assert!(text.contains("more than one document"), "{text}");
}

#[test]
fn release_and_channel_documents_round_trip() {
    let r = Release::new(
        Version::parse("2026.07.11-001").unwrap(),
        vec![Artifact {
            name: "system".into(),
            file: FileName::parse("system.squashfs").unwrap(),
            sha256: Sha256Hex::parse(&"ab".repeat(32)).unwrap(),
            size: 123_456_789,
        }],
        vec![Component {
            name: "k3s".into(),
            version: "v1.34.4+k3s1".into(),
        }],
    );
    let yaml = decode::to_yaml(&r).unwrap();
    assert_eq!(decode::strict::<Release>(&yaml, "release.yaml").unwrap(), r);

    let c = Channel::new(Version::parse("2026.07.11-001").unwrap());
    let yaml = decode::to_yaml(&c).unwrap();
    assert_eq!(
        yaml,
        "apiVersion: liken.sh/v1alpha1\nkind: Channel\nlatest: 2026.07.11-001\n"
    );
    assert_eq!(decode::strict::<Channel>(&yaml, "channel.yaml").unwrap(), c);

    let escape = yaml_with_file(&r, "../../etc/shadow");
    let text = err_text(decode::strict::<Release>(&escape, "release.yaml"));
    assert!(
        text.contains("must be a plain name in the release directory"),
        "{text}"
    );
}

fn yaml_with_file(r: &Release, file: &str) -> String {
    decode::to_yaml(r)
        .unwrap()
        .replace("file: system.squashfs", &format!("file: {file}"))
}

#[test]
fn interface_without_name_or_mac_is_refused() {
    let mut m = machine();
    m.spec
        .network
        .as_mut()
        .unwrap()
        .interfaces
        .push(InterfaceSpec {
            dhcp: true,
            ..Default::default()
        });
    let text = err_text(decode::strict::<Machine>(
        &decode::to_yaml(&m).unwrap(),
        "m.yaml",
    ));
    assert!(
        text.contains(
            "spec.network.interfaces[4]: name the interface (name: eth0) or give its mac address"
        ),
        "{text}"
    );
}

/// The network mistakes a person makes (issue 17's bad inputs), each
/// named with its field and what to do.
#[test]
fn network_mistakes_are_named_with_what_to_do() {
    let doc = "apiVersion: liken.sh/v1alpha1
kind: Machine
metadata:
  name: node-1
spec:
  network:
    interfaces:
      - name: eth1
        addresses: [192.168.50.10/24]
        routes:
          - to: fd99::/64
            via: fd50::1
          - to: 10.99.0.0/16
            via: fd50::1
        mtu: 40
      - name: eth2
        dhcp: true
    bonds:
      - name: bond0
        members: [eth2, eth3, eth2]
      - name: bond1
        members: [eth3]
    vlans:
      - name: vlan42
        parent: eth9
        id: 42
      - name: vlan43
        parent: eth1
        id: 4095
";
    let text = err_text(decode::strict::<Machine>(doc, "machines/node-1.yaml"));
    for want in [
        "spec.network.bonds[0].members[2]: \"eth2\" is named twice in this bond; an interface joins one bond, once",
        "spec.network.bonds[1].members[0]: \"eth3\" is named in bond \"bond0\" too; an interface joins one bond, once",
        "spec.network.vlans[0].parent: \"eth9\" is neither an interface named in spec.network.interfaces nor a bond; \
         add an interface entry with name: eth9 or correct the name",
        "spec.network.vlans[1].id: 4095 is not a VLAN id (1 to 4094)",
        "spec.network.interfaces[0].routes[0]: an IPv6 route needs an IPv6 address on this interface: \
         add one to addresses or set slaac: true",
        "spec.network.interfaces[0].routes[1].via: the gateway fd50::1 is not of the destination 10.99.0.0/16's family",
        "spec.network.interfaces[0].mtu: 40 is not an MTU this interface can use (68 to 65535)",
        "spec.network.interfaces[1].name: \"eth2\" is a member of bond \"bond0\"; configure the bond instead",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    assert!(text.starts_with("machines/node-1.yaml"), "{text}");
}

#[test]
fn strict_refuses_a_key_given_twice() {
    // A second `hostname:` would silently win in a lenient reader; a
    // person editing a long file deserves to hear about the first one.
    let doc = MACHINE.replace(
        "  hostname: node-1.lan\n",
        "  hostname: node-1.lan\n  hostname: other\n",
    );
    let text = err_text(decode::strict::<Machine>(&doc, "m.yaml"));
    assert!(
        text.starts_with("m.yaml: ") && text.contains("duplicate"),
        "{text}"
    );
}
