//! A writer for the newc cpio format, the one the Linux kernel unpacks as
//! an initramfs.
//!
//! Each entry is a 110-byte ASCII header (`070701`, then thirteen 8-digit
//! hex fields: inode, mode, uid, gid, nlink, mtime, size, dev major/minor,
//! rdev major/minor, name size including its NUL, checksum), the name and
//! its NUL padded to a multiple of four, then the data padded to a
//! multiple of four. The archive ends with an entry named `TRAILER!!!`.
//!
//! The writer is deterministic by construction: the caller gives the
//! entries, the archive keeps them in path order, [`Archive::finish`] numbers inodes in that
//! order, and writes zero mtimes and owner 0:0. Nothing from the machine
//! that builds it (clock, user, inode numbers) reaches the bytes.
//!
//! `liken layer` packs deployment layers with it, and liken-init's
//! install mode packs the per-role layer it writes to a machine's ESP.
//!
//! [`read`] takes such an archive apart again, for liken-init to unpack
//! the layer that systemd-boot's stub hands a unified kernel image's boot
//! as a credential file (the kernel unpacks only the outer archive). It
//! reads what [`Archive::finish`] writes and any newc archive of
//! directories and regular files; it refuses links, devices, paths that
//! are not plain and relative, and headers that run past the bytes,
//! without panicking on any input.

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// A directory.
    Dir,
    /// A regular file with these bytes.
    File(Vec<u8>),
}

/// One archive member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The path inside the archive, relative (no leading `/`).
    pub path: String,
    /// Permission bits (0o755, 0o644, 0o600).
    pub perm: u32,
    /// The contents.
    pub body: Body,
}

/// Why an entry was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpioError {
    /// The path is empty, absolute, has `.`/`..`/empty components or a NUL.
    BadPath(String),
    /// Two entries have the same path.
    Duplicate(String),
    /// A file is larger than the format's 32-bit size field.
    TooLarge(String),
}

impl std::fmt::Display for CpioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CpioError::BadPath(p) => write!(f, "{p:?} is not a plain relative archive path"),
            CpioError::Duplicate(p) => write!(f, "{p:?} would be in the archive twice"),
            CpioError::TooLarge(p) => {
                write!(f, "{p:?} is larger than a cpio entry can hold (4 GiB)")
            }
        }
    }
}

impl std::error::Error for CpioError {}

