# SPDX-License-Identifier: MIT
# The two commands the README promises. Both install what is missing first.
BUILD ?= build
COLL_JOBS ?= 2
COLL_ALGOS ?=
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: test-asan test-tsan sanitizer-build fuzz fuzz-build chaos soak check-build check-run test-check
.PHONY: device-check device-check-prepare device-check-dry
.PHONY: all deps deps-build install build build-cli build-examples run example format-check test test-coll-full test-largest test-torch-verbs bench bench-shm bench-coll bench-peers bench-torch bench-verbs bench-scale bench-fairness clean

all: build

# deps: everything make test needs; deps-build: only what building the
# library, the rdmx command and the examples needs (make run, make example,
# make install). Each installs only what is missing (scripts/deps.sh).
DEPS_STAMP = $(BUILD)/.deps-installed
deps:
	@bash scripts/deps.sh --stamp $(DEPS_STAMP)

deps-build:
	@bash scripts/deps.sh --build --stamp $(DEPS_STAMP)

$(BUILD)/build.ninja: CMakeLists.txt
	@echo "== configure ($(BUILD))"
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)
	@rm -f $(DEPS_STAMP)

# A tree configured before scripts/deps.sh installed packages (torch after a
# make run) is configured again, so that it finds them.
define reconfigure_if_deps_installed
	@if [ -f $(DEPS_STAMP) ]; then echo "== configure $(BUILD) again: scripts/deps.sh installed packages"; \
	  cmake -S . -B $(BUILD) >/dev/null && rm -f $(DEPS_STAMP); fi
endef

build: deps $(BUILD)/build.ninja
	$(reconfigure_if_deps_installed)
	@echo "== build"
	cmake --build $(BUILD) -j $(JOBS)

# make install PREFIX=P: builds what cmake --install installs (the target
# rdmx_install_set: the library, rdmx, rdmx_store and the Python package when
# it is configured), then installs it into P (README.md, "Install").
PREFIX ?= /usr/local
install: deps-build $(BUILD)/build.ninja
	$(reconfigure_if_deps_installed)
	@echo "== build what is installed (rdmx_install_set), then install it into $(PREFIX)"
	cmake --build $(BUILD) -j $(JOBS) --target rdmx_install_set
	cmake --install $(BUILD) --prefix $(PREFIX)

# Only what `rdmx bench` runs: the rdmx command and the library under it (bench
# starts each step as `rdmx perf ...` of itself). Not the test suites: on two
# cores those take most of a full build's time.
build-cli: deps-build $(BUILD)/build.ninja
	$(reconfigure_if_deps_installed)
	@echo "== build (the rdmx command; make test builds everything)"
	cmake --build $(BUILD) -j $(JOBS) --target rdmx_cli

EXAMPLES = rdmx_write_read rdmx_all_reduce
build-examples: deps-build $(BUILD)/build.ninja
	$(reconfigure_if_deps_installed)
	@echo "== build (the rdmx command and the examples)"
	cmake --build $(BUILD) -j $(JOBS) --target rdmx_cli $(EXAMPLES)

# The main job: `rdmx bench` on local ranks probes the providers, runs a short
# p2p and all_reduce sweep on each, prints a summary and writes results.json
# and report.html (docs/TOOLS.md).
REPORT ?= $(BUILD)/bench-report
run: build-cli
	@echo "== run: rdmx bench on local ranks (summary below; full results and the HTML report in $(REPORT)/)"
	$(BUILD)/tools/rdmx bench --out $(REPORT)

# The examples of the README: two local ranks WRITE and READ 64 MiB
# (examples/write_read.cpp), then four sum a vector with all_reduce
# (examples/all_reduce.cpp), both bounded by RDMX_EXAMPLE_TIMEOUT seconds.
RDMX_EXAMPLE_TIMEOUT ?= 120
example: build-examples
	@echo "== example: 2 local ranks (examples/write_read.cpp)"
	bash scripts/run_example.sh $(BUILD)/examples/rdmx_write_read
	@echo "== example: 4 local ranks (examples/all_reduce.cpp)"
	RDMX_TIMEOUT=$${RDMX_TIMEOUT:-30} $(BUILD)/tools/rdmx run -n 4 --time-limit $(RDMX_EXAMPLE_TIMEOUT) -- \
	    $(BUILD)/examples/rdmx_all_reduce

# Every tracked C/C++ file as clang-format (.clang-format) makes it.
format-check: deps
	@echo "== format check (scripts/check-format.sh)"
	@bash scripts/check-format.sh

