# SPDX-License-Identifier: MIT
# The two commands the README promises. Both install what is missing first.
BUILD ?= build
COLL_JOBS ?= 2
COLL_ALGOS ?=
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build build-cli build-examples run example format-check test test-coll-full test-largest bench bench-shm bench-coll bench-peers bench-torch bench-verbs clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/build.ninja: CMakeLists.txt
	@echo "== configure ($(BUILD))"
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	@echo "== build"
	cmake --build $(BUILD) -j $(JOBS)

# Only what `rdmx bench` runs: the rdmx command and the library under it (bench
# starts each step as `rdmx perf ...` of itself). Not the test suites: on two
# cores those take most of a full build's time.
build-cli: deps $(BUILD)/build.ninja
	@echo "== build (the rdmx command; make test builds everything)"
	cmake --build $(BUILD) -j $(JOBS) --target rdmx_cli

EXAMPLES = rdmx_write_read rdmx_all_reduce
build-examples: deps $(BUILD)/build.ninja
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

test: format-check build
	@echo "== test (ctest; needs root for the network-namespace cases; the verbs cases boot a soft-RoCE guest)"
	cd $(BUILD) && ctest --output-on-failure -j 2 --timeout 300

# The collectives' full correctness matrix: every size up to 64 MiB and every
# rank count on shm, tcp and two network-namespace hosts (long; not in CI).
# COLL_ALGOS=hier,hier-wide runs only those algorithms (table: the table's
# choice).
test-coll-full: build
	@echo "== test-coll-full (RDMX_COLL_MATRIX=full: the collective correctness suite at every size)"
	cd $(BUILD) && RDMX_COLL_MATRIX=full RDMX_COLL_ALGOS=$(COLL_ALGOS) ctest --output-on-failure -j $(COLL_JOBS) -R 'Coll/Correctness'

# The 2 GiB (max_msg_size) WRITE and READ cases in every placement, not only Local.
test-largest: build
	@echo "== test-largest (RDMX_LARGEST_MESSAGE_PLACEMENTS=all: max_msg_size transfers in every placement)"
	cd $(BUILD) && RDMX_LARGEST_MESSAGE_PLACEMENTS=all ctest --output-on-failure -j 2 -R 'OfTheLargestMessage'

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

clean:
	rm -rf $(BUILD)
