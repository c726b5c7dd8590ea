#!/usr/bin/env bash
# Installs what `make bench-releases` compares against, and does nothing
# on a machine that has it. nginx is only a reference here: the bench
# starts its own copy on a loopback port with a generated config, so the
# package's system service must not start (or stay running) on port 80.
set -euo pipefail

packages=(
  nginx     # the reference static file server for `liken serve`
  wrk       # the HTTP load generator both servers are measured with
  curl      # the reference downloader for `liken fetch`
  python3   # arithmetic and free-port picking in scripts/bench/releases.sh
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "bench setup: missing Debian packages: ${missing[*]}; run: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
echo "bench setup: installing ${missing[*]}"
# Keep maintainer scripts from starting services for the install only
# (Debian's policy-rc.d protocol: 101 means "not allowed").
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  made_policy=1
fi
trap '[ -n "$made_policy" ] && rm -f "$policy"' EXIT
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
