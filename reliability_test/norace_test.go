//go:build !race

package reliability

// raceEnabled is true when the tests run with the race detector.
const raceEnabled = false
