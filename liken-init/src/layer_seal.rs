//! Checking the deployment layer against its seal before anything of it
//! is trusted.
//!
//! A boot from a signed unified kernel image has its command line from
//! the image, and the image names the key that seals the fleet's layers
//! (`liken.layer-key=`, [`liken_api::layer_seal`]). The layer itself is a
//! file on the ESP (systemd-boot's credential) that anyone holding the
//! disk can rewrite, and it decides the Machine and Cluster documents,
//! the trust root for releases and a leader's identity. So when the
//! command line names a key, the `layer` step accepts the layer only if
//! its seal.yaml is signed by that key and lists every file found with
//! the same bytes and mode; otherwise nothing of it stays in /etc/liken
//! and the boot goes on without a layer (no machine, no k3s), which a
//! boot on trial cannot get healthy from, so the bootloader falls back.
//!
//! [`decide`] is pure: it takes the files (from the archive before it is
//! unpacked, or from /etc/liken when the initramfs brought the layer) and
//! the key, and answers the key's id or the refusal.

use std::fmt;

use liken_api::layer_seal::{self, Found, LayerSeal, SealError};
use liken_api::signing::{
    self, DetachedSignature, KeyId, PublicKey, TrustRoot, TrustedKey, VerifyError,
};

/// One file of a layer: its path below /etc/liken, permission bits and
/// bytes.
pub struct LayerFile<'a> {
    /// The path below /etc/liken.
    pub path: &'a str,
    /// The permission bits.
    pub perm: u32,
    /// The contents.
    pub bytes: &'a [u8],
}

/// Why a layer was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The layer has no seal.yaml or no seal.yaml.sig.
    Unsealed {
        /// The file missing.
        missing: String,
    },
    /// seal.yaml or its signature is not the document expected.
    Unreadable(String),
    /// The signature is not the named key's over seal.yaml.
    Signature(VerifyError),
    /// A file does not match the seal.
    Seal(SealError),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Unsealed { missing } => write!(
                f,
                "the layer has no {missing}, but this boot image accepts only a layer sealed by \
                 its key: pack it with `liken layer -seal-key <release.key>` (the key whose \
                 release.pub was given to `liken bundle -layer-key`)"
            ),
            Refusal::Unreadable(e) => write!(f, "{e}"),
            Refusal::Signature(VerifyError::UnknownKey { key_id, .. }) => write!(
                f,
                "the layer's seal is signed by key {key_id}, not by the key this boot image \
                 names: seal it with the key given to `liken bundle -layer-key`"
            ),
            Refusal::Signature(e) => write!(f, "the layer's seal.yaml.sig: {}", e.reason()),
            Refusal::Seal(e) => write!(f, "{e}"),
        }
    }
}

