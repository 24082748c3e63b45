package kv

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/goroce/goroce/verbs"
)

// The messages, the same bytes over TCP and in the RDMA path's SENDs:
//
//	request: op (1 byte), key length (1), value length (4, big-endian), key, value
//	reply:   status (1 byte), value length (4, big-endian), value
//
// Over TCP both are self-delimiting on the byte stream; over RDMA a
// request is one SEND (PUT only: GETs are READs) and its reply another.
const (
	opPut = 1
	opGet = 2

	headerLen = 6
	replyLen  = 5
)

// Reply statuses.
const (
	statusOK = iota
	statusNotFound
	statusFull
	statusTooLarge
	statusBadRequest
)

var errBadMessage = errors.New("kv: malformed message")

// request is a decoded request; key and value alias the message.
type request struct {
	op         byte
	key, value []byte
}

// appendRequest appends the encoding of a request to b.
func appendRequest(b []byte, op byte, key, value []byte) []byte {
	b = append(b, op, byte(len(key)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(value)))
	b = append(b, key...)
	return append(b, value...)
}

// parseHeader returns a request's op and the lengths its header announces,
// refusing lengths over the limits before anything is read or allocated.
func parseHeader(h []byte, valueMax int) (op byte, klen, vlen int, err error) {
	if len(h) < headerLen {
		return 0, 0, 0, errBadMessage
	}
	op, klen, vlen = h[0], int(h[1]), int(binary.BigEndian.Uint32(h[2:]))
	if (op != opPut && op != opGet) || klen == 0 || klen > KeyMax || vlen > valueMax || (op == opGet && vlen != 0) {
		return 0, 0, 0, fmt.Errorf("%w: op %d, key %d bytes, value %d bytes", errBadMessage, op, klen, vlen)
	}
	return op, klen, vlen, nil
}

// decodeRequest decodes a whole request message (an RDMA SEND).
func decodeRequest(m []byte, valueMax int) (request, error) {
	op, klen, vlen, err := parseHeader(m, valueMax)
	if err != nil {
		return request{}, err
	}
	if len(m) != headerLen+klen+vlen {
		return request{}, fmt.Errorf("%w: %d bytes, header says %d", errBadMessage, len(m), headerLen+klen+vlen)
	}
	return request{op: op, key: m[headerLen : headerLen+klen], value: m[headerLen+klen:]}, nil
}

// statusOf maps a table error to a reply status.
func statusOf(err error) byte {
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, ErrNotFound):
		return statusNotFound
	case errors.Is(err, ErrFull):
		return statusFull
	case errors.Is(err, ErrTooLarge):
		return statusTooLarge
	}
	return statusBadRequest
}

// errOf maps a reply status back to the error.
func errOf(status byte) error {
	switch status {
	case statusOK:
		return nil
	case statusNotFound:
		return ErrNotFound
	case statusFull:
		return ErrFull
	case statusTooLarge:
		return ErrTooLarge
	}
	return fmt.Errorf("kv: server refused the request (status %d)", status)
}

// The RDMA server's private data in the connection's REP: where the table
// is and its shape.
//
//	[0, 16)   the table's region (verbs.RemoteRegion.MarshalBinary)
//	[16, 20)  slots (big-endian)
//	[20, 24)  value capacity (big-endian)
const helloLen = verbs.RemoteRegionSize + 8

func encodeHello(r verbs.RemoteRegion, g Geometry) ([]byte, error) {
	b, err := r.MarshalBinary()
	if err != nil {
		return nil, err
	}
	b = binary.BigEndian.AppendUint32(b, uint32(g.Slots))
	return binary.BigEndian.AppendUint32(b, uint32(g.ValueMax)), nil
}

// decodeHello decodes the REP's private data (196 bytes, zero-padded),
// refusing a table whose shape or size does not add up.
func decodeHello(b []byte) (verbs.RemoteRegion, Geometry, error) {
	var r verbs.RemoteRegion
	if len(b) < helloLen {
		return r, Geometry{}, fmt.Errorf("%w: private data of %d bytes", errBadMessage, len(b))
	}
	if err := r.UnmarshalBinary(b[:verbs.RemoteRegionSize]); err != nil {
		return r, Geometry{}, err
	}
	g := Geometry{Slots: int(binary.BigEndian.Uint32(b[16:])), ValueMax: int(binary.BigEndian.Uint32(b[20:]))}
	if err := g.check(); err != nil {
		return r, Geometry{}, err
	}
	if uint64(r.Length) != uint64(g.Slots)*uint64(g.SlotSize()) {
		return r, Geometry{}, fmt.Errorf("%w: region of %d bytes for %d slots of %d", errBadMessage, r.Length, g.Slots, g.SlotSize())
	}
	return r, g, nil
}
