//! `liken`: the workstation toolkit. main only maps the process onto
//! [`liken_cli::run`] and turns an error into `liken: …` and exit 1.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let mut out = std::io::stdout().lock();
    match liken_cli::run(args, &mut out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("liken: {e}");
            ExitCode::FAILURE
        }
    }
}
