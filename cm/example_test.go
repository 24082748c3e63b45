package cm_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/goroce/goroce/cm"
	"github.com/goroce/goroce/verbs"
)

// newQP opens a device on addr and creates an RC QP on it.
func newQP(addr string) (*verbs.Device, *verbs.QP) {
	dev, err := verbs.Open(verbs.DeviceConfig{Addr: netip.MustParseAddr(addr)})
	if err != nil {
		panic(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		panic(err)
	}
	cq, err := dev.CreateCQ(16, nil, 0)
	if err != nil {
		panic(err)
	}
	qp, err := pd.CreateQP(verbs.QPInitAttr{
		QPType: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1},
	})
	if err != nil {
		panic(err)
	}
	return dev, qp
}

// Two devices in one process stand for two hosts: the passive side
// listens, the active side dials, and each learns the other's private
// data (typically an rkey and an address).
func Example() {
	devA, qpA := newQP("127.0.2.1")
	defer devA.Close()
	devB, qpB := newQP("127.0.2.2")
	defer devB.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	l, err := cm.Listen("127.0.2.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	accepted := make(chan *cm.Conn)
	go func() {
		req, err := l.Accept(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("passive side got %q\n", req.PrivateData())
		conn, err := req.Accept(ctx, qpB, &cm.Params{PrivateData: []byte("rkey=0x1234")})
		if err != nil {
			panic(err)
		}
		accepted <- conn
	}()

	conn, err := cm.Dial(ctx, l.Addr().String(), qpA, &cm.Params{PrivateData: []byte("hello")})
	if err != nil {
		panic(err)
	}
	peer := <-accepted
	fmt.Printf("active side got %q\n", conn.Remote().PrivateData)
	fmt.Println(qpA.State(), qpB.State())

	conn.Close()
	<-peer.Done()
	fmt.Println(peer.Err())
	peer.Close()
	// Output:
	// passive side got "hello"
	// active side got "rkey=0x1234"
	// RTS RTS
	// disconnected by peer
}
