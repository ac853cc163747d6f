# MW -- build, test, install.  `make` builds build/mw and build/mw.so;
# `make test` runs every test and ends with "N passed, N failed, N skipped".

PREFIX   ?= /usr/local
BUILD    ?= build
LUA      ?= lua5.4
BUSTED   ?= /usr/bin/busted
PKGS     := lua5.4 sqlite3 libcrypto libuv

PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS))
PKG_LIBS   := $(shell pkg-config --libs sqlite3 libcrypto libuv) -lhttp_parser -lexpat -lpthread
LUA_LIBS   := $(shell pkg-config --libs lua5.4)

CFLAGS   ?= -O2 -g
# The project's own flags come after the caller's, so `make CFLAGS=...` tunes
# optimisation and instrumentation without losing them.
ALL_CFLAGS = $(CFLAGS) -std=c11 -Wall -Wextra -Werror -fPIC -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
            -Iinclude -Iruntime $(PKG_CFLAGS) -DMW_SCRIPTS_DIR='"$(SCRIPTS_DIR)"' -DMW_SKILLS_DIR='"$(SKILLS_DIR)"'
LDLIBS   += $(PKG_LIBS) -lm
SCRIPTS_DIR ?= $(CURDIR)/scripts
SKILLS_DIR  ?= $(CURDIR)/skills

# Three layers: storage (SQLite; no Lua, no libuv), the engine (Lua and
# libuv: folds, tenants, sources, the lifecycle, HTTP framing), the host (CLI).
CORE_SRC := runtime/buf.c runtime/errors.c runtime/chain.c runtime/json.c runtime/store.c \
            runtime/sessions.c runtime/jfield.c runtime/map.c runtime/corpus.c \
            runtime/cortex.c runtime/facts.c
LUA_SRC  := runtime/ljson.c runtime/fold.c runtime/hydrate.c runtime/lmw.c runtime/tenant.c \
            runtime/sources.c runtime/engine.c runtime/http.c
HOST_SRC := runtime/cli.c runtime/server.c runtime/main.c

