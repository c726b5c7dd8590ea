//! A loopback HTTP server for unit tests of what the apiserver cannot be
//! made to do on cue: answer 200 and close, go silent after the headers,
//! throttle with `Retry-After`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Listens on loopback and answers the n-th connection with the n-th of
/// `answers` (the last one again once they run out), then closes it, or
/// with `hold` keeps it open and silent. Returns the server's URL and
/// when each connection came.
pub fn serve(answers: Vec<&'static str>, hold: bool) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for (n, conn) in listener.incoming().enumerate() {
            let Ok(mut conn) = conn else { return };
            log.lock().unwrap().push(Instant::now());
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let answer = answers[n.min(answers.len() - 1)];
            let _ = conn.write_all(answer.as_bytes());
            if hold {
                held.push(conn);
            }
        }
    });
    (url, seen)
}
