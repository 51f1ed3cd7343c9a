# greenreplica — top-level Makefile
#
# Two kinds of targets live here:
#  - the extension's PGXS build (all, install, installcheck, clean), and
#  - the project's entry points (check, demo, deps, storage), which drive
#    the whole job on a fresh machine through the scripts in scripts/.
# PGXS defines a "check" target of its own that only prints a refusal, so
# PGXS is included only when no project entry point was asked for: the
# entry points call back into this Makefile for the PGXS steps.

PROJECT_GOALS := check check-recovery demo deps storage storage-check bench-agent-fio bench-paper bench-raid bench-compaction bench-compaction-tpcc

ifneq ($(filter $(PROJECT_GOALS),$(MAKECMDGOALS)),)

.PHONY: $(PROJECT_GOALS)

# Install the system packages everything needs (Debian 12, as root).
deps:
	bash scripts/install-deps.sh

# Build the storage agent.
storage:
	bash scripts/storage.sh build

# Lint and test the storage agent.
storage-check:
	bash scripts/storage.sh check

# Every test: Rust workspace, pg_regress and TAP suites.
check:
	bash scripts/check.sh

# PostgreSQL's own recovery TAP suite, stock and with greenreplica.
check-recovery:
	bash scripts/check-recovery.sh

# The main job end to end.
demo:
	bash scripts/demo.sh

bench-agent-fio:
	bash bench/agent-fio/run.sh

# RAID5/6 vs RAID10 in replay and replay speed (minutes, any user); RAID_ARGS=--baseline-bin ...
bench-raid:
	cd contrib-storage && PATH=$$HOME/.cargo/bin:$$PATH cargo build --release --quiet
	/usr/bin/python3 bench/raid/raid.py $(RAID_ARGS)

# The paper-scale energy grid (hours); needs what "make demo" builds.
bench-paper:
	bash scripts/demo.sh --build-only
	/usr/bin/python3 bench/energy/paper_grid.py $(PAPER_ARGS)

# Replay speed of one recorded window, stock vs tuned stock vs defer vs compact (minutes per
# profile); COMPACTION_ARGS=--window mid ...; needs what "make demo" builds.
bench-compaction:
	bash scripts/demo.sh --build-only
	/usr/bin/python3 bench/compaction/compaction.py $(COMPACTION_ARGS)

# The TPC-C-like windows of issue 14 (4 warehouses, both profiles, right after a checkpoint
# and mid-cycle), each read the volume served accounted for from the agent's trace.
TPCC_WINDOW_ARGS = --workload tpcc --warehouses 4 --profiles ultrastar-36z15,deskstar-t7k250 \
	--record 60 --prefix 30 --shared-buffers 256MB --member-size 2GiB --trace \
	--modes stock_tuned,defer,compact,compact_os,compact_os_nopf
bench-compaction-tpcc:
	bash scripts/demo.sh --build-only
	/usr/bin/python3 bench/compaction/compaction.py $(TPCC_WINDOW_ARGS) --window fresh --out compaction-tpcc-fresh
	/usr/bin/python3 bench/compaction/compaction.py $(TPCC_WINDOW_ARGS) --window mid --out compaction-tpcc-mid

else

# Prefer the PostgreSQL 15 toolchain; PG_CONFIG=... overrides.
PG_CONFIG ?= $(firstword $(wildcard /usr/lib/postgresql/15/bin/pg_config) pg_config)

MODULE_big = greenreplica
OBJS = \
	src/greenreplica.o \
	src/gr_agent.o \
	src/gr_flush.o \
	src/gr_fold.o \
	src/gr_guc.o \
	src/gr_hint.o \
	src/gr_number.o \
	src/gr_align.o \
	src/gr_pause.o \
	src/gr_plan.o \
	src/gr_prefetch.o \
	src/gr_redo.o \
	src/gr_shmem.o \
	src/gr_status.o \
	src/gr_temperature.o \
	src/gr_wake.o \
	src/gr_wake_window.o \
	src/gr_window.o \
	src/gr_worker.o
PGFILEDESC = "greenreplica - energy-efficient disaster-recovery standbys"
PG_CFLAGS = -Werror

EXTENSION = greenreplica
DATA = greenreplica--0.1.sql greenreplica--0.1--0.2.sql greenreplica--0.2--0.3.sql greenreplica--0.3--0.4.sql greenreplica--0.4--0.5.sql greenreplica--0.5--0.6.sql greenreplica--0.6--0.7.sql greenreplica--0.7--0.8.sql

REGRESS = status guc plan temperature
# The library must be preloaded, so pg_regress runs its own instance.
REGRESS_OPTS = --temp-instance=$(CURDIR)/tmp_regress \
	--temp-config=$(CURDIR)/sql/greenreplica.conf

TAP_TESTS = 1

EXTRA_CLEAN = tmp_regress

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifeq ($(PGXS),)
$(error pg_config not found: run "make deps" first, or set PG_CONFIG)
endif
include $(PGXS)

endif
