# Smelt: the everyday commands. Each target installs what is missing first (scripts/install-deps).
BUILD ?= build
JOBS ?= $(shell nproc)
# make demo's deadline in minutes: the demo trains for what the install and the build leave of it
DEMO_MINUTES ?= 15
FUZZ_SECONDS ?= 60

.PHONY: all deps build test demo bench fuzz clean

all: build

deps:
	@scripts/install-deps

build: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# A failure ends with each failed test's assertion lines (scripts/test-failures), where a log's tail shows them.
test: build
	cd $(BUILD) && { ctest --output-on-failure -j$(JOBS) || { $(CURDIR)/scripts/test-failures Testing/Temporary/LastTest.log; exit 1; }; }

# The main job on the built-in default corpus (Debian's documentation, crawled into WARC files):
# installs only what the demo needs, builds only the two binaries the pipeline runs (not the
# tests) while the corpus is crawled beside the build (the crawl needs the packages, not the
# binaries), then runs the pipeline; each phase says how long it took.
demo:
	@t0=$$(date +%s); scripts/install-deps --demo || exit 1; \
	t1=$$(date +%s); echo "[demo] install: $$((t1 - t0)) s"; \
	mkdir -p $(BUILD); DEMO_CORPUS_ONLY=1 scripts/demo > $(BUILD)/demo-corpus.log 2>&1 & corpus=$$!; \
	echo "[demo] building smelt while the corpus is crawled (its log: $(BUILD)/demo-corpus.log)"; \
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null && \
	cmake --build $(BUILD) -j$(JOBS) --target smelt smelt-full || { kill $$corpus 2>/dev/null; exit 1; }; \
	t2=$$(date +%s); echo "[demo] build: $$((t2 - t1)) s"; \
	wait $$corpus; rc=$$?; cat $(BUILD)/demo-corpus.log; [ $$rc -eq 0 ] || exit 1; \
	t3=$$(date +%s); echo "[demo] corpus: done $$((t3 - t1)) s after the install ($$((t3 - t2)) s after the build)"; \
	SMELT=$(BUILD)/smelt DEMO_DEADLINE_S=$$((t0 + $(DEMO_MINUTES) * 60)) scripts/demo || exit 1; \
	t4=$$(date +%s); echo "[demo] install $$((t1 - t0)) s, build $$((t2 - t1)) s (the corpus beside it), the rest of the corpus $$((t3 - t2)) s, pipeline $$((t4 - t3)) s: $$((t4 - t0)) s in all"; \
	run=$$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["artifacts"]["run"])' "$${DEMO_DIR:-data/demo}/pipeline.json" 2>/dev/null) && \
	echo "[demo] watch the run: $(BUILD)/smelt dashboard $$run (http://127.0.0.1:8080); its report: $$run/report.html"

bench: build
	@bench/prep/run

# libFuzzer targets for the readers and the HTML extractor, built with clang + ASan.
fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release -DSMELT_FUZZ=ON -DSMELT_TESTS=OFF >/dev/null
	@cmake --build build-fuzz -j$(JOBS) --target $(notdir $(basename $(wildcard fuzz/*.cpp)))
	@for f in build-fuzz/fuzz_*; do \
	  name=$$(basename $$f); mkdir -p build-fuzz/corpus/$$name; \
	  echo "== $$name ($(FUZZ_SECONDS)s)"; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -max_len=65536 build-fuzz/corpus/$$name fuzz/seeds/$$name 2>&1 | tail -3 || exit 1; \
	done

clean:
	rm -rf $(BUILD) build-fuzz
