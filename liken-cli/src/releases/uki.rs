//! Unified kernel images: one signed PE file per slot that the firmware
//! checks whole under Secure Boot (`liken bundle -secureboot-key`).
//!
//! An image is Debian's systemd-boot-efi stub (`linuxx64.efi.stub`, the
//! one systemd-boot 252 ships) with four sections added by objcopy, as
//! systemd-stub(7) describes them:
//!
//! | section | holds |
//! | --- | --- |
//! | `.osrel` | os-release text: systemd-boot's title, sort key and version for the entry |
//! | `.cmdline` | the kernel command line: the slot, its root hash, the release's arguments |
//! | `.linux` | the kernel |
//! | `.initrd` | microcode.cpio (when the release has it) then boot.cpio, concatenated as the kernel reads several initrds |
//!
//! Each new section's address is where ukify puts it: after the end of
//! the stub's last section (its virtual address plus virtual size, plus
//! the image base), rounded up to a 4096-byte page, and each later one
//! at the next page after the one before ([`decide_layout`]). The stub
//! finds the sections by name, and the firmware's loader maps them at
//! those addresses, so they must not overlap the stub or each other.
//! The stub's headers are read here ([`read_pe`]) rather than assumed:
//! a newer stub grows.
//!
//! Then sbsign (sbsigntool) signs the image with the fleet's db key, the
//! signature the firmware checks against db. Under Secure Boot the stub
//! takes the command line only from `.cmdline` and ignores what the
//! bootloader passes, so the root hash in it is as trusted as the
//! kernel. The stub, objcopy and sbsign are Debian's (systemd-boot-efi,
//! binutils, sbsigntool); nothing here writes PE itself.

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's systemd-boot-efi stub.
pub const STUB: &str = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub";

/// The page the new sections are aligned to.
pub const PAGE: u64 = 4096;

/// The sections added, in this order.
pub const SECTIONS: [&str; 4] = [".osrel", ".cmdline", ".linux", ".initrd"];

/// Why an image could not be made.
#[derive(Debug)]
pub enum UkiError {
    /// The stub is not a PE32+ file this code can read.
    Stub {
        /// Its path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// A tool is missing.
    MissingTool {
        /// The program.
        tool: &'static str,
        /// The Debian package that has it.
        package: &'static str,
    },
    /// A tool failed.
    Tool {
        /// The program.
        tool: &'static str,
        /// Its stderr, or how it ended.
        output: String,
    },
    /// Reading or writing a file failed.
    Io {
        /// What was being done.
        doing: String,
        /// The error.
        error: io::Error,
    },
    /// The section addresses do not fit 64 bits.
    Overflow,
}

impl fmt::Display for UkiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UkiError::Stub { path, why } => write!(
                f,
                "{} is not the systemd-boot stub liken can build on ({why}); install Debian's \
                 systemd-boot-efi",
                path.display()
            ),
            UkiError::MissingTool { tool, package } => write!(
                f,
                "{tool} is not on PATH; install it (apt-get install {package}) to build signed \
                 unified kernel images"
            ),
            UkiError::Tool { tool, output } => write!(f, "{tool} failed: {output}"),
            UkiError::Io { doing, error } => write!(f, "{doing}: {error}"),
            UkiError::Overflow => f.write_str(
                "the unified kernel image's section addresses overflow 64 bits: the kernel or \
                 initrds are far too large",
            ),
        }
    }
}

impl std::error::Error for UkiError {}

