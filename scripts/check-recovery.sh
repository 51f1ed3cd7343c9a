#!/usr/bin/env bash
# make check-recovery: PostgreSQL 15's own recovery TAP suite (src/test/recovery)
# against the installed server, once per configuration:
#   stock    no greenreplica (the reference)
#   off      greenreplica preloaded on every node, replaying continuously
#   compact  greenreplica batching on every standby (short RTO and staleness bound)
# As root on a fresh Debian 12 machine: installs the packages and the extension,
# fetches the test sources from Debian's source package of postgresql-15 (cached
# under $GR_RECOVERY_CACHE, so a second run fetches nothing), runs every test as
# the unprivileged test user, prints one line per test and configuration and a
# summary, writes $GR_RECOVERY_RESULT, and fails if a test that passes with
# greenreplica off fails with batching on without being listed in
# scripts/recovery-incompatible.txt (or one that passes stock fails with it off).
#
# Environment:
#   GR_RECOVERY_CONFIGS   configurations to run, in order (default "stock off compact")
#   GR_RECOVERY_TESTS     test names to run, e.g. "001_stream_rep 005_replay_delay"
#                         (default: every t/*.pl)
#   GR_RECOVERY_TIMEOUT   PG_TEST_TIMEOUT_DEFAULT for the tests, seconds (default 60;
#                         PostgreSQL's own default is 180)
#   GR_RECOVERY_CACHE     where the source package is kept (default /var/cache/greenreplica)
#   GR_RECOVERY_RESULT    the JSON written (default bench/results/recovery-suite.json)
#   GR_RECOVERY_NO_INSTALL=1  use the extension already installed (no make install)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_root "make check-recovery"

configs=${GR_RECOVERY_CONFIGS:-stock off compact}
test_timeout=${GR_RECOVERY_TIMEOUT:-60}
cache=${GR_RECOVERY_CACHE:-/var/cache/greenreplica}
result_json=${GR_RECOVERY_RESULT:-bench/results/recovery-suite.json}
incompatible_list=scripts/recovery-incompatible.txt
pgxs_dir=$(dirname "$(dirname "$(dirname "$($PG_CONFIG --pgxs)")")")
pg_regress_bin=$pgxs_dir/src/test/regress/pg_regress
tap_perl_dir=$pgxs_dir/src/test/perl

for c in $configs; do
	case $c in stock | off | compact) ;; *) die "unknown configuration '$c' (stock, off, compact)" ;; esac
done
case $test_timeout in '' | *[!0-9]*) die "GR_RECOVERY_TIMEOUT must be a number of seconds" ;; esac
# A test waits at most test_timeout per step; a test killed after this long
# is reported as a hang instead of holding the run up.
# (A statement that waits for a standby without a timeout, e.g. a synchronous
# commit, is bounded only by this.)
test_wall_limit=$((test_timeout * 5 > 300 ? test_timeout * 5 : 300))

bash scripts/install-deps.sh
ensure_test_user

# ---------------------------------------------------------------------------
# The test sources: Debian's source package of postgresql-15, the installed
# server's version if the mirror still serves it, else the newest 15.x it has.
# apt runs with a private state under the cache (deb-src entries derived from
# the machine's configured Debian mirrors), so the system's apt set-up is
# left as it is.

server_version=$(dpkg-query -W -f='${Version}' postgresql-15)
src_root=$cache/postgresql-15-src
choice_file=$src_root/for-$server_version
apt_state=$cache/apt
apt_opts=(
	-o "Dir::Etc::SourceList=/dev/null"
	-o "Dir::Etc::SourceParts=$apt_state/sources.list.d"
	-o "Dir::State::Lists=$apt_state/lists"
	-o "Dir::Cache=$apt_state/cache"
	-o "APT::Sandbox::User=root"
)

