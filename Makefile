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
# liken-init is built for the musl target (INIT_TARGET) and links musl's
# C library statically: 1.39 MB where glibc's static C library (its
# printf, scanf, iconv tables, dlopen for NSS and the rest, 840 kB that
# init never calls but cannot drop) made it 2.09 MB, over its 2 MB
# target and within 2 kB of the budget images/build-boot.sh enforces.
# init resolves no names through the C library and allocates little, so
# musl's resolver and allocator cost it nothing. rustup supplies the
# target (scripts/setup.sh adds it). That target links with cc and the
# system's ld by default; rustc's own lld (gcc-ld in the toolchain's
# sysroot, the linker the gnu target uses) is named instead, for the
# flags below.
INIT_TARGET := x86_64-unknown-linux-musl
RUST_GCC_LD := $(shell rustc --print sysroot 2>/dev/null)/lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld
# It is linked non-PIE as well: PID 1 always loads at the same
# address anyway, and dropping the relocations saves about 55 kB of its
# 2 MB budget. It is linked without
# unwind tables too (about 260 kB): it aborts on panic, so nothing in it
# unwinds (liken-init/discard-eh-frame.ld says what that gives up).
# LLVM's machine outliner is on for it (about 49 kB): at opt-level z the
# same instruction runs recur across init's many error paths and
# formatting calls, and the outliner moves each into one shared
# function, called where it was. x86-64 supports it (clang's -moutline
# drives the same pass there); it is off by default only because calls
# cost a little time, and init does little computing. It outlines only
# from functions that do not use the red zone, so a call cannot clobber
# what a function keeps below its stack pointer.
# The linker (rust-lld) also folds
# functions whose machine code came out identical (--icf=all, about 5.6 kB):
# generic code instantiated for types of the same layout. Rust promises
# no distinct address for distinct functions, so nothing can tell.
# It folds identical read-only data as well (--ignore-data-address-equality,
# about 3.5 kB of .rodata and, through it, 0.6 kB more of folded code):
# mostly vtables that became identical once the functions they point to
# were folded. Rust gives vtables and constants no identity either; the
# C library keeps its read-only data in one section per object file,
# which folds only where a whole file's constants match another's. -O2
# merges string tails
# ("abc" also serves "bc"), about 0.4 kB.
# images/build-boot.sh refuses an init at or over the budget.
STATIC_INIT := RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static -C llvm-args=-enable-machine-outliner=always -C link-arg=-B$(RUST_GCC_LD) -C link-arg=-fuse-ld=lld -C link-arg=-Wl,-T,$(CURDIR)/liken-init/discard-eh-frame.ld -C link-arg=-Wl,--icf=all -C link-arg=-Wl,--ignore-data-address-equality -C link-arg=-Wl,-O2"

.PHONY: all test setup check lint unit crds

all: test

## demo: a one-machine fleet under QEMU, installed from a `liken stick`
## stick and run by liken's operators against a control plane on this
## workstation; it ends at a shell where `liken kubectl home get machines`
## shows the machine Ready (without a terminal it prints that table and
## returns, leaving the fleet running). The machine's k3s is the test
## stand-in (liken-standin-k3s, which says so on every line); the control
## plane is liken-testenv's. qemu-tests' liken-demo does it; demo-stop
## ends it; test-demo proves both (docs/testing.md, The demo). About two
## minutes to Ready under TCG once the images are built.
## `make demo NODE=upstream` runs a real node instead: the upstream node
## launcher (real containerd, runc, kubelet and kube-proxy, the API server
## and its controllers inside the machine, both operators as containers),
## which the workstation reaches through a port QEMU forwards; it builds
## upstream-images (and the node's parts, make testenv-node, 15 minutes
## cold) and takes about ten minutes to Ready under TCG.
DEMO_DIR ?= $(CARGO_TARGET_DIR)/demo
NODE ?= standin
DEMO_IMAGES := $(if $(filter upstream,$(NODE)),upstream-images,e2e-images)
.PHONY: demo demo-stop demo-bin demo-k3s test-demo
demo: demo-k3s setup $(DEMO_IMAGES) demo-bin
	@# The images were just built, so the demo uses them as they are
	@# rather than run make's up-to-date checks again (27 s).
	LIKEN_IMAGES_JUST_BUILT=1 LIKEN_DEMO_NODE=$(NODE) $(CARGO_TARGET_DIR)/release/liken-demo up $(DEMO_DIR)

