// Command goroce-pingpong is rdma-core's ibv_rc_pingpong on a goroce
// device: it exchanges messages over an RC queue pair with SEND and RECV,
// and is wire-compatible with ibv_rc_pingpong on any RoCEv2 device (rxe or
// hardware) in either role.
//
//	goroce-pingpong [options]          start a server and wait for a client
//	goroce-pingpong [options] <host>   connect to the server at <host>
//
// Its siblings goroce-uc-pingpong, goroce-ud-pingpong and
// goroce-srq-pingpong stand in for ibv_uc_pingpong, ibv_ud_pingpong and
// ibv_srq_pingpong. The options, the exchange and the output are the
// examples'; see package pingpong for them and for what differs.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/goroce/goroce/internal/pingpong"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := pingpong.Run(ctx, pingpong.RC, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
