// Package httpblob is an HTTP/1.1 service (net/http) and its client over
// any transport: the server serves a net.Listener (an rsocket.Listener),
// the client dials through a function (rsocket.Dialer.DialContext, which
// has net.Dialer's signature, goes into http.Transport as it is).
//
//	POST /echo        the request body, back
//	GET  /blob?n=N    N bytes of Pattern
package httpblob

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// MaxBlob bounds /blob's n, and /echo's body.
const MaxBlob = 64 << 20

// Pattern is byte i of every blob: a client can check what it got.
func Pattern(i int) byte { return byte(i*131 + i>>8) }

// blob is the first 1 MiB of Pattern, written in pieces.
var blob = func() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = Pattern(i)
	}
	return b
}()

// Handler serves /echo and /blob.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		// The whole body first: an HTTP/1 handler that starts its
		// response can no longer read the request.
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBlob))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
	})
	mux.HandleFunc("GET /blob", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 0 || n > MaxBlob {
			http.Error(w, "n: a byte count up to 64 MiB", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.Header().Set("Content-Type", "application/octet-stream")
		for off := 0; off < n; {
			// Byte i of the body is blob[i % len(blob)].
			k := min(n-off, len(blob))
			if _, err := w.Write(blob[:k]); err != nil {
				return
			}
			off += k
		}
	})
	return mux
}

// NewServer returns a server of Handler with the usual timeouts.
func NewServer() *http.Server {
	return &http.Server{Handler: Handler(), ReadHeaderTimeout: 10 * time.Second}
}

// NewClient returns an HTTP client whose connections dial opens, keeping
// up to conns of them alive for reuse.
func NewClient(dial func(ctx context.Context, network, addr string) (net.Conn, error), conns int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         dial,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}}
}

// Get fetches /blob?n=n from the server at addr ("ip:port") into buf[:0],
// and with check compares every byte i with Pattern(i % 1 MiB).
func Get(ctx context.Context, c *http.Client, addr string, n int, buf []byte, check bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/blob?n="+strconv.Itoa(n), nil)
	if err != nil {
		return buf, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return buf, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return buf, fmt.Errorf("GET /blob: %s", resp.Status)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		k, err := resp.Body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+k]
		if err == io.EOF {
			break
		}
		if err != nil {
			return buf, err
		}
	}
	if len(buf) != n {
		return buf, fmt.Errorf("GET /blob?n=%d: %d bytes", n, len(buf))
	}
	if !check {
		return buf, nil
	}
	for i, b := range buf {
		if b != Pattern(i%len(blob)) {
			return buf, fmt.Errorf("GET /blob?n=%d: byte %d is %#x, want %#x", n, i, b, Pattern(i%len(blob)))
		}
	}
	return buf, nil
}
