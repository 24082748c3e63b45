//go:build linux

// Command goroce-exec runs an unmodified libibverbs or librdmacm program on goroce
// devices, like torsocks runs a program over Tor:
//
//	goroce-exec [--bind ADDR[,ADDR...]] CMD [ARGS...]
//
// It makes sure the software NIC daemon runs (starting it detached if no
// daemon answers on the socket, with the bind list; a running daemon opens
// devices for addresses it lacks), builds libgoroce.so from its embedded
// sources on first use (gcc, libibverbs-dev and librdmacm-dev needed; kept in
// ~/.cache/goroce), and execs CMD with LD_PRELOAD set. The devices are
// goroce0, goroce1, ... in the order their addresses were first bound; the
// default bind list is $GOROCE_BIND, else 127.0.0.1,127.0.0.2.
//
// The manual way: run goroce-nic yourself, then
//
//	LD_PRELOAD=/path/to/libgoroce.so ibv_devinfo
//
// (GOROCE_NIC_SOCKET names the socket if not the default; GOROCE_DEBUG=1
// makes the library explain failures on stderr).
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/goroce/goroce/internal/nic"
	"github.com/goroce/goroce/libgoroce"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("goroce-exec: ")
	fs := flag.NewFlagSet("goroce-exec", flag.ExitOnError)
	bind := fs.String("bind", nic.DefaultBind(), "comma-separated addresses that must have goroce devices")
	socket := fs.String("socket", nic.DefaultSocket(), "the daemon's Unix socket: @name (abstract) or a path")
	lib := fs.String("lib", os.Getenv("GOROCE_LIB"), "libgoroce.so to preload (default: built from the embedded sources)")
	idle := fs.Duration("idle-exit", 10*time.Minute, "a daemon started here exits after this long without clients (0: never)")
	daemon := fs.Bool("daemon", false, "run as the daemon (what goroce-exec starts; see goroce-nic)")
	port := fs.Uint("port", 4791, "UDP port of a daemon started here (another than 4791 reaches goroce peers only)")
	spin := fs.Duration("poll", 0, "a daemon started here polls each queue pair this long before sleeping")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: goroce-exec [flags] CMD [ARGS...]\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	addrs, err := nic.ParseBind(*bind)
	if err != nil {
		log.Fatal(err)
	}
	dcfg := nic.Config{Socket: *socket, Bind: addrs, UDPPort: uint16(*port), PollSpin: *spin, Logf: nic.StdLogf}
	if *daemon {
		runDaemon(dcfg, *idle)
		return
	}
	if fs.NArg() == 0 {
		fs.Usage()
		os.Exit(2)
	}
	if err := ensureDaemon(dcfg, *bind, *idle); err != nil {
		log.Fatal(err)
	}
	cl, err := nic.Dial(*socket)
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range addrs {
		if _, err := cl.Ensure(a); err != nil {
			log.Fatal(err)
		}
	}
	cl.Close()
	if *lib == "" {
		if *lib, err = libgoroce.Build(libgoroce.DefaultCacheDir(), ""); err != nil {
			log.Fatal(err)
		}
	}
	run(*lib, *socket, fs.Args())
}

// run execs the program with libgoroce.so preloaded.
func run(lib, socket string, args []string) {
	path, err := exec.LookPath(args[0])
	if err != nil {
		log.Fatal(err)
	}
	preload := lib
	if old := os.Getenv("LD_PRELOAD"); old != "" {
		preload += ":" + old
	}
	env := append(os.Environ(), "LD_PRELOAD="+preload, "GOROCE_NIC_SOCKET="+socket)
	// Each registered buffer holds a descriptor in the library: lift the
	// soft limit on descriptors to the hard one.
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < rl.Max {
		rl.Cur = rl.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
	log.Fatal(syscall.Exec(path, args, env))
}

// ensureDaemon starts a detached daemon unless one answers on socket.
func ensureDaemon(cfg nic.Config, bind string, idle time.Duration) error {
	socket := cfg.Socket
	if cl, err := nic.Dial(socket); err == nil {
		cl.Close()
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logPath := daemonLog()
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer lf.Close()
	cmd := exec.Command(self, "--daemon", "--bind", bind, "--socket", socket, "--idle-exit", idle.String(),
		"--port", fmt.Sprint(cfg.UDPPort), "--poll", cfg.PollSpin.String())
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(10 * time.Second)
	for {
		if cl, err := nic.Dial(socket); err == nil {
			cl.Close()
			cmd.Process.Release()
			return nil
		}
		select {
		case err := <-exited:
			// Another goroce-exec may have won the race to start one.
			if cl, derr := nic.WaitReady(socket, 2*time.Second); derr == nil {
				cl.Close()
				return nil
			}
			return fmt.Errorf("the daemon exited (%v); see %s", err, logPath)
		case <-deadline:
			return errors.New("the daemon did not come up in 10s; see " + logPath)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func daemonLog() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("goroce-nic-%d.log", os.Getuid()))
}

func runDaemon(cfg nic.Config, idle time.Duration) {
	srv, err := nic.Listen(cfg)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("daemon pid %d listening on %s", os.Getpid(), cfg.Socket)
	if idle > 0 {
		go nic.ExitWhenIdle(srv, idle)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		srv.Close()
	}()
	if err := srv.Serve(); err != nil {
		log.Fatal(err)
	}
	srv.Close()
}
