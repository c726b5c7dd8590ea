# The entry points people type. `make demo` shows liken's main job as far
# as it is built; `make test` sets up a fresh Debian machine and runs
# every check CI runs.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

# Cargo's build tree lives in a cache keyed by the toolchain, so a second
# run (and CI on the same machine) is incremental, and a new rustc never
# mixes artifacts with an old one.
RUSTC_VERSION := $(shell rustc --version 2>/dev/null | tr -c 'A-Za-z0-9.\n' '-' )
export CARGO_TARGET_DIR ?= $(HOME)/.cache/liken/cargo/$(RUSTC_VERSION)

# Static release binaries: the gnu target with crt-static gives a
# static-pie (PLATFORM.md). The explicit --target keeps these flags off
# build scripts and proc macros, which cannot be static.
TARGET := x86_64-unknown-linux-gnu
STATIC := RUSTFLAGS="-C target-feature=+crt-static"

.PHONY: all demo test setup check lint unit crds

all: test

## demo: build the workstation CLI statically and show what it is.
demo:
	$(STATIC) cargo build --release --target $(TARGET) -p liken-cli
	@bin=$(CARGO_TARGET_DIR)/$(TARGET)/release/liken; \
	echo "built $$bin ($$(stat -c %s $$bin) bytes, $$(file -b $$bin | grep -o "static-pie linked" || echo "NOT static"))"; \
	$$bin version

## test: install what the tests need, then format, lint and test.
test: setup lint unit

setup:
	./scripts/setup.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings
	@# liken-api is linked by init: it must stay free of network and I/O crates.
	@if cargo tree -p liken-api -e normal --prefix none | grep -E '^(ureq|rustls|nix|rustix|tokio|crossbeam-channel) '; then \
	  echo "liken-api must not depend on the crates above (it is init's no-I/O vocabulary)"; exit 1; fi

# Kept last so the output ends with cargo's test summary.
unit:
	cargo test --workspace

## crds: regenerate images/manifests/crds from liken-api.
crds:
	cargo run -q -p liken-api --example write-crds -- images/manifests/crds
