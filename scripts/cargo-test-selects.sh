#!/usr/bin/env bash
# Runs `cargo test ARGS...` and fails when a test binary it ran selected
# no test: a filter (`-- --exact name`, `--ignored`) that matches nothing
# would otherwise pass, and a renamed test would silently stop running.
# The Makefile runs every filtered `cargo test` through this script (its
# lint target checks that).
set -euo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test "$@" 2>&1 | tee "$log"
if grep -q '^running 0 tests$' "$log"; then
  echo "cargo test $*: the filter selected no test; check the test's name (and #[ignore]) against the filter" >&2
  exit 1
fi
