#!/bin/sh
# test/hw/tools-vm.sh ADDR: run inside the rxe VM by test/hw/run.sh, ADDR
# being rxe0's IPv4 address. goroce-devinfo, goroce-perf, goroce-rping, goroce-rstream
# and goroce-riostream,
# built with -tags goroce_ibverbs, on rxe0 (--hw), each checked on what it
# can show:
#   - goroce-devinfo --hw prints what ibv_devinfo prints, byte for byte
#     (-l, -d rxe0, and -d rxe0 -v but for the multicast limits, which
#     package verbs does not have: goroce-devinfo prints 0, as a device
#     without multicast);
#   - goroce-perf runs write_bw, read_bw, send_bw, write_lat and
#     atomic_bw (FETCH_AND_ADD and CMP_AND_SWAP) between two processes with
#     --check, each side printing "data check: passed" where the data
#     lands on it (the sender's pattern, the atomics' final value), and
#     against perftest's ib_write_bw as the client;
#   - goroce-rping -V pings between two processes, each ping's data
#     compared (-V) and printed (-v), and against rdma-core's rping as the
#     client.
#   - goroce-rstream and goroce-riostream --hw against rdma-core's
#     rstream and riostream (rsockets), either side the server, the
#     transfers verified by both (-T v).
# Iteration counts are small: the VM emulates its processor.
set -u
ip=${1:?usage: tools-vm.sh ADDR}
fail() {
	echo "FAIL: $*"
	exit 1
}

