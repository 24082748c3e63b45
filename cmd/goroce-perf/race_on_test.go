//go:build race

package main

// raceEnabled reports a -race build: see TestLoopbackEveryTest.
const raceEnabled = true
