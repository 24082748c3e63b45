//go:build goroce_faults

package main

import (
	"flag"
	"math/rand/v2"

	"github.com/goroce/goroce/verbs"
)

// dropProb is --drop: the share of received RoCE packets each device drops;
// markCE is --mark-ce: the share it marks CE. Process-wide settings, as the
// devices of a --loopback run share them.
var dropProb, markCE float64

// defineFaultFlags defines --drop and --mark-ce: with the goroce_faults
// tag, goroce-perf runs on a lossy or congested path without root,
// iptables, netem or an ECN-marking queue (verbs.Faults).
func defineFaultFlags(fs *flag.FlagSet) {
	fs.Float64Var(&dropProb, "drop", 0, "drop received RoCE packets with this probability (fault injection, goroce_faults builds)")
	fs.Float64Var(&markCE, "mark-ce", 0, "mark received ECN-capable RoCE packets CE with this probability, as a congested queue would (fault injection, goroce_faults builds)")
}

// openDevice opens the device, through verbs.OpenWithFaults when --drop or
// --mark-ce is given.
func openDevice(dc verbs.DeviceConfig) (*verbs.Device, error) {
	if dropProb == 0 && markCE == 0 {
		return verbs.Open(dc)
	}
	return verbs.OpenWithFaults(dc, verbs.Faults{Seed: rand.Uint64(), Drop: dropProb, MarkCE: markCE})
}
