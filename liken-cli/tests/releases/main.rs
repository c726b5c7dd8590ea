//! Integration tests of the release commands, run through the real
//! `liken` binary against real tools: curl for serve, and fetch against
//! serve, against Debian's nginx over http and https (nginx.rs), or
//! against a deliberately broken server where the test needs one, over
//! loopback.

mod bundle;
mod fetch;
mod index;
mod nginx;
mod serve_curl;
mod support;
