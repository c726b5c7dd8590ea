//! liken-standin-k3s: a test-only stand-in that the QEMU tests boot
//! where k3s would be (/usr/bin/k3s in a test-only cpio), so init's
//! supervision, restart backoff and control socket are exercised
//! without k3s. It is built statically by `make qemu-images` and never
//! goes into an image for people.
//!
//! What it does is chosen on the kernel command line with
//! `liken.standin=<instruction>`:
//!
//! - `run` (the default): print the arguments it was started with,
//!   init's resident memory and the boot record init published, then
//!   stay up.
//! - `exit:<code>`: stay up half a second, then exit with `<code>`
//!   (every run, so init's backoff shows).
//! - `reboot` or `poweroff`: ask init for its status and then for a
//!   reboot (or poweroff) over the control socket, as the machine
//!   operator will, and print both answers.
//!
//! Every line it prints starts with `liken-standin-k3s:` so the console
//! shows plainly that this is not k3s.

use std::os::unix::net::UnixStream;
use std::time::Duration;

use liken_api::control::{Request, Response, SOCKET_PATH, read_frame, write_frame};

fn say(text: &str) {
    println!("liken-standin-k3s: {text}");
}

fn instruction() -> String {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    cmdline
        .split_whitespace()
        .find_map(|a| a.strip_prefix("liken.standin="))
        .unwrap_or("run")
        .to_owned()
}

fn ask(request: &Request) -> Result<Response, String> {
    let mut s =
        UnixStream::connect(SOCKET_PATH).map_err(|e| format!("connect {SOCKET_PATH}: {e}"))?;
    write_frame(&mut s, request).map_err(|e| e.to_string())?;
    read_frame(&mut s).map_err(|e| e.to_string())
}

fn stay_up() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let what = instruction();
    say(&format!(
        "started as k3s {} (instruction {what})",
        args.join(" ")
    ));
    match what.split_once(':') {
        Some(("exit", code)) => {
            let code: i32 = code.parse().unwrap_or(1);
            std::thread::sleep(Duration::from_millis(500));
            say(&format!("exiting with status {code}"));
            std::process::exit(code);
        }
        _ if what == "reboot" || what == "poweroff" => {
            match ask(&Request::Status) {
                Ok(r) => say(&format!(
                    "status {}",
                    serde_json::to_string(&r).unwrap_or_default()
                )),
                Err(e) => say(&format!("status request failed: {e}")),
            }
            let request = if what == "reboot" {
                Request::Reboot
            } else {
                Request::Poweroff
            };
            say(&format!("asking for {what}"));
            match ask(&request) {
                Ok(r) => say(&format!(
                    "{what} answered {}",
                    serde_json::to_string(&r).unwrap_or_default()
                )),
                Err(e) => say(&format!("{what} request failed: {e}")),
            }
            stay_up();
        }
        _ => {
            // init's resident memory now that it supervises, for the
            // benchmark.
            if let Some(rss) = std::fs::read_to_string("/proc/1/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .map(str::to_owned)
                })
            {
                say(&format!(
                    "init {}",
                    rss.split_whitespace().collect::<Vec<_>>().join(" ")
                ));
            }
            match std::fs::read_to_string("/run/liken/boot.json") {
                Ok(text) => say(&format!(
                    "boot record {}",
                    text.split_whitespace().collect::<Vec<_>>().join("")
                )),
                Err(e) => say(&format!("no boot record: {e}")),
            }
            stay_up();
        }
    }
}
