//! The OCI documents a pull reads, and the decisions made on them: which
//! manifest of an index is this workstation's, which file the image runs,
//! how each layer is compressed.
//!
//! Both the OCI media types and Docker's v2 equivalents are read, because
//! registries and the tools that push to them still write both. Fields
//! liken does not use are ignored; the ones it uses are checked
//! ([`Descriptor::digest`] must be a valid `sha256:` digest, which also
//! keeps it safe to put in a URL).

use liken_api::Digest;
use serde::Deserialize;

/// An OCI image index.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A Docker manifest list (the index's older twin).
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
/// An OCI image manifest.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// A Docker v2 schema 2 manifest.
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

/// What a manifest request accepts, most preferred first.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
application/vnd.docker.distribution.manifest.list.v2+json, \
application/vnd.oci.image.manifest.v1+json, \
application/vnd.docker.distribution.manifest.v2+json";

/// A pointer to a blob or manifest: its type, digest and size.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The content's media type.
    #[serde(default)]
    pub media_type: String,
    /// `sha256:<hex>` of the exact bytes.
    pub digest: Digest,
    /// The byte count.
    pub size: u64,
    /// For an index entry: the platform it is built for.
    #[serde(default)]
    pub platform: Option<Platform>,
}

/// An index entry's platform.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Platform {
    /// `linux`.
    #[serde(default)]
    pub os: String,
    /// `amd64`, `arm64`...
    #[serde(default)]
    pub architecture: String,
}

/// An image index (or manifest list).
#[derive(Clone, Debug, Deserialize)]
pub struct Index {
    /// One entry per platform (and attestations, platform `unknown`).
    pub manifests: Vec<Descriptor>,
}

/// An image manifest.
#[derive(Clone, Debug, Deserialize)]
pub struct Manifest {
    /// The config blob.
    pub config: Descriptor,
    /// The filesystem layers, bottom first.
    pub layers: Vec<Descriptor>,
}

/// The part of an image config a pull reads.
#[derive(Clone, Debug, Deserialize)]
pub struct ImageConfig {
    /// The OS the image is built for.
    #[serde(default)]
    pub os: String,
    /// The architecture the image is built for.
    #[serde(default)]
    pub architecture: String,
    /// How the image runs.
    #[serde(default)]
    pub config: RunConfig,
}

/// The image config's `config` object.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct RunConfig {
    /// The program and its first arguments.
    #[serde(default, rename = "Entrypoint")]
    pub entrypoint: Option<Vec<String>>,
}

/// What kind of document a manifest response is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DocumentKind {
    /// An index or manifest list: pick a platform.
    Index,
    /// One image's manifest.
    Manifest,
}

/// The kind a manifest response's media type names; `None` for anything
/// else (a schema 1 manifest, an artifact).
pub fn decide_kind(media_type: &str) -> Option<DocumentKind> {
    match media_type.split(';').next().unwrap_or("").trim() {
        OCI_INDEX | DOCKER_LIST => Some(DocumentKind::Index),
        OCI_MANIFEST | DOCKER_MANIFEST => Some(DocumentKind::Manifest),
        _ => None,
    }
}

/// How a layer's tar is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// A plain tar.
    None,
    /// A gzip-compressed tar.
    Gzip,
}

/// The compression a layer's media type names; `None` for a type this
/// pull cannot read (zstd, foreign layers).
pub fn decide_compression(media_type: &str) -> Option<Compression> {
    match media_type {
        "application/vnd.oci.image.layer.v1.tar"
        | "application/vnd.docker.image.rootfs.diff.tar" => Some(Compression::None),
        "application/vnd.oci.image.layer.v1.tar+gzip"
        | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Some(Compression::Gzip),
        _ => None,
    }
}

/// This workstation's platform in OCI's words.
pub fn this_platform() -> Platform {
    let architecture = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    };
    Platform {
        os: std::env::consts::OS.to_owned(),
        architecture: architecture.to_owned(),
    }
}

/// The index entry built for `want`, or the platforms the index does
/// have (for the message).
pub fn decide_manifest<'a>(
    index: &'a Index,
    want: &Platform,
) -> Result<&'a Descriptor, Vec<String>> {
    index
        .manifests
        .iter()
        .find(|d| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == want.os && p.architecture == want.architecture)
                && decide_kind(&d.media_type) == Some(DocumentKind::Manifest)
        })
        .ok_or_else(|| {
            index
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .filter(|p| p.os != "unknown")
                .map(|p| format!("{}/{}", p.os, p.architecture))
                .collect()
        })
}

/// The path inside the image of the program it runs (its entrypoint),
/// without the leading `/`; `None` when the config names none.
pub fn decide_entrypoint(config: &ImageConfig) -> Option<String> {
    let first = config.config.entrypoint.as_ref()?.first()?;
    let path = first.trim_start_matches('/');
    (!path.is_empty()).then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(json: &str) -> Index {
        serde_json::from_str(json).unwrap()
    }

    const DIGEST: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

    #[test]
    fn the_workstations_platform_is_chosen_from_an_index() {
        let i = index(&format!(
            r#"{{"schemaVersion":2,"manifests":[
              {{"mediaType":"{OCI_MANIFEST}","digest":"{DIGEST}","size":1,"platform":{{"os":"linux","architecture":"arm64"}}}},
              {{"mediaType":"{OCI_MANIFEST}","digest":"{DIGEST}","size":2,"platform":{{"os":"linux","architecture":"amd64"}}}},
              {{"mediaType":"{OCI_MANIFEST}","digest":"{DIGEST}","size":3,"platform":{{"os":"unknown","architecture":"unknown"}}}}]}}"#
        ));
        let amd64 = Platform {
            os: "linux".into(),
            architecture: "amd64".into(),
        };
        assert_eq!(decide_manifest(&i, &amd64).unwrap().size, 2);
        let riscv = Platform {
            os: "linux".into(),
            architecture: "riscv64".into(),
        };
        assert_eq!(
            decide_manifest(&i, &riscv).unwrap_err(),
            ["linux/arm64", "linux/amd64"]
        );
        assert_eq!(this_platform().os, "linux");
    }

    #[test]
    fn a_descriptor_with_a_bad_digest_is_refused() {
        let bad = r#"{"manifests":[{"mediaType":"x","digest":"sha256:../../etc","size":1}]}"#;
        assert!(serde_json::from_str::<Index>(bad).is_err());
    }

    #[test]
    fn kinds_compressions_and_entrypoints() {
        assert_eq!(decide_kind(OCI_INDEX), Some(DocumentKind::Index));
        assert_eq!(
            decide_kind("application/vnd.docker.distribution.manifest.v2+json; charset=utf-8"),
            Some(DocumentKind::Manifest)
        );
        assert_eq!(
            decide_kind("application/vnd.docker.distribution.manifest.v1+prettyjws"),
            None
        );
        assert_eq!(
            decide_compression("application/vnd.oci.image.layer.v1.tar+gzip"),
            Some(Compression::Gzip)
        );
        assert_eq!(
            decide_compression("application/vnd.oci.image.layer.v1.tar+zstd"),
            None
        );
        let config: ImageConfig = serde_json::from_str(
            r#"{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/usr/bin/kubectl-liken-audio","x"]}}"#,
        )
        .unwrap();
        assert_eq!(
            decide_entrypoint(&config).as_deref(),
            Some("usr/bin/kubectl-liken-audio")
        );
        let none: ImageConfig = serde_json::from_str(r#"{"config":{}}"#).unwrap();
        assert_eq!(decide_entrypoint(&none), None);
    }
}
