package verbs

import "github.com/goroce/goroce/internal/racesync"

// raceSync marks a point where memory handed to or taken from the device is
// synchronised, for the race detector (see internal/racesync); it compiles
// to nothing without -race.
func raceSync() { racesync.Sync() }
