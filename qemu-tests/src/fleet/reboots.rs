//! Each reboot a machine made, and which way it went, judged from its
//! console as the host timed it: the end-to-end scenario's evidence that
//! kexec reboots skip the firmware and are the shorter ones.
//!
//! init says which way it chose (`liken: reboot-via: ...`), but that is
//! the word of the code under test. The path is read instead from what
//! other programs print between init's orderly shutdown (`liken:
//! shutdown: ok (reboot requested)`) and the next kernel's first line
//! (`] Linux version `): OVMF's boot manager prints `BdsDxe` on every
//! boot through the firmware, and nothing runs between a kexec and the
//! new kernel. The times are the host's arrival stamps
//! ([`crate::Stamped`]), so both figures are measured outside the guest:
//!
//! - shutdown to kernel: from the shutdown line to the new kernel's
//!   first line, the whole reboot as a person watching the console sees
//!   it (stopping k3s and unmounting included, the same on both paths);
//! - the jump: from init's last line of the old boot (`liken: kexec:
//!   ok` or `liken: reboot: ok`) to the new kernel's first line, the part
//!   the firmware adds to.
//!
//! A kill or a power-on by the test ends an unfinished reboot unjudged:
//! the next kernel line is then a cold start, not the reboot's end.
//!
//! Everything here is pure ([`decide_reboots`], [`decide_paths`]), with
//! table tests; the scenario feeds it each machine's console and power.

use std::time::{Duration, Instant};

use super::downtime::{Interval, Sign};

/// How a reboot reached the next kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    /// No firmware line before the new kernel.
    Kexec,
    /// The firmware's boot manager ran first.
    Firmware,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Kexec => "kexec",
            Path::Firmware => "firmware",
        }
    }
}

/// One reboot, from init's shutdown line to the next kernel's first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reboot {
    /// The machine.
    pub machine: String,
    /// init's shutdown line.
    pub shutdown: Instant,
    /// How the next kernel was reached.
    pub path: Path,
    /// Shutdown line to the new kernel's first line.
    pub to_kernel: Duration,
    /// init's last line of the old boot to the new kernel's first line.
    pub jump: Duration,
}

/// One console line or power action, as [`decide_reboots`] reads them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen<'a> {
    /// A console line.
    Line(&'a str),
    /// The test started or killed the machine's QEMU.
    Power,
}

