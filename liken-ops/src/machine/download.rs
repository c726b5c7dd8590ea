//! The download worker: the Cluster's target release, fetched and
//! verified on a thread of its own, then written into the inactive slot
//! by init.
//!
//! The pass never waits for any of this. It tells the worker what it
//! wants ([`Intent`]) and reads back where the worker stands
//! ([`Worker`]); the worker wakes the loop at each step and every 5 % of
//! a download, so the progress in the condition moves without a status
//! write per read.
//!
//! The download goes through liken-releases, the code `liken fetch`
//! runs: release.yaml pinned by the catalog's digest, every artifact
//! hashed while it streams to a `.partial` name and renamed only once it
//! matches. It downloads into `releases/.download/<version>`, and only the
//! whole verified release is renamed to `releases/<version>`, the
//! directory init writes from: a half-downloaded release never sits
//! under its final name. An interrupted transfer resumes from the
//! partial files on the next try.
//!
//! Before any artifact moves, the fetch checks release.yaml's detached
//! signature against the deployment's trust root (crate::machine::trust),
//! so a release init would refuse is Blocked with the key and the reason
//! instead of being downloaded first; a release already on disk is
//! checked the same way.
//!
//! Failures divide in two. A network failure is tried again after a
//! backoff (30 s doubling to 10 min). A release that does not verify, a
//! full data partition or a write init refused is Blocked: trying again
//! would meet the same answer, so the worker waits for another target.
//! None of them touches the running slot: init writes only the other one.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError, bounded};
use liken_api::control::WriteRelease;
use liken_api::release::RELEASE_FILE;
use liken_api::signing::signature_name;
use liken_api::{Cluster, Digest, Sha256Hex, Version};
use liken_releases::fetch::{self, FetchError, FetchRequest, Signatures, Wanted};
use liken_releases::progress::{Observer, Style};

use crate::machine::facts::Written;
use crate::machine::host::{self, HostPaths};
use crate::machine::init_client::{InitClient, InitError};
use crate::machine::release::{Intent, Worker};
use crate::machine::trust::{Deployed, TrustError};

/// Reads the deployment's trust root (crate::machine::trust), once per
/// download.
pub type TrustLoader = Box<dyn Fn() -> Result<Deployed, TrustError> + Send>;
use crate::runtime::log;

/// The directory below releases/ that downloads happen in.
pub const DOWNLOAD_DIR: &str = ".download";
/// The first wait after a failed download; it doubles to [`RETRY_MAX`].
pub const RETRY_FIRST: Duration = Duration::from_secs(30);
/// The longest wait between two tries.
pub const RETRY_MAX: Duration = Duration::from_secs(600);

/// One job for the worker.
#[derive(Clone, Debug)]
enum Job {
    Download {
        version: Version,
        source: String,
        digest: Digest,
    },
    Write {
        version: Version,
        release_sha256: Sha256Hex,
        boot: Sha256Hex,
    },
}

struct Shared {
    state: Worker,
    /// Not before this, after a transient failure.
    retry_at: Option<Instant>,
    failures: u32,
}

/// The worker and its thread.
pub struct Downloads {
    shared: Arc<Mutex<Shared>>,
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

/// What a failed write into the inactive slot means for the next try.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteFailure {
    /// init is writing (or disarming) already: ask again after a backoff.
    /// Never Blocked; nothing is wrong with the release.
    Busy,
    /// init did not answer, or the exchange broke: ask again after a
    /// backoff.
    Transient,
    /// init refused the release itself (it does not verify, the slot is
    /// missing): Blocked until the target changes.
    Refused,
}

/// Classifies init's answer to a release write.
pub fn decide_write_failure(e: &InitError) -> WriteFailure {
    match e {
        InitError::Refused(why) if why == liken_api::control::WRITE_BUSY => WriteFailure::Busy,
        InitError::Refused(_) => WriteFailure::Refused,
        InitError::Unreachable(_) | InitError::Malformed(_) => WriteFailure::Transient,
    }
}

/// The first wait after init was busy or did not answer a write; it
/// doubles to [`RETRY_MAX`].
pub const WRITE_RETRY_FIRST: Duration = Duration::from_secs(5);

