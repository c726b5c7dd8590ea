//! liken-init: PID 1 of a liken machine. All of it lives in the library;
//! this only refuses to run anywhere but as the first process.

fn main() {
    if std::process::id() != 1 {
        eprintln!(
            "liken-init: this is the first process of a liken machine and runs only as PID 1; \
             boot it from a liken image (see images/ and qemu-tests/)"
        );
        std::process::exit(1);
    }
    liken_init::run()
}
