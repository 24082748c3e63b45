// Command goroce-uc-pingpong is rdma-core's ibv_uc_pingpong on a goroce
// device: it exchanges messages with SEND and RECV over an unreliable
// connected (UC) queue pair, and is wire-compatible with ibv_uc_pingpong on
// any RoCEv2 device (rxe or hardware) in either role.
//
//	goroce-uc-pingpong [options]          start a server and wait for a client
//	goroce-uc-pingpong [options] <host>   connect to the server at <host>
//
// The options, the exchange and the output are ibv_uc_pingpong's; see
// package pingpong (internal/pingpong) for them and for what
// differs.
package main

import (
	"context"
	"os"
	"os/signal"

	"github.com/goroce/goroce/internal/pingpong"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := pingpong.Run(ctx, pingpong.UC, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
