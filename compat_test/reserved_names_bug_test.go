//go:build interopbugs

package compat_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// TestPythonAttributesNamedLikeDdblocksOwn reproduces an interoperability
// bug: ddblock gives a meaning to three attribute names that Python
// leaves to the application, so a Python item that uses one of them as an
// additional attribute is misread:
//
//   - "released": true makes every Go client (default options) take a
//     live Python holder's lock at once — two holders;
//   - "fencing_token" of any type but a whole number makes the item
//     unreadable (INVALID_ITEM): Go can neither read nor take the lock;
//   - "heartbeat_time_ms" is hidden from GetLock's additional attributes,
//     and with MaxClockSkew a small number would allow an early takeover.
//
// It fails until ddblock keeps its own attributes out of the
// application's namespace (doc/migrating-from-python.md, "Attribute
// names"). Run it with: go test -tags interopbugs -run NamedLike ./compat_test/
func TestPythonAttributesNamedLikeDdblocksOwn(t *testing.T) {
	for _, tc := range []struct {
		name string
		attr types.AttributeValue
	}{
		{"released", &types.AttributeValueMemberBOOL{Value: true}},
		{"fencing_token", &types.AttributeValueMemberS{Value: "batch-2024-11-22"}},
		{"heartbeat_time_ms", &types.AttributeValueMemberN{Value: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkPythonAttributeIsData(t, tc.name, tc.attr) })
	}
}
