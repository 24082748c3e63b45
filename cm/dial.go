package cm

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/goroce/goroce/verbs"
)

// Dial connects qp to a peer's QP through the Listener at address
// (host:port, TCP) and returns when both QPs are in RTS (the active side,
// rdma_connect). qp must be an RC or UC QP in RESET or INIT; Dial moves it
// to INIT at once, then, on the passive side's REP, to RTR and RTS, and
// acknowledges with an RTU. Handing the QP over in INIT with receive work
// requests posted lets the peer send as soon as it is connected, without
// RNR NAKs.
//
// Invalid Params, or a QP of the wrong type or state, are reported before
// any network I/O, with errors wrapping verbs.ErrInvalidArgument,
// verbs.ErrNotSupported or verbs.ErrInvalidState. ctx bounds the whole
// exchange: when it ends, Dial returns an error wrapping ctx.Err(). A peer
// that rejects the request makes Dial return a *RejectError (ErrRejected).
// If Dial fails after the QP reached RTR the QP is moved to ERR; before
// that it stays in INIT and can be used for another attempt.
func Dial(ctx context.Context, address string, qp *verbs.QP, p *Params) (*Conn, error) {
	c, err := dial(ctx, address, qp, p)
	if err != nil {
		return nil, fmt.Errorf("cm: dial %s: %w", address, err)
	}
	return c, nil
}

func dial(ctx context.Context, address string, qp *verbs.QP, p *Params) (*Conn, error) {
	e, err := newEndpoint(qp, p)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := e.toInit(); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", address)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	rep, err := activeHandshake(ctx, nc, e)
	if err != nil {
		e.abort()
		_ = nc.Close()
		return nil, err
	}
	// The handshake has stopped watching ctx: the Conn may read nc.
	info := remoteInfo(&rep)
	info.Addr = nc.RemoteAddr()
	return newConn(nc, qp, info), nil
}

// activeHandshake sends the REQ, connects the QP on the REP and sends the
// RTU. It returns the REP. After a failure it sends the peer a REJ when
// the peer is owed an explanation.
func activeHandshake(ctx context.Context, nc net.Conn, e *endpoint) (rep message, err error) {
	w := watchContext(ctx, nc)
	var reply *message // sent to the peer on failure
	defer func() {
		w.end()
		if err == nil {
			return
		}
		if reply == nil && ctx.Err() != nil {
			reply = timeoutREJ(ctx, "active")
		}
		if reply != nil {
			sendBestEffort(nc, reply)
		}
	}()

	req := e.proposal(msgREQ, nil)
	if err := writeMessage(nc, &req); err != nil {
		return message{}, ioError(ctx, "sending REQ", err)
	}
	rep, err = readMessage(nc)
	if err != nil {
		if errors.Is(err, ErrVersion) {
			reply = versionREJ()
		}
		return message{}, ioError(ctx, "waiting for REP", err)
	}
	switch rep.typ {
	case msgREP:
	case msgREJ:
		return message{}, rejected(&rep)
	default:
		r := rejection{RejectUnsupported, fmt.Sprintf("got %v, want REP or REJ", rep.typ)}
		m := r.message()
		reply = &m
		return message{}, fmt.Errorf("%w: %s", ErrProtocol, r.info)
	}
	n, rej := e.negotiate(&rep, true)
	if rej != nil {
		m := rej.message()
		reply = &m
		return message{}, rej.err()
	}
	if err := e.connect(&rep, n); err != nil {
		reply = noResourcesREJ("active", err)
		return message{}, err
	}
	rtu := message{typ: msgRTU}
	if err := writeMessage(nc, &rtu); err != nil {
		return message{}, ioError(ctx, "sending RTU", err)
	}
	return rep, nil
}
