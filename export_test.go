package ddblock

// Test-only views of unexported values, for the external tests.
var (
	FairGraceForTest = fairGrace
	LineBoundForTest = lineBound
)
