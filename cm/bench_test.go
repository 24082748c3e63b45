package cm

import (
	"context"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// BenchmarkConnect measures connection setup on loopback: Dial to a
// listener on another device, Request.Accept, both QPs in RTS (REQ, REP,
// RTU and the QPs' transitions), then the QPs' destruction. Disconnects
// are not timed: the connections stay up until the end.
func BenchmarkConnect(b *testing.B) {
	ha, hb := newBenchHost(b, 1), newBenchHost(b, 2)
	defer ha.dev.Close()
	defer hb.dev.Close()
	l, err := Listen(netipString(hb.dev, 0))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	var conns []*Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	done := make(chan *Conn)
	for b.Loop() {
		qa, qb := benchQP(b, ha), benchQP(b, hb)
		go func() {
			req, err := l.Accept(ctx)
			if err != nil {
				done <- nil
				return
			}
			c, _ := req.Accept(ctx, qb, nil)
			done <- c
		}()
		c, err := Dial(ctx, l.Addr().String(), qa, nil)
		if err != nil {
			b.Fatal(err)
		}
		cb := <-done
		if cb == nil {
			b.Fatal("accept failed")
		}
		conns = append(conns, c, cb)
	}
}

func newBenchHost(b *testing.B, i int) *host {
	b.Helper()
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: testkit.Addr(i), NoStatsEndpoint: true})
	if err != nil {
		b.Fatal(err)
	}
	h := &host{dev: dev}
	if h.pd, err = dev.AllocPD(); err != nil {
		b.Fatal(err)
	}
	if h.cq, err = dev.CreateCQ(16, nil, 0); err != nil {
		b.Fatal(err)
	}
	return h
}

func benchQP(b *testing.B, h *host) *verbs.QP {
	qp, err := h.pd.CreateQP(verbs.QPInitAttr{QPType: verbs.QPTypeRC, SendCQ: h.cq, RecvCQ: h.cq,
		Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		b.Fatal(err)
	}
	return qp
}