write_deb_src_entries() {
	# indextargets lists what apt is configured with, whatever the file format.
	local entries
	entries=$(apt-get indextargets --format '$(ORIGIN)|$(REPO_URI)|$(RELEASE)|$(COMPONENT)' \
		'Created-By: Packages' | sort -u | awk -F'|' '$1 == "Debian" && $4 == "main"')
	[ -n "$entries" ] || die "no Debian mirror in the apt configuration to fetch postgresql-15's source from"
	mkdir -p "$apt_state/sources.list.d" "$apt_state/lists/partial" "$apt_state/cache"
	{
		while IFS='|' read -r _ uri release component; do
			printf 'Types: deb-src\nURIs: %s\nSuites: %s\nComponents: %s\nSigned-By: %s\n\n' \
				"$uri" "$release" "$component" /usr/share/keyrings/debian-archive-keyring.gpg
		done <<<"$entries"
	} >"$apt_state/sources.list.d/debian-src.sources"
}

fetch_test_sources() {
	say "PostgreSQL test sources for the installed server $server_version"
	write_deb_src_entries
	apt-get -q "${apt_opts[@]}" update >/dev/null
	local versions version dl
	# Newest first, the installed version at the top when the mirror lists it.
	versions=$(apt-cache "${apt_opts[@]}" showsrc postgresql-15 | awk '/^Version:/ {print $2}' |
		sort -u | sort -r -V)
	versions=$( (grep -Fx "$server_version" <<<"$versions" || true; grep -Fvx "$server_version" <<<"$versions" || true) | grep .)
	[ -n "$versions" ] || die "the Debian mirror lists no source package postgresql-15"
	for version in $versions; do
		dl=$src_root/download-$version
		rm -rf "$dl"
		mkdir -p "$dl"
		if (cd "$dl" && apt-get -q "${apt_opts[@]}" source --download-only "postgresql-15=$version" >"$dl.log" 2>&1); then
			say "extracting postgresql-15 $version"
			rm -rf "$src_root/$version"
			# apt checked the files against the signed Sources index; dpkg-source's own
			# check of the .dsc signature needs debian-keyring and only warns without it.
			(cd "$dl" && dpkg-source -q -x ./*.dsc "$src_root/$version" >/dev/null)
			# dpkg-source leaves a copy of the upstream tarball beside the tree
			rm -f "$src_root"/postgresql-15_*.orig.tar.*
			rm -rf "$dl" "$dl.log"
			echo "$version" >"$choice_file"
			if [ "$version" != "$server_version" ]; then
				echo "note: the mirror no longer serves the source of $server_version; using $version's tests" \
					"with the installed server's test modules ($tap_perl_dir)"
			fi
			return 0
		fi
		echo "note: source of postgresql-15 $version not downloadable: $(grep -m1 '^E:' "$dl.log" || true)"
		rm -rf "$dl" "$dl.log"
	done
	die "could not download any source package of postgresql-15"
}

mkdir -p "$src_root"
if [ ! -s "$choice_file" ] || [ ! -d "$src_root/$(cat "$choice_file")/src/test/recovery/t" ]; then
	fetch_test_sources
else
	say "PostgreSQL test sources: cached in $src_root (nothing fetched)"
fi
source_version=$(cat "$choice_file")
pg_src=$src_root/$source_version
echo "server $server_version, recovery suite from source package $source_version"

# regress.so (017_shm, 027_stream_regress) is a test library the Debian
# packages do not install: build it with PGXS, once per source version.
regress_lib_dir=$src_root/regress-lib-$source_version
regress_build_log=$src_root/regress-lib-$source_version.log
if [ ! -f "$regress_lib_dir/regress.so" ] && [ ! -f "$regress_build_log" ]; then
	say "building the regression test library regress.so with PGXS"
	build=$(mktemp -d)
	cp "$pg_src/src/test/regress/regress.c" "$build/"
	printf 'MODULES = regress\nPGXS := $(shell %s --pgxs)\ninclude $(PGXS)\n' "$PG_CONFIG" >"$build/Makefile"
	if make -s -C "$build" PG_CONFIG="$PG_CONFIG" >"$regress_build_log" 2>&1; then
		mkdir -p "$regress_lib_dir"
		cp "$build/regress.so" "$regress_lib_dir/"
		# the regression suite loads these two from the same directory
		for lib in autoinc refint; do
			[ -f "$($PG_CONFIG --pkglibdir)/$lib.so" ] && ln -sf "$($PG_CONFIG --pkglibdir)/$lib.so" "$regress_lib_dir/"
		done
		rm -f "$regress_build_log"
	else
		echo "note: regress.so did not build (see $regress_build_log)"
	fi
	rm -rf "$build"
fi

# Why a test cannot run on this machine, or nothing.
missing_prerequisite() {
	case $1 in
	017_shm | 027_stream_regress)
		[ -f "$regress_lib_dir/regress.so" ] ||
			echo "needs regress.so from src/test/regress, which did not build here ($regress_build_log)"
		;;
	esac
	case $1 in
	027_stream_regress)
		for lib in autoinc refint; do
			[ -e "$regress_lib_dir/$lib.so" ] || echo "needs $lib.so (contrib/spi), not installed"
		done
		;;
	esac
	case $1 in
	006_logical_decoding | 010_logical_decoding_timelines | 035_standby_logical_decoding)
		[ -f "$($PG_CONFIG --pkglibdir)/test_decoding.so" ] || echo "needs contrib/test_decoding, not installed"
		;;
	esac
}

# ---------------------------------------------------------------------------
# The extension, installed as scripts/check.sh installs it.
if [ "${GR_RECOVERY_NO_INSTALL:-0}" != 1 ]; then
	say "extension: build and install"
	make -s PG_CONFIG="$PG_CONFIG" clean
	make -s PG_CONFIG="$PG_CONFIG"
	make -s PG_CONFIG="$PG_CONFIG" install
fi
[ -f "$($PG_CONFIG --pkglibdir)/greenreplica.so" ] || die "greenreplica.so is not installed"

# ---------------------------------------------------------------------------
# A staged copy of the suite owned by the test user; the tests run from its
# src/test/recovery (027 finds ../regress there).
stage=$(mktemp -d /tmp/greenreplica-recovery.XXXXXX)
chmod 755 "$stage"
mkdir -p "$stage/pg/src/test" "$stage/conf" "$stage/runs"
cp -a "$pg_src/src/test/recovery" "$pg_src/src/test/regress" "$stage/pg/src/test/"
chown -R "$GR_TEST_USER:" "$stage"
suite_dir=$stage/pg/src/test/recovery
results_tsv=$stage/results.tsv
: >"$results_tsv"

# TEMP_CONFIG: appended to every node's postgresql.conf by PostgreSQL::Test::Cluster.
write_temp_config() {
	case $1 in
	stock) : ;;
	off)
		cat <<-'EOF'
			shared_preload_libraries = 'greenreplica'
			greenreplica.mode = off
		EOF
		;;
	compact)
		# A short RTO and staleness bound so that batches really happen within a
		# test's lifetime; tests that wait for replay must still finish.
		cat <<-'EOF'
			shared_preload_libraries = 'greenreplica'
			greenreplica.mode = compact
			greenreplica.rto = 10s
			greenreplica.max_apply_delay = 2s
		EOF
		;;
	esac
}

# Stop the servers a killed test left behind (only those under its own directory).
stop_leftover_servers() {
	local pidfile
	while IFS= read -r pidfile; do
		as_test_user pg_ctl stop -m immediate -D "$(dirname "$pidfile")" >/dev/null 2>&1 || true
	done < <(find "$1" -name postmaster.pid 2>/dev/null)
}

# Why a failed test failed, in one line, from its TAP output: the first
# failure message, with the line after it when it ends in a colon (the query
# a poll timed out on).
failure_reason() {
	local reason
	reason=$(awk '
		found { sub(/^#[ \t]*/, ""); if ($0 != "") { print prev " " $0; exit } ; next }
		/timed out|died|Bail out|Failed test|error running SQL/ {
			line = $0; sub(/^#[ \t]*/, "", line)
			if (line ~ /:$/) { prev = line; found = 1; next }
			print line; exit
		}' "$1" | cut -c1-200)
	[ -n "$reason" ] || reason=$(grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-200)
	# how far it got: "Failed 1/8 subtests", or the test number it died after
	local progress
	progress=$(grep -m1 -o -E 'Failed [0-9]+/[0-9]+ subtests|exited with [0-9]+ just after [0-9]+|No subtests run' "$1" || true)
	printf '%s' "${progress:+$progress: }$reason"
}

