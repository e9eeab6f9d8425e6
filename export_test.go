package ddblock

// OutcomeUnknown exposes outcomeUnknown to the external tests, which
// need the test server to produce real failures.
var OutcomeUnknown = outcomeUnknown