## demo-stop: end the demo's fleet, control plane and cluster operator.
demo-stop: demo-bin
	$(CARGO_TARGET_DIR)/release/liken-demo stop $(DEMO_DIR)

# The demo's machine runs the k3s stand-in against a control plane on
# this workstation; with a real k3s the API server would be the
# leader's own, which the demo does not reach yet (docs/testing.md, The demo).
demo-k3s:
	@case "$(NODE)" in standin|upstream) ;; *) echo "demo: NODE=$(NODE) is not a node the demo runs: NODE=standin (the default) or NODE=upstream" >&2; exit 1;; esac
	@if [ -n "$(K3S_BINARY)" ]; then echo "demo: make demo runs the k3s stand-in and does not take K3S_BINARY yet; make images K3S_BINARY=$(K3S_BINARY) builds a release with it (docs/testing.md, The demo)" >&2; exit 1; fi

demo-bin:
	@echo "demo: building liken-demo (release, fat LTO: a few minutes the first time)"
	cargo build -q --release -p qemu-tests --bin liken-demo

## test-demo: `make demo` without a terminal and on one (a pty, typing
## into its shell), every "Try next" hint it prints run as printed and
## checked from the API (two reboots, one held for approve-reboot, the
## upgrade to the next release in slot B), `make demo-stop` leaving
## nothing, and a start that fails printing the machine's console and
## leaving nothing (qemu-tests/test-demo.sh). Not part of `make test`:
## about 11 minutes under TCG once the images are built.
test-demo:
	./qemu-tests/test-demo.sh $(DEMO_DIR)

## test: install what the tests need, then format, lint and test, the
## fleets last (test-e2e, about 16 minutes under TCG, and
## test-upstream-fleet, about 15), each phase timed: setup, lint,
## fuzz-smoke, bench-smoke, one build of every test binary, each crate's
## tests and each QEMU scenario, doctests, e2e-images, test-e2e,
## upstream-images, test-upstream-fleet. It ends with a table of each phase's wall time
## beside its share of the budget (a phase over it is marked, never
## failed) and `N passed, N failed` (scripts/test-run, scripts/test-times).
test:
	./scripts/test-run

setup:
	./scripts/setup.sh

## testenv-node: build a Kubernetes node's parts at pinned versions beside
## testenv's control plane (kubelet and kube-proxy of its release,
## containerd v2 with containerd-shim-runc-v2 and ctr, runc static with
## seccomp, the CNI plugins bridge, host-local, loopback and portmap;
## testenv/node/versions.env) into testenv's cache, printing each
## component's build time, then check that each runs, reports its version
## and is static (testenv/smoke-node.sh). upstream-images needs them, so
## make test builds them when they are not cached: a cold build took 15
## minutes on one core of 2; a cached one under a second (testenv/README.md).
.PHONY: testenv-node
testenv-node: setup
	./testenv/smoke-node.sh

lint:
	cargo fmt --all -- --check
	@# Every crate's modules import in one direction, and liken-init's
	@# ground (sys/) and top keep their places (docs/init.md, Layers);
	@# the check first proves it rejects circles on its own fixtures.
	python3 scripts/import-layers.py --self-test
	python3 scripts/import-layers.py
	cargo clippy --workspace --all-targets -- -D warnings
	@# A test filter that selects nothing must fail: every filtered cargo test
	@# goes through scripts/cargo-test-selects.sh.
	@if grep -nE '^	.*cargo test .* -- ' Makefile | grep -v 'grep -nE'; then \
	  echo "lint: run filtered tests through ./scripts/cargo-test-selects.sh, which fails when the filter selects no test"; exit 1; fi
	@# liken-api is linked by init: it must stay free of network and I/O crates.
	@if cargo tree -p liken-api -e normal --prefix none | grep -E '^(ureq|rustls|nix|rustix|tokio|crossbeam-channel) '; then \
	  echo "liken-api must not depend on the crates above (it is init's no-I/O vocabulary)"; exit 1; fi
	@# Every make target, liken verb and liken.sh/ key is documented, and
	@# every relative link in README.md and docs/ leads somewhere.
	./scripts/check-docs --self-test
	./scripts/check-docs

