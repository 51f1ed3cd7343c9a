# Shared helpers for the project's entry-point scripts (sourced, not run).

# PostgreSQL 15 as packaged by Debian.
PG_BINDIR=/usr/lib/postgresql/15/bin
PG_CONFIG=$PG_BINDIR/pg_config

# PostgreSQL refuses to run as root: tests and the demo run as this user.
GR_TEST_USER=${GR_TEST_USER:-grtest}

# rustup installs cargo for root here; a login shell is not guaranteed.
export PATH="${HOME:-/root}/.cargo/bin:/root/.cargo/bin:$PATH"

say() {
	printf '\n==> %s\n' "$*"
}

die() {
	printf 'error: %s\n' "$*" >&2
	exit 1
}

require_root() {
	[ "$(id -u)" -eq 0 ] || die "$1 must run as root (it installs packages and creates the test user)"
}

# Create the unprivileged user that runs PostgreSQL, once.
ensure_test_user() {
	if ! id -u "$GR_TEST_USER" >/dev/null 2>&1; then
		useradd --system --create-home --shell /bin/bash "$GR_TEST_USER"
	fi
}

# Copy the source tree (without build products) into a fresh directory
# owned by the test user; print its path.
stage_tree_for_test_user() {
	local dest=$1
	rm -rf "$dest"
	mkdir -p "$dest"
	rsync -a --exclude .git --exclude contrib-storage/target \
		--exclude tmp_check --exclude tmp_regress --exclude results \
		--exclude log ./ "$dest/"
	chown -R "$GR_TEST_USER:" "$dest"
}

# Run a command as the test user, keeping PATH.
as_test_user() {
	runuser -u "$GR_TEST_USER" -- env PATH="$PG_BINDIR:$PATH" "$@"
}
