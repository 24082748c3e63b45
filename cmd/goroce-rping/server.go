package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// runServer listens on -a and serves one client (-P: every client, each
// on its own goroutine, until interrupted).
func runServer(ctx context.Context, cfg *config, lg *logger) error {
	dev, err := openDevice(cfg, cfg.addr)
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	l, err := cm.Listen(hostPort(cfg))
	if err != nil {
		return err
	}
	defer l.Close()
	lg.debugf("rdma_listen on %v\n", l.Addr())
	if !cfg.persistent {
		return acceptAndServe(ctx, cfg, pd, l, lg)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		req, err := l.Accept(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil // interrupted: the persistent server's end
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveRequest(ctx, cfg, pd, req, lg); err != nil && ctx.Err() == nil {
				lg.errorf("rping server failed: %v\n", err)
			}
		}()
	}
}

func acceptAndServe(ctx context.Context, cfg *config, pd *verbs.PD, l *cm.Listener, lg *logger) error {
	req, err := l.Accept(ctx)
	if err != nil {
		return err
	}
	return serveRequest(ctx, cfg, pd, req, lg)
}

// serveRequest accepts a connection request with rping's parameters and
// runs the server's loop until the client disconnects.
func serveRequest(ctx context.Context, cfg *config, pd *verbs.PD, req *cm.Request, lg *logger) error {
	lg.debugf("child cma %v\n", req.Remote().QPN)
	e, err := newEndpoint(pd, cfg.size, false, lg)
	if err != nil {
		_ = req.Reject(nil)
		return err
	}
	defer e.destroy()
	e.conn, err = req.Accept(ctx, e.qp, &cm.Params{ResponderResources: 1, InitiatorDepth: 1})
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	lg.debugf("accepting client connection request\n")
	err = e.serve(ctx, cfg.verbose)
	if errors.Is(err, errDisconnected) {
		lg.errorf("server DISCONNECT EVENT...\n")
		return nil
	}
	return err
}

// serve is rping's server loop: READ the client's start buffer, go ahead,
// WRITE it back into the client's rdma buffer, go ahead.
func (e *endpoint) serve(ctx context.Context, verbose bool) error {
	for {
		src, err := e.expect(ctx, verbs.WCRecv, "RDMA_READ_ADV")
		if err != nil {
			return err
		}
		e.lg.debugf("Received rkey %x addr %x len %d from peer\n", src.rkey, src.addr, src.size)
		if int(src.size) > e.size {
			return fmt.Errorf("the client's buffer is %d bytes, more than this server's -S %d", src.size, e.size)
		}
		if err := e.rdma(verbs.WRRDMARead, src, int(src.size)); err != nil {
			return err
		}
		e.lg.debugf("server posted rdma read req\n")
		if _, err := e.expect(ctx, verbs.WCRDMARead, "RDMA_READ_COMPLETE"); err != nil {
			return err
		}
		data := cstring(e.rdmaMR.Buf())
		if verbose {
			e.lg.printf("server ping data: %s\n", data)
		}
		if err := e.send(); err != nil {
			return err
		}
		e.lg.debugf("server posted go ahead\n")
		dst, err := e.expect(ctx, verbs.WCRecv, "RDMA_WRITE_ADV")
		if err != nil {
			return err
		}
		e.lg.debugf("Received rkey %x addr %x len %d from peer\n", dst.rkey, dst.addr, dst.size)
		// rping echoes the string and its NUL.
		n := min(len(data)+1, e.size)
		if err := e.rdma(verbs.WRRDMAWrite, dst, n); err != nil {
			return err
		}
		e.lg.debugf("rdma write from lkey %x laddr %x len %d\n", e.rdmaMR.LKey(), e.rdmaMR.IOVA(), n)
		if _, err := e.expect(ctx, verbs.WCRDMAWrite, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		e.lg.debugf("server rdma write complete\n")
		if err := e.send(); err != nil {
			return err
		}
		e.lg.debugf("server posted go ahead\n")
	}
}
