# gradsync: the two commands of the README, and the targets behind them.
#   make demo   install dependencies, build, run the main job, print the result
#   make test   install dependencies, build, check formatting, run every test but the long ones
#               and the sanitizer builds (make test-sanitize)
# Other targets: deps, build, python, benchmarks, bench, bench-peers, bench-emulated, sim-validate, sim-papers, sim-wavelet, test-long,
# test-sanitize, test-kernels, fuzz, fuzz-seeds, format, format-check, clean.

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CTEST_FLAGS ?= --output-on-failure

.PHONY: all deps deps-demo configure build python benchmarks test demo bench bench-peers bench-emulated bench-lm bench-dist-backend sim-validate sim-papers sim-wavelet test-long test-sanitize test-kernels fuzz fuzz-seeds format format-check clean

all: build

deps:
	@scripts/setup.sh

# Only the packages the demo needs (scripts/setup.sh says which).
deps-demo:
	@scripts/setup.sh --demo

CONFIGURE = cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGRADSYNC_WITH_TORCH=ON
# Everything: the tests, the Python package, the MPI transport, and the benchmarks configured
# (their programs build on demand: make benchmarks).
FULL_FLAGS = -DGRADSYNC_BUILD_TESTS=ON -DGRADSYNC_BUILD_BENCHMARKS=ON -DGRADSYNC_WITH_PYTHON=ON \
             -DGRADSYNC_WITH_MPI=ON
# The demo's: the CLI and the libraries it links, so that a first run takes minutes
# (docs/testing.md, "A first run"). make build turns the rest on in the same folder.
DEMO_FLAGS = -DGRADSYNC_BUILD_TESTS=OFF -DGRADSYNC_BUILD_BENCHMARKS=OFF -DGRADSYNC_WITH_PYTHON=OFF \
             -DGRADSYNC_WITH_MPI=OFF