/// The wait after `failures` busy or transient write answers in a row.
pub fn write_retry_after(failures: u32) -> Duration {
    WRITE_RETRY_FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(8))
        .min(RETRY_MAX)
}

/// Whether a fetch failure is fixed by time (the network) or by an edit.
pub fn decide_blocked(e: &FetchError) -> bool {
    match e {
        FetchError::Client(_) | FetchError::Interrupted { .. } | FetchError::BadRange { .. } => {
            false
        }
        FetchError::Io { error, .. } => error.kind() != io::ErrorKind::Interrupted,
        _ => true,
    }
}

/// The wait after `failures` transient failures in a row.
pub fn retry_after(failures: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(8))
        .min(RETRY_MAX)
}

/// A message for a fetch failure of `version` in the operator's words
/// (the library's speak to a person at a terminal running `liken fetch`).
fn explain(e: &FetchError, version: &Version) -> String {
    match e {
        FetchError::Signature { error, .. } => format!(
            "release {version} was refused before download ({}): {error}",
            error.reason()
        ),
        FetchError::UnreadableSignature { error, .. } => format!(
            "release {version} was refused before download (bad-signature): release.yaml.sig \
             cannot be read ({error}); sign the release again with `liken sign`"
        ),
        FetchError::DocumentDigest { url, want, got } => format!(
            "{url} has digest {got}, but the Cluster's catalog pins {want}: this is not the release \
             the catalog trusts, and nothing was written; check the catalog entry and \
             spec.releases.source"
        ),
        FetchError::ArtifactDigest { url, want, got } => format!(
            "{url} has sha256 {got}, but release.yaml says {want}: the download is corrupt or was \
             tampered with, and was deleted; the channel's copy is damaged, so publish the release \
             again or pick another spec.version"
        ),
        FetchError::Io { error, .. } if error.kind() == io::ErrorKind::StorageFull => format!(
            "{e}: the data partition is full; free space on /var (or grow LIKEN-DATA), then \
             change the Cluster's target to try again"
        ),
        other => other.to_string(),
    }
}

impl Downloads {
    /// Starts the worker; `wake` wakes the loop when its state moves, and
    /// `trust` reads the deployment's trust root at each download.
    pub fn start(
        paths: HostPaths,
        init: InitClient,
        trust: TrustLoader,
        wake: Sender<()>,
    ) -> Downloads {
        let shared = Arc::new(Mutex::new(Shared {
            state: Worker::Idle,
            retry_at: None,
            failures: 0,
        }));
        let (tx, rx) = bounded::<Job>(1);
        let thread_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("download".into())
            .spawn(move || work(&paths, &init, &trust, &rx, &thread_shared, &wake))
            .map_err(|e| {
                log::warn(
                    "the download thread did not start; releases will not download",
                    &[("err", &e)],
                )
            })
            .ok();
        Downloads {
            shared,
            jobs: thread.as_ref().map(|_| tx),
            thread,
        }
    }

    /// Where the worker stands.
    pub fn state(&self) -> Worker {
        self.shared
            .lock()
            .map(|s| s.state.clone())
            .unwrap_or_default()
    }

    /// Takes the pass's intent; ignored while the worker is on it, busy,
    /// or waiting out a backoff.
    pub fn ask(&self, intent: &Intent, cluster: &Cluster, boot: Option<&Sha256Hex>) {
        let Some(jobs) = &self.jobs else { return };
        let job = match intent {
            Intent::None => return,
            Intent::Download { version } => {
                let Some(entry) = cluster.catalog_entry(version) else {
                    return;
                };
                let source = cluster
                    .spec
                    .releases
                    .as_ref()
                    .map(|r| r.source.clone())
                    .unwrap_or_default();
                if let Ok(s) = self.shared.lock()
                    && s.retry_at.is_some_and(|t| Instant::now() < t)
                {
                    return;
                }
                Job::Download {
                    version: version.clone(),
                    source,
                    digest: entry.digest.clone(),
                }
            }
            Intent::Write {
                version,
                release_sha256,
            } => {
                let Some(boot) = boot else { return };
                // A write init was busy with (or did not answer) waits
                // out its backoff, rather than asking on every pass.
                if let Ok(s) = self.shared.lock()
                    && s.retry_at.is_some_and(|t| Instant::now() < t)
                {
                    return;
                }
                Job::Write {
                    version: version.clone(),
                    release_sha256: release_sha256.clone(),
                    boot: boot.clone(),
                }
            }
        };
        match jobs.try_send(job) {
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => {
                log::warn("the download thread is gone", &[]);
            }
        }
    }