# A build directory that make test configures has line tables only (-g1; a
# quarter less compile time, backtraces keep their lines), and no second
# parse of the library for the thread-safety analysis, which the check build
# (below) runs as it compiles. One configured by make build stays as it is.
# On a failure the last lines are a digest of what the failed tests said
# (scripts/ctest-digest.py): CI keeps only the tail of the log.
test: CMAKE_FLAGS += -DRDMX_THREAD_SAFETY=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
test: format-check build check-build
	@echo "== test (ctest; needs root for the network-namespace cases; the verbs cases boot a soft-RoCE guest)"
	cd $(BUILD) && { ctest --output-on-failure -j 2 --timeout 300 || { python3 $(CURDIR)/scripts/ctest-digest.py .; exit 1; }; }
	@$(MAKE) --no-print-directory check-run

# What make test runs of the sanitizers and the fuzzers (docs/TESTING.md), in
# one clang++ build: ASan+UBSan and libFuzzer's coverage on the library, the
# fuzz targets and the test areas in CHECK_AREAS; clang checks the locks
# (thread-safety analysis) as it compiles. check-run gives each fuzz target
# FUZZ_SMOKE_SECONDS from the committed corpus, two at a time, then runs the
# CHECK_LABELS areas' tests in the Local placement on host memory under the
# sanitizers (the network-namespace, GPU and 2 GiB cases are the main
# build's). make test-asan runs the larger share.
CHECK_BUILD ?= build-check
# Any ASan or UBSan report stops the process and fails its test.
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:halt_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
CHECK_AREAS ?= rdmx_conformance_tests rdmx_bootstrap_tests rdmx_core_tests rdmx_tcp_tests rdmx_shm_tests \
    rdmx_membership_tests
CHECK_LABELS ?= ^(conformance|bootstrap|core|tcp|shm|membership|thread_safety)$$
# DescriptorLimit: UBSan reads a vtable only after proving it readable
# through a pipe, so in a process out of descriptors it reports a valid
# object as having an "invalid vptr"; the main build runs those cases.
CHECK_EXCLUDE ?= NetNs|Cuda|SimulatedGpu|OfTheLargestMessage|DescriptorLimit
FUZZ_SMOKE_SECONDS ?= 10
CHECK_CMAKE = -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" -DRDMX_SANITIZE=address,undefined \
    -DRDMX_FUZZ=ON -DRDMX_BUILD_BENCH=OFF -DRDMX_BUILD_PYTHON=OFF -DRDMX_CUDA_KERNELS=OFF
check-build: deps
	@echo "== configure and build $(CHECK_BUILD) (clang++, ASan+UBSan, libFuzzer, thread-safety analysis)"
	cmake -S . -B $(CHECK_BUILD) $(CHECK_CMAKE) >/dev/null
	cmake --build $(CHECK_BUILD) -j $(JOBS) --target fuzz_targets $(CHECK_AREAS)

check-run:
	@echo "== fuzz smoke: $(FUZZ_TARGETS), $(FUZZ_SMOKE_SECONDS) s each (ASan+UBSan)"
	FUZZ_JOBS=2 bash scripts/fuzz.sh $(CHECK_BUILD) $(FUZZ_SMOKE_SECONDS) $(FUZZ_TARGETS)
	@echo "== sanitizer share: ctest -L '$(CHECK_LABELS)' -E '$(CHECK_EXCLUDE)' under ASan+UBSan"
	cd $(CHECK_BUILD) && { $(ASAN_ENV) ctest --output-on-failure -j 2 --timeout 600 -L '$(CHECK_LABELS)' -E '$(CHECK_EXCLUDE)' || \
	    { python3 $(CURDIR)/scripts/ctest-digest.py .; exit 1; }; }

test-check: check-build
	@$(MAKE) --no-print-directory check-run

# The conformance suite, the collectives' default matrix and the bootstrap
# tests under AddressSanitizer+UndefinedBehaviorSanitizer, or ThreadSanitizer
# (docs/TESTING.md). Any report fails its test. SAN_TESTS picks the cases
# (a ctest -R expression); the default is all three areas.
SAN_AREAS ?= rdmx_conformance_tests rdmx_coll_tests rdmx_bootstrap_tests rdmx_core_tests rdmx_tcp_tests rdmx_shm_tests \
    rdmx_membership_tests
SAN_TESTS ?= .
# Only the built areas' cases (a test area's label is its folder): the rest
# of the tree's tests (tools, the guest, the bed, install) need the main build.
SAN_LABELS ?= ^(conformance|coll|bootstrap|core|tcp|shm|membership)$$
SAN_EXCLUDE ?= OfTheLargestMessage
SAN_JOBS ?= 2
SAN_CMAKE = -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRDMX_BUILD_PYTHON=OFF -DRDMX_BUILD_BENCH=OFF
sanitizer-build: deps
	@echo "== configure and build $(SAN_BUILD) (-fsanitize=$(SAN)): $(SAN_AREAS)"
	cmake -S . -B $(SAN_BUILD) $(SAN_CMAKE) -DRDMX_SANITIZE=$(SAN) >/dev/null
	cmake --build $(SAN_BUILD) -j $(JOBS) --target $(SAN_AREAS)