## unit: every crate's tests in one `cargo test --workspace` (make test
## runs the same binaries crate by crate, to time each).
unit:
	cargo test --workspace

## bench: liken-kube LIST of 5,000 Machines vs the same pages read raw
## (in-process; client-go beside them for reference) and vs kubectl
## (fresh processes) in the same run, and the RSS of a store of 10,000
## (starts its own control plane).
.PHONY: bench bench-smoke
bench: setup bench-releases bench-cluster-operator bench-machine-operator
	cargo bench -p liken-kube --bench list
	cargo bench -p liken-api --bench verify

## bench-cluster-operator: one sweep's decisions over 10,000 Machines, a
## settled fleet of 100 writing nothing over 10 sweeps (audit log), the
## stripped static binary's size and its RSS with 1,000 Machines watched
## beside kubectl's (liken-ops/benches/cluster.rs).
.PHONY: bench-cluster-operator
bench-cluster-operator:
	$(STATIC) cargo build --profile release-abort --target $(TARGET) -p liken-ops --bin liken-cluster-operator
	LIKEN_CLUSTER_OPERATOR_BINARY=$(CARGO_TARGET_DIR)/$(TARGET)/release-abort/liken-cluster-operator \
	  cargo bench -p liken-ops --bench cluster

## bench-machine-operator: the machine operator's stripped static binary
## (beside kubectl's size), its RSS on a converged machine (beside kubectl
## watching the same Machine), the CPU of one converged pass, and its
## writes counted in the audit log (starts its own control plane).
.PHONY: bench-machine-operator
bench-machine-operator:
	$(STATIC) cargo build --profile release-abort --target $(TARGET) -p liken-ops --bin liken-machine-operator
	LIKEN_MACHINE_OPERATOR_BINARY=$(CARGO_TARGET_DIR)/$(TARGET)/release-abort/liken-machine-operator \
	  cargo bench -p liken-ops --bench machine_operator

## bench-releases: liken fetch vs curl + sha256sum, and liken serve vs
## nginx under wrk, on loopback (scripts/bench/releases.sh prints ratios).
.PHONY: bench-releases
bench-releases:
	$(STATIC) cargo build --release --target $(TARGET) -p liken-cli
	./scripts/bench/releases.sh $(CARGO_TARGET_DIR)/$(TARGET)/release/liken

