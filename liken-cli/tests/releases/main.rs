//! Integration tests of the release commands, run through the real
//! `liken` binary against real tools: curl for serve, and fetch against
//! serve, against Debian's nginx over http and https (nginx.rs), or
//! against a deliberately broken server where the test needs one, over
//! loopback. signed.rs holds fetch and sign over signed channels.

mod bundle;
mod fetch;
mod index;
mod nginx;
mod serve_curl;
mod signed;
mod support;
