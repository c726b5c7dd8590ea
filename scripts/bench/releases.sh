#!/usr/bin/env bash
# The release commands' benchmarks, each a ratio against a reference
# measured in the same run on the same machine:
#
#   1. `liken fetch` of a 1 GiB release (by default) from `liken serve` against
#      `curl -o` of the same files followed by `sha256sum` (target >= 1.2x:
#      one streaming pass must beat two passes).
#   2. `liken serve` against Debian's nginx under wrk: requests per second
#      for a 1 MiB file (target >= 0.7x) and throughput for one 1 GiB file
#      (target >= 0.8x).
#
# Usage: scripts/bench/releases.sh <liken-binary>
#
# BENCH_ROUNDS (3), BENCH_SECONDS (8 per wrk run), BENCH_RELEASE_MIB
# (1024, the system image's size) and BENCH_FILE_KIB (1024, the small
# file wrk asks for) set the size. LIKEN_BENCH_SMOKE=1 (`make
# bench-smoke`, part of `make test`) makes those 1 round, 1 s, 4 MiB and
# 64 KiB, so a change to the commands' interface breaks a test rather
# than this benchmark; its figures are not measurements.
# Everything lives in a temporary directory on tmpfs (/dev/shm when
# present), so the numbers measure the network path, hashing and copying
# rather than this machine's disk; fetch's fsyncs still run. Servers
# listen on 127.0.0.1 only, runs are bounded in time, and every process
# started here is stopped on exit.
set -euo pipefail

liken=${1:?usage: $0 <liken-binary>}
liken=$(realpath "$liken")
for tool in curl sha256sum nginx wrk; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is missing; run scripts/setup.sh" >&2; exit 1; }
done

base=/dev/shm
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/liken-bench.XXXXXX")
# nginx's workers drop root for an unprivileged user, who must be able
# to read the channel.
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

if [ "${LIKEN_BENCH_SMOKE:-}" = 1 ]; then
  echo "bench: smoke size (LIKEN_BENCH_SMOKE=1): the figures below are not measurements"
  rounds=${BENCH_ROUNDS:-1} seconds=${BENCH_SECONDS:-1}
  release_mib=${BENCH_RELEASE_MIB:-4} file_kib=${BENCH_FILE_KIB:-64}
else
  rounds=${BENCH_ROUNDS:-3} seconds=${BENCH_SECONDS:-8}
  release_mib=${BENCH_RELEASE_MIB:-1024} file_kib=${BENCH_FILE_KIB:-1024}
fi
version=2026.07.11-001

# Runs a command quietly; on failure shows what it printed and stops.
quiet() {
  local out
  out=$("$@" 2>&1) || { echo "$out" >&2; echo "bench: $* failed" >&2; exit 1; }
}

# A free loopback port, picked by the kernel.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

wait_port() {
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$1/" && return 0
    sleep 0.05
  done
  echo "bench: nothing answers on port $1" >&2
  exit 1
}

now() { date +%s.%N; }

echo "bench: preparing a $release_mib MiB release in $work"
mkdir -p "$work/in"
head -c "${release_mib}M" /dev/urandom > "$work/in/liken.sqfs"
for f in vmlinuz boot.cpio microcode.cpio liken systemd-boot.efi grub-boot.img grub-core.img licenses.md; do
  head -c 65536 /dev/urandom > "$work/in/$f"
done
in=$work/in
quiet "$liken" bundle -slot-size 2Gi -microcode "$in/microcode.cpio" "$in/vmlinuz" "$in/liken.sqfs" \
  "$in/boot.cpio" "$in/liken" "$in/systemd-boot.efi" "$in/grub-boot.img" "$in/grub-core.img" \
  "$in/licenses.md" "$work/channel" "$version"
rm -rf "$in"
head -c "${file_kib}K" /dev/urandom > "$work/channel/small-file"

serve_port=$(free_port)
"$liken" serve "$work/channel" "127.0.0.1:$serve_port" > "$work/serve.log" 2>&1 &
pids+=($!)
wait_port "$serve_port"

nginx_port=$(free_port)
mkdir -p "$work/nginx"
cat > "$work/nginx/nginx.conf" <<CONF
# Debian's nginx with the usual static-file settings, logging like serve does.
worker_processes auto;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log;
events { worker_connections 4096; }
http {
  default_type application/octet-stream;
  access_log $work/nginx/access.log;
  sendfile on;
  tcp_nopush on;
  tcp_nodelay on;
  keepalive_requests 1000000;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  server {
    listen 127.0.0.1:$nginx_port;
    root $work/channel;
  }
}
CONF
nginx -c "$work/nginx/nginx.conf" -p "$work/nginx" 2>>"$work/nginx/error.log" &
pids+=($!)
wait_port "$nginx_port"

ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}')" "$1" "$2"; }
best_min() { printf '%s\n' "$@" | sort -g | head -1; }
best_max() { printf '%s\n' "$@" | sort -g | tail -1; }

