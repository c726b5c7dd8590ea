//! `liken` (also `kubectl-liken`, and `kubectl_complete-liken` for
//! kubectl's completion): the workstation toolkit. main only maps the
//! process onto [`liken_cli::run`] and turns an error into `liken: …` and
//! exit 1. Messages can quote what a server or a document said, so their
//! control characters are shown escaped rather than sent to the terminal.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args = liken_cli::command_words(std::env::args_os().collect());
    let mut stdin = std::io::stdin().lock();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr();
    let mut io = liken_cli::Io {
        stdin: &mut stdin,
        out: &mut out,
        err: &mut err,
    };
    let result = liken_cli::run(args, &mut io);
    match result.and_then(|()| Ok(std::io::Write::flush(&mut out)?)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let message = e.to_string();
            eprintln!("liken: {}", liken_releases::terminal::escape_text(&message));
            ExitCode::FAILURE
        }
    }
}
