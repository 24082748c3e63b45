# bench/lib.sh: what every bench script shares (sourced, not run).
#
#   . bench/lib.sh
#   bench_require_root NAME WHY     # exits 2 unless root, saying why root
#   bench_dirs NAME                 # sets OUT (kept if given, else a temporary
#                                   # directory) and BIN (temporary, for binaries)
#   bench_dirs_remove               # removes BIN, and OUT unless it was given
#   bench_install CMD...            # apt-get installs the commands missing
#                                   # (package named as the command), unless
#                                   # BENCH_NO_INSTALL is set
#   bench_netns_down NS...          # kills what runs in the namespaces, deletes them
#   ... | bench_median              # the median of the numbers read, "-" if none
#   bench_fmt VALUE [FORMAT]        # printf FORMAT (%.0f), "-" for "" or "-"
#
# bench/netns-pair.sh (two namespaces joined by a veth pair) sources it.

bench_require_root() {
	if [[ $(id -u) != 0 ]]; then
		echo "$1: must run as root ($2)" >&2
		exit 2
	fi
}

bench_dirs() {
	bench_keep_out=
	if [[ -n ${OUT:-} ]]; then
		mkdir -p "$OUT" || exit 2
		bench_keep_out=1
	else
		OUT=$(mktemp -d "/tmp/goroce-$1.XXXXXX") || exit 2
	fi
	BIN=$(mktemp -d "/tmp/goroce-$1-bin.XXXXXX") || exit 2
}

bench_dirs_remove() {
	rm -rf "$BIN"
	[[ -z ${bench_keep_out:-} ]] && rm -rf "$OUT"
	return 0
}

bench_netns_down() {
	local ns p
	for ns in "$@"; do
		for p in $(ip netns pids "$ns" 2>/dev/null); do
			kill -KILL "$p" 2>/dev/null
		done
		ip netns del "$ns" 2>/dev/null
	done
	return 0
}

bench_median() {
	sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

bench_fmt() {
	awk -v a="$1" -v f="${2:-%.0f}" 'BEGIN { if (a == "" || a == "-") print "-"; else printf f, a }'
}

bench_install() {
	[[ -n ${BENCH_NO_INSTALL:-} ]] && return 0
	local c missing=()
	for c in "$@"; do
		command -v "$c" >/dev/null || missing+=("$c")
	done
	((${#missing[@]})) || return 0
	if [[ $(id -u) != 0 ]]; then
		echo "bench: not root: cannot apt-get install ${missing[*]}; set BENCH_NO_INSTALL=1 if they are installed" >&2
		exit 1
	fi
	echo "bench: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update >/dev/null && apt-get install -y "${missing[@]}" >/dev/null; }
}