test-asan:
	@$(MAKE) --no-print-directory sanitizer-build SAN=address,undefined SAN_BUILD=build-asan
	@echo "== test-asan (ctest -R '$(SAN_TESTS)' -E '$(SAN_EXCLUDE)' under ASan+UBSan)"
	cd build-asan && $(ASAN_ENV) ctest --output-on-failure -j $(SAN_JOBS) --timeout 600 -L '$(SAN_LABELS)' -R '$(SAN_TESTS)' -E '$(SAN_EXCLUDE)'

# die_after_fork=0: tests fork ranks from a process whose threads run (a
# provider's engine, the unmap watch), and a forked rank starts its own, as
# the library does after fork; TSan otherwise refuses any thread there.
test-tsan:
	@$(MAKE) --no-print-directory sanitizer-build SAN=thread SAN_BUILD=build-tsan
	@echo "== test-tsan (ctest -R '$(SAN_TESTS)' -E '$(SAN_EXCLUDE)' under ThreadSanitizer)"
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:die_after_fork=0 \
	    ctest --output-on-failure -j $(SAN_JOBS) --timeout 600 -L '$(SAN_LABELS)' -R '$(SAN_TESTS)' -E '$(SAN_EXCLUDE)'

# libFuzzer over every decoder of outside bytes (fuzz/, docs/TESTING.md),
# built with clang++ and ASan+UBSan in the check build; each target runs
# FUZZ_SECONDS from the committed corpus, FUZZ_JOBS at a time.
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?= addresses coll_header launcher_env store_client store_server tcp_frames shm_hello
fuzz-build: deps
	@echo "== configure and build $(CHECK_BUILD)'s fuzz targets (clang++, libFuzzer, ASan+UBSan)"
	cmake -S . -B $(CHECK_BUILD) $(CHECK_CMAKE) >/dev/null
	cmake --build $(CHECK_BUILD) -j $(JOBS) --target fuzz_targets

