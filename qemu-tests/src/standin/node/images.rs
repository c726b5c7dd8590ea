//! The images k3s would import from its airgap directory, unpacked.
//!
//! k3s imports every archive in `<data-dir>/agent/images` into
//! containerd when it starts (k3s-io/k3s pkg/agent/containerd/watcher.go;
//! liken-init links the release's `/usr/share/liken/images/*.tar` there),
//! and containerd names each image by its index's
//! `io.containerd.image.name` annotation. The stand-in reads the same
//! archives: OCI image layouts packed as tar (what images/oci-image.sh
//! writes). For each manifest in index.json it checks every blob it uses
//! (manifest, config, layers) against its digest and size before
//! reading it, then unpacks the layers in order into
//! `<store>/<manifest hex>/rootfs` (tar's own unpacking keeps every path
//! inside; whiteouts are not read: liken's images have one layer), and
//! keeps the config's entrypoint, command, environment and working
//! directory. Gzip layers and `docker save` archives are refused with a
//! message: liken's images are neither.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The most an archive may hold in memory (liken's images are a few MB).
const MAX_ARCHIVE: u64 = 256 << 20;

/// One image, ready to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Its name (`liken.sh/liken-machine-operator:2026.12.03-001`).
    pub name: String,
    /// The manifest's digest, `sha256:<hex>`.
    pub digest: String,
    /// The unpacked layers.
    pub rootfs: PathBuf,
    /// The config's Entrypoint.
    pub entrypoint: Vec<String>,
    /// The config's Cmd.
    pub cmd: Vec<String>,
    /// The config's Env (`KEY=value`).
    pub env: Vec<String>,
    /// The config's WorkingDir.
    pub working_dir: String,
}

/// Imports every `*.tar` in `dir` into `store`; returns the images and,
/// for each archive that could not be read, why.
pub fn import_dir(dir: &Path, store: &Path) -> (Vec<Image>, Vec<String>) {
    let mut images = Vec::new();
    let mut problems = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    for f in files {
        let is_tar = f.extension().is_some_and(|x| x == "tar")
            && !f
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        if !is_tar {
            continue;
        }
        match import(&f, store) {
            Ok(mut got) => images.append(&mut got),
            Err(e) => problems.push(format!("{}: {e}", f.display())),
        }
    }
    (images, problems)
}

/// Where an imported image's name and config are kept beside its
/// rootfs, so a later boot still knows it.
const KEPT: &str = "image.json";

/// Records `image` in its store directory `dir`.
fn remember(dir: &Path, image: &Image) -> Result<(), String> {
    let text = serde_json::json!({
        "name": image.name, "digest": image.digest, "entrypoint": image.entrypoint,
        "cmd": image.cmd, "env": image.env, "workingDir": image.working_dir,
    });
    let path = dir.join(format!("{}.{KEPT}", hex_name(&image.name)));
    std::fs::write(&path, text.to_string()).map_err(|e| format!("{}: {e}", path.display()))
}

/// A file-name-safe form of an image name (one store directory can
/// carry several names for the same bytes).
fn hex_name(name: &str) -> String {
    name.bytes().map(|b| format!("{b:02x}")).collect()
}

/// The images imported into `store` on earlier boots: containerd keeps
/// its image store on disk (k3s's agent/containerd under its data
/// directory), so an image a machine imported from an older release's
/// airgap archives is still there after it booted a newer one, and a
/// pod from before the upgrade can run until it is replaced.
pub fn kept(store: &Path) -> Vec<Image> {
    let mut images = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(store)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    for dir in dirs.into_iter().filter(|d| d.join("complete").exists()) {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            if !f.to_string_lossy().ends_with(KEPT) {
                continue;
            }
            let Ok(v) = std::fs::read(&f).map(|b| serde_json::from_slice::<Value>(&b)) else {
                continue;
            };
            let Ok(v) = v else { continue };
            images.push(Image {
                name: v["name"].as_str().unwrap_or_default().to_owned(),
                digest: v["digest"].as_str().unwrap_or_default().to_owned(),
                rootfs: dir.join("rootfs"),
                entrypoint: strings(&v["entrypoint"]),
                cmd: strings(&v["cmd"]),
                env: strings(&v["env"]),
                working_dir: v["workingDir"].as_str().unwrap_or("").to_owned(),
            });
        }
    }
    images
}

