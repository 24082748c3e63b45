module github.com/goroce/goroce

go 1.26.0

require (
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
