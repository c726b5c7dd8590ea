//! Integration tests of the release commands, run through the real
//! `liken` binary against real tools: curl for serve, and fetch against
//! serve (or against a deliberately broken server where the test needs
//! one) over loopback.

mod bundle;
mod fetch;
mod index;
mod serve_curl;
mod support;