run_test() {
	local config=$1 name=$2 conf=$3 dir out start secs rc status reason
	dir=$stage/runs/$config/$name
	out=$dir.out
	mkdir -p "$dir"
	chown "$GR_TEST_USER:" "$dir"
	start=$(date +%s%N)
	rc=0
	(
		cd "$suite_dir"
		timeout -k 30 "$test_wall_limit" runuser -u "$GR_TEST_USER" -- env \
			PATH="$PG_BINDIR:$PATH" TESTDIR="$dir" top_builddir="$dir" \
			PG_REGRESS="$pg_regress_bin" REGRESS_SHLIB="$regress_lib_dir/regress.so" \
			PG_TEST_TIMEOUT_DEFAULT="$test_timeout" ${conf:+TEMP_CONFIG="$conf"} \
			prove -I "$tap_perl_dir" -I . "t/$name.pl"
	) >"$out" 2>&1 || rc=$?
	secs=$((($(date +%s%N) - start) / 1000000))
	secs=$((secs / 1000)).$(((secs % 1000) / 100))
	stop_leftover_servers "$dir"
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
		status=fail
		# a hung test prints nothing useful: name its last step instead
		reason="hung, killed after ${test_wall_limit} s; last step: $(grep -h '^### ' "$dir"/tmp_check/log/regress_log_* 2>/dev/null | tail -n 1 | cut -c5-120)"
	elif [ $rc -ne 0 ]; then
		status=fail
		reason=$(failure_reason "$out")
	elif reason=$(grep -m1 -o 'skipped: .*' "$out"); then
		status=skipped
		reason=${reason#skipped: }
	else
		status=pass
		reason=
	fi
	printf '%s\t%s\t%s\t%.1f\t%s\n' "$config" "$name" "$status" "$secs" "$reason" >>"$results_tsv"
	printf '%-8s %-34s %-8s %6.1f s  %s\n' "$config" "$name" "$status" "$secs" "$reason"
}

# An interrupted run leaves no server behind.
trap 'stop_leftover_servers "$stage/runs"' EXIT

tests=${GR_RECOVERY_TESTS:-$(cd "$suite_dir/t" && ls -- *.pl | sed 's/\.pl$//')}
for name in $tests; do
	[ -f "$suite_dir/t/$name.pl" ] || die "no test $name in the recovery suite of $source_version"
done

for config in $configs; do
	conf=
	if [ "$config" != stock ]; then
		conf=$stage/conf/$config.conf
		write_temp_config "$config" >"$conf"
		chmod 644 "$conf"
	fi
	say "recovery suite, configuration '$config' (PG_TEST_TIMEOUT_DEFAULT=$test_timeout)"
	[ -z "$conf" ] || sed 's/^/    /' "$conf"
	config_start=$(date +%s)
	for name in $tests; do
		reason=$(missing_prerequisite "$name" | head -n 1)
		if [ -n "$reason" ]; then
			printf '%s\t%s\tnot-runnable\t0\t%s\n' "$config" "$name" "$reason" >>"$results_tsv"
			printf '%-8s %-34s %-8s %6s    %s\n' "$config" "$name" "n/a" "" "not runnable here: $reason"
			continue
		fi
		run_test "$config" "$name" "$conf"
	done
	printf '%s\t%s\n' "$config" "$(($(date +%s) - config_start))" >>"$stage/durations.tsv"
done

say "summary"
status=0
python3 scripts/recovery-suite-report.py \
	--results "$results_tsv" --durations "$stage/durations.tsv" \
	--incompatible "$incompatible_list" --json "$result_json" \
	--server-version "$server_version" --source-version "$source_version" \
	--timeout "$test_timeout" --temp-configs "$stage/conf" --logs "$stage/runs" || status=$?

trap - EXIT
if [ $status -eq 0 ]; then
	rm -rf "$stage"
	say "make check-recovery: passed (result in $result_json)"
else
	say "make check-recovery: FAILED (result in $result_json; logs kept in $stage/runs)"
fi
exit $status