# Configures $(BUILD) with everything, unless it already is (a folder the demo configured is
# reconfigured; CMAKE_FLAGS come last, so they win).
configure: deps
	@grep -qs '^GRADSYNC_BUILD_TESTS:BOOL=ON' $(BUILD)/CMakeCache.txt || \
	  $(CONFIGURE) $(FULL_FLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The Python package gradsync.torch into $(BUILD)/python (PYTHONPATH=$(BUILD)/python; docs/python.md),
# and the CLI beside it: `gradsync launch` starts Python ranks.
python: configure
	cmake --build $(BUILD) -j $(JOBS) --target gradsync_python gradsync

# The benchmark programs (build/benchmarks/: the peers' all-reduce, plain LibTorch, fused_update,
# engine_overhead); every bench target builds them first.
benchmarks: configure
	cmake --build $(BUILD) -j $(JOBS) --target benchmarks

# Every stage timed, then one summary of every suite (scripts/ci_test.sh, docs/testing.md).
CI_TEST = BUILD=$(BUILD) JOBS=$(JOBS) scripts/ci_test.sh
test: build
	@$(CI_TEST) format release fuzz

# The embedded default: 2 local workers over TCP, cnn on Fashion-MNIST, dense SSGD, 2 epochs.
# Builds the CLI alone (in a folder configured by make build too: then it reuses that).
demo: deps-demo
	@[ -f $(BUILD)/CMakeCache.txt ] || $(CONFIGURE) $(DEMO_FLAGS) $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j $(JOBS) --target gradsync
	$(BUILD)/apps/gradsync/gradsync train

bench: build benchmarks
	mkdir -p results
	$(BUILD)/apps/gradsync/gradsync bench allreduce --workers 4 --min-bytes 1M --max-bytes 64M --json results/allreduce.json
	$(BUILD)/apps/gradsync/gradsync bench allreduce --workers 4 --min-bytes 1M --max-bytes 64M --bandwidth 1gbit --iters 5 --json results/allreduce-1gbit.json
	$(BUILD)/apps/gradsync/gradsync simulate --model-profile resnet50 --gpus-per-host 8 --bandwidth 25gbit --latency 5us --schedule fusion:25 --sweep workers=8,16,32,64,128,256,512,1024,2048,4096 --json results/sim-resnet50-workers.json --plot results/sim-resnet50-workers.svg
	scripts/experiments/run_all.sh --short --build $(BUILD)

bench-peers: build benchmarks
	scripts/bench_peers.sh --build $(BUILD)

# Scheduling and delayed SGD over emulated accelerator compute, and the simulator against it
# (about 90 minutes; docs/performance.md, "Emulated accelerator compute").
bench-emulated: build benchmarks
	scripts/bench_emulated.sh --build $(BUILD)

# The language model under ssgd, localsgd and DiLoCo (about 20 minutes; docs/performance.md,
# "Language model: DiLoCo against data-parallel training").
bench-lm: build benchmarks
	scripts/bench_lm.py --build $(BUILD)

# DDP on gradsync's torch.distributed backend against DDP on gloo, and both backends' all_reduce
# (about 20 minutes; docs/performance.md, "DDP on gradsync's torch.distributed backend").
bench-dist-backend: build benchmarks
	scripts/bench_dist_backend.sh --build $(BUILD)

# The simulator: predicted vs measured step time here (about 10 minutes), and the seed papers'
# headline setups (seconds). docs/simulator.md has the results.
sim-validate: build
	scripts/validate_simulator.py --build $(BUILD)

sim-papers: build
	scripts/sim_papers.py --build $(BUILD)

# Wavelet's shapes in the simulator (about a minute): docs/performance.md, "Wavelet in the simulator".
sim-wavelet: build
	scripts/sim_wavelet.py --build $(BUILD)

# AddressSanitizer and ThreadSanitizer builds of the library and tests, without LibTorch (it is
# not instrumented, so it would only add false reports): the suites labelled asan, then those
# labelled tsan (about 7 minutes); SANITIZE_LABELS=L the suites labelled L in both (empty: every
# torch-free suite; docs/testing.md says which of those do not fit a sanitizer). Not in make
# test (its 25-minute budget): run it before landing a change to the transports, collectives,
# rendezvous, engine, servers or decoders.
test-sanitize: deps
	@$(if $(filter undefined,$(origin SANITIZE_LABELS)),,SANITIZE_LABELS='$(SANITIZE_LABELS)') \
	  $(CI_TEST) asan tsan

# The long suites make test leaves out (the rest of the convergence cases, about 15 minutes; the
# 1,000 kill-during-collective trials; the Python cases marked long): run before changing an
# algorithm, and record its figures (docs/testing.md).
test-long: build
	@$(CI_TEST) long

# The numerically sensitive suites under two forced OpenBLAS kernel families (as on other
# machines of this kind); run it before changing any numerical bound (docs/testing.md).
test-kernels: build
	@$(CI_TEST) kernels

# libFuzzer (clang) on every decoder of untrusted bytes: TCP frames, store wire, checkpoints, IDX
# files, model-profile JSON, compressed payloads (tests/fuzz, docs/testing.md "Fuzzing"); runs
# FUZZ_SECONDS per target from the committed seeds (scripts/fuzz.sh).
FUZZ_SECONDS ?= 60
FUZZERS = frame_fuzz store_wire_fuzz checkpoint_fuzz idx_fuzz profile_fuzz codec_fuzz \
          recommendation_fuzz
fuzz: deps
	cmake -S tests/fuzz -B $(BUILD)-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD)-fuzz -j $(JOBS)
	scripts/fuzz.sh $(BUILD)-fuzz $(FUZZ_SECONDS) $(FUZZERS)

# Rewrites the committed seed corpora from the writers and encoders (tests/fuzz/make_seeds.cc):
# after a change of a format or of the compression registry.
fuzz-seeds: deps
	cmake -S tests/fuzz -B $(BUILD)-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD)-fuzz -j $(JOBS) --target make_seeds
	rm -rf tests/fuzz/corpus
	$(BUILD)-fuzz/make_seeds tests/fuzz/corpus

FORMAT_FILES = $(shell git ls-files '*.cc' '*.h')
format:
	clang-format -i $(FORMAT_FILES)

format-check:
	@clang-format --dry-run -Werror $(FORMAT_FILES) && echo "format-check: all $(words $(FORMAT_FILES)) files formatted"

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-fuzz
