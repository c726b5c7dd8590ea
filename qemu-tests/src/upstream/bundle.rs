//! The node's programs, carried inside the launcher and unpacked where
//! k3s unpacks its own.
//!
//! k3s is one binary that carries kubelet's code, containerd, runc, the
//! CNI plugins and the rest as an archive, and on its first start
//! unpacks them into `<data-dir>/data/<hash>/bin` (k3s-io/k3s
//! cmd/k3s/main.go: `getAssetAndDir` names the directory after the
//! asset, whose name is its hash; `extract` unpacks into `<dir>-tmp`,
//! checks the result, moves `data/current` to `data/previous`, points
//! `data/current` at the new directory and renames `<dir>-tmp` to
//! `<dir>`; `stageAndRun` then puts `<dir>/bin` first on PATH). A start
//! that finds the directory unpacks nothing.
//!
//! The launcher does the same with an archive appended to its own file
//! by `qemu-tests/upstream-bundle.sh`: a plain tar of `bin/<program>`
//! files (the squashfs around it compresses it; k3s's is zstd), then a
//! trailer of [`TRAILER_LEN`] ASCII bytes: [`MAGIC`], the archive's
//! SHA-256 in hex and its length in 16 hex digits. The SHA-256 names the
//! directory and is checked against the bytes as they are unpacked, so
//! a damaged image never leaves a directory that looks complete: the
//! rename happens only after the check. Unpacking is confined: only
//! `bin/`, regular files directly below it and links directly below it
//! to one of those files, each a plain name, are taken; anything else in
//! the archive (a link that leaves `bin/` or names no file of the
//! archive, a device, `..`, a deeper path) refuses the whole archive.
//! The links are how one program answers to several names: the archive
//! links `kubelet`, `kube-apiserver` and the rest to `hyperkube`, as
//! k3s's own archive links `kubectl`, `crictl` and `containerd` to `k3s`
//! (k3s-io/k3s scripts/package-cli).

use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// The trailer's first bytes.
pub const MAGIC: &[u8; 8] = b"LIKENUPB";
/// The trailer's length: magic, 64 hex digits, 16 hex digits.
pub const TRAILER_LEN: usize = 8 + 64 + 16;

/// Where the archive lies in the launcher's file, and what it hashes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bundle {
    /// The archive's SHA-256, lower-case hex (the directory's name).
    pub sha256: String,
    /// Its first byte's offset in the file.
    pub offset: u64,
    /// Its length.
    pub len: u64,
}

/// Why the bundled programs are not there to run.
#[derive(Debug)]
pub enum Error {
    /// The launcher carries no archive (built without
    /// upstream-bundle.sh).
    NoBundle(String),
    /// Reading or writing a file failed.
    Io(String, std::io::Error),
    /// An archive entry the unpacking refuses.
    Refused(String),
    /// The archive does not hash to what its trailer says.
    Digest {
        /// From the trailer.
        want: String,
        /// Of the bytes read.
        got: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoBundle(why) => write!(
                f,
                "this launcher carries no node programs ({why}); build it with \
                 `make upstream-images`, which appends them (qemu-tests/upstream-bundle.sh)"
            ),
            Error::Io(what, e) => write!(f, "{what}: {e}"),
            Error::Refused(why) => write!(
                f,
                "the bundled archive holds {why}; it may hold only bin/<program> files and \
                 links between them, so it was not unpacked (rebuild the image)"
            ),
            Error::Digest { want, got } => write!(
                f,
                "the bundled archive hashes to {got}, not the {want} its trailer names: the \
                 image is damaged; nothing was unpacked (reinstall or rebuild the release)"
            ),
        }
    }
}

