// Package tooldev is what goroce's command-line tools share to open the
// device they run on: a goroce device (verbs.Open), or, with --hw, a kernel
// RDMA device through libibverbs (verbs.OpenHardware, in a binary built
// with cgo and -tags goroce_ibverbs). The tools name the device with -d
// (--ib-dev), as rdma-core's examples and perftest do; --hw says the name
// is a kernel device's (rxe0, mlx5_0) rather than a goroce device's.
//
// On a kernel device the GID table is the NIC's: RoCE v1 and v2 entries
// for every address of its interface. GIDIndex picks the one to send from
// when the command line names none, as perftest does.
//
// It also starts the tools' --cpuprofile (StartCPUProfile).
package tooldev

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/goroce/goroce/verbs"
)

// Flag is the name of the flag that selects a kernel RDMA device.
const Flag = "hw"

// Usage is the text of --hw in a tool's usage, after the flag's name.
const Usage = "-d names a kernel RDMA device (rxe0, mlx5_0), opened through\n" +
	"libibverbs (a build with -tags goroce_ibverbs)"

// Open opens the device a tool runs on: with hw the kernel RDMA device
// name ("" for the first one), and otherwise open(cfg) with cfg.Name set
// to name (open is verbs.Open, or a tool's own, e.g. with fault
// injection).
func Open(hw bool, name string, cfg verbs.DeviceConfig, open func(verbs.DeviceConfig) (*verbs.Device, error)) (*verbs.Device, error) {
	if hw {
		return verbs.OpenHardware(name)
	}
	cfg.Name = name
	return open(cfg)
}

// OpenAddr opens the kernel RDMA device that has addr in its GID table: the
// device of the network interface holding addr, which librdmacm resolves
// the address to as well.
func OpenAddr(addr netip.Addr) (*verbs.Device, error) {
	names, err := verbs.HardwareDevices()
	if err != nil {
		return nil, err
	}
	addr = addr.Unmap()
	for _, name := range names {
		d, err := verbs.OpenHardware(name)
		if err != nil {
			return nil, err
		}
		if _, ok := roceV2(d, addr); ok {
			return d, nil
		}
		if err := d.Close(); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no kernel RDMA device has %v in its GID table (devices: %s)", addr, strings.Join(names, ", "))
}

// OpenToward opens the kernel RDMA device a connection to host goes
// from: the one holding local if it is valid, else the one holding the
// source address the kernel's routing picks toward host (a UDP connect,
// which sends nothing, tells).
func OpenToward(ctx context.Context, local netip.Addr, host string) (*verbs.Device, error) {
	if !local.IsValid() {
		var d net.Dialer
		c, err := d.DialContext(ctx, "udp", net.JoinHostPort(host, "4791"))
		if err != nil {
			return nil, err
		}
		local = c.LocalAddr().(*net.UDPAddr).AddrPort().Addr()
		_ = c.Close()
	}
	return OpenAddr(local)
}

// Toward is the kernel RDMA device a tool's connections go from (--hw):
// the first Open opens it, the next ones return it, so that a tool that
// connects once per test of its table opens the device once.
type Toward struct{ dev *verbs.Device }

// Open returns the device, opening it with OpenToward the first time.
func (w *Toward) Open(ctx context.Context, local netip.Addr, host string) (*verbs.Device, error) {
	if w.dev == nil {
		d, err := OpenToward(ctx, local, host)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", Flag, err)
		}
		w.dev = d
	}
	return w.dev, nil
}

// Close closes the device if Open opened it.
func (w *Toward) Close() error {
	if w.dev == nil {
		return nil
	}
	return w.dev.Close()
}

// GIDIndex returns the index of the GID a tool sends from on d when the
// command line gives none. On a goroce device it is 1, the GID of the
// device's address. On a kernel device it is the RoCE v2 entry of addr if
// the table has one (addr: the address the tool's peer is reached from),
// and otherwise the first RoCE v2 entry of an IPv4 address, perftest's
// choice: RoCE v1 entries and rxe's link-local IPv6 entries reach no peer
// through an IPv4 route.
func GIDIndex(d *verbs.Device, addr netip.Addr) (int, error) {
	if !d.Hardware() {
		return 1, nil
	}
	if i, ok := roceV2(d, addr.Unmap()); ok {
		return i, nil
	}
	for _, e := range d.GIDTable() {
		if e.Type == verbs.GIDTypeRoCEv2 && !e.GID.IsZero() && e.GID.Addr().Is4() {
			return e.Index, nil
		}
	}
	return 0, fmt.Errorf("%s has no RoCE v2 GID of an IPv4 address: give the GID index", d.Name())
}

// roceV2 returns the index of d's RoCE v2 GID of addr.
func roceV2(d *verbs.Device, addr netip.Addr) (int, bool) {
	if !addr.IsValid() {
		return 0, false
	}
	for _, e := range d.GIDTable() {
		if e.Type == verbs.GIDTypeRoCEv2 && e.GID.Addr() == addr {
			return e.Index, true
		}
	}
	return 0, false
}

// GorocOnly returns an error naming the first of the flags names that was
// set on fs's command line, when hw: they configure or report what only a
// goroce device has (its UDP port, its receive goroutines, its congestion
// control, its counters, ...), which a kernel device would silently
// ignore.
func GorocOnly(fs *flag.FlagSet, hw bool, names ...string) error {
	if !hw {
		return nil
	}
	var set string
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			if f.Name == n && set == "" {
				set = f.Name
			}
		}
	})
	if set == "" {
		return nil
	}
	return fmt.Errorf("%s%s: goroce devices only, not with --%s", dashes(set), set, Flag)
}

// Given reports whether one of the flags names was set on fs's command
// line.
func Given(fs *flag.FlagSet, names ...string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) {
		for _, n := range names {
			given = given || f.Name == n
		}
	})
	return given
}

// dashes is the prefix a flag is written with: "-" for one letter.
func dashes(name string) string {
	if len(name) == 1 {
		return "-"
	}
	return "--"
}