# listening PORT: a socket listens on TCP port PORT (Go's listener is an
# IPv6 one that takes IPv4 as well).
listening() {
	hex=$(printf '%04X' "$1")
	grep -qE ":$hex 0+:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# wait_listen PORT: up to 30 s for a server to listen.
wait_listen() {
	n=0
	until listening "$1"; do
		n=$((n + 1))
		[ $n -le 300 ] || return 1
		sleep 0.1
	done
}

# goroce-devinfo against ibv_devinfo.
ibv_devinfo -l >want.txt 2>&1
./goroce-devinfo --hw -l >got.txt 2>&1 || fail "goroce-devinfo --hw -l: $(cat got.txt)"
diff -u want.txt got.txt || fail "goroce-devinfo --hw -l differs from ibv_devinfo -l"
ibv_devinfo -d rxe0 >want.txt 2>&1
./goroce-devinfo --hw -d rxe0 >got.txt 2>&1 || fail "goroce-devinfo --hw -d rxe0: $(cat got.txt)"
diff -u want.txt got.txt || fail "goroce-devinfo --hw -d rxe0 differs from ibv_devinfo -d rxe0"
mcast='max_mcast_grp:|max_mcast_qp_attach:|max_total_mcast_qp_attach:'
ibv_devinfo -d rxe0 -v 2>&1 | grep -Ev "$mcast" >want.txt
./goroce-devinfo --hw -d rxe0 -v >got.txt 2>&1 || fail "goroce-devinfo --hw -d rxe0 -v: $(cat got.txt)"
grep -Ev "$mcast" got.txt >got-v.txt
diff -u want.txt got-v.txt || fail "goroce-devinfo --hw -d rxe0 -v differs from ibv_devinfo -d rxe0 -v"
echo "goroce-devinfo on rxe0: ok"

# goroce-perf, both sides: TEST [FLAGS...]; both must pass, and the side
# the data lands on must say its check passed.
perf() {
	t=$1
	shift
	timeout 120 ./goroce-perf "$t" --hw -d rxe0 --check "$@" >srv.txt 2>&1 &
	srv=$!
	wait_listen 18515 || fail "goroce-perf $t: the server does not listen: $(cat srv.txt)"
	timeout 120 ./goroce-perf "$t" --hw -d rxe0 --check "$@" 127.0.0.1 >cli.txt 2>&1
	crc=$?
	wait $srv
	src=$?
	cat cli.txt
	echo " server side:"
	cat srv.txt
	[ $crc -eq 0 ] && [ $src -eq 0 ] || fail "goroce-perf $t $*: client exit $crc, server exit $src"
	grep -q 'data check: passed' cli.txt srv.txt || fail "goroce-perf $t $*: no side checked its data"
	grep -q 'data check: failed' cli.txt srv.txt && fail "goroce-perf $t $*: a data check failed"
	echo "goroce-perf $t $* on rxe0: ok"
}
perf write_bw -n 200 -s 65536
perf read_bw -n 200 -s 65536
perf send_bw -n 200 -s 4096
perf write_lat -n 100 -s 64
perf atomic_bw -n 200
perf atomic_bw -n 200 -A CMP_AND_SWAP

# goroce-perf --hw as the server of perftest's ib_write_bw.
timeout 120 ./goroce-perf write_bw --hw -d rxe0 -n 200 >srv.txt 2>&1 &
srv=$!
wait_listen 18515 || fail "goroce-perf write_bw: the server does not listen: $(cat srv.txt)"
timeout 120 ib_write_bw -d rxe0 -x 1 -n 200 -F 127.0.0.1 >cli.txt 2>&1
crc=$?
wait $srv
src=$?
cat cli.txt
echo " server side:"
cat srv.txt
[ $crc -eq 0 ] && [ $src -eq 0 ] || fail "ib_write_bw against goroce-perf: client exit $crc, server exit $src"
echo "ib_write_bw against goroce-perf write_bw on rxe0: ok"

# goroce-rping between two processes, then rping's client against it.
# The client prints a line per ping (-v) and fails on a mismatch (-V).
rping_pair() {
	client=$1
	timeout 60 ./goroce-rping --hw -s -a "$ip" -V -v >srv.txt 2>&1 &
	srv=$!
	sleep 2 # rping's port is the cm's: nothing in /proc/net to wait for
	timeout 60 $client -c -a "$ip" -C 10 -V -v >cli.txt 2>&1
	crc=$?
	wait $srv
	src=$?
	cat cli.txt
	echo " server side:"
	cat srv.txt
	[ $crc -eq 0 ] && [ $src -eq 0 ] || fail "$client against goroce-rping: client exit $crc, server exit $src"
	n=$(grep -c '^ping data: rdma-ping-' cli.txt)
	[ "$n" -eq 10 ] || fail "$client against goroce-rping: $n pings of 10"
	n=$(grep -c '^server ping data: rdma-ping-' srv.txt)
	[ "$n" -eq 10 ] || fail "$client against goroce-rping: the server saw $n pings of 10"
	echo "$client -c against goroce-rping --hw -s on rxe0: ok"
}
rping_pair "./goroce-rping --hw"
rping_pair rping

# goroce-rstream and goroce-riostream --hw (rsocket on rxe0 through
# librdmacm) against rdma-core's rstream and riostream (librdmacm's
# rsockets), each side in turn, 50 transfers of 64 KiB verified by both
# (-T v).
rstream_pair() {
	server=$1 client=$2 port=$3
	timeout 60 $server -b "$ip" -p "$port" -S 65536 -C 50 -T v >srv.txt 2>&1 &
	srv=$!
	sleep 2 # the cm's port: nothing in /proc/net to wait for
	timeout 60 $client -s "$ip" -p "$port" -S 65536 -C 50 -T v >cli.txt 2>&1
	crc=$?
	wait $srv
	src=$?
	cat cli.txt
	echo " server side:"
	cat srv.txt
	[ $crc -eq 0 ] && [ $src -eq 0 ] || fail "$client against $server: client exit $crc, server exit $src"
	grep -q '^custom *64k *50 ' cli.txt && grep -q '^custom *64k *50 ' srv.txt ||
		fail "$client against $server: no result line"
	echo "$client -s against $server -b on rxe0: ok"
}
rstream_pair rstream "./goroce-rstream --hw" 7471
rstream_pair "./goroce-rstream --hw" rstream 7472
rstream_pair riostream "./goroce-riostream --hw" 7473
rstream_pair "./goroce-riostream --hw" riostream 7474