## bench-smoke: every benchmark once at a tiny size (part of make test):
## a few MiB, one round, each kind of QEMU boot once, so a change to an
## interface a benchmark uses fails here rather than in a `make bench`
## nobody ran. The figures it prints are not measurements. The benches
## run in the test profile, whose build `cargo test` shares.
bench-smoke:
	@# A benchmark nobody runs rots: each cargo bench, bench script and
	@# bench binary must have its LIKEN_BENCH_SMOKE=1 line below.
	@shopt -s nullglob; smoke=$$(grep '^	LIKEN_BENCH_SMOKE=1 ' Makefile); missing=; \
	for f in */benches/*.rs; do grep -q -- "-p $${f%%/*} --bench $$(basename $$f .rs)$$" <<<"$$smoke" || missing="$$missing $$f"; done; \
	for f in scripts/bench/*.sh; do grep -qF -- "./$$f " <<<"$$smoke" || missing="$$missing $$f"; done; \
	for f in qemu-tests/src/bin/liken-bench*.rs; do grep -q -- "--bin $$(basename $$f .rs)$$" <<<"$$smoke" || missing="$$missing $$f"; done; \
	[ -z "$$missing" ] || { echo "bench-smoke: not run at a tiny size:$$missing; give each a LIKEN_BENCH_SMOKE=1 line in the Makefile's bench-smoke" >&2; exit 1; }
	$(STATIC) cargo build -q --release --target $(TARGET) -p liken-cli
	LIKEN_BENCH_SMOKE=1 ./scripts/bench/releases.sh $(CARGO_TARGET_DIR)/$(TARGET)/release/liken
	LIKEN_BENCH_SMOKE=1 cargo test -q -p liken-kube --bench list
	LIKEN_BENCH_SMOKE=1 cargo test -q -p liken-api --bench verify
	LIKEN_BENCH_SMOKE=1 cargo test -q -p liken-ops --bench cluster
	LIKEN_BENCH_SMOKE=1 cargo test -q -p liken-ops --bench machine_operator
	LIKEN_BENCH_SMOKE=1 cargo run -q -p qemu-tests --bin liken-bench
	LIKEN_BENCH_SMOKE=1 cargo run -q -p qemu-tests --bin liken-bench-lease

# Fuzzing (liken-cli/fuzz): cargo-fuzz on the nightly toolchain, with
# cargo-fuzz installed once from crates.io into the cache. The corpus
# grows across runs in the cache too; seeds live in the repository.
# Sanitizer none: the fuzzed code forbids unsafe, so what fuzzing hunts is
# panics and broken invariants, with debug assertions (overflow) on.
CARGO_FUZZ_VERSION := 0.13.2
CARGO_FUZZ_ROOT := $(HOME)/.cache/liken/tools/cargo-fuzz-$(CARGO_FUZZ_VERSION)
FUZZ_CORPUS := $(HOME)/.cache/liken/fuzz-corpus
FUZZ_TARGETS := manifest_machine manifest_cluster release_yaml channel_yaml http_request tzif signature trust_root
FUZZ_SECONDS ?= 60
.PHONY: fuzz fuzz-smoke fuzz-setup

fuzz-setup:
	@rustup toolchain list | grep -q '^nightly' || { echo "fuzz: the nightly toolchain is missing; run: rustup toolchain install nightly" >&2; exit 1; }
	@[ -x $(CARGO_FUZZ_ROOT)/bin/cargo-fuzz ] || cargo install -q cargo-fuzz --version $(CARGO_FUZZ_VERSION) --locked --root $(CARGO_FUZZ_ROOT)

## fuzz: run every fuzz target for FUZZ_SECONDS (60) seconds.
fuzz: fuzz-setup
	@mkdir -p $(CARGO_TARGET_DIR); \
	export PATH="$(CARGO_FUZZ_ROOT)/bin:$$PATH" CARGO_TARGET_DIR="$(CARGO_TARGET_DIR)/fuzz"; \
	cargo +nightly fuzz build -s none --debug-assertions --fuzz-dir liken-cli/fuzz 2>$(CARGO_TARGET_DIR)/fuzz-build.log \
	  || { cat $(CARGO_TARGET_DIR)/fuzz-build.log; exit 1; }; \
	for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_CORPUS)/$$t; log=$(CARGO_TARGET_DIR)/fuzz-$$t.log; \
	  if cargo +nightly fuzz run -s none --debug-assertions --fuzz-dir liken-cli/fuzz $$t \
	      $(FUZZ_CORPUS)/$$t liken-cli/fuzz/seeds/$$t -- -max_total_time=$(FUZZ_SECONDS) >$$log 2>&1; then \
	    echo "fuzz: $$t: $$(grep -o '^Done [0-9]* runs in [0-9]* second(s)' $$log)"; \
	  else tail -40 $$log; echo "fuzz: $$t failed; the input is under liken-cli/fuzz/artifacts/$$t" >&2; exit 1; fi; \
	done

## fuzz-smoke: every fuzz target briefly (part of make test).
fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

## crds: regenerate images/manifests/crds from liken-api.
crds:
	cargo run -q -p liken-api --example write-crds -- images/manifests/crds

# The release images (images/README.md). Debian packages are downloaded
# once per version into ~/.cache/liken/images; the outputs go to
# IMAGES_OUT. Each script leaves an output alone when its inputs are
# unchanged, so a second `make images` takes seconds.
# K3S_BINARY=<path> puts that k3s binary into the system image; without
# it the image has no k3s and the build says so. LIKEN_VERSION names the
# release (else today's date and the channel's next serial).
IMAGES_OUT ?= $(CARGO_TARGET_DIR)/images
K3S_BINARY ?=
# K3S_AIRGAP_IMAGES=<archive> ... (k3s's release asset
# k3s-airgap-images-amd64.tar.zst, or any .tar/.tar.gz/.tgz/.tar.zst/
# .tzst/.tar.bz2/.tbz/.tar.lz4 or .txt list k3s imports) puts k3s's own
# images into the system image, which init hands to k3s's agent/images;
# without it k3s pulls pause, coredns and local-path from their
# registries on first start (images/README.md).
K3S_AIRGAP_IMAGES ?=
# The operators ship as one image each, liken.sh/<binary>:<LIKEN_VERSION,
# else dev> (IMAGES_OUT/<binary>.tar, images/oci-image.sh), the names
# their manifests (images/manifests/<name>.yaml) use; the system image
# carries them for k3s to preload. Each is liken-ops's static binary, built
# with the crash-only release-abort profile, and the tz database from
# Debian's tzdata that maintenance windows are judged by (--tzdata).
OPERATORS := liken-machine-operator liken-cluster-operator
OPERATOR_IMAGES := $(foreach o,$(OPERATORS),$(IMAGES_OUT)/$(o).tar)
# The upstream node's releases (upstream-images): the names of the pod
# sandbox image and the test's workload image, which both releases carry
# under these same tags. The launcher pins UPSTREAM_PAUSE as containerd's
# sandbox image (qemu-tests/src/upstream/config.rs, DEFAULT_PAUSE_IMAGE,
# which a test holds equal to this line), and the tests' Deployment names
# UPSTREAM_WORKLOAD (qemu-tests/src/real_node.rs, WORKLOAD_IMAGE).
UPSTREAM_PAUSE := liken.sh/liken-upstream-pause:1
UPSTREAM_WORKLOAD := liken.sh/liken-upstream-workload:1
.PHONY: images qemu-images

## images: kernel, boot.cpio, the squashfs system image, bootloaders and licenses, bundled into IMAGES_OUT/channel.
## It needs setup's packages and Rust's musl target, so on a fresh machine it runs setup first (a second run checks and returns).
images: setup
	$(STATIC_INIT) cargo build --profile release-init --target $(INIT_TARGET) -p liken-init
	$(STATIC) cargo build --release --target $(TARGET) -p liken-cli
	./images/build-boot.sh $(CARGO_TARGET_DIR)/$(INIT_TARGET)/release-init/liken-init $(IMAGES_OUT)
	@cmp -s $(CARGO_TARGET_DIR)/$(TARGET)/release/liken $(IMAGES_OUT)/liken || { \
	  cp $(CARGO_TARGET_DIR)/$(TARGET)/release/liken $(IMAGES_OUT)/.liken.$$$$ && mv $(IMAGES_OUT)/.liken.$$$$ $(IMAGES_OUT)/liken; }
	$(STATIC) cargo build --profile release-abort --target $(TARGET) -p liken-ops $(addprefix --bin ,$(OPERATORS))
	@for o in $(OPERATORS); do \
	  ./images/oci-image.sh --tzdata $(CARGO_TARGET_DIR)/$(TARGET)/release-abort/$$o liken.sh/$$o:$(or $(LIKEN_VERSION),dev) $(IMAGES_OUT)/$$o.tar; done
	./images/build-system.sh $(addprefix --image ,$(OPERATOR_IMAGES)) $(addprefix --airgap ,$(K3S_AIRGAP_IMAGES)) $(IMAGES_OUT)/liken.sqfs $(K3S_BINARY)
	./images/build-loaders.sh $(IMAGES_OUT)
	./images/licenses.sh $(IMAGES_OUT)/licenses.md $(K3S_BINARY)
	./images/release.sh $(IMAGES_OUT) $(IMAGES_OUT)/channel liken.sqfs

## qemu-images: what qemu-tests use: the images, the test-only stand-in service and hello PID 1, and a
## channel of two releases whose system images run the stand-in as k3s (IMAGES_OUT/channel-standin),
## each image its own (VERSION_ID standin-1 and standin-2), so slot B's bytes are not slot A's.
qemu-images: images
	$(STATIC) cargo build --release --target $(TARGET) -p qemu-tests --bin liken-hello-pid1
	$(STATIC) cargo build --profile test-tools --target $(TARGET) -p qemu-tests --bin liken-standin-k3s
	@for b in release/liken-hello-pid1 test-tools/liken-standin-k3s; do \
	  n=$$(basename $$b); cmp -s $(CARGO_TARGET_DIR)/$(TARGET)/$$b $(IMAGES_OUT)/$$n || { \
	    cp $(CARGO_TARGET_DIR)/$(TARGET)/$$b $(IMAGES_OUT)/.$$n.$$$$ && mv $(IMAGES_OUT)/.$$n.$$$$ $(IMAGES_OUT)/$$n; }; done
	LIKEN_VERSION=standin-1 ./images/build-system.sh $(IMAGES_OUT)/system-standin.squashfs $(IMAGES_OUT)/liken-standin-k3s
	LIKEN_VERSION=standin-2 ./images/build-system.sh $(IMAGES_OUT)/system-standin-2.squashfs $(IMAGES_OUT)/liken-standin-k3s
	LIKEN_VERSION= ./images/release.sh $(IMAGES_OUT) $(IMAGES_OUT)/channel-standin system-standin.squashfs system-standin-2.squashfs

## upstream-images: the upstream fleet's channel (IMAGES_OUT/channel-upstream): releases N and N+1 whose
## k3s is the upstream node launcher (liken-upstream-k3s, which says on every line it is not k3s) carrying
## the real node's programs and the control plane from `make testenv-node` and testenv/build.sh, each with
## a liken-init that knows its version, signed by the test fleets' release key (qemu-tests/upstream-images.sh).
## Their airgap images are the operators' tagged with the release's version (the tag its manifests name),
## the pod sandbox image containerd pins (UPSTREAM_PAUSE, from liken-pause) and the tests' workload
## (UPSTREAM_WORKLOAD, from liken-workload). For qemu-tests/tests/upstream_node.rs and upstream_fleet.rs.
.PHONY: upstream-images
upstream-images: qemu-images testenv-node
	$(STATIC) cargo build --profile test-tools --target $(TARGET) -p qemu-tests \
	  --bin liken-upstream-k3s --bin liken-pause --bin liken-workload
	./qemu-tests/upstream-bundle.sh $(CARGO_TARGET_DIR)/$(TARGET)/test-tools/liken-upstream-k3s \
	  "$$(./testenv/build.sh node | tail -1)" "$$(./testenv/build.sh | tail -1)" $(IMAGES_OUT)/liken-upstream-k3s
	UPSTREAM_PAUSE=$(UPSTREAM_PAUSE) UPSTREAM_WORKLOAD=$(UPSTREAM_WORKLOAD) LIKEN_INIT_TARGET=$(INIT_TARGET) $(STATIC_INIT) \
	  ./qemu-tests/upstream-images.sh $(IMAGES_OUT) $(IMAGES_OUT)/liken-upstream-k3s \
	  $(CARGO_TARGET_DIR)/$(TARGET)/test-tools/liken-pause $(CARGO_TARGET_DIR)/$(TARGET)/test-tools/liken-workload \
	  $(addprefix $(CARGO_TARGET_DIR)/$(TARGET)/release-abort/,$(OPERATORS))

## test-upstream-node: one machine whose k3s is the upstream node launcher joins the host's control
## plane; its real kubelet turns the Node Ready and init blesses the boot; a leader runs k3s server (the
## control plane in the guest, reached from the host through a forwarded port) and its own Node turns
## Ready; and what the node's programs add to a slot write under TCG (qemu-tests/tests/upstream_node.rs).
## Not part of make test yet (docs/testing.md, The upstream node).
.PHONY: test-upstream-node
test-upstream-node: upstream-images
	LIKEN_IMAGES_JUST_BUILT=1 ./scripts/cargo-test-selects.sh -p qemu-tests --test upstream_node -- --ignored --test-threads=1 --nocapture

## test-upstream-fleet: a leader and a follower, both upstream nodes, on one network segment: the API
## in the leader, the follower joining with the agent token, both Nodes Ready from real kubelets, the
## operators and a workload as containers (qemu-tests/tests/upstream_fleet.rs; docs/testing.md, A fleet
## of real nodes). The last part of make test: about 15 minutes under TCG.
.PHONY: test-upstream-fleet test-upstream-rollout
test-upstream-fleet: upstream-images
	LIKEN_IMAGES_JUST_BUILT=1 ./scripts/cargo-test-selects.sh -p qemu-tests --test upstream_fleet -- --ignored --test-threads=1 --nocapture \
	  --exact a_leader_and_a_follower_on_one_segment_run_real_nodes_and_the_operators_as_containers

## test-upstream-rollout: the same fleet, then the rollout N -> N+1 of the upstream channel: the leader's
## turn takes the API away, then the follower's; a probe on the host finds the workload answering
## throughout (same file and section). About 60 minutes under TCG, so not part of make test yet: the suite's
## 90 minutes cannot hold it beside the rest.
test-upstream-rollout: upstream-images
	LIKEN_IMAGES_JUST_BUILT=1 ./scripts/cargo-test-selects.sh -p qemu-tests --test upstream_fleet -- --ignored --test-threads=1 --nocapture \
	  --exact a_fleet_of_real_nodes_rolls_out_n_plus_1_with_the_api_in_the_leader

## e2e-images: the end-to-end tests' channel (IMAGES_OUT/channel-e2e): releases
## N, N+1 and N+2 of the stand-in system image with the operators' images, N+2
## built never to become healthy, each with an init that knows its release
## (qemu-tests/e2e-images.sh). The operators are the binaries `make images`
## built for OPERATORS, tagged per release.
.PHONY: e2e-images test-e2e
e2e-images: qemu-images
	LIKEN_INIT_TARGET=$(INIT_TARGET) $(STATIC_INIT) ./qemu-tests/e2e-images.sh $(IMAGES_OUT) $(addprefix $(CARGO_TARGET_DIR)/$(TARGET)/release-abort/,$(OPERATORS))

## test-e2e: the end-to-end fleets under QEMU (qemu-tests/tests/e2e.rs):
## machines installed from a stick, run by liken's operators against a
## control plane on this host. Part of `make test`, before the upstream fleet: the scenario
## takes about 20 minutes under TCG (docs/testing.md, End to end).
test-e2e: setup e2e-images
	LIKEN_IMAGES_JUST_BUILT=1 ./scripts/cargo-test-selects.sh -p qemu-tests --test e2e -- --ignored --test-threads=1 --nocapture

## bench-rollout: the three-machine rolling upgrade of test-e2e's scenario,
## twice: with the Cluster's spec.reboot firmware, then kexec (the
## default). Each run is timed from the watch history: per machine, grant
## to Ready on the new release and the shares spent draining, rebooting
## and waiting for health (and writing the slot, before the grant), and
## the whole rollout against the 20-minute target, which it checks. The
## second run then prints each machine's grant to Ready and its shutdown
## to the new kernel's first line by both ways, and checks that the
## firmware rollout's turns took at least 1.3x the kexec one's. About 40
## minutes. make test's test-e2e runs the kexec scenario (with one
## request-reboot by the firmware), so the benchmark cannot rot unseen.
ROLLOUT_FIGURES := $(CARGO_TARGET_DIR)/bench-rollout
.PHONY: bench-rollout
bench: bench-rollout
bench-rollout: setup e2e-images
	mkdir -p $(ROLLOUT_FIGURES)
	LIKEN_IMAGES_JUST_BUILT=1 LIKEN_ROLLOUT_TARGET=check LIKEN_ROLLOUT_REBOOT=firmware \
	  LIKEN_ROLLOUT_FIGURES=$(ROLLOUT_FIGURES)/firmware.json \
	  ./scripts/cargo-test-selects.sh -p qemu-tests --test e2e -- --ignored --nocapture \
	  --exact a_fleet_upgrades_itself_one_machine_at_a_time
	LIKEN_IMAGES_JUST_BUILT=1 LIKEN_ROLLOUT_TARGET=check LIKEN_ROLLOUT_REBOOT=kexec \
	  LIKEN_ROLLOUT_FIGURES=$(ROLLOUT_FIGURES)/kexec.json LIKEN_ROLLOUT_BASELINE=$(ROLLOUT_FIGURES)/firmware.json \
	  ./scripts/cargo-test-selects.sh -p qemu-tests --test e2e -- --ignored --nocapture \
	  --exact a_fleet_upgrades_itself_one_machine_at_a_time

## bench-init: liken-init's size, memory and boot time beside a hello-world PID 1, under QEMU.
.PHONY: bench bench-init
bench: bench-init
bench-init: qemu-images
	cargo run -q --release -p qemu-tests --bin liken-bench

## bench-lease: liken-init keeping a DHCPv4 lease under QEMU, from Debian's
## dnsmasq in a network namespace with T1 of 3 s: init's RSS (budget 200 kB
## over what it held before the first renewal) and its allocations (no
## growth) after renewals 1, 10, 50 and 100, read in the guest from
## /proc/1/status (qemu-tests/src/bin/liken-bench-lease.rs). Needs root.
.PHONY: bench-lease
bench: bench-lease
bench-lease: qemu-images
	cargo run -q --release -p qemu-tests --bin liken-bench-lease