/// The reboots in one machine's timeline (in time order).
pub fn decide_reboots(machine: &str, timeline: &[(Instant, Seen<'_>)]) -> Vec<Reboot> {
    struct Open {
        shutdown: Instant,
        last_init: Instant,
        firmware: bool,
    }
    let mut open: Option<Open> = None;
    let mut out = Vec::new();
    for (at, seen) in timeline {
        let line = match seen {
            Seen::Power => {
                open = None;
                continue;
            }
            Seen::Line(l) => *l,
        };
        if line.contains("liken: shutdown: ok (reboot requested)") {
            open = Some(Open {
                shutdown: *at,
                last_init: *at,
                firmware: false,
            });
            continue;
        }
        let Some(o) = open.as_mut() else {
            continue;
        };
        if line.contains("liken: kexec: ok") || line.contains("liken: reboot: ok") {
            o.last_init = *at;
        } else if line.contains("BdsDxe") {
            o.firmware = true;
        } else if line.contains("] Linux version ") {
            out.push(Reboot {
                machine: machine.to_owned(),
                shutdown: o.shutdown,
                path: if o.firmware {
                    Path::Firmware
                } else {
                    Path::Kexec
                },
                to_kernel: at.saturating_duration_since(o.shutdown),
                jump: at.saturating_duration_since(o.last_init),
            });
            open = None;
        }
    }
    out
}

/// One path's figures over the reboots that took it.
#[derive(Clone, Debug, PartialEq)]
pub struct PathFigures {
    /// The path.
    pub path: Path,
    /// How many reboots took it.
    pub count: usize,
    /// The median shutdown-to-kernel time, in seconds.
    pub to_kernel: f64,
    /// The longest and shortest jump, in seconds.
    pub jump: (f64, f64),
    /// The median downtime (the judge's interval that began with the
    /// reboot, when it held one boot), in seconds, and how many.
    pub down: Option<(f64, usize)>,
}

/// The verdict over a scenario's reboots: each path's figures, and
/// whether every kexec jump was shorter than every firmware one.
#[derive(Clone, Debug, PartialEq)]
pub struct Paths {
    /// Kexec first, then firmware; a path no reboot took is absent.
    pub figures: Vec<PathFigures>,
    /// Why the paths do not show kexec as the shorter reboot, if so.
    pub problem: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Each path's figures over `reboots`, with the downtime of each from
/// `intervals` (the judge's, whose start is the shutdown line's stamp);
/// a problem unless both paths were taken and the longest kexec jump is
/// shorter than the shortest firmware one.
pub fn decide_paths(reboots: &[Reboot], intervals: &[Interval], until: Instant) -> Paths {
    let mut figures = Vec::new();
    for path in [Path::Kexec, Path::Firmware] {
        let took: Vec<&Reboot> = reboots.iter().filter(|r| r.path == path).collect();
        if took.is_empty() {
            continue;
        }
        let jumps: Vec<f64> = took.iter().map(|r| r.jump.as_secs_f64()).collect();
        let downs: Vec<f64> = took
            .iter()
            .filter_map(|r| {
                intervals.iter().find(|i| {
                    i.machine == r.machine
                        && i.start == r.shutdown
                        && i.boots == 1
                        && i.end.is_some()
                })
            })
            .map(|i| i.length(until).as_secs_f64())
            .collect();
        figures.push(PathFigures {
            path,
            count: took.len(),
            to_kernel: median(took.iter().map(|r| r.to_kernel.as_secs_f64()).collect()),
            jump: (
                jumps.iter().copied().fold(0.0, f64::max),
                jumps.iter().copied().fold(f64::INFINITY, f64::min),
            ),
            down: (!downs.is_empty()).then(|| (median(downs.clone()), downs.len())),
        });
    }
    let find = |p: Path| figures.iter().find(|f| f.path == p);
    let problem = match (find(Path::Kexec), find(Path::Firmware)) {
        (None, _) => Some("no reboot reached its kernel by kexec".to_owned()),
        (_, None) => Some("no reboot went through the firmware".to_owned()),
        (Some(k), Some(f)) if k.jump.0 >= f.jump.1 => Some(format!(
            "the longest kexec jump ({:.1} s) is not shorter than the shortest firmware one \
             ({:.1} s)",
            k.jump.0, f.jump.1
        )),
        _ => None,
    };
    Paths { figures, problem }
}

impl Paths {
    /// One line per path, for the scenario's log and the benchmark.
    pub fn lines(&self) -> Vec<String> {
        self.figures
            .iter()
            .map(|f| {
                let down = f.down.map_or_else(
                    || "no single-boot downtime".to_owned(),
                    |(d, n)| format!("down {d:.0} s median over {n}"),
                );
                format!(
                    "{:<8} {} reboot(s): shutdown to kernel {:.1} s median, jump {:.1} to {:.1} s, {down}",
                    f.path.name(),
                    f.count,
                    f.to_kernel,
                    f.jump.1,
                    f.jump.0,
                )
            })
            .collect()
    }
}

/// A machine's timeline for [`decide_reboots`]: its console lines and
/// its power actions, in time order.
pub fn timeline<'a>(
    console: &'a [crate::Stamped],
    power: &[(Instant, Sign)],
) -> Vec<(Instant, Seen<'a>)> {
    let mut t: Vec<(Instant, Seen<'a>)> = console
        .iter()
        .map(|l| (l.at, Seen::Line(l.text.as_str())))
        .chain(power.iter().map(|(at, _)| (*at, Seen::Power)))
        .collect();
    t.sort_by_key(|(at, _)| *at);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, s: f64) -> Instant {
        t0 + Duration::from_secs_f64(s)
    }

    fn lines<'a>(t0: Instant, l: &[(f64, &'a str)]) -> Vec<(Instant, Seen<'a>)> {
        l.iter().map(|(s, t)| (at(t0, *s), Seen::Line(t))).collect()
    }

    const SHUT: &str = "liken: shutdown: ok (reboot requested)";
    const KERNEL: &str = "[    0.000000] Linux version 6.1.0-57-amd64";

    #[test]
    fn a_kexec_and_a_firmware_reboot_are_told_apart_by_the_firmware_line() {
        let t0 = Instant::now();
        let t = lines(
            t0,
            &[
                (0.0, "liken: supervisor: ok"),
                (10.0, SHUT),
                (12.0, "liken: reboot-via: ok (by kexec: ...)"),
                (13.0, "liken: kexec: ok"),
                (13.4, KERNEL),
                (40.0, SHUT),
                (41.0, "liken: reboot: ok"),
                (44.0, "BdsDxe: loading Boot0001"),
                (47.0, KERNEL),
            ],
        );
        let r = decide_reboots("m", &t);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].path, Path::Kexec);
        assert_eq!(r[0].to_kernel, Duration::from_secs_f64(3.4));
        assert!((r[0].jump.as_secs_f64() - 0.4).abs() < 1e-6);
        assert_eq!(r[1].path, Path::Firmware);
        assert_eq!(r[1].to_kernel, Duration::from_secs(7));
        assert_eq!(r[1].jump, Duration::from_secs(6));
    }

    #[test]
    fn init_saying_kexec_does_not_make_a_firmware_boot_a_kexec() {
        let t0 = Instant::now();
        let t = lines(
            t0,
            &[
                (0.0, SHUT),
                (1.0, "liken: kexec: ok"),
                (2.0, "BdsDxe: starting"),
                (5.0, KERNEL),
            ],
        );
        assert_eq!(decide_reboots("m", &t)[0].path, Path::Firmware);
    }

    #[test]
    fn a_kill_or_a_cold_start_is_not_a_reboot() {
        let t0 = Instant::now();
        let mut t = lines(t0, &[(0.0, KERNEL), (5.0, SHUT)]);
        t.push((at(t0, 6.0), Seen::Power));
        t.extend(lines(t0, &[(9.0, "BdsDxe: starting"), (12.0, KERNEL)]));
        assert!(decide_reboots("m", &t).is_empty());
    }

    fn reboot(path: Path, jump: f64, shutdown: Instant) -> Reboot {
        Reboot {
            machine: "m".into(),
            shutdown,
            path,
            to_kernel: Duration::from_secs_f64(jump + 2.0),
            jump: Duration::from_secs_f64(jump),
        }
    }

    #[test]
    fn kexec_must_be_the_shorter_jump_and_both_paths_must_be_seen() {
        let t0 = Instant::now();
        let k = reboot(Path::Kexec, 0.5, t0);
        let f = reboot(Path::Firmware, 6.0, at(t0, 100.0));
        let down = Interval {
            machine: "m".into(),
            start: t0,
            end: Some(at(t0, 15.0)),
            began: "shutdown",
            ended: "blessed",
            boots: 1,
        };
        let p = decide_paths(&[k.clone(), f.clone()], &[down], at(t0, 200.0));
        assert_eq!(p.problem, None);
        assert_eq!(p.figures[0].down, Some((15.0, 1)));
        assert_eq!(p.figures[1].down, None);
        assert_eq!(p.lines().len(), 2);

        let slow = reboot(Path::Kexec, 7.0, t0);
        let p = decide_paths(&[slow, f.clone()], &[], t0);
        assert!(p.problem.unwrap().contains("not shorter"));
        assert!(
            decide_paths(&[k], &[], t0)
                .problem
                .unwrap()
                .contains("firmware")
        );
        assert!(
            decide_paths(&[f], &[], t0)
                .problem
                .unwrap()
                .contains("kexec")
        );
    }
}