    /// Stops taking jobs. A transfer under way is left to end with the
    /// process; its partial files resume next time.
    pub fn stop(mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take()
            && t.is_finished()
        {
            let _ = t.join();
        }
    }
}

fn set(shared: &Mutex<Shared>, wake: &Sender<()>, state: Worker) {
    if let Ok(mut s) = shared.lock() {
        s.state = state;
    }
    let _ = wake.try_send(());
}

fn work(
    paths: &HostPaths,
    init: &InitClient,
    trust: &TrustLoader,
    jobs: &Receiver<Job>,
    shared: &Arc<Mutex<Shared>>,
    wake: &Sender<()>,
) {
    for job in jobs {
        let busy_with = shared.lock().map(|s| s.state.clone()).unwrap_or_default();
        match job {
            Job::Download {
                version,
                source,
                digest,
            } => {
                if matches!(&busy_with, Worker::Verified { version: v, .. } if *v == version) {
                    continue;
                }
                download(paths, trust, shared, wake, &version, &source, &digest);
            }
            Job::Write {
                version,
                release_sha256,
                boot,
            } => write(paths, init, shared, wake, &version, &release_sha256, &boot),
        }
    }
}

/// Removes every release directory but `keep` (and the download
/// directory), to make room: a machine needs one release on disk at a
/// time.
fn prune(releases: &Path, keep: &Version) {
    let Ok(entries) = fs::read_dir(releases) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name == keep.as_str() || name == DOWNLOAD_DIR || Version::parse(&name).is_err() {
            continue;
        }
        match fs::remove_dir_all(e.path()) {
            Ok(()) => log::info("removed an old release", &[("release", &name)]),
            Err(err) => log::warn(
                "removing an old release failed",
                &[("release", &name), ("err", &err)],
            ),
        }
    }
    // Partial downloads of other versions go too.
    if let Ok(entries) = fs::read_dir(releases.join(DOWNLOAD_DIR)) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name != keep.as_str() && Version::parse(&name).is_ok() {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

fn download(
    paths: &HostPaths,
    trust: &TrustLoader,
    shared: &Arc<Mutex<Shared>>,
    wake: &Sender<()>,
    version: &Version,
    source: &str,
    digest: &Digest,
) {
    let releases = paths.releases_dir();
    let final_dir = releases.join(version.as_str());
    prune(&releases, version);
    set(
        shared,
        wake,
        Worker::Downloading {
            version: version.clone(),
            done: 0,
            total: None,
        },
    );
    let result = trust()
        .map_err(|e| {
            let blocked = matches!(e, TrustError::Unreadable(_));
            (e.to_string(), blocked)
        })
        .and_then(|deployed| {
            let signatures = deployed.signatures();
            if final_dir.join(RELEASE_FILE).is_file() {
                check_downloaded(&final_dir, version, &signatures)
            } else {
                let fetch = (source, digest, signatures);
                fetch_into(&releases, &final_dir, version, fetch, shared, wake)
            }
        });
    let state = match result.and_then(|()| verified(&final_dir, digest)) {
        Ok(sha) => {
            log::info("downloaded and verified", &[("release", version)]);
            if let Ok(mut s) = shared.lock() {
                s.retry_at = None;
                s.failures = 0;
            }
            Worker::Verified {
                version: version.clone(),
                release_sha256: sha,
            }
        }
        Err((message, blocked)) => {
            if let Ok(mut s) = shared.lock() {
                if blocked {
                    s.retry_at = None;
                } else {
                    s.failures = s.failures.saturating_add(1);
                    s.retry_at = Some(Instant::now() + retry_after(s.failures));
                }
            }
            log::warn(
                "the release download failed",
                &[
                    ("release", version),
                    ("blocked", &blocked),
                    ("err", &message),
                ],
            );
            Worker::Failed {
                version: version.clone(),
                message,
                blocked,
            }
        }
    };
    set(shared, wake, state);
}

/// Checks a release downloaded before (under another trust root, or
/// none) against the deployment's: the decision fetch makes before it
/// downloads, on the files at hand.
fn check_downloaded(
    dir: &Path,
    version: &Version,
    signatures: &Signatures,
) -> Result<(), (String, bool)> {
    let path = dir.join(RELEASE_FILE);
    let bytes = fs::read(&path).map_err(|e| (format!("reading {}: {e}", path.display()), true))?;
    let signature = fs::read(dir.join(signature_name(RELEASE_FILE))).ok();
    let origin = path.display().to_string();
    fetch::decide_signature(signatures, &origin, &bytes, signature.as_deref())
        .map(|_| ())
        .map_err(|e| (explain(&e, version), decide_blocked(&e)))
}

/// Fetches into the download directory, then renames the verified
/// release to its final name.
fn fetch_into(
    releases: &Path,
    final_dir: &Path,
    version: &Version,
    (source, digest, signatures): (&str, &Digest, Signatures),
    shared: &Arc<Mutex<Shared>>,
    wake: &Sender<()>,
) -> Result<(), (String, bool)> {
    let staging = releases.join(DOWNLOAD_DIR);
    fs::create_dir_all(&staging)
        .map_err(|e| (format!("creating {}: {e}", staging.display()), true))?;
    let observer = progress_observer(shared, wake, version);
    let request = FetchRequest {
        source: source.to_owned(),
        wanted: Wanted::Version(version.clone()),
        digest: Some(digest.clone()),
        channel: staging.clone(),
        // The Cluster names no CA: an https channel is checked against
        // the built-in roots.
        ca: None,
        progress: Style::Quiet,
        observer: Some(observer),
        // The deployment's trust root, checked before any artifact
        // (crate::machine::trust); init checks again against the root it
        // keeps, and fetch keeps the signature for the write request.
        signatures,
    };
    fetch::run(&request, &mut io::sink())
        .map_err(|e| (explain(&e, version), decide_blocked(&e)))?;
    let downloaded: PathBuf = staging.join(version.as_str());
    liken_releases::files::rename_noreplace(&downloaded, final_dir)
        .and_then(|()| liken_releases::files::sync_dir(releases))
        .map_err(|e| {
            (
                format!(
                    "moving {} to {}: {e}",
                    downloaded.display(),
                    final_dir.display()
                ),
                true,
            )
        })
}

/// Reports progress to the loop every 5 %.
fn progress_observer(
    shared: &Arc<Mutex<Shared>>,
    wake: &Sender<()>,
    version: &Version,
) -> Observer {
    let shared = Arc::clone(shared);
    let wake = wake.clone();
    let version = version.clone();
    let last = Mutex::new(u64::MAX);
    Observer(Arc::new(move |done, total| {
        let step = done.saturating_mul(20).checked_div(total).unwrap_or(20);
        let Ok(mut l) = last.lock() else { return };
        if *l == step {
            return;
        }
        *l = step;
        set(
            &shared,
            &wake,
            Worker::Downloading {
                version: version.clone(),
                done,
                total: Some(total),
            },
        );
    }))
}

/// Hashes the release.yaml under its final name and checks it against
/// the catalog's digest once more (the files on disk are what init will
/// be told to write).
fn verified(dir: &Path, digest: &Digest) -> Result<Sha256Hex, (String, bool)> {
    let path = dir.join(RELEASE_FILE);
    let bytes = fs::read(&path).map_err(|e| (format!("reading {}: {e}", path.display()), true))?;
    let sha = liken_api::hash::sha256(&bytes);
    if &sha != digest.hex() {
        return Err((
            format!(
                "{} hashes to sha256:{sha}, not the catalog's {digest}: the release on disk is not \
                 the one the Cluster trusts; it was left for a person to inspect",
                path.display()
            ),
            true,
        ));
    }
    Ok(sha)
}

#[allow(clippy::too_many_arguments)]
fn write(
    paths: &HostPaths,
    init: &InitClient,
    shared: &Mutex<Shared>,
    wake: &Sender<()>,
    version: &Version,
    release_sha256: &Sha256Hex,
    boot: &Sha256Hex,
) {
    let dir = paths.releases_dir().join(version.as_str());
    set(
        shared,
        wake,
        Worker::Writing {
            version: version.clone(),
        },
    );
    log::info(
        "asking init to write the release into the inactive slot",
        &[("release", version)],
    );
    // init checks release.yaml's signature against its trust root; the
    // operator hands it on as the channel published it.
    let signature = std::fs::read_to_string(dir.join(liken_api::signing::signature_name(
        liken_api::release::RELEASE_FILE,
    )))
    .ok();
    let state = match init.write_release(WriteRelease {
        directory: dir.display().to_string(),
        release_sha256: release_sha256.clone(),
        signature,
        rollback_permit: None,
    }) {
        Ok(w) => {
            log::info(
                "init wrote the release",
                &[
                    ("release", &w.version),
                    ("slot", &w.slot),
                    ("bytes", &w.bytes),
                    ("entry", &w.entry),
                ],
            );
            let record = Written {
                boot: boot.clone(),
                version: Some(w.version.clone()),
                release_sha256: release_sha256.clone(),
            };
            if let Err(e) = host::record_written(paths, &record) {
                log::warn("recording the written release failed", &[("err", &e)]);
            }
            // The slot holds it now; the files only took room.
            let _ = fs::remove_dir_all(&dir);
            if let Ok(mut s) = shared.lock() {
                s.retry_at = None;
                s.failures = 0;
            }
            Worker::Idle
        }
        Err(e) => match decide_write_failure(&e) {
            WriteFailure::Refused => Worker::Failed {
                version: version.clone(),
                message: format!(
                    "init refused to write {version} into the inactive slot: {}; the running \
                     slot is untouched",
                    match &e {
                        InitError::Refused(why) => why.as_str(),
                        _ => "",
                    }
                ),
                blocked: true,
            },
            // Busy or no answer: the release is still verified; ask
            // again after a backoff.
            failure => {
                let wait = if let Ok(mut s) = shared.lock() {
                    s.failures = s.failures.saturating_add(1);
                    let wait = write_retry_after(s.failures);
                    s.retry_at = Some(Instant::now() + wait);
                    wait
                } else {
                    WRITE_RETRY_FIRST
                };
                log::info(
                    "init did not write the release now; asking again after a backoff",
                    &[
                        ("release", version),
                        ("busy", &(failure == WriteFailure::Busy)),
                        ("err", &e),
                        ("after_secs", &wait.as_secs()),
                    ],
                );
                Worker::Verified {
                    version: version.clone(),
                    release_sha256: release_sha256.clone(),
                }
            }
        },
    };
    set(shared, wake, state);
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::hash::sha256;
    use liken_releases::client::ClientError;

    fn io_error(kind: io::ErrorKind) -> FetchError {
        FetchError::Io {
            doing: "writing kernel.partial".into(),
            error: io::Error::from(kind),
        }
    }

    #[test]
    fn time_fixes_the_network_and_an_edit_fixes_the_rest() {
        let url = || "http://channel/stable/2026.12.02-001/kernel".to_owned();
        let cases = [
            (
                FetchError::Client(ClientError::Status {
                    url: url(),
                    status: 503,
                }),
                false,
                "a server error passes",
            ),
            (
                FetchError::Interrupted {
                    url: url(),
                    have: 1,
                    size: 2,
                    reason: "reset".into(),
                },
                false,
                "an interrupted transfer resumes",
            ),
            (
                FetchError::BadRange {
                    url: url(),
                    reason: "206 without Content-Range".into(),
                },
                false,
                "a confused server may be fixed",
            ),
            (
                io_error(io::ErrorKind::Interrupted),
                false,
                "an interrupted write",
            ),
            (
                io_error(io::ErrorKind::StorageFull),
                true,
                "a full disk stays full",
            ),
            (
                FetchError::ArtifactDigest {
                    url: url(),
                    want: sha256(b"a"),
                    got: sha256(b"b"),
                },
                true,
                "a corrupt artifact",
            ),
            (
                FetchError::DocumentDigest {
                    url: url(),
                    want: Digest::from(sha256(b"a")),
                    got: Digest::from(sha256(b"b")),
                },
                true,
                "an untrusted release.yaml",
            ),
        ];
        for (e, blocked, why) in cases {
            assert_eq!(decide_blocked(&e), blocked, "{why}: {e}");
        }
    }

    #[test]
    fn a_full_disk_says_what_to_free_and_a_bad_digest_what_to_check() {
        let v = Version::parse("2026.12.06-001").unwrap();
        let full = explain(&io_error(io::ErrorKind::StorageFull), &v);
        assert!(full.contains("the data partition is full"), "{full}");
        assert!(full.contains("free space on /var"), "{full}");
        let bad = explain(
            &FetchError::DocumentDigest {
                url: "http://c/r/release.yaml".into(),
                want: Digest::from(sha256(b"a")),
                got: Digest::from(sha256(b"b")),
            },
            &v,
        );
        assert!(bad.contains("the Cluster's catalog pins"), "{bad}");
        assert!(bad.contains("nothing was written"), "{bad}");
    }

    #[test]
    fn init_busy_is_retried_and_never_blocks() {
        use liken_api::control::WRITE_BUSY;
        let cases = [
            (InitError::Refused(WRITE_BUSY.into()), WriteFailure::Busy),
            (
                InitError::Unreachable("connection refused".into()),
                WriteFailure::Transient,
            ),
            (InitError::Malformed("eof".into()), WriteFailure::Transient),
            (
                InitError::Refused("release.yaml does not match".into()),
                WriteFailure::Refused,
            ),
        ];
        for (e, want) in cases {
            assert_eq!(decide_write_failure(&e), want, "{e}");
        }
        let waits: Vec<u64> = (1..=9).map(|n| write_retry_after(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 600, 600]);
    }

    #[test]
    fn a_release_is_checked_only_against_a_deployed_root() {
        use liken_api::signing::{SigningKey, TrustRoot, key_pair};
        let (a, _) = key_pair([1; 32]);
        let (b, _) = key_pair([2; 32]);
        let v = Version::parse("2026.12.06-001").unwrap();
        let root = Deployed::Signed(TrustRoot::new([a.public()])).signatures();
        let bytes = b"apiVersion: liken.sh/v1alpha1\nkind: Release\n";
        let sig = |k: &SigningKey, bytes: &[u8]| {
            serde_yaml::to_string(&k.sign(bytes)).unwrap().into_bytes()
        };
        let check = |s: &Signatures, bytes: &[u8], sig: Option<&[u8]>| {
            fetch::decide_signature(s, "release.yaml", bytes, sig)
                .map_err(|e| (explain(&e, &v), decide_blocked(&e)))
        };
        assert_eq!(
            check(&root, bytes, Some(&sig(&a, bytes))).unwrap(),
            Some(a.public().id)
        );
        let refused = |r: Result<_, (String, bool)>| {
            let (message, blocked) = r.unwrap_err();
            assert!(blocked, "{message}");
            message
        };
        assert!(
            refused(check(&root, bytes, None))
                .starts_with("release 2026.12.06-001 was refused before download (unsigned)")
        );
        let foreign = refused(check(&root, bytes, Some(&sig(&b, bytes))));
        assert!(foreign.contains("(unknown-key)"), "{foreign}");
        assert!(foreign.contains(b.public().id.as_str()), "{foreign}");
        let changed = refused(check(&root, b"other bytes", Some(&sig(&a, bytes))));
        assert!(changed.contains("(changed)"), "{changed}");
        assert!(refused(check(&root, bytes, Some(b"garbage"))).contains("bad-signature"));
        // Nothing deployed to check against: init decides.
        for nothing in [Deployed::Unsigned, Deployed::Absent] {
            assert_eq!(check(&nothing.signatures(), bytes, None).unwrap(), None);
        }
    }

    #[test]
    fn the_retry_doubles_from_30_seconds_to_10_minutes() {
        let secs: Vec<u64> = (1..=8).map(|n| retry_after(n).as_secs()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 600, 600, 600]);
        assert_eq!(retry_after(0), RETRY_FIRST);
        assert_eq!(retry_after(u32::MAX), RETRY_MAX);
    }
}
