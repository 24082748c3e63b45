package oob

import (
	"bytes"
	"context"
	"fmt"
	"net"
)

// PingpongClient runs the client side of the pingpong examples' exchange on
// nc (pp_client_exch_dest): it writes local's message, reads the server's
// and writes "done\0". It returns the server's Dest. The server has already
// connected its QP to ours when its message arrives. The caller closes nc,
// as the examples do right after.
func PingpongClient(ctx context.Context, nc net.Conn, local PingpongDest) (PingpongDest, error) {
	if err := local.check(); err != nil {
		return PingpongDest{}, err
	}
	var remote PingpongDest
	err := withContext(ctx, nc, func() error {
		if err := writeBlock(nc, AppendPingpongDest(make([]byte, 0, PingpongMsgSize), local), "local address"); err != nil {
			return err
		}
		msg := make([]byte, PingpongMsgSize)
		if err := readBlock(nc, msg, "remote address"); err != nil {
			return err
		}
		var err error
		if remote, err = ParsePingpongDest(msg); err != nil {
			return err
		}
		return writeBlock(nc, doneMsg, "done")
	})
	if err != nil {
		return PingpongDest{}, fmt.Errorf("oob: pingpong client: %w", err)
	}
	return remote, nil
}

// PingpongServer runs the server side of the pingpong examples' exchange on
// nc (pp_server_exch_dest): it reads the client's message, calls connect
// with the client's Dest, which must bring the local QP to RTR and RTS (the
// client starts sending as soon as it has the answer), writes local's
// message and reads the client's "done\0". It returns the client's Dest; an
// error from connect is returned without answering. The caller closes nc.
func PingpongServer(ctx context.Context, nc net.Conn, local PingpongDest, connect func(ctx context.Context, remote PingpongDest) error) (PingpongDest, error) {
	if err := local.check(); err != nil {
		return PingpongDest{}, err
	}
	if connect == nil {
		return PingpongDest{}, fmt.Errorf("oob: pingpong server: nil connect function")
	}
	var remote PingpongDest
	err := withContext(ctx, nc, func() error {
		msg := make([]byte, PingpongMsgSize)
		if err := readBlock(nc, msg, "remote address"); err != nil {
			return err
		}
		var err error
		if remote, err = ParsePingpongDest(msg); err != nil {
			return err
		}
		if err := connect(ctx, remote); err != nil {
			return fmt.Errorf("connect to the client's QP: %w", err)
		}
		if err := writeBlock(nc, AppendPingpongDest(msg[:0], local), "local address"); err != nil {
			return err
		}
		done := msg[:len(doneMsg)]
		if err := readBlock(nc, done, "done"); err != nil {
			return err
		}
		if !bytes.Equal(done, doneMsg) {
			return fmt.Errorf("%w: pingpong client ended with %s, want \"done\\x00\"", ErrMalformed, quoteBytes(done))
		}
		return nil
	})
	if err != nil {
		return PingpongDest{}, fmt.Errorf("oob: pingpong server: %w", err)
	}
	return remote, nil
}
