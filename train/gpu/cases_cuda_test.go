//go:build cuda

package gpu

var matchCases = []matchCase{
	{"tiny", 4, 64, "tc", 5}, {"tiny", 4, 64, "simple", 5}, {"small", 2, 96, "tc", 5}, {"small", 2, 96, "simple", 5},
}
