module github.com/goroce/goroce/examples/apps

go 1.26.0

require github.com/goroce/goroce v0.0.0

require golang.org/x/sys v0.50.0 // indirect

replace github.com/goroce/goroce => ../../
