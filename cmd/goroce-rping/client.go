package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// runClient connects to the server and pings -C times (0: until
// interrupted).
func runClient(ctx context.Context, cfg *config, lg *logger) error {
	src := cfg.source
	if !src.IsValid() {
		var err error
		if src, err = routeSource(cfg.addr, cfg.udpPort); err != nil {
			return err
		}
	}
	dev, err := openDevice(cfg, src)
	if err != nil {
		return err
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	e, err := newEndpoint(pd, cfg.size, true, lg)
	if err != nil {
		return err
	}
	defer e.destroy()
	e.conn, err = cm.Dial(ctx, hostPort(cfg), e.qp, &cm.Params{ResponderResources: 1, InitiatorDepth: 1,
		TrafficClass: uint8(cfg.tos)})
	if err != nil {
		return err
	}
	lg.debugf("rdma_connect successful\n")
	err = e.ping(ctx, cfg)
	if errors.Is(err, errDisconnected) {
		lg.errorf("client DISCONNECT EVENT...\n")
		return nil // rping: the server ended the test
	}
	return err
}

// ping is rping's client loop.
func (e *endpoint) ping(ctx context.Context, cfg *config) error {
	start := byte('A')
	startBuf, rdmaBuf := e.startMR.Buf(), e.rdmaMR.Buf()
	for ping := 0; cfg.count == 0 || ping < cfg.count; ping++ {
		fillPing(startBuf, ping, start)
		if start++; start > 'z' {
			start = 'A'
		}
		if err := e.advertise(e.startMR); err != nil {
			return err
		}
		if _, err := e.expect(ctx, verbs.WCRecv, "RDMA_WRITE_ADV"); err != nil {
			return err
		}
		if err := e.advertise(e.rdmaMR); err != nil {
			return err
		}
		if _, err := e.expect(ctx, verbs.WCRecv, "RDMA_WRITE_COMPLETE"); err != nil {
			return err
		}
		if cfg.validate && !bytes.Equal(startBuf, rdmaBuf) {
			return errors.New("data mismatch")
		}
		if cfg.verbose {
			e.lg.printf("ping data: %s\n", cstring(rdmaBuf))
		}
	}
	return nil
}

// advertise SENDs mr's address, rkey and the ping size.
func (e *endpoint) advertise(mr *verbs.MR) error {
	in := info{addr: mr.IOVA(), rkey: mr.RKey(), size: uint32(e.size)}
	in.put(e.sendMR.Buf())
	e.lg.debugf("RDMA addr %x rkey %x len %d\n", in.addr, in.rkey, in.size)
	return e.send()
}

// fillPing writes rping's ping: "rdma-ping-N: ", then letters from start
// on ('A' to 'z', wrapping), and a NUL in the last byte.
func fillPing(b []byte, ping int, start byte) {
	n := copy(b, fmt.Sprintf("rdma-ping-%d: ", ping))
	c := start
	for i := n; i < len(b); i++ {
		b[i] = c
		if c++; c > 'z' {
			c = 'A'
		}
	}
	b[len(b)-1] = 0
}
