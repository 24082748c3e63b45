# bench/netns-pair.sh: two network namespaces joined by a veth pair, for
# benchmarks whose server and client must be two processes on a real path
# (sourced, not run). Needs root.
#
#   . bench/netns-pair.sh
#   netns_pair_up NS_A NS_B IP_A IP_B MTU   # IP_A/24 in NS_A, IP_B/24 in NS_B
#   ip netns exec "$NS_A" ...               # run things on either side
#   netns_pair_down NS_A NS_B               # kills what runs inside, deletes both
#
# The veth ends are named veth-$NS_A and veth-$NS_B cut to 15 characters;
# loopback is up in both. A namespace left by an earlier run of the same
# names is deleted first. It sources bench/lib.sh, the helpers every bench
# script shares.

# shellcheck source=bench/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# netns_pair_down NS_A NS_B: kills every process in the namespaces and
# deletes them (with them the veth pair); quiet if they do not exist.
netns_pair_down() { bench_netns_down "$1" "$2"; }

# netns_pair_up NS_A NS_B IP_A IP_B MTU: builds the pair; returns non-zero
# (and says why on stderr) if any step fails.
netns_pair_up() {
	local a=$1 b=$2 ipa=$3 ipb=$4 mtu=$5
	local va=veth-$a vb=veth-$b
	va=${va:0:15}
	vb=${vb:0:15}
	netns_pair_down "$a" "$b"
	ip netns add "$a" && ip netns add "$b" &&
		ip link add "$va" netns "$a" type veth peer name "$vb" netns "$b" &&
		ip netns exec "$a" ip addr add "$ipa/24" dev "$va" &&
		ip netns exec "$b" ip addr add "$ipb/24" dev "$vb" &&
		ip netns exec "$a" ip link set "$va" mtu "$mtu" up &&
		ip netns exec "$b" ip link set "$vb" mtu "$mtu" up &&
		ip netns exec "$a" ip link set lo up && ip netns exec "$b" ip link set lo up ||
		{ echo "netns-pair: cannot build the veth pair $a/$b" >&2; return 1; }
}
