//go:build race

package main

// raceDetector reports a binary built with -race.
const raceDetector = true
