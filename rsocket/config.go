package rsocket

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/goroce/goroce/verbs"
)

// Config sizes a connection's buffers, registered once per connection.
// The zero value selects rsockets' defaults.
type Config struct {
	// SendBuffer is the send buffer's size in bytes: data a Write copies
	// and the peer has not acknowledged yet. Zero selects 128 KiB
	// (rsockets' wmem_default); at least 4 KiB.
	SendBuffer int
	// ReceiveBuffer is the receive buffer's size in bytes, which the peer
	// writes into directly, half of it at a time. Zero selects 128 KiB
	// (rsockets' mem_default); at least 4 KiB. rsockets doubles
	// SO_RCVBUF and SO_SNDBUF as Linux does: setsockopt(SO_RCVBUF, n)
	// there is ReceiveBuffer 2n here.
	ReceiveBuffer int
	// IOMapSize is how many mappings the peer may announce into this
	// side's iomap table (rsockets' RDMA_IOMAPSIZE; riostream sets 1):
	// the peer's Conn.IOMap, or riomap, fails without room, and zero
	// (rsockets' default) leaves none. The wire's 8-bit scale holds up
	// to 128, then multiples of 256 up to 32512: other sizes round down.
	IOMapSize int
	// KeepAlive, when positive, is the period of keepalive probes
	// (Conn.SetKeepAlivePeriod); zero, rsockets' default, sends none.
	KeepAlive time.Duration
}

const (
	defaultBuffer = 1 << 17
	minBuffer     = 2 * sndLowat
	maxBuffer     = 1 << 28 // a message's length has 29 bits
)

func (c *Config) sendBuffer() int    { return orDefault(c.SendBuffer) }
func (c *Config) receiveBuffer() int { return orDefault(c.ReceiveBuffer) &^ 1 }

func orDefault(n int) int {
	if n == 0 {
		return defaultBuffer
	}
	return n
}

func (c *Config) check() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"SendBuffer", c.SendBuffer}, {"ReceiveBuffer", c.ReceiveBuffer}} {
		if f.v != 0 && (f.v < minBuffer || f.v > maxBuffer) {
			return fmt.Errorf("rsocket: Config.%s %d outside %d..%d: %w", f.name, f.v, minBuffer, maxBuffer, verbs.ErrInvalidArgument)
		}
	}
	switch {
	case c.IOMapSize < 0 || c.IOMapSize > maxIOMapEntries:
		return fmt.Errorf("rsocket: Config.IOMapSize %d outside 0..%d: %w", c.IOMapSize, maxIOMapEntries, verbs.ErrInvalidArgument)
	case c.KeepAlive < 0:
		return fmt.Errorf("rsocket: Config.KeepAlive %v negative: %w", c.KeepAlive, verbs.ErrInvalidArgument)
	}
	return nil
}

// ioMapSize is the table's size as announced: IOMapSize in the wire's
// scale.
func (c *Config) ioMapSize() int { return fromScale(toScale(c.IOMapSize)) }

// Addr is the address of one side of a connection: the IP address of its
// goroce device and the rdma_cm port.
type Addr struct{ netip.AddrPort }

// Network returns "rdma".
func (Addr) Network() string { return "rdma" }

var _ net.Addr = Addr{}

// The devices this package opens, one per local address and RoCE UDP
// port, shared by the connections and listeners on it. A device lingers
// a moment after its last user, so that the CM can finish the last
// disconnection (DREQ, DREP) and a program that reconnects at once reuses
// it.
var devices = struct {
	mu sync.Mutex
	m  map[netip.AddrPort]*sharedDevice
}{m: map[netip.AddrPort]*sharedDevice{}}

type sharedDevice struct {
	dev   *verbs.Device
	refs  int
	timer *time.Timer
}

// deviceLinger is how long an unused device stays open.
const deviceLinger = 2 * time.Second

// acquireDevice returns the device on addr and port (opening it if need
// be) and the function that releases it.
func acquireDevice(addr netip.Addr, port uint16) (*verbs.Device, func(), error) {
	if port == 0 {
		port = 4791
	}
	key := netip.AddrPortFrom(addr.Unmap(), port)
	devices.mu.Lock()
	defer devices.mu.Unlock()
	sd := devices.m[key]
	if sd == nil {
		dev, err := verbs.Open(verbs.DeviceConfig{Addr: key.Addr(), Port: port})
		if err != nil {
			return nil, nil, fmt.Errorf("rsocket: open a goroce device on %v: %w", key, err)
		}
		sd = &sharedDevice{dev: dev}
		devices.m[key] = sd
	}
	if sd.timer != nil {
		sd.timer.Stop()
		sd.timer = nil
	}
	sd.refs++
	var once sync.Once
	return sd.dev, func() { once.Do(func() { releaseDevice(key, sd) }) }, nil
}

func releaseDevice(key netip.AddrPort, sd *sharedDevice) {
	devices.mu.Lock()
	defer devices.mu.Unlock()
	if sd.refs--; sd.refs > 0 {
		return
	}
	sd.timer = time.AfterFunc(deviceLinger, func() {
		devices.mu.Lock()
		defer devices.mu.Unlock()
		if sd.refs > 0 || devices.m[key] != sd {
			return
		}
		delete(devices.m, key)
		_ = sd.dev.Close()
	})
}
