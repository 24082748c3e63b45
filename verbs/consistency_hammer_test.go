//go:build !race

// The race detector reports every CPU store that races a device's READ of
// the same bytes, which is the very situation this test creates on
// purpose: it runs without -race (./scripts/test.sh runs it so).

package verbs_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest"
	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

// TestVersionedRecordHammer has the owner's CPU rewrite records without
// pause while a peer READs them one-sidedly with both protocols of
// consistency_test.go, and checks that no reader ever accepts a record
// whose payload is not exactly its version's. It also counts the torn
// reads the checks caught: reads whose version was even but whose payload
// was a mixture, which a reader trusting the version alone would have
// accepted.
func TestVersionedRecordHammer(t *testing.T) {
	server, client := rdmatest.Pair(t, rdmatest.EndOptions{BufSize: 1 << 20}, rdmatest.EndOptions{BufSize: 1 << 20})

	const (
		records = 4
		stride  = 8192
	)
	// Payloads of one packet and of several: 1000 and 5000 bytes (the
	// path MTU is 1024).
	sizes := []int{1000, 5000}
	recs := make([][]byte, records)
	remotes := make([]verbs.RemoteRegion, records)
	for i := range recs {
		n := sizes[i%len(sizes)]
		recs[i] = server.Buf[i*stride : i*stride+n+recordOverhead]
		p := make([]byte, n)
		payloadFor(p, 2)
		writeRecord(recs[i], p)
		var err error
		if remotes[i], err = server.MR.Remote().Slice(i*stride, len(recs[i])); err != nil {
			t.Fatal(err)
		}
	}

	// Each read gets its own bound (testkit.Timeout): how long the whole
	// test takes depends on the machine's load, not on the product.
	readOnce := func(read func(context.Context, *verbs.QP, verbs.RemoteRegion, *verbs.MR, int) (readResult, error),
		k, off int) (readResult, error) {
		ctx, cancel := context.WithTimeout(t.Context(), testkit.Timeout)
		defer cancel()
		return read(ctx, client.QP, remotes[k], client.MR, off)
	}

	stop := make(chan struct{})
	var writes atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { // the owner
		p := make([]byte, sizes[len(sizes)-1])
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec := recs[i%records]
			payload := p[:len(rec)-recordOverhead]
			payloadFor(payload, word(rec).Load()+2)
			writeRecord(rec, payload)
			writes.Add(1)
			if i%64 == 0 {
				runtime.Gosched() // let the device's goroutines run on two cores
			}
		}
	})

	reads := 3000
	if testing.Short() {
		reads = 500
	}
	type tally struct{ accepted, odd, mismatch, tornEven int }
	results := make([]tally, 2)
	protocols := []struct {
		name string
		read func(context.Context, *verbs.QP, verbs.RemoteRegion, *verbs.MR, int) (readResult, error)
	}{{"one checked READ", readChecked}, {"three READs", readSeqlock}}
	var readers sync.WaitGroup
	for pi, proto := range protocols {
		readers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(pi), 1))
			tl := &results[pi]
			for range reads {
				k := rng.IntN(records)
				r, err := readOnce(proto.read, k, (pi*records+k)*stride)
				if err != nil {
					t.Error(err)
					return
				}
				switch {
				case r.odd:
					tl.odd++
				case r.mismatch:
					tl.mismatch++
					if !consistent(r.payload, r.version) {
						tl.tornEven++
					}
				case !consistent(r.payload, r.version):
					t.Errorf("%s accepted a torn record %d at version %d", proto.name, k, r.version)
					return
				default:
					tl.accepted++
				}
			}
		})
	}
	readers.Wait()
	close(stop)
	wg.Wait()
	c := client.Dev.Counters()
	for pi, tl := range results {
		t.Logf("%s: %d accepted, %d during a write (odd version), %d rejected by the check, of which %d torn with an even version",
			protocols[pi].name, tl.accepted, tl.odd, tl.mismatch, tl.tornEven)
	}
	// Whether a protocol accepted any record while the owner wrote
	// without pause depends on the scheduler (three READs rarely fit
	// between two writes on two busy cores). With the owner stopped, each
	// must accept every record: a check that rejects everything would
	// pass the hammer.
	for pi, proto := range protocols {
		for k := range records {
			r, err := readOnce(proto.read, k, (pi*records+k)*stride)
			switch {
			case err != nil:
				t.Errorf("%s of record %d at rest: %v", proto.name, k, err)
			case r.odd || r.mismatch || !consistent(r.payload, r.version):
				t.Errorf("%s did not accept record %d at rest (version %d, odd %v, rejected %v)", proto.name, k, r.version, r.odd, r.mismatch)
			}
		}
	}
	t.Logf("owner: %d writes; reader's device: %d ICRC errors, %d retry timeouts", writes.Load(), c.ICRCErrors, c.RetryTimeouts)
	// Over loopback without faults no packet is corrupt: a READ response
	// whose payload changed between its ICRC and its send would be.
	if c.ICRCErrors != 0 {
		t.Errorf("reader's device dropped %d packets for their ICRC: READ responses of memory being written must be copied before the ICRC", c.ICRCErrors)
	}
}