/// Reads the trailer from the last [`TRAILER_LEN`] bytes of a file of
/// `file_len` bytes.
pub fn decide_bundle(trailer: &[u8], file_len: u64) -> Result<Bundle, String> {
    let (magic, rest) = trailer
        .split_at_checked(MAGIC.len())
        .ok_or_else(|| "the file is shorter than a trailer".to_owned())?;
    if magic != MAGIC || rest.len() != TRAILER_LEN - MAGIC.len() {
        return Err("no trailer at the end of the file".into());
    }
    let text = std::str::from_utf8(rest).map_err(|_| "the trailer is not ASCII".to_owned())?;
    let (sha, len) = text.split_at(64);
    if !sha
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!(
            "the trailer's digest {sha:?} is not lower-case hex"
        ));
    }
    let len = u64::from_str_radix(len, 16).map_err(|_| format!("the trailer's length {len:?}"))?;
    let offset = file_len
        .checked_sub(TRAILER_LEN as u64)
        .and_then(|end| end.checked_sub(len))
        .ok_or_else(|| format!("the trailer names {len} bytes, more than the file holds"))?;
    Ok(Bundle {
        sha256: sha.to_owned(),
        offset,
        len,
    })
}

/// What kind of archive entry is being decided.
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link, with what it points at.
    Link(&'a Path),
    /// Anything else (a device, a hard link, a FIFO).
    Other,
}

/// What one archive entry becomes in `bin/`.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// `bin/` itself: nothing to make.
    Dir,
    /// A program, by name.
    File(String),
    /// Another name for a program beside it: the name, then the
    /// program's.
    Link(String, String),
}

/// A plain name in `bin/`: one path component, not hidden.
fn plain_name(name: &std::ffi::OsStr) -> Option<String> {
    name.to_str()
        .filter(|n| !n.is_empty() && !n.starts_with('.'))
        .map(str::to_owned)
}

/// What a `bin/<name>` entry unpacks to, or why it is refused. A link's
/// target must be a plain name too, so it stays in `bin/`; whether that
/// name is a file of the archive is known only at its end (see
/// [`decide_links`]).
pub fn decide_entry(path: &Path, kind: Kind<'_>) -> Result<Entry, String> {
    let parts: Vec<Component<'_>> = path.components().collect();
    let name = match parts.as_slice() {
        [Component::Normal(b)] if *b == "bin" && matches!(kind, Kind::Dir) => {
            return Ok(Entry::Dir);
        }
        [Component::Normal(b), Component::Normal(name)] if *b == "bin" => {
            plain_name(name).ok_or_else(|| format!("an entry named {name:?}"))?
        }
        _ => return Err(format!("{} (outside bin/)", path.display())),
    };
    match kind {
        Kind::File => Ok(Entry::File(name)),
        Kind::Link(target) => match target.components().collect::<Vec<_>>().as_slice() {
            [Component::Normal(t)] => plain_name(t)
                .map(|t| Entry::Link(name.clone(), t))
                .ok_or_else(|| format!("bin/{name}, a link to {}", target.display())),
            _ => Err(format!(
                "bin/{name}, a link to {} (outside bin/)",
                target.display()
            )),
        },
        Kind::Dir | Kind::Other => Err(format!("bin/{name} (neither a file nor a link)")),
    }
}

/// Every link must name a file the archive holds (a link to a link, or
/// to nothing, would leave a name that runs nothing).
pub fn decide_links(files: &[String], links: &[(String, String)]) -> Result<(), String> {
    match links.iter().find(|(_, t)| !files.contains(t)) {
        Some((name, t)) => Err(format!(
            "bin/{name}, a link to {t}, which is no file of the archive"
        )),
        None => Ok(()),
    }
}

/// Reads the launcher's own trailer.
pub fn find(exe: &Path) -> Result<Bundle, Error> {
    let io = |e| Error::Io(format!("reading {}", exe.display()), e);
    let mut f = File::open(exe).map_err(io)?;
    let len = f.metadata().map_err(io)?.len();
    let start = len
        .checked_sub(TRAILER_LEN as u64)
        .ok_or_else(|| Error::NoBundle("the file is shorter than a trailer".into()))?;
    f.seek(SeekFrom::Start(start)).map_err(io)?;
    let mut trailer = [0u8; TRAILER_LEN];
    f.read_exact(&mut trailer).map_err(io)?;
    decide_bundle(&trailer, len).map_err(Error::NoBundle)
}

