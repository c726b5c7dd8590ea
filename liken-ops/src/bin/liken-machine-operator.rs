//! liken-machine-operator: the per-machine DaemonSet pod. See
//! `liken_ops::machine`.

use liken_ops::machine::{flags, operator};
use liken_ops::runtime::flags::{Parsed, parse};

fn main() {
    let args = std::env::args_os().skip(1).collect();
    let values = match parse(&flags::PROGRAM, args, &|k| std::env::var(k).ok()) {
        Ok(Parsed::Help(text)) => {
            print!("{text}");
            return;
        }
        Ok(Parsed::Run(v)) => v,
        Err(e) => {
            eprintln!("liken-machine-operator: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = operator::run(values) {
        eprintln!("liken-machine-operator: {e}");
        std::process::exit(1);
    }
}
