package nicproto

import (
	"testing"
)

// FuzzParseHeader feeds arbitrary messages to what the daemon runs on every
// client message: the header check, then the body decoders. A client is
// another process of the same user, possibly buggy: nothing may panic.
func FuzzParseHeader(f *testing.F) {
	f.Add(NewMessage(OpHello, 0).Append(HelloReq{Version: Version, PID: 1}).Bytes(0))
	f.Add(NewMessage(OpRegMR, 0).Append(RegMRReq{PD: 1, Length: 4096, NPieces: 1}, Piece{Length: 4096}).Bytes(1))
	f.Add(NewMessage(OpModifyQP, 0).Append(ModifyQPReq{Handle: 3, Mask: 1}).Bytes(0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := ParseHeader(msg)
		if err != nil {
			return
		}
		if !h.Op.Valid() || int(h.Len) != len(msg) {
			t.Fatalf("accepted %+v for %d bytes", h, len(msg))
		}
		body := msg[HeaderSize:]
		for _, v := range []any{&HelloReq{}, &EnsureReq{}, &OpenReq{}, &Handle{}, &RegMRReq{},
			&CreateCQReq{}, &ResizeCQReq{}, &CreateAHReq{}, &CreateQPReq{}, &ModifyQPReq{},
			&CreateSRQReq{}, &ModifySRQReq{}} {
			rest, err := Decode(body, v)
			if err == nil && len(rest) > len(body) {
				t.Fatalf("%T: rest longer than body", v)
			}
		}
		var req RegMRReq
		if rest, err := Decode(body, &req); err == nil && req.NPieces <= MaxPieces {
			pieces := make([]Piece, req.NPieces)
			Decode(rest, pieces)
		}
	})
}
