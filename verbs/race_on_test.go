//go:build race

package verbs_test

// raceDetector reports a binary built with -race, where the long
// randomised tests run fewer rounds.
const raceDetector = true
