//! The kernel command line: the few `liken.*` arguments init acts on.
//!
//! The bootloader entry (written by init itself, or by `liken stick`)
//! carries them: `liken.machine=<name>` picks this computer's Machine
//! document, `liken.install` boots install mode, `liken.slot=A|B` says
//! which slot the entry boots, `liken.bless-after=<s>` and
//! `liken.bless-deadline=<s>` tune boot assessment, `liken.kexec=<entry>`
//! says the previous boot reached this one by kexec,
//! `liken.verity=<root>:<salt>:<blocks>` gives the slot's dm-verity root
//! hash ([`liken_api::verity`]), and `console=` arguments are kept so
//! the installed machine's entries carry them on. Anything else is the
//! kernel's business and ignored here.
//!
//! `liken.verity=` is read strictly: a value outside its grammar, or the
//! argument twice, is kept as the error, which the root step reports and
//! fails on. A malformed root hash must never become an unverified root.
//! `liken.layer-key=<hex>`, the key a signed image accepts the layer's
//! seal from, is read the same way, and the layer step refuses the layer
//! on its error.
//!
//! Parsing follows the kernel's own rules: arguments split on
//! whitespace, and double quotes group a value with spaces in it.

use liken_api::Slot;
use liken_api::layer_seal::{self, LayerKeyError};
use liken_api::signing::PublicKey;
use liken_api::verity::{self, VerityArg, VerityArgError};

/// What init reads from the command line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cmdline {
    /// `liken.machine=`.
    pub machine: Option<String>,
    /// `liken.install` (bare, or `=1`/`=yes`/`=true`).
    pub install: bool,
    /// `liken.slot=`, when the entry names a slot.
    pub slot: Option<Slot>,
    /// Every `console=` value, in order.
    pub consoles: Vec<String>,
    /// `liken.bless-after=<seconds>`: assess the boot by how long the
    /// supervised service has stayed up instead of k3s's health (tests
    /// with the stand-in).
    pub bless_after: Option<u64>,
    /// `liken.bless-deadline=<seconds>`: how long a counted boot may take
    /// to become healthy before init reboots it.
    pub bless_deadline: Option<u64>,
    /// `liken.kexec=<entry>|grub`: the previous boot's init reached this
    /// one by kexec, booting that entry ([`liken_api::next_boot::KEXEC_ARG`]).
    pub kexec: Option<String>,
    /// `liken.verity=`: the slot's dm-verity root hash, or why the value
    /// given cannot be one. `None` when the entry carries none.
    pub verity: Option<Result<VerityArg, VerityArgError>>,
    /// `liken.layer-key=`: the key a signed boot image accepts the
    /// layer's seal from ([`liken_api::layer_seal`]), or why the value
    /// cannot be one. `None` when the command line names none.
    pub layer_key: Option<Result<PublicKey, LayerKeyError>>,
    /// Arguments that start with `liken.` but mean nothing to this
    /// version, so the console can say so (a typo picks no machine).
    pub unknown: Vec<String>,
}

/// Splits a command line into arguments the way the kernel does.
pub fn split(text: &str) -> Vec<String> {
    let mut args = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut in_arg = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_arg = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_arg {
                    args.push(std::mem::take(&mut current));
                    in_arg = false;
                }
            }
            c => {
                current.push(c);
                in_arg = true;
            }
        }
    }
    if in_arg {
        args.push(current);
    }
    args
}

/// A count of seconds: digits only, at least 1, at most a year.
fn seconds(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().filter(|n| (1..=366 * 24 * 3600).contains(n))
}