/// Why [`read`] refused an archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// A header, name or body runs past the end, or a field is not hex.
    Malformed {
        /// The byte offset of the member.
        at: usize,
        /// What is wrong.
        why: &'static str,
    },
    /// A member is neither a directory nor a regular file.
    Type(String),
    /// A member's path is not plain and relative, or appears twice.
    Path(CpioError),
    /// No trailer: the archive was cut short.
    NoTrailer,
    /// More members than [`MAX_READ_ENTRIES`].
    TooMany,
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Malformed { at, why } => {
                write!(f, "the cpio member at byte {at} is malformed: {why}")
            }
            ReadError::Type(p) => write!(
                f,
                "{p:?} is neither a directory nor a regular file (links and devices are refused)"
            ),
            ReadError::Path(e) => write!(f, "{e}"),
            ReadError::NoTrailer => f.write_str("the cpio archive ends without its trailer"),
            ReadError::TooMany => write!(
                f,
                "the cpio archive holds more than {MAX_READ_ENTRIES} members"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// The most members [`read`] takes.
pub const MAX_READ_ENTRIES: usize = 4096;

const HEADER: usize = 110;

fn hex_field(h: &[u8], i: usize) -> Option<u32> {
    let start = 6usize.checked_add(i.checked_mul(8)?)?;
    let text = std::str::from_utf8(h.get(start..start.checked_add(8)?)?).ok()?;
    u32::from_str_radix(text, 16).ok()
}

fn round4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// The members of a newc archive, in archive order (the trailer left
/// out; directories' and files' permission bits kept).
pub fn read(bytes: &[u8]) -> Result<Vec<Entry>, ReadError> {
    let mut at = 0usize;
    let mut out: Vec<Entry> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    loop {
        let bad = |why| ReadError::Malformed { at, why };
        let head = bytes
            .get(at..at.checked_add(HEADER).ok_or(bad("offset overflow"))?)
            .ok_or(bad("the header runs past the end"))?;
        if head.get(..6) != Some(b"070701".as_slice()) {
            return Err(bad("no newc magic 070701"));
        }
        let field = |i| hex_field(head, i).ok_or(bad("a header field is not 8 hex digits"));
        let mode = field(1)?;
        let size = usize::try_from(field(6)?).map_err(|_| bad("size"))?;
        let name_size = usize::try_from(field(11)?).map_err(|_| bad("name size"))?;
        let name_start = at.checked_add(HEADER).ok_or(bad("offset overflow"))?;
        let name_end = name_start
            .checked_add(name_size)
            .ok_or(bad("offset overflow"))?;
        let raw_name = bytes
            .get(name_start..name_end)
            .ok_or(bad("the name runs past the end"))?;
        let name = raw_name
            .strip_suffix(&[0])
            .ok_or(bad("the name does not end in NUL"))?;
        let name = std::str::from_utf8(name).map_err(|_| bad("the name is not UTF-8"))?;
        let data_start = round4(name_end).ok_or(bad("offset overflow"))?;
        let data_end = data_start.checked_add(size).ok_or(bad("offset overflow"))?;
        let data = bytes
            .get(data_start..data_end)
            .ok_or(bad("the body runs past the end"))?;
        at = round4(data_end).ok_or(bad("offset overflow"))?;
        if name == TRAILER {
            return Ok(out);
        }
        if out.len() >= MAX_READ_ENTRIES {
            return Err(ReadError::TooMany);
        }
        let body = match mode & 0o170000 {
            S_IFDIR => Body::Dir,
            S_IFREG => Body::File(data.to_vec()),
            _ => return Err(ReadError::Type(name.to_owned())),
        };
        let plain = !name.is_empty()
            && name
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != "..");
        if !plain {
            return Err(ReadError::Path(CpioError::BadPath(name.to_owned())));
        }
        if !seen.insert(name.to_owned()) {
            return Err(ReadError::Path(CpioError::Duplicate(name.to_owned())));
        }
        out.push(Entry {
            path: name.to_owned(),
            perm: mode & 0o7777,
            body,
        });
        if at >= bytes.len() {
            return Err(ReadError::NoTrailer);
        }
    }
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const TRAILER: &str = "TRAILER!!!";

/// Entries collected for one archive, by path: a map keeps them in the
/// order they are written (a path's bytes, as `String` compares) and
/// finds a duplicate in one look. It also spares liken-init, which packs
/// layers with this and has a size budget, a copy of std's sort.
#[derive(Debug, Default)]
pub struct Archive {
    entries: std::collections::BTreeMap<String, Entry>,
}

impl Archive {
    /// An empty archive.
    pub fn new() -> Archive {
        Archive::default()
    }

    /// Adds an entry; the order of calls does not matter.
    pub fn add(&mut self, entry: Entry) -> Result<(), CpioError> {
        let p = &entry.path;
        let plain = !p.is_empty()
            && !p.contains('\0')
            && p.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
        if !plain {
            return Err(CpioError::BadPath(p.clone()));
        }
        if let Body::File(b) = &entry.body
            && u32::try_from(b.len()).is_err()
        {
            return Err(CpioError::TooLarge(p.clone()));
        }
        if self.entries.contains_key(p) {
            return Err(CpioError::Duplicate(p.clone()));
        }
        self.entries.insert(p.clone(), entry);
        Ok(())
    }

    /// The archive's bytes: entries sorted by path (so every directory
    /// comes before what it holds), then the trailer.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, e) in self.entries.values().enumerate() {
            let (mode, nlink, data): (u32, u32, &[u8]) = match &e.body {
                Body::Dir => (S_IFDIR | e.perm, 2, &[]),
                Body::File(b) => (S_IFREG | e.perm, 1, b),
            };
            // Inode 0 is left for the trailer; the sizes were checked in add.
            let ino = u32::try_from(i).unwrap_or(u32::MAX).saturating_add(1);
            write_member(&mut out, ino, mode, nlink, &e.path, data);
        }
        write_member(&mut out, 0, 0, 1, TRAILER, &[]);
        out
    }
}