/// Decides whether `files` are a layer sealed by `key`; returns the
/// key's id.
pub fn decide(key: &PublicKey, files: &[LayerFile<'_>]) -> Result<KeyId, Refusal> {
    let find = |name: &str| {
        files
            .iter()
            .find(|f| f.path == name)
            .map(|f| f.bytes)
            .ok_or_else(|| Refusal::Unsealed {
                missing: name.to_owned(),
            })
    };
    let sig_name = signing::signature_name(layer_seal::SEAL_FILE);
    let seal_bytes = find(layer_seal::SEAL_FILE)?;
    let sig_bytes = find(&sig_name)?;
    let id = KeyId::of(key);
    let trust = TrustRoot {
        api_version: liken_api::API_VERSION.to_owned(),
        kind: "TrustRoot".to_owned(),
        keys: vec![TrustedKey {
            id: id.clone(),
            public_key: *key,
        }],
    };
    let sig: DetachedSignature =
        liken_api::decode::strict(&String::from_utf8_lossy(sig_bytes), &sig_name)
            .map_err(|e| Refusal::Unreadable(e.to_string()))?;
    trust
        .verify(seal_bytes, Some(&sig))
        .map_err(Refusal::Signature)?;
    // Decoded only once its signature holds: a forged seal is never parsed.
    let seal: LayerSeal =
        liken_api::decode::strict(&String::from_utf8_lossy(seal_bytes), layer_seal::SEAL_FILE)
            .map_err(|e| Refusal::Unreadable(e.to_string()))?;
    let found: Vec<Found> = files
        .iter()
        .map(|f| Found {
            path: f.path.to_owned(),
            perm: f.perm,
            sha256: liken_api::hash::sha256(f.bytes),
        })
        .collect();
    layer_seal::decide_sealed(&seal, &found).map_err(Refusal::Seal)?;
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::signing::key_pair;

    fn sealed(seed: u8) -> (PublicKey, Vec<(String, u32, Vec<u8>)>) {
        let (private, public) = key_pair([seed; 32]);
        let mut files = vec![
            (
                "cluster.yaml".to_owned(),
                0o644,
                b"kind: Cluster\n".to_vec(),
            ),
            (
                "machines/node-1.yaml".to_owned(),
                0o644,
                b"kind: Machine\n".to_vec(),
            ),
            (
                "identity/server/token".to_owned(),
                0o600,
                b"K10secret\n".to_vec(),
            ),
        ];
        let seal = LayerSeal::of(files.iter().map(|(p, m, b)| Found {
            path: p.clone(),
            perm: *m,
            sha256: liken_api::hash::sha256(b),
        }))
        .render()
        .unwrap();
        let sig = liken_api::decode::to_yaml(&private.sign(seal.as_bytes())).unwrap();
        files.push(("seal.yaml".to_owned(), 0o644, seal.into_bytes()));
        files.push(("seal.yaml.sig".to_owned(), 0o644, sig.into_bytes()));
        (public.public_key, files)
    }

    fn view(files: &[(String, u32, Vec<u8>)]) -> Vec<LayerFile<'_>> {
        files
            .iter()
            .map(|(p, m, b)| LayerFile {
                path: p,
                perm: *m,
                bytes: b,
            })
            .collect()
    }

    #[test]
    fn a_sealed_layer_and_a_followers_part_of_it_pass() {
        let (key, files) = sealed(1);
        assert_eq!(decide(&key, &view(&files)), Ok(KeyId::of(&key)));
        let follower: Vec<_> = files
            .iter()
            .filter(|(p, _, _)| !p.starts_with("identity/"))
            .cloned()
            .collect();
        assert_eq!(decide(&key, &view(&follower)), Ok(KeyId::of(&key)));
    }

    #[test]
    fn another_keys_seal_a_changed_file_a_changed_seal_and_no_seal_are_refused() {
        let (key, files) = sealed(1);
        let (other, _) = sealed(2);
        let e = decide(&other, &view(&files)).unwrap_err();
        assert!(
            e.to_string()
                .contains("not by the key this boot image names"),
            "{e}"
        );

        let mut changed = files.clone();
        changed[1].2 = b"kind: Machine\n# and more\n".to_vec();
        assert_eq!(
            decide(&key, &view(&changed)),
            Err(Refusal::Seal(SealError::Changed {
                path: "machines/node-1.yaml".into()
            }))
        );

        // A seal rewritten to match a changed file no longer matches its
        // signature.
        let mut reseal = files.clone();
        let text = String::from_utf8(reseal[3].2.clone()).unwrap();
        reseal[3].2 = text.replacen("'0600'", "'0644'", 1).into_bytes();
        assert_ne!(reseal[3].2, files[3].2);
        assert!(matches!(
            decide(&key, &view(&reseal)),
            Err(Refusal::Signature(VerifyError::Changed { .. }))
        ));

        let unsealed: Vec<_> = files[..3].to_vec();
        let e = decide(&key, &view(&unsealed)).unwrap_err();
        assert_eq!(
            e,
            Refusal::Unsealed {
                missing: "seal.yaml".into()
            }
        );
        assert!(e.to_string().contains("liken layer -seal-key"), "{e}");
    }
}