fuzz: fuzz-build
	@echo "== fuzz: $(FUZZ_TARGETS), $(FUZZ_SECONDS) s each"
	FUZZ_JOBS=$(FUZZ_JOBS) bash scripts/fuzz.sh $(CHECK_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# Fault campaigns (scripts/chaos.py, docs/TESTING.md): CHAOS_RUNS runs of
# each scenario (a rank killed, a rank stopped, the store server killed, a
# bed host cut off), every survivor's error checked and the job's leftovers
# looked for; then the recovery scenarios (recover-*): the survivors shrink,
# go on and grow back. The soak: 8 ranks of random collectives checked bit-exactly
# for SOAK_MINUTES, resident memory and descriptors sampled each minute.
CHAOS_RUNS ?= 100
CHAOS_SCENARIOS ?= kill:shm,kill:tcp,stop:shm,stop:tcp,store:bed,partition:bed,$(CHAOS_RECOVERY)
CHAOS_RECOVERY = recover-kill:shm,recover-kill:tcp,recover-kill:bed,recover-kill2:shm,recover-kill2:tcp
CHAOS_RECOVERY := $(CHAOS_RECOVERY),recover-kill2:bed,recover-agree:shm,recover-agree:tcp,recover-agree:bed
CHAOS_RECOVERY := $(CHAOS_RECOVERY),recover-stop:shm,recover-stop:tcp,recover-stop:bed,recover-cut:bed
SOAK_MINUTES ?= 60
chaos: build
	@echo "== chaos: $(CHAOS_RUNS) runs of $(CHAOS_SCENARIOS) (table below; JSON in $(BUILD)/chaos.json)"
	python3 scripts/chaos.py campaign --build $(BUILD) --runs $(CHAOS_RUNS) --scenarios $(CHAOS_SCENARIOS) \
	    --out $(BUILD)/chaos.json

soak: build
	@echo "== soak: $(SOAK_MINUTES) min of random collectives on 8 ranks (JSON in $(BUILD)/soak.json)"
	python3 scripts/chaos.py soak --build $(BUILD) --minutes $(SOAK_MINUTES) --out $(BUILD)/soak.json

# The collectives' full correctness matrix: every size up to 64 MiB and every
# rank count on shm, tcp and two network-namespace hosts (long; not in CI).
# COLL_ALGOS=hier,hier-wide runs only those algorithms (table: the table's
# choice).
test-coll-full: build
	@echo "== test-coll-full (RDMX_COLL_MATRIX=full: the collective correctness suite at every size)"
	cd $(BUILD) && RDMX_COLL_MATRIX=full RDMX_COLL_ALGOS=$(COLL_ALGOS) ctest --output-on-failure -j $(COLL_JOBS) -R 'Coll/Correctness'

# The 2 GiB (max_msg_size) WRITE and READ cases in every placement, not only
# Local, and on verbs in the soft-RoCE guest (about 2 minutes there).
test-largest: build
	@echo "== test-largest (RDMX_LARGEST_MESSAGE_PLACEMENTS=all: max_msg_size transfers in every placement)"
	cd $(BUILD) && RDMX_LARGEST_MESSAGE_PLACEMENTS=all ctest --output-on-failure -j 2 -R 'OfTheLargestMessage'
	@echo "== test-largest on verbs (scripts/verbs-guest-tests.sh $(BUILD) largest)"
	bash scripts/verbs-guest-tests.sh $(BUILD) largest

# The torch recovery (a DDP job loses a rank, goes on, grows back) over verbs
# in the soft-RoCE guest, the victim killed and stopped: about 8 minutes
# (make test runs the killed case there).
test-torch-verbs: build
	@echo "== test-torch-verbs (scripts/verbs-guest-tests.sh $(BUILD) torch)"
	RXE_VM_TIMEOUT=1400 bash scripts/verbs-guest-tests.sh $(BUILD) torch

bench: build
	@bash scripts/deps.sh --bench
	bash bench/run_tcp.sh $(BUILD)

# The shm provider against UCX (ucx_perftest) and Open MPI (vader), 2 local ranks.
bench-shm: build
	@bash scripts/deps.sh --bench
	bash bench/run_shm.sh $(BUILD)

# Collectives (all_reduce, all_gather, broadcast) against Open MPI (vader, tcp) and Gloo, 2 and 4 local ranks.
bench-coll: build
	@bash scripts/deps.sh --bench
	bash bench/run_coll.sh $(BUILD)

# rdmx beside every peer in one run (p2p shm and tcp, all_reduce), a table with
# ratios printed and written into docs/PERFORMANCE.md (~2-3 minutes; PEERS_FLAGS=--quick: ~1).
bench-peers: build
	bash bench/peers/run.sh $(BUILD) $(PEERS_FLAGS)

# One communicator at growing rank counts (SCALE_NP, default "8 16 32" local
# ranks): creation time, connections, store requests and memory per rank, a
# 4 B and a 64 MiB all_reduce; the model extrapolated to 16,384 ranks and the
# targets judged (bench/scale/run.sh; ~2 minutes here).
SCALE_NP ?= 8 16 32
bench-scale: build
	bash bench/scale/run.sh $(BUILD) --np "$(SCALE_NP)" --out $(BUILD)/rdmx-scale.jsonl

# Two ranks' all_gather (rdmx shm at several RDMX_SPIN_US, Open MPI vader)
# idle and while another process takes a core in bursts: how much slower each
# gets and how much CPU the burner keeps (bench/fairness/run.sh; ~5 minutes).
bench-fairness: build
	@bash scripts/deps.sh --bench
	bash bench/fairness/run.sh $(BUILD)

# The torch.distributed backend "rdmx" beside Gloo and `rdmx perf coll` (collectives
# from Python on 1, 2 and 4 ranks; DDP steps of ResNet-18 and an MLP), tables written
# into docs/PERFORMANCE.md (~15 minutes; TORCH_FLAGS=--quick: ~3, not a measurement).
bench-torch: build
	@bash scripts/deps.sh --bench
	bash bench/torch/run.sh $(BUILD) --update-doc $(TORCH_FLAGS)

# The verbs provider against perftest (ib_write_bw, ib_write_lat) on soft-RoCE
# in the qemu guest of scripts/rxe-vm.sh; writes the table into docs/PERFORMANCE.md.
bench-verbs: build
	bash bench/run_verbs.sh $(BUILD) --update-doc

# A lent GPU machine (docs/GPU.md, "On a lent GPU machine"): make
# device-check fetches what the device lacks to build rdmx into
# build-device/ (device-check-prepare), runs the device's stages here on the
# simulated CUDA driver against $(BUILD) (device-check-dry, also in make
# test), and prints the one `run` call that does it all on the GPU.
DEVICE_CHECK_TARGETS = rdmx_cli rdmx_cuda_tests rdmx_conformance_tests rdmx_coll_tests rdmx_reduce_tests \
    rdmx_python_core rdmx_python_torch
device-check: device-check-prepare device-check-dry
	@bash scripts/device_check.sh --print-call

device-check-prepare:
	@bash scripts/device_check.sh --prepare

device-check-dry: deps $(BUILD)/build.ninja
	$(reconfigure_if_deps_installed)
	@echo "== build what the dry run uses: $(DEVICE_CHECK_TARGETS)"
	cmake --build $(BUILD) -j $(JOBS) --target $(DEVICE_CHECK_TARGETS)
	bash scripts/device_check.sh --dry --build $(BUILD)

clean:
	rm -rf $(BUILD)
