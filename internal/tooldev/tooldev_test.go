package tooldev

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/goroce/goroce/internal/rdmatest/testkit"
	"github.com/goroce/goroce/verbs"
)

func parse(t *testing.T, args ...string) *flag.FlagSet {
	t.Helper()
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("udp-port", 4791, "")
	fs.Bool("x", false, "")
	fs.Int("g", 1, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// TestGorocOnly: a goroce-only flag given with --hw is refused by name,
// one left at its default or given without --hw is not.
func TestGorocOnly(t *testing.T) {
	fs := parse(t, "-x", "--udp-port", "5000")
	err := GorocOnly(fs, true, "udp-port")
	if err == nil || err.Error() != "--udp-port: goroce devices only, not with --hw" {
		t.Fatalf("GorocOnly: %v", err)
	}
	if err := GorocOnly(fs, true, "x"); err == nil || !strings.HasPrefix(err.Error(), "-x: ") {
		t.Fatalf("GorocOnly of a one-letter flag: %v", err)
	}
	if err := GorocOnly(fs, false, "udp-port"); err != nil {
		t.Fatalf("GorocOnly without --hw: %v", err)
	}
	if err := GorocOnly(parse(t, "-x"), true, "udp-port"); err != nil {
		t.Fatalf("GorocOnly of a flag left at its default: %v", err)
	}
}

func TestGiven(t *testing.T) {
	fs := parse(t, "-g", "1")
	if !Given(fs, "gid-idx", "g") || Given(fs, "udp-port") {
		t.Fatal("Given does not tell the flags set from the others")
	}
}

// TestOpenGoroce: without --hw, Open opens a goroce device with the
// configuration and name given, whose GID index to send from is 1.
func TestOpenGoroce(t *testing.T) {
	var got verbs.DeviceConfig
	d, err := Open(false, "dev7", verbs.DeviceConfig{Addr: testkit.Addr(1)}, func(c verbs.DeviceConfig) (*verbs.Device, error) {
		got = c
		return verbs.Open(c)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if got.Name != "dev7" || got.Addr != testkit.Addr(1) || d.Hardware() {
		t.Fatalf("opened %+v (hardware %v)", got, d.Hardware())
	}
	if i, err := GIDIndex(d, testkit.Addr(1)); i != 1 || err != nil {
		t.Fatalf("GIDIndex: %d, %v", i, err)
	}
}
