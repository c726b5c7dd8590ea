#!/usr/bin/env bash
# Installs what `make test` needs on a fresh Debian 12 machine, and does
# nothing on one that has it: each package is checked with dpkg first, so
# a second run costs no apt-get update.
set -euo pipefail

# Debian packages the tests use, with the reason for each.
packages=(
  ca-certificates   # TLS roots for the Go module proxy and crates.io
  openssl           # `openssl verify` checks minted certificate chains
  curl              # Range requests against `liken serve`
)
# Real kubectl for the interop tests: Debian's kubernetes-client, unless
# the machine already has a kubectl (some images ship the Cloud SDK's,
# which owns /usr/bin/kubectl and conflicts with Debian's package).
command -v kubectl >/dev/null || packages+=(kubernetes-client)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

for tool in cargo rustfmt cargo-clippy go; do
  command -v "$tool" >/dev/null || {
    echo "setup: $tool is not on PATH; install Rust (rustup, with rustfmt and clippy) and Go" >&2
    exit 1
  }
done
