package oob

import (
	"bytes"
	"context"
	"fmt"
	"net"
)

// PingpongSRQMaxQP is ibv_srq_pingpong's MAX_QP. Its exchange always
// carries this many messages each way, whatever the number of QPs (-q):
// one per QP, then all-zero ones ("0000:000000:000000:000...0") for the
// QPs it does not have.
const PingpongSRQMaxQP = 256

// PingpongSRQClient runs the client side of ibv_srq_pingpong's exchange on
// nc (its pp_client_exch_dest): it writes local's messages, padded with
// zero ones to [PingpongSRQMaxQP], reads the server's PingpongSRQMaxQP and
// writes "done\0". It returns the server's PingpongSRQMaxQP Dests, the
// padding included: comparing the number of QPs is the caller's business.
// The caller closes nc.
func PingpongSRQClient(ctx context.Context, nc net.Conn, local []PingpongDest) ([]PingpongDest, error) {
	msgs, err := appendSRQDests(local)
	if err != nil {
		return nil, err
	}
	var remote []PingpongDest
	err = withContext(ctx, nc, func() error {
		// ibv_srq_pingpong reads the messages in a loop: one write of
		// them all is as good as one per message.
		if err := writeBlock(nc, msgs, "local addresses"); err != nil {
			return err
		}
		var err error
		if remote, err = readSRQDests(nc, msgs[:PingpongMsgSize]); err != nil {
			return err
		}
		return writeBlock(nc, doneMsg, "done")
	})
	if err != nil {
		return nil, fmt.Errorf("oob: srq pingpong client: %w", err)
	}
	return remote, nil
}

// PingpongSRQServer runs the server side of ibv_srq_pingpong's exchange on
// nc (its pp_server_exch_dest): it reads the client's [PingpongSRQMaxQP]
// messages, calls connect with them (it must bring the local QPs to RTS:
// the client sends once it has the answer), writes local's messages, padded
// with zero ones, and reads "done\0". It returns the client's Dests, the
// padding included; an error from connect is returned without answering.
// The caller closes nc.
func PingpongSRQServer(ctx context.Context, nc net.Conn, local []PingpongDest, connect func(ctx context.Context, remote []PingpongDest) error) ([]PingpongDest, error) {
	msgs, err := appendSRQDests(local)
	if err != nil {
		return nil, err
	}
	if connect == nil {
		return nil, fmt.Errorf("oob: srq pingpong server: nil connect function")
	}
	var remote []PingpongDest
	err = withContext(ctx, nc, func() error {
		var err error
		if remote, err = readSRQDests(nc, make([]byte, PingpongMsgSize)); err != nil {
			return err
		}
		if err := connect(ctx, remote); err != nil {
			return fmt.Errorf("connect to the client's QPs: %w", err)
		}
		if err := writeBlock(nc, msgs, "local addresses"); err != nil {
			return err
		}
		done := make([]byte, len(doneMsg))
		if err := readBlock(nc, done, "done"); err != nil {
			return err
		}
		if !bytes.Equal(done, doneMsg) {
			return fmt.Errorf("%w: srq pingpong client ended with %s, want \"done\\x00\"", ErrMalformed, quoteBytes(done))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("oob: srq pingpong server: %w", err)
	}
	return remote, nil
}

// appendSRQDests returns the PingpongSRQMaxQP messages that describe local.
func appendSRQDests(local []PingpongDest) ([]byte, error) {
	if len(local) == 0 || len(local) > PingpongSRQMaxQP {
		return nil, fmt.Errorf("oob: srq pingpong: %d QPs, want 1 to %d", len(local), PingpongSRQMaxQP)
	}
	b := make([]byte, 0, PingpongSRQMaxQP*PingpongMsgSize)
	for i := range PingpongSRQMaxQP {
		var d PingpongDest
		if i < len(local) {
			d = local[i]
			if err := d.check(); err != nil {
				return nil, err
			}
		}
		b = AppendPingpongDest(b, d)
	}
	return b, nil
}

// readSRQDests reads and parses PingpongSRQMaxQP messages into buf-sized
// pieces.
func readSRQDests(nc net.Conn, buf []byte) ([]PingpongDest, error) {
	remote := make([]PingpongDest, PingpongSRQMaxQP)
	for i := range remote {
		if err := readBlock(nc, buf, fmt.Sprintf("remote address %d", i)); err != nil {
			return nil, err
		}
		d, err := ParsePingpongDest(buf)
		if err != nil {
			return nil, fmt.Errorf("remote address %d: %w", i, err)
		}
		remote[i] = d
	}
	return remote, nil
}
