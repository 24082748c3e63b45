// Command goroce-ud-pingpong is rdma-core's ibv_ud_pingpong on a goroce
// device: it exchanges messages with SEND and RECV over an unreliable
// datagram (UD) queue pair, and is wire-compatible with ibv_ud_pingpong on
// any RoCEv2 device (rxe or hardware) in either role.
//
//	goroce-ud-pingpong [options]          start a server and wait for a client
//	goroce-ud-pingpong [options] <host>   connect to the server at <host>
//
// The options, the exchange and the output are ibv_ud_pingpong's; see
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
	code := pingpong.Run(ctx, pingpong.UD, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