/// What [`read_pe`] learns of a PE32+ file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeInfo {
    /// The optional header's ImageBase.
    pub image_base: u64,
    /// Each section's name, virtual address and virtual size.
    pub sections: Vec<(String, u32, u32)>,
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn le64(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Reads a PE32+ file's image base and section table (the PE/COFF
/// specification: the DOS header's `e_lfanew` at 0x3c, `PE\0\0`, the
/// COFF header, the optional header with magic 0x20b, then 40-byte
/// section headers).
pub fn read_pe(b: &[u8]) -> Result<PeInfo, String> {
    if b.get(..2) != Some(b"MZ") {
        return Err("no MZ header".into());
    }
    let pe = le32(b, 0x3c).ok_or("truncated DOS header")? as usize;
    if b.get(pe..pe.saturating_add(4)) != Some(b"PE\0\0") {
        return Err("no PE signature".into());
    }
    let coff = pe + 4;
    let count = le16(b, coff + 2).ok_or("truncated COFF header")? as usize;
    let opt_size = le16(b, coff + 16).ok_or("truncated COFF header")? as usize;
    let opt = coff + 20;
    if le16(b, opt) != Some(0x20b) {
        return Err("not PE32+ (optional header magic is not 0x20b)".into());
    }
    let image_base = le64(b, opt + 24).ok_or("truncated optional header")?;
    let table = opt + opt_size;
    let mut sections = Vec::with_capacity(count);
    for i in 0..count {
        let h = table + i * 40;
        let raw = b.get(h..h + 8).ok_or("truncated section table")?;
        let name = String::from_utf8_lossy(raw)
            .trim_end_matches('\0')
            .to_string();
        let vsize = le32(b, h + 8).ok_or("truncated section table")?;
        let vaddr = le32(b, h + 12).ok_or("truncated section table")?;
        sections.push((name, vaddr, vsize));
    }
    if sections.is_empty() {
        return Err("no sections".into());
    }
    Ok(PeInfo {
        image_base,
        sections,
    })
}

fn round_up(n: u64) -> Option<u64> {
    n.checked_add(PAGE - 1).map(|n| n / PAGE * PAGE)
}

/// The address of each new section, in order, for sections of `sizes`
/// bytes added to the stub `pe`: ukify's rule (the first at the page
/// after the stub's last byte in memory, each next one at the page after
/// the one before). `None` on overflow.
pub fn decide_layout(pe: &PeInfo, sizes: &[u64]) -> Option<Vec<u64>> {
    let end = pe
        .sections
        .iter()
        .map(|(_, va, vs)| u64::from(*va) + u64::from(*vs))
        .max()?;
    let mut at = round_up(pe.image_base.checked_add(end)?)?;
    let mut out = Vec::with_capacity(sizes.len());
    for size in sizes {
        out.push(at);
        at = round_up(at.checked_add(*size)?)?;
    }
    Some(out)
}

/// One image to make.
pub struct Build<'a> {
    /// The stub to build on ([`STUB`]).
    pub stub: &'a Path,
    /// The kernel.
    pub kernel: &'a Path,
    /// The initrds, in the order the kernel reads them.
    pub initrds: &'a [&'a Path],
    /// The `.osrel` text.
    pub osrel: &'a str,
    /// The `.cmdline` text.
    pub cmdline: &'a str,
    /// The db private key (PEM), which sbsign reads; never read here.
    pub key: &'a Path,
    /// The db certificate (PEM).
    pub cert: &'a Path,
    /// Where the signed image goes.
    pub output: &'a Path,
    /// A directory for the parts (the caller's staging directory).
    pub work: &'a Path,
}

fn run(tool: &'static str, package: &'static str, cmd: &mut Command) -> Result<(), UkiError> {
    match cmd.output() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Err(UkiError::MissingTool { tool, package })
        }
        Err(e) => Err(UkiError::Io {
            doing: format!("running {tool}"),
            error: e,
        }),
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(UkiError::Tool {
            tool,
            output: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }),
    }
}

