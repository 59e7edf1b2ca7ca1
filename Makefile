# The two commands the README promises. Both install what is missing first.
BUILD ?= build
COLL_JOBS ?= 2
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps build run example test test-coll-full bench bench-shm bench-coll bench-peers bench-verbs clean

all: build

deps:
	@bash scripts/deps.sh

$(BUILD)/build.ninja: CMakeLists.txt
	@echo "== configure ($(BUILD))"
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	@echo "== build"
	cmake --build $(BUILD) -j $(JOBS)

# The main job: `rdmx bench` on local ranks probes the providers, runs a short
# p2p and all_reduce sweep on each, prints a summary and writes results.json
# and report.html (docs/TOOLS.md).
REPORT ?= $(BUILD)/bench-report
run: build
	@echo "== run: rdmx bench on local ranks (summary below; full results and the HTML report in $(REPORT)/)"
	$(BUILD)/tools/rdmx bench --out $(REPORT)

# The example of the README: two local ranks WRITE and READ 64 MiB (examples/write_read.cpp).
example: build
	@echo "== example: 2 local ranks (examples/write_read.cpp)"
	bash scripts/run_example.sh $(BUILD)/examples/rdmx_write_read

test: build
	@echo "== test (ctest; needs root for the network-namespace cases; the verbs cases boot a soft-RoCE guest)"
	cd $(BUILD) && ctest --output-on-failure -j 2 --timeout 300

# The collectives' full correctness matrix: every size up to 64 MiB and every
# rank count on shm, tcp and two network-namespace hosts (long; not in CI).
test-coll-full: build
	@echo "== test-coll-full (RDMX_COLL_MATRIX=full: the collective correctness suite at every size)"
	cd $(BUILD) && RDMX_COLL_MATRIX=full ctest --output-on-failure -j $(COLL_JOBS) -R 'Coll/Correctness'

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

# The verbs provider against perftest (ib_write_bw, ib_write_lat) on soft-RoCE
# in the qemu guest of scripts/rxe-vm.sh; writes the table into docs/PERFORMANCE.md.
bench-verbs: build
	bash bench/run_verbs.sh $(BUILD) --update-doc

clean:
	rm -rf $(BUILD)