impl Cmdline {
    /// Reads the arguments init acts on from the text of /proc/cmdline.
    pub fn parse(text: &str) -> Cmdline {
        let mut c = Cmdline::default();
        for arg in split(text) {
            let (key, value) = match arg.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (arg.as_str(), None),
            };
            match (key, value) {
                ("liken.machine", Some(v)) if !v.is_empty() => c.machine = Some(v.to_owned()),
                // An empty name asks for nothing: the MAC or the only
                // document decides.
                ("liken.machine", Some(_)) => {}
                ("liken.install", None) => c.install = true,
                ("liken.install", Some(v)) => {
                    c.install = matches!(v, "1" | "yes" | "true" | "on");
                }
                ("liken.slot", Some("A" | "a")) => c.slot = Some(Slot::A),
                ("liken.slot", Some("B" | "b")) => c.slot = Some(Slot::B),
                ("console", Some(v)) => c.consoles.push(v.to_owned()),
                ("liken.bless-after", Some(v)) if seconds(v).is_some() => {
                    c.bless_after = seconds(v);
                }
                ("liken.bless-deadline", Some(v)) if seconds(v).is_some() => {
                    c.bless_deadline = seconds(v);
                }
                (liken_api::next_boot::KEXEC_ARG, Some(v)) if !v.is_empty() => {
                    c.kexec = Some(v.to_owned());
                }
                (verity::ARG, value) => {
                    c.verity = Some(match (&c.verity, value) {
                        (Some(_), _) => Err(VerityArgError::Twice),
                        (None, Some(v)) => VerityArg::parse(v),
                        (None, None) => Err(VerityArgError::Fields(String::new())),
                    });
                }
                (layer_seal::ARG, value) => {
                    c.layer_key = Some(match (&c.layer_key, value) {
                        (Some(_), _) => Err(LayerKeyError::Twice),
                        (None, Some(v)) => layer_seal::parse_arg(v),
                        (None, None) => Err(LayerKeyError::Hex(String::new())),
                    });
                }
                (k, _) if k.starts_with("liken.") && !k.starts_with("liken.standin") => {
                    c.unknown.push(arg.clone());
                }
                _ => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_the_kernel() {
        assert_eq!(
            split("  a b=\"c d\"  e\n"),
            vec!["a".to_owned(), "b=c d".to_owned(), "e".to_owned()]
        );
        assert!(split("").is_empty());
    }

    #[test]
    fn reads_liken_arguments() {
        let c = Cmdline::parse(
            "BOOT_IMAGE=/x console=tty0 console=ttyS0,115200 liken.machine=web-1 \
             liken.install liken.slot=B liken.mashine=x quiet liken.standin=exit:3",
        );
        assert_eq!(c.machine.as_deref(), Some("web-1"));
        assert!(c.install);
        assert_eq!(c.slot, Some(Slot::B));
        assert_eq!(c.consoles, vec!["tty0", "ttyS0,115200"]);
        assert_eq!(c.unknown, vec!["liken.mashine=x"]);
    }

    #[test]
    fn boot_assessment_arguments() {
        let c = Cmdline::parse("liken.bless-after=5 liken.bless-deadline=600");
        assert_eq!(c.bless_after, Some(5));
        assert_eq!(c.bless_deadline, Some(600));
        assert!(c.unknown.is_empty());
        let c = Cmdline::parse(
            "liken.bless-after=0 liken.bless-after=-1 liken.bless-deadline=soon liken.bless-after",
        );
        assert_eq!(c.bless_after, None);
        assert_eq!(c.bless_deadline, None);
        assert_eq!(c.unknown.len(), 4, "{:?}", c.unknown);
    }

    #[test]
    fn a_kexec_names_its_entry() {
        let c = Cmdline::parse("liken.slot=b liken.kexec=liken-b+3.conf");
        assert_eq!(c.kexec.as_deref(), Some("liken-b+3.conf"));
        assert!(c.unknown.is_empty());
        assert_eq!(
            Cmdline::parse("liken.kexec=grub").kexec.as_deref(),
            Some("grub")
        );
        let c = Cmdline::parse("liken.kexec=");
        assert_eq!(c.kexec, None);
        assert_eq!(c.unknown, vec!["liken.kexec="]);
    }

    #[test]
    fn the_layer_key_is_read_strictly() {
        let key = "cd".repeat(32);
        let c = Cmdline::parse(&format!("liken.slot=a liken.layer-key={key} quiet"));
        assert_eq!(c.layer_key, Some(Ok(PublicKey([0xcd; 32]))));
        assert!(c.unknown.is_empty());
        assert_eq!(Cmdline::parse("liken.slot=a").layer_key, None);
        for (text, want) in [
            (
                "liken.layer-key".to_owned(),
                LayerKeyError::Hex(String::new()),
            ),
            (
                "liken.layer-key=CD".to_owned(),
                LayerKeyError::Hex("CD".into()),
            ),
            (
                format!("liken.layer-key={key} liken.layer-key={key}"),
                LayerKeyError::Twice,
            ),
        ] {
            assert_eq!(Cmdline::parse(&text).layer_key, Some(Err(want)), "{text}");
        }
    }

    #[test]
    fn the_verity_argument_is_read_strictly() {
        let root = "ab".repeat(32);
        let c = Cmdline::parse(&format!("liken.slot=a liken.verity={root}:0f:513 quiet"));
        let arg = c.verity.unwrap().unwrap();
        assert_eq!(arg.root_hash().as_str(), root);
        assert_eq!(arg.data_blocks(), 513);
        assert_eq!(Cmdline::parse("liken.slot=a").verity, None);
        // Malformed, bare, or twice: kept as the error, never dropped.
        for (text, want) in [
            (
                format!("liken.verity={root}:0f"),
                VerityArgError::Fields(format!("{root}:0f")),
            ),
            (
                format!("liken.verity={root}:0f:0"),
                VerityArgError::DataBlocks("0".into()),
            ),
            (
                "liken.verity".to_owned(),
                VerityArgError::Fields(String::new()),
            ),
            (
                "liken.verity=".to_owned(),
                VerityArgError::Fields(String::new()),
            ),
            (
                format!("liken.verity={root}:0f:1 liken.verity={root}:0f:1"),
                VerityArgError::Twice,
            ),
            (
                format!("liken.verity=x liken.verity={root}:0f:1"),
                VerityArgError::Twice,
            ),
        ] {
            let c = Cmdline::parse(&text);
            assert_eq!(c.verity, Some(Err(want)), "{text}");
            assert!(c.unknown.is_empty(), "{text}: {:?}", c.unknown);
        }
    }

    #[test]
    fn absent_and_empty_values() {
        let c = Cmdline::parse("liken.machine= liken.install=0 liken.slot=C");
        assert_eq!(c.machine, None);
        assert!(!c.install);
        assert_eq!(c.slot, None);
        assert_eq!(c.unknown, vec!["liken.slot=C"]);
    }
}