# 1. fetch against curl + sha256sum, all files of the release.
src="http://127.0.0.1:$serve_port"
files=$(grep -E '^  file: ' "$work/channel/$version/release.yaml" | sed 's/^  file: //')
cat "$work/channel/$version"/* > /dev/null   # both start from a warm page cache
fetch_times=(); curl_times=()
for r in $(seq "$rounds"); do
  rm -rf "$work/fetched" "$work/curled"
  t0=$(now)
  # -unsigned: curl checks no signature either (checking one costs well
  # under a millisecond next to hashing the release).
  quiet "$liken" fetch -unsigned "$src" "$version" "$work/fetched"
  t1=$(now)
  fetch_times+=("$(python3 -c "print($t1-$t0)")")
  rm -rf "$work/fetched"

  mkdir -p "$work/curled"
  t0=$(now)
  curl -s -f -o "$work/curled/release.yaml" "$src/$version/release.yaml"
  for f in $files; do curl -s -f -o "$work/curled/$f" "$src/$version/$f"; done
  (cd "$work/curled" && sha256sum $files > /dev/null)
  t1=$(now)
  curl_times+=("$(python3 -c "print($t1-$t0)")")
  rm -rf "$work/curled"
done
ft=$(best_min "${fetch_times[@]}"); ct=$(best_min "${curl_times[@]}")
mib=$(python3 -c "print($release_mib + 8*64/1024)")
echo "fetch $release_mib MiB release: liken fetch $(python3 -c "print(f'{$mib/$ft:.0f}')") MiB/s ($ft s)   curl -o + sha256sum $(python3 -c "print(f'{$mib/$ct:.0f}')") MiB/s ($ct s)"
echo "RATIO fetch/curl+sha256sum: $(ratio "$ct" "$ft")x (target >= 1.2x)"

# 2. serve against nginx under wrk. A Lua hook prints exact counts.
cat > "$work/report.lua" <<'LUA'
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT %d %d %d %d\n", summary.requests, summary.bytes,
    summary.duration, e.connect + e.read + e.write + e.status + e.timeout))
end
LUA
# wrk_run <url> <threads> <connections>: prints "requests bytes seconds".
wrk_run() {
  local line
  line=$(wrk -t"$2" -c"$3" -d"${seconds}s" --timeout 30s -s "$work/report.lua" "$1" | grep '^RESULT')
  read -r _ req bytes us errors <<<"$line"
  if [ "$errors" -ne 0 ]; then echo "bench: wrk saw $errors errors against $1" >&2; exit 1; fi
  echo "$req $bytes $(python3 -c "print($us/1e6)")"
}

rps_serve=(); rps_nginx=(); tp_serve=(); tp_nginx=()
for r in $(seq "$rounds"); do
  read -r q _ s <<<"$(wrk_run "http://127.0.0.1:$serve_port/small-file" 2 32)"
  rps_serve+=("$(python3 -c "print($q/$s)")")
  read -r q _ s <<<"$(wrk_run "http://127.0.0.1:$nginx_port/small-file" 2 32)"
  rps_nginx+=("$(python3 -c "print($q/$s)")")
  read -r _ b s <<<"$(wrk_run "http://127.0.0.1:$serve_port/$version/liken.sqfs" 1 1)"
  tp_serve+=("$(python3 -c "print($b/$s/2**20)")")
  read -r _ b s <<<"$(wrk_run "http://127.0.0.1:$nginx_port/$version/liken.sqfs" 1 1)"
  tp_nginx+=("$(python3 -c "print($b/$s/2**20)")")
done
rs=$(best_max "${rps_serve[@]}"); rn=$(best_max "${rps_nginx[@]}")
ts=$(best_max "${tp_serve[@]}"); tn=$(best_max "${tp_nginx[@]}")
printf "serve %s KiB file, wrk -c32: liken serve %.0f req/s   nginx %.0f req/s\n" "$file_kib" "$rs" "$rn"
echo "RATIO serve/nginx req/s:    $(ratio "$rs" "$rn")x (target >= 0.7x)"
printf "serve %s MiB file, wrk -c1:  liken serve %.0f MiB/s   nginx %.0f MiB/s\n" "$release_mib" "$ts" "$tn"
echo "RATIO serve/nginx MiB/s:    $(ratio "$ts" "$tn")x (target >= 0.8x)"
