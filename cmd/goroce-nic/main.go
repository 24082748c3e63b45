//go:build linux

// Command goroce-nic is the software NIC daemon behind libgoroce.so: it opens
// goroce devices (goroce0, goroce1, ... one per bound address) and serves the
// libibverbs calls of the programs that goroce-exec starts, on a Unix socket.
//
//	goroce-nic [--bind ADDR[,ADDR...]] [--socket NAME] [--idle-exit DURATION] [-v]
//
// The default bind list is $GOROCE_BIND, else 127.0.0.1,127.0.0.2; the
// default socket is $GOROCE_NIC_SOCKET, else the abstract name
// "@goroce-nic.<uid>". Only processes of the same user (or root) may connect.
// goroce-exec starts it when it is not running; run it by hand to see its log.
package main

import (
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/goroce/goroce/internal/nic"
	"github.com/goroce/goroce/internal/tooldev"
)

func main() {
	if err := run(); err != nil {
		log.Printf("goroce-nic: %v", err)
		os.Exit(1)
	}
}

func run() error {
	bind := flag.String("bind", nic.DefaultBind(), "comma-separated addresses to open devices on, in order")
	socket := flag.String("socket", nic.DefaultSocket(), "Unix socket: @name (abstract) or a path")
	port := flag.Uint("port", 4791, "UDP port of the devices")
	idle := flag.Duration("idle-exit", 0, "exit after this long without clients (0: never)")
	queues := flag.Int("receive-queues", 1, "sockets and goroutines receiving each device's packets, QPs spread over them (Linux)")
	spin := flag.Duration("poll", 0, "each queue pair's pump polls this long before sleeping (needs a spare core)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the daemon to this file until it exits")
	verbose := flag.Bool("v", false, "log devices, refused clients and broken queue pairs")
	flag.Parse()
	addrs, err := nic.ParseBind(*bind)
	if err != nil {
		return err
	}
	cfg := nic.Config{Socket: *socket, Bind: addrs, UDPPort: uint16(*port), PollSpin: *spin, ReceiveQueues: *queues}
	if *verbose {
		cfg.Logf = nic.StdLogf
	}
	if *cpuprofile != "" {
		stop, err := tooldev.StartCPUProfile(*cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	srv, err := nic.Listen(cfg)
	if err != nil {
		return err
	}
	if *verbose {
		log.Printf("goroce-nic: listening on %s", srv.Addr())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		srv.Close()
	}()
	if *idle > 0 {
		go nic.ExitWhenIdle(srv, *idle)
	}
	err = srv.Serve()
	srv.Close()
	return err
}