/// Makes one signed image: the parts written into `work`, objcopy onto
/// the stub, sbsign. The unsigned image and the parts are removed.
pub fn build(b: &Build<'_>) -> Result<(), UkiError> {
    let io = |doing: String| move |error| UkiError::Io { doing, error };
    let stub_bytes = fs::read(b.stub).map_err(io(format!("reading {}", b.stub.display())))?;
    let pe = read_pe(&stub_bytes).map_err(|why| UkiError::Stub {
        path: b.stub.to_path_buf(),
        why,
    })?;
    let osrel = b.work.join(".uki.osrel");
    let cmdline = b.work.join(".uki.cmdline");
    let initrd = b.work.join(".uki.initrd");
    let unsigned = b.work.join(".uki.unsigned.efi");
    let result = (|| {
        fs::write(&osrel, b.osrel).map_err(io(format!("writing {}", osrel.display())))?;
        fs::write(&cmdline, b.cmdline).map_err(io(format!("writing {}", cmdline.display())))?;
        let mut joined =
            fs::File::create(&initrd).map_err(io(format!("creating {}", initrd.display())))?;
        for part in b.initrds {
            let mut f = fs::File::open(part).map_err(io(format!("reading {}", part.display())))?;
            io::copy(&mut f, &mut joined).map_err(io(format!("copying {}", part.display())))?;
        }
        joined
            .flush()
            .map_err(io(format!("writing {}", initrd.display())))?;
        drop(joined);
        let files = [
            osrel.as_path(),
            cmdline.as_path(),
            b.kernel,
            initrd.as_path(),
        ];
        let mut sizes = Vec::with_capacity(files.len());
        for f in files {
            sizes.push(
                fs::metadata(f)
                    .map_err(io(format!("reading {}", f.display())))?
                    .len(),
            );
        }
        let vmas = decide_layout(&pe, &sizes).ok_or(UkiError::Overflow)?;
        let mut cmd = Command::new("objcopy");
        for ((name, file), vma) in SECTIONS.iter().zip(files).zip(&vmas) {
            cmd.arg("--add-section")
                .arg(format!("{name}={}", file.display()))
                .arg("--set-section-flags")
                .arg(format!("{name}=data,readonly"))
                .arg("--change-section-vma")
                .arg(format!("{name}=0x{vma:x}"));
        }
        cmd.arg(b.stub).arg(&unsigned);
        run("objcopy", "binutils", &mut cmd)?;
        run(
            "sbsign",
            "sbsigntool",
            Command::new("sbsign")
                .arg("--key")
                .arg(b.key)
                .arg("--cert")
                .arg(b.cert)
                .arg("--output")
                .arg(b.output)
                .arg(&unsigned),
        )
    })();
    for f in [&osrel, &cmdline, &initrd, &unsigned] {
        let _ = fs::remove_file(f);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stub_is_read_and_the_sections_follow_it_page_by_page() {
        let stub = fs::read(STUB).expect("systemd-boot-efi's stub (scripts/setup.sh installs it)");
        let pe = read_pe(&stub).unwrap();
        assert!(pe.sections.iter().any(|(n, _, _)| n == ".text"), "{pe:?}");
        assert!(
            pe.sections.iter().any(|(n, _, _)| n == ".sdmagic"),
            "{pe:?}"
        );
        let end = pe
            .sections
            .iter()
            .map(|(_, va, vs)| u64::from(*va) + u64::from(*vs))
            .max()
            .unwrap();
        let vmas = decide_layout(&pe, &[100, 5000, 4096, 1]).unwrap();
        assert_eq!(vmas[0] % PAGE, 0);
        assert!(vmas[0] >= pe.image_base + end && vmas[0] < pe.image_base + end + PAGE);
        assert_eq!(vmas[1], vmas[0] + PAGE);
        assert_eq!(vmas[2], vmas[1] + 2 * PAGE);
        assert_eq!(vmas[3], vmas[2] + PAGE);
    }

    #[test]
    fn a_made_up_pe_and_odd_bytes() {
        let pe = PeInfo {
            image_base: 0x1000_0000,
            sections: vec![(".text".into(), 0x1000, 0x2345)],
        };
        assert_eq!(
            decide_layout(&pe, &[1, 1]).unwrap(),
            [0x1000_4000, 0x1000_5000]
        );
        let huge = PeInfo {
            image_base: u64::MAX - 10,
            sections: vec![(".text".into(), 0, 1)],
        };
        assert_eq!(decide_layout(&huge, &[1]), None);
        for bad in [
            &b""[..],
            b"MZ",
            b"MZxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
        ] {
            assert!(read_pe(bad).is_err());
        }
    }
}
