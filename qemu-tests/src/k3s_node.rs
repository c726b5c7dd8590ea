//! What both programs that stand at k3s's path, the node stand-in
//! (`liken-standin-k3s`) and the upstream node launcher
//! (`liken-upstream-k3s`), do the same way: write a private file whole,
//! retry a step of the node's start until it works, and turn a join
//! token's secret into the bootstrap token both register and present.
//! Each binary includes this file with `#[path]`, as it does its console.

use std::path::Path;
use std::time::Duration;

/// Where k3s reads the flags it was not given (k3s-io/k3s
/// pkg/configfilearg/defaultparser.go, `MustParse`'s `DefaultConfig`),
/// which liken-init renders.
pub const CONFIG_PATH: &str = "/etc/rancher/k3s/config.yaml";
/// k3s's data directory for root when config.yaml names none (k3s-io/k3s
/// pkg/datadir/datadir.go, `DefaultDataDir`).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/rancher/k3s";
/// The server CA certificate a follower keeps of the layer init unpacked.
pub const FOLLOWER_SERVER_CA: &str = "/run/liken/layer/identity/server/tls/server-ca.crt";

/// Writes `bytes` to `path`, 0600, through a temporary name.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Repeats `what` until it succeeds, saying through `say` why each try
/// failed, waiting 2 s and then twice as long each time, up to 30 s.
pub fn until_ok<T>(what: &str, say: fn(&str), mut f: impl FnMut() -> Result<T, String>) -> T {
    let mut wait = Duration::from_secs(2);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) => {
                say(&format!(
                    "{what}: {e}; trying again in {} s",
                    wait.as_secs()
                ));
                std::thread::sleep(wait);
                wait = (wait * 2).min(Duration::from_secs(30));
            }
        }
    }
}

/// The bootstrap token (id, secret) that stands for a join token's
/// secret: the first 6 and the next 16 hex digits of its SHA-256, which
/// fit Kubernetes' `[a-z0-9]{6}.[a-z0-9]{16}` whatever the secret holds.
/// The side that registers it (the stand-in's supervisor, the launcher's
/// server) and the side that presents it (an agent's kubelet) derive it
/// here, so only a machine holding the join token can present it.
pub fn bootstrap_token(secret: &str) -> (String, String) {
    let hex = liken_api::hash::sha256(secret.as_bytes()).to_string();
    let hex = hex.trim_start_matches("sha256:");
    (
        hex.get(..6).unwrap_or_default().to_owned(),
        hex.get(6..22).unwrap_or_default().to_owned(),
    )
}

/// A join token: `K10<CA hash>::<user>:<secret>` (k3s's secure form) or
/// a bare secret. Returns the CA hash, if the token has one, and the
/// secret; as k3s's parser does (k3s-io/k3s pkg/clientaccess/token.go,
/// `parseToken`), an empty hash (`K10::<user>:<secret>`) is no hash, and
/// a secure token without its user and secret is refused.
pub fn parse_token(token: &str) -> Result<(Option<&str>, &str), String> {
    let token = token.trim();
    let Some(rest) = token.strip_prefix("K10") else {
        return Ok((None, token));
    };
    let (hash, creds) = rest
        .split_once("::")
        .ok_or_else(|| "the join token starts with K10 but has no `::`".to_owned())?;
    let (_, secret) = creds
        .split_once(':')
        .ok_or_else(|| "the join token has no `<user>:<secret>` after `::`".to_owned())?;
    if secret.is_empty() {
        return Err("the join token's secret is empty".into());
    }
    Ok(((!hash.is_empty()).then_some(hash), secret))
}
