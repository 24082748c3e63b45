// Package cputime reads the CPU time the process has used, for the
// benchmarks' CPU seconds per GB, on every GOOS.
package cputime