/// Reads one archive's entries into memory: path -> bytes.
fn read_archive(path: &Path) -> Result<HashMap<String, Vec<u8>>, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut archive = tar::Archive::new(file.take(MAX_ARCHIVE));
    let mut entries = HashMap::new();
    for e in archive.entries().map_err(|e| e.to_string())? {
        let mut e = e.map_err(|e| e.to_string())?;
        if !e.header().entry_type().is_file() {
            continue;
        }
        let name = e
            .path()
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .trim_start_matches("./")
            .to_owned();
        let mut bytes = Vec::new();
        e.read_to_end(&mut bytes).map_err(|e| e.to_string())?;
        entries.insert(name, bytes);
    }
    Ok(entries)
}

/// A blob named by `descriptor` (digest and size), checked.
fn blob<'a>(entries: &'a HashMap<String, Vec<u8>>, descriptor: &Value) -> Result<&'a [u8], String> {
    let digest = descriptor["digest"]
        .as_str()
        .ok_or("a descriptor has no digest")?;
    let hex = digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("digest {digest} is not sha256:<64 hex>"))?;
    let bytes = entries
        .get(&format!("blobs/sha256/{hex}"))
        .ok_or_else(|| format!("the archive has no blob {digest}"))?;
    let got = liken_api::hash::sha256(bytes).to_string();
    if got != hex {
        return Err(format!(
            "blob {digest} hashes to sha256:{got}: the archive was altered; it is not run"
        ));
    }
    if let Some(size) = descriptor["size"].as_u64()
        && size != bytes.len() as u64
    {
        return Err(format!(
            "blob {digest} is {} bytes, not the {size} its descriptor says",
            bytes.len()
        ));
    }
    Ok(bytes)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Imports one archive (see the module docs).
pub fn import(path: &Path, store: &Path) -> Result<Vec<Image>, String> {
    let entries = read_archive(path)?;
    if !entries.contains_key("oci-layout") {
        return Err("not an OCI image layout (no oci-layout); only OCI archives are read".into());
    }
    let index: Value = serde_json::from_slice(
        entries
            .get("index.json")
            .ok_or("the archive has no index.json")?,
    )
    .map_err(|e| format!("index.json: {e}"))?;
    let mut images = Vec::new();
    for m in index["manifests"].as_array().into_iter().flatten() {
        let Some(name) = m["annotations"]["io.containerd.image.name"].as_str() else {
            continue;
        };
        let manifest: Value =
            serde_json::from_slice(blob(&entries, m)?).map_err(|e| format!("manifest: {e}"))?;
        let config: Value = serde_json::from_slice(blob(&entries, &manifest["config"])?)
            .map_err(|e| format!("config: {e}"))?;
        let digest = m["digest"].as_str().unwrap_or_default().to_owned();
        let dir = store.join(digest.trim_start_matches("sha256:"));
        let rootfs = dir.join("rootfs");
        if !dir.join("complete").exists() {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&rootfs).map_err(|e| format!("{}: {e}", rootfs.display()))?;
            for layer in manifest["layers"].as_array().into_iter().flatten() {
                let media = layer["mediaType"].as_str().unwrap_or("");
                if media != "application/vnd.oci.image.layer.v1.tar"
                    && media != "application/vnd.docker.image.rootfs.diff.tar"
                {
                    return Err(format!(
                        "{name}: layer type {media} is not read (only uncompressed tar layers)"
                    ));
                }
                let bytes = blob(&entries, layer)?;
                let mut t = tar::Archive::new(bytes);
                t.set_preserve_permissions(true);
                for e in t.entries().map_err(|e| e.to_string())? {
                    let mut e = e.map_err(|e| e.to_string())?;
                    e.unpack_in(&rootfs)
                        .map_err(|err| format!("{name}: unpacking a layer: {err}"))?;
                }
            }
            std::fs::write(dir.join("complete"), b"").map_err(|e| e.to_string())?;
        }
        let c = &config["config"];
        let image = Image {
            name: name.to_owned(),
            digest,
            rootfs,
            entrypoint: strings(&c["Entrypoint"]),
            cmd: strings(&c["Cmd"]),
            env: strings(&c["Env"]),
            working_dir: c["WorkingDir"].as_str().unwrap_or("").to_owned(),
        };
        remember(&dir, &image)?;
        images.push(image);
    }
    if images.is_empty() {
        return Err("its index names no image (no io.containerd.image.name)".into());
    }
    Ok(images)
}
