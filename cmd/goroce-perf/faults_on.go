//go:build goroce_faults

package main

import (
	"flag"
	"math/rand/v2"

	"github.com/goroce/goroce/verbs"
)

// dropProb is --drop: the share of received RoCE packets each device drops.
// A process-wide setting, as the devices of a --loopback run share it.
var dropProb float64

// defineFaultFlags defines --drop: with the goroce_faults tag, goroce-perf
// runs on a lossy path without root, iptables or netem (verbs.Faults).
func defineFaultFlags(fs *flag.FlagSet) {
	fs.Float64Var(&dropProb, "drop", 0, "drop received RoCE packets with this probability (fault injection, goroce_faults builds)")
}

// openDevice opens the device, through verbs.OpenWithFaults when --drop is
// given.
func openDevice(dc verbs.DeviceConfig) (*verbs.Device, error) {
	if dropProb == 0 {
		return verbs.Open(dc)
	}
	return verbs.OpenWithFaults(dc, verbs.Faults{Seed: rand.Uint64(), Drop: dropProb})
}
