//go:build !race

package verbs

// raceSync is a no-op without the race detector: the system calls that
// carry every packet already order memory (see race.go).
func raceSync() {}