OBJ      := $(BUILD)/obj
CORE_OBJ := $(CORE_SRC:runtime/%.c=$(OBJ)/%.o)
LUA_OBJ  := $(LUA_SRC:runtime/%.c=$(OBJ)/%.o)
HOST_OBJ := $(HOST_SRC:runtime/%.c=$(OBJ)/%.o)
HEADERS  := $(wildcard include/*.h runtime/*.h)

C_TESTS  := $(patsubst spec/c/%.c,$(BUILD)/test/%,$(wildcard spec/c/*_test.c))

.PHONY: all test sanitize deps install clean bench demo c-tests

all: $(BUILD)/mw $(BUILD)/mw.so

$(OBJ)/%.o: runtime/%.c $(HEADERS) | $(OBJ)
	$(CC) $(ALL_CFLAGS) -c $< -o $@

$(OBJ) $(BUILD)/test:
	mkdir -p $@

$(BUILD)/mw: $(CORE_OBJ) $(LUA_OBJ) $(HOST_OBJ)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $^ -o $@ $(LUA_LIBS) $(LDLIBS)

# The module resolves Lua's symbols from the interpreter that loads it.
$(BUILD)/mw.so: $(CORE_OBJ) $(LUA_OBJ)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) -shared $^ -o $@ $(LDLIBS)

$(BUILD)/test/%: spec/c/%.c $(CORE_OBJ) $(LUA_OBJ) | $(BUILD)/test
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $^ -o $@ $(LUA_LIBS) $(LDLIBS)

c-tests: $(C_TESTS)

# busted runs under Lua 5.4 explicitly, whatever `lua` is on this machine.
test: all c-tests
	@MW_BUILD=$(CURDIR)/$(BUILD) MW_SCRIPTS=$(CURDIR)/scripts $(LUA) $(BUSTED) \
	  --lpath='./spec/?.lua;./spec/support/?.lua' --cpath='$(BUILD)/?.so' \
	  -o spec/support/summary.lua spec

# AddressSanitizer + UBSan: a separate build tree, the same tests.  The Lua
# interpreter is not instrumented, so the runtime is preloaded for the module.
ASAN_FLAGS := -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize:
	$(MAKE) BUILD=build/asan CFLAGS="$(ASAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" all c-tests
	@ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	  MW_BUILD=$(CURDIR)/build/asan MW_SCRIPTS=$(CURDIR)/scripts $(LUA) $(BUSTED) \
	  --lpath='./spec/?.lua;./spec/support/?.lua' --cpath='build/asan/?.so' \
	  -o spec/support/summary.lua spec

# `make torture`: the reliability specs at full strength -- 200 crash rounds
# (MW_TORTURE_ROUNDS; MW_TORTURE_SEED=N replays a run), 10,000 leak cycles
# (MW_LEAK_CYCLES), the faults and the isolation matrix.
TORTURE_SPECS := spec/crash_spec.lua spec/faults_spec.lua spec/isolation_spec.lua spec/leaks_spec.lua
.PHONY: torture
torture: all
	@MW_TORTURE_ROUNDS=$${MW_TORTURE_ROUNDS:-200} MW_LEAK_CYCLES=$${MW_LEAK_CYCLES:-10000} \
	  MW_BUILD=$(CURDIR)/$(BUILD) MW_SCRIPTS=$(CURDIR)/scripts $(LUA) $(BUSTED) \
	  --lpath='./spec/?.lua;./spec/support/?.lua' --cpath='$(BUILD)/?.so' \
	  -o spec/support/summary.lua $(TORTURE_SPECS)

# libFuzzer targets under ASan + UBSan (clang, libclang-rt-14-dev); CI runs
# them briefly with FUZZ_SECONDS=10.
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) fuzz/run.sh

# valgrind over the C test programs, and over the lifecycle, error-table,
# trigger and source specs with the host itself under valgrind (an error or a
# definite leak fails the spec that started it).  Specs that time SIGKILLs
# against the host's progress are left out: valgrind is ~20x slower.
VALGRIND_SPECS := spec/lifecycle_spec.lua spec/errors_spec.lua spec/triggers_spec.lua spec/sources_spec.lua
.PHONY: valgrind
valgrind: all c-tests
	@for t in $(C_TESTS); do \
	  valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite $$t >/dev/null \
	    || { echo "valgrind: $$t"; exit 1; }; done
	@MW_VALGRIND=1 MW_BUILD=$(CURDIR)/$(BUILD) MW_SCRIPTS=$(CURDIR)/scripts $(LUA) $(BUSTED) \
	  --lpath='./spec/?.lua;./spec/support/?.lua' --cpath='$(BUILD)/?.so' \
	  -o spec/support/summary.lua $(VALGRIND_SPECS)

DEB_PKGS := liblua5.4-dev lua5.4 libsqlite3-dev lua-cjson libuv1-dev lua-busted libssl-dev \
            pkg-config libhttp-parser-dev libexpat1-dev lua-socket curl gcc make git sqlite3 strace \
            clang libclang-rt-14-dev valgrind
deps:
	@missing=""; for p in $(DEB_PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "all Debian packages present"; fi

bench: all
	$(LUA) bench/store.lua

demo: all
	@MW_SCRIPTS=$(CURDIR)/scripts $(LUA) examples/demo.lua

# An installed host finds its scripts and skills under PREFIX/share/mw: it is
# built apart with those paths.  Embedders get libmw.a and include/mw.h.
INSTALL_BUILD := build/install
install:
	$(MAKE) BUILD=$(INSTALL_BUILD) SCRIPTS_DIR=$(PREFIX)/share/mw/scripts SKILLS_DIR=$(PREFIX)/share/mw/skills all
	ar rcs $(INSTALL_BUILD)/libmw.a $(patsubst $(BUILD)/%,$(INSTALL_BUILD)/%,$(CORE_OBJ) $(LUA_OBJ))
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib \
	  $(DESTDIR)$(PREFIX)/share/mw/scripts/policies $(DESTDIR)$(PREFIX)/share/mw/skills $(DESTDIR)$(PREFIX)/lib/lua/5.4
	install -m 755 $(INSTALL_BUILD)/mw $(DESTDIR)$(PREFIX)/bin/mw
	install -m 644 $(INSTALL_BUILD)/mw.so $(DESTDIR)$(PREFIX)/lib/lua/5.4/mw.so
	install -m 644 $(INSTALL_BUILD)/libmw.a $(DESTDIR)$(PREFIX)/lib/libmw.a
	install -m 644 include/mw.h $(DESTDIR)$(PREFIX)/include/mw.h
	install -m 644 scripts/*.lua $(DESTDIR)$(PREFIX)/share/mw/scripts/
	install -m 644 scripts/policies/*.lua $(DESTDIR)$(PREFIX)/share/mw/scripts/policies/
	install -m 644 skills/*.lua $(DESTDIR)$(PREFIX)/share/mw/skills/

clean:
	rm -rf build