fn write_member(out: &mut Vec<u8>, ino: u32, mode: u32, nlink: u32, name: &str, data: &[u8]) {
    let fields = [
        ino,
        mode,
        0, // uid
        0, // gid
        nlink,
        0, // mtime
        u32::try_from(data.len()).unwrap_or(u32::MAX),
        0, // dev major
        0, // dev minor
        0, // rdev major
        0, // rdev minor
        u32::try_from(name.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1),
        0, // check (newc has none)
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_takes_back_what_finish_wrote_and_refuses_the_rest() {
        let mut a = Archive::new();
        a.add(Entry {
            path: "etc".into(),
            perm: 0o755,
            body: Body::Dir,
        })
        .unwrap();
        a.add(file("etc/liken/cluster.yaml", 0o644, b"kind: Cluster\n"))
            .unwrap();
        a.add(file("etc/liken/identity/server/token", 0o600, b"K10"))
            .unwrap();
        a.add(file("etc/liken/empty", 0o644, b"")).unwrap();
        let bytes = a.finish();
        let back = read(&bytes).unwrap();
        let paths: Vec<(&str, u32)> = back.iter().map(|e| (e.path.as_str(), e.perm)).collect();
        assert_eq!(
            paths,
            [
                ("etc", 0o755),
                ("etc/liken/cluster.yaml", 0o644),
                ("etc/liken/empty", 0o644),
                ("etc/liken/identity/server/token", 0o600)
            ]
        );
        assert_eq!(back[1].body, Body::File(b"kind: Cluster\n".to_vec()));
        // Every cut of the archive is refused, never a panic.
        for n in 0..bytes.len() {
            assert!(read(&bytes[..n]).is_err(), "cut at {n}");
        }
        // A symlink, a path that climbs, a bad digit.
        let mut link = Vec::new();
        write_member(&mut link, 1, 0o120777, 1, "etc/liken/x", b"/etc/shadow");
        write_member(&mut link, 0, 0, 1, TRAILER, &[]);
        assert_eq!(read(&link), Err(ReadError::Type("etc/liken/x".into())));
        let mut climb = Vec::new();
        write_member(&mut climb, 1, S_IFREG | 0o644, 1, "etc/../x", b"");
        write_member(&mut climb, 0, 0, 1, TRAILER, &[]);
        assert!(matches!(read(&climb), Err(ReadError::Path(_))));
        let mut bad = bytes.clone();
        bad[20] = b'g'; // in the mode field
        assert!(matches!(read(&bad), Err(ReadError::Malformed { .. })));
    }

    fn file(path: &str, perm: u32, data: &[u8]) -> Entry {
        Entry {
            path: path.into(),
            perm,
            body: Body::File(data.to_vec()),
        }
    }

    #[test]
    fn one_file_is_laid_out_exactly() {
        let mut a = Archive::new();
        a.add(file("a", 0o644, b"hi\n")).unwrap();
        let bytes = a.finish();
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            1, 0o100644, 0, 0, 1, 0, 3, 0, 0, 0, 0, 2, 0
        );
        let mut want = header.into_bytes();
        want.extend_from_slice(b"a\0"); // 110 + 2 = 112, aligned
        want.extend_from_slice(b"hi\n\0"); // data padded to 4
        assert_eq!(&bytes[..want.len()], &want[..]);
        let rest = &bytes[want.len()..];
        assert!(rest.starts_with(b"070701"));
        assert_eq!(&rest[110..121], b"TRAILER!!!\0");
        assert!(bytes.len().is_multiple_of(4));
    }

    #[test]
    fn order_of_adding_does_not_change_the_bytes() {
        let entries = [
            Entry {
                path: "etc".into(),
                perm: 0o755,
                body: Body::Dir,
            },
            file("etc/b", 0o600, b"secret"),
            file("etc/a", 0o644, b"x"),
        ];
        let mut one = Archive::new();
        let mut two = Archive::new();
        for e in &entries {
            one.add(e.clone()).unwrap();
        }
        for e in entries.iter().rev() {
            two.add(e.clone()).unwrap();
        }
        assert_eq!(one.finish(), two.finish());
    }

    #[test]
    fn bad_paths_and_duplicates_are_refused() {
        let mut a = Archive::new();
        for bad in ["", "/etc", "etc/../x", "etc//x", "./x", "a\0b"] {
            assert_eq!(
                a.add(file(bad, 0o644, b"")),
                Err(CpioError::BadPath(bad.into()))
            );
        }
        a.add(file("x", 0o644, b"")).unwrap();
        assert_eq!(
            a.add(file("x", 0o644, b"")),
            Err(CpioError::Duplicate("x".into()))
        );
    }
}
