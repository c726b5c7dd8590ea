//! liken-cluster-operator: see `liken_ops::cluster`.

use liken_ops::cluster::run::{Error, Options, PROGRAM, run};
use liken_ops::runtime::flags::{self, Parsed};
use liken_ops::runtime::{log, signals};

fn main() {
    // Signals first: the mask must be set before any thread starts.
    let stop = match signals::listen() {
        Ok(rx) => rx,
        Err(e) => fail(&Error::Start(e.to_string())),
    };
    log::init(PROGRAM.name);
    let args = std::env::args_os().skip(1).collect();
    let values = match flags::parse(&PROGRAM, args, &|k| std::env::var(k).ok()) {
        Ok(Parsed::Help(text)) => {
            print!("{text}");
            return;
        }
        Ok(Parsed::Run(v)) => v,
        Err(e) => fail(&Error::Flag(e.to_string())),
    };
    let result = Options::from_values(&values).and_then(|o| run(o, stop));
    if let Err(e) = result {
        fail(&e);
    }
}

fn fail(e: &Error) -> ! {
    eprintln!("{e}");
    std::process::exit(1);
}
