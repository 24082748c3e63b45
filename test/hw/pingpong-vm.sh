#!/bin/sh
# test/hw/pingpong-vm.sh: run inside the rxe VM by test/hw/run.sh. Each
# goroce pingpong tool, built with -tags goroce_ibverbs, serves and
# connects over rxe0 (--hw), with its data checked (-c), between two
# processes of the VM.
set -u
ports=/sys/class/infiniband/rxe0/ports/1
# The RoCE v2 GID of rxe0's IPv4 address, as perftest's -x would pick.
gid=""
for f in "$ports"/gid_attrs/types/*; do
	i=${f##*/}
	[ "$(cat "$f" 2>/dev/null)" = "RoCE v2" ] || continue
	case "$(cat "$ports/gids/$i")" in
	0000:0000:0000:0000:0000:ffff:*) gid=$i; break ;;
	esac
done
[ -n "$gid" ] || { echo "no IPv4 RoCE v2 GID on rxe0"; exit 1; }
# listening reports whether a socket listens on TCP port 18515 (0x4853);
# Go's listener is an IPv6 one that takes IPv4 as well.
listening() { grep -qE ':4853 0+:0000 0A' /proc/net/tcp /proc/net/tcp6 2>/dev/null; }
for t in pingpong uc-pingpong srq-pingpong ud-pingpong; do
	timeout 120 ./goroce-$t --hw -d rxe0 -g "$gid" -n 200 -c >"srv-$t.log" 2>&1 &
	srv=$!
	n=0
	until listening; do
		n=$((n + 1))
		[ $n -le 300 ] || { echo "goroce-$t: the server does not listen"; cat "srv-$t.log"; exit 1; }
		sleep 0.1
	done
	if ! timeout 120 ./goroce-$t --hw -d rxe0 -g "$gid" -n 200 -c 127.0.0.1; then
		echo "goroce-$t: client failed; server:"; cat "srv-$t.log"; exit 1
	fi
	wait $srv || { echo "goroce-$t: server failed:"; cat "srv-$t.log"; exit 1; }
	cat "srv-$t.log"
	echo "goroce-$t on rxe0: ok"
done
