#!/usr/bin/env bash
# Install the Debian packages greenreplica needs to build, test and demo.
# Idempotent: a second run on the same machine installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

require_root "make deps"

packages=(
	# the extension and its tests
	postgresql-15 postgresql-server-dev-15 postgresql-contrib libipc-run-perl
	build-essential rsync util-linux
	# benchmarks and plots
	python3 python3-matplotlib
)
# the storage agent's own list
while read -r pkg; do
	case "$pkg" in '' | '#'*) continue ;; esac
	packages+=("$pkg")
done < contrib-storage/apt-packages.txt

missing=()
for pkg in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$pkg")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	say "system packages: all ${#packages[@]} present"
else
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

command -v cargo >/dev/null || die "cargo not found: the Rust toolchain (rustup) is expected in \$HOME/.cargo/bin"
