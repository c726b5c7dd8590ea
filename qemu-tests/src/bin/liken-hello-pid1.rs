//! liken-hello-pid1: the benchmark's reference, a bare static PID 1
//! that prints the guest's uptime and sleeps. Booted from the same
//! kernel as liken-init, it measures what the kernel and QEMU cost on
//! their own, so `make bench` can print what liken-init adds.
//! Test-only; never in an image for people.

fn main() {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let uptime = t.tv_sec as f64 + t.tv_nsec as f64 / 1e9;
    println!("hello-pid1: uptime {uptime:.2} s");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}