/// `<data_dir>/data/<sha256>`, the directory the programs run from.
pub fn dir_for(data_dir: &Path, b: &Bundle) -> PathBuf {
    data_dir.join("data").join(&b.sha256)
}

/// Hashes what is read through it.
struct Hashing<R> {
    inner: R,
    hash: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(buf.get(..n).unwrap_or_default());
        Ok(n)
    }
}

/// What [`ensure`] did.
pub enum Unpacked {
    /// The directory was there from an earlier start.
    Found(PathBuf),
    /// It was unpacked now: its files and bytes.
    Now(PathBuf, usize, u64),
}

/// Makes sure the bundled programs are unpacked below `data_dir` (see
/// the module docs) and returns the directory.
pub fn ensure(exe: &Path, data_dir: &Path) -> Result<Unpacked, Error> {
    let b = find(exe)?;
    let dir = dir_for(data_dir, &b);
    if dir.join("bin").is_dir() {
        return Ok(Unpacked::Found(dir));
    }
    // Several starts may race here (init's health query runs `k3s
    // kubectl` every few seconds from the moment k3s starts): k3s takes
    // `data/.lock` and looks again once it holds it.
    let data = data_dir.join("data");
    std::fs::create_dir_all(&data)
        .map_err(|e| Error::Io(format!("mkdir {}", data.display()), e))?;
    let lock_path = data.join(".lock");
    let lock = File::create(&lock_path)
        .map_err(|e| Error::Io(format!("creating {}", lock_path.display()), e))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).map_err(|e| {
        Error::Io(
            format!("locking {}", lock_path.display()),
            std::io::Error::from(e),
        )
    })?;
    if dir.join("bin").is_dir() {
        return Ok(Unpacked::Found(dir));
    }
    let tmp = data.join(format!("{}-tmp", b.sha256));
    let _ = std::fs::remove_dir_all(&tmp);
    let bin = tmp.join("bin");
    std::fs::create_dir_all(&bin).map_err(|e| Error::Io(format!("mkdir {}", bin.display()), e))?;
    match unpack(exe, &b, &bin) {
        Ok((files, bytes)) => {
            // k3s cmd/k3s/main.go extract: current becomes previous,
            // current points at the new directory, then the rename.
            let current = data.join("current");
            if std::fs::symlink_metadata(&current).is_ok() {
                let _ = std::fs::rename(&current, data.join("previous"));
            }
            let _ = std::os::unix::fs::symlink(&dir, &current);
            std::fs::rename(&tmp, &dir).map_err(|e| {
                Error::Io(
                    format!("renaming {} to {}", tmp.display(), dir.display()),
                    e,
                )
            })?;
            Ok(Unpacked::Now(dir, files, bytes))
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

fn unpack(exe: &Path, b: &Bundle, bin: &Path) -> Result<(usize, u64), Error> {
    let io = |what: String| move |e| Error::Io(what, e);
    let mut f = File::open(exe).map_err(io(format!("reading {}", exe.display())))?;
    f.seek(SeekFrom::Start(b.offset))
        .map_err(io(format!("reading {}", exe.display())))?;
    let mut reader = Hashing {
        inner: f.take(b.len),
        hash: Sha256::new(),
    };
    let (mut files, mut bytes) = (0usize, 0u64);
    let (mut names, mut links) = (Vec::new(), Vec::new());
    {
        let mut archive = tar::Archive::new(&mut reader);
        let entries = archive
            .entries()
            .map_err(io("reading the bundled archive".into()))?;
        for entry in entries {
            let mut entry = entry.map_err(io("reading the bundled archive".into()))?;
            let kind = entry.header().entry_type();
            let path = entry
                .path()
                .map_err(io("reading the bundled archive".into()))?
                .into_owned();
            let link = entry
                .link_name()
                .map_err(io("reading the bundled archive".into()))?
                .map(|l| l.into_owned());
            let kind = match (&link, kind) {
                (_, k) if k.is_dir() => Kind::Dir,
                (_, k) if k.is_file() => Kind::File,
                (Some(t), k) if k.is_symlink() => Kind::Link(t),
                _ => Kind::Other,
            };
            let name = match decide_entry(&path, kind).map_err(Error::Refused)? {
                Entry::Dir => continue,
                Entry::Link(name, to) => {
                    let at = bin.join(&name);
                    std::os::unix::fs::symlink(&to, &at)
                        .map_err(io(format!("linking {} to {to}", at.display())))?;
                    links.push((name, to));
                    continue;
                }
                Entry::File(name) => name,
            };
            let target = bin.join(&name);
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o755)
                .open(&target)
                .map_err(io(format!("creating {}", target.display())))?;
            bytes += std::io::copy(&mut entry, &mut out)
                .map_err(io(format!("writing {}", target.display())))?;
            out.flush()
                .map_err(io(format!("writing {}", target.display())))?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                .map_err(io(format!("chmod {}", target.display())))?;
            files += 1;
            names.push(name);
        }
    }
    decide_links(&names, &links).map_err(Error::Refused)?;
    // The tar reader stops at the end-of-archive blocks; the digest
    // covers every byte the trailer counts.
    std::io::copy(&mut reader, &mut std::io::sink())
        .map_err(io("reading the bundled archive".into()))?;
    let got = hex(&reader.hash.finalize());
    if got != b.sha256 {
        return Err(Error::Digest {
            want: b.sha256.clone(),
            got,
        });
    }
    Ok((files, bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trailer(sha: &str, len: u64) -> Vec<u8> {
        format!("LIKENUPB{sha}{len:016x}").into_bytes()
    }

    #[test]
    fn reads_a_trailer() {
        let sha = "ab".repeat(32);
        let b = decide_bundle(&trailer(&sha, 100), 1000).unwrap();
        assert_eq!(
            b,
            Bundle {
                sha256: sha,
                offset: 1000 - 88 - 100,
                len: 100
            }
        );
    }

    #[test]
    fn refuses_bad_trailers() {
        let sha = "ab".repeat(32);
        assert!(decide_bundle(b"short", 10).is_err());
        assert!(decide_bundle(&trailer(&sha, 1000), 1000).is_err());
        assert!(decide_bundle(&trailer(&"AB".repeat(32), 1), 1000).is_err());
        let mut t = trailer(&sha, 1);
        t[0] = b'X';
        assert!(decide_bundle(&t, 1000).is_err());
    }

    #[test]
    fn takes_only_files_and_links_directly_in_bin() {
        let p = Path::new;
        assert_eq!(decide_entry(p("bin"), Kind::Dir), Ok(Entry::Dir));
        assert_eq!(decide_entry(p("bin/"), Kind::Dir), Ok(Entry::Dir));
        assert_eq!(
            decide_entry(p("bin/hyperkube"), Kind::File),
            Ok(Entry::File("hyperkube".into()))
        );
        assert_eq!(
            decide_entry(p("bin/kubelet"), Kind::Link(p("hyperkube"))),
            Ok(Entry::Link("kubelet".into(), "hyperkube".into()))
        );
        for bad in [
            "bin/../etc/passwd",
            "../bin/x",
            "/bin/x",
            "bin/a/b",
            "etc/x",
            "bin/.hidden",
        ] {
            assert!(decide_entry(p(bad), Kind::File).is_err(), "{bad}");
            assert!(
                decide_entry(p(bad), Kind::Link(p("hyperkube"))).is_err(),
                "{bad}"
            );
        }
        for target in ["../x", "/usr/bin/x", "sub/x", ".", "..", ".hidden", ""] {
            assert!(
                decide_entry(p("bin/kubelet"), Kind::Link(p(target))).is_err(),
                "{target}"
            );
        }
        assert!(decide_entry(p("bin/dev"), Kind::Other).is_err());
        assert!(decide_entry(p("bin/sub"), Kind::Dir).is_err());
    }

    #[test]
    fn a_link_must_name_a_file_of_the_archive() {
        let files = ["hyperkube".to_owned(), "etcd".to_owned()];
        let link = |a: &str, b: &str| (a.to_owned(), b.to_owned());
        assert!(decide_links(&files, &[link("kubelet", "hyperkube")]).is_ok());
        assert!(decide_links(&files, &[]).is_ok());
        assert!(decide_links(&files, &[link("kubelet", "hyperkub")]).is_err());
        // A link to a link is refused too: only files count.
        assert!(
            decide_links(
                &files,
                &[link("kubelet", "hyperkube"), link("kubectl", "kubelet")]
            )
            .is_err()
        );
    }

    #[test]
    fn unpacks_checks_the_digest_and_keeps_what_it_unpacked() {
        let dir = std::env::temp_dir().join(format!("upstream-bundle-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut tar = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(5);
        h.set_mode(0o755);
        h.set_cksum();
        tar.append_data(&mut h, "bin/hello", &b"hello"[..]).unwrap();
        let mut l = tar::Header::new_gnu();
        l.set_entry_type(tar::EntryType::Symlink);
        l.set_size(0);
        tar.append_link(&mut l, "bin/hi", "hello").unwrap();
        let archive = tar.into_inner().unwrap();
        let sha = hex(&Sha256::digest(&archive));
        let exe = dir.join("launcher");
        let mut bytes = b"#!program".to_vec();
        bytes.extend_from_slice(&archive);
        bytes.extend(trailer(&sha, archive.len() as u64));
        std::fs::write(&exe, &bytes).unwrap();
        let data = dir.join("k3s");
        let Unpacked::Now(d, files, n) = ensure(&exe, &data).unwrap() else {
            panic!("unpacked nothing")
        };
        assert_eq!((files, n), (1, 5));
        assert_eq!(d, data.join("data").join(&sha));
        assert_eq!(std::fs::read(d.join("bin/hello")).unwrap(), b"hello");
        assert_eq!(
            std::fs::read_link(d.join("bin/hi")).unwrap(),
            Path::new("hello")
        );
        assert_eq!(std::fs::read(d.join("bin/hi")).unwrap(), b"hello");
        assert_eq!(std::fs::read_link(data.join("data/current")).unwrap(), d);
        assert!(matches!(ensure(&exe, &data).unwrap(), Unpacked::Found(_)));

        // Starts racing on a fresh data directory: one unpacks, the
        // others wait for its lock and find the result.
        let raced = dir.join("k3s-raced");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (exe, raced) = (exe.clone(), raced.clone());
                std::thread::spawn(move || {
                    ensure(&exe, &raced).map(|_| ()).map_err(|e| e.to_string())
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap().unwrap();
        }
        assert_eq!(
            std::fs::read(raced.join("data").join(&sha).join("bin/hello")).unwrap(),
            b"hello"
        );

        // One flipped byte of the archive: refused, nothing left behind.
        let other = dir.join("k3s-2");
        let mut bad = bytes.clone();
        let at = 9 + 512 + 1;
        bad[at] ^= 1;
        std::fs::write(&exe, &bad).unwrap();
        assert!(matches!(ensure(&exe, &other), Err(Error::Digest { .. })));
        assert!(!other.join("data").join(&sha).exists());

        // A link to no file of the archive: refused, nothing left behind.
        let mut tar = tar::Builder::new(Vec::new());
        tar.append_data(&mut h, "bin/hello", &b"hello"[..]).unwrap();
        tar.append_link(&mut l, "bin/hi", "hell").unwrap();
        let archive = tar.into_inner().unwrap();
        let sha = hex(&Sha256::digest(&archive));
        let mut bytes = b"#!program".to_vec();
        bytes.extend_from_slice(&archive);
        bytes.extend(trailer(&sha, archive.len() as u64));
        std::fs::write(&exe, &bytes).unwrap();
        let dangling = dir.join("k3s-3");
        assert!(matches!(ensure(&exe, &dangling), Err(Error::Refused(_))));
        assert!(!dangling.join("data").join(&sha).exists());
        assert!(!dangling.join("data").join(format!("{sha}-tmp")).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
