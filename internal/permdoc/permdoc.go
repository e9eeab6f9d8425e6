// Package permdoc reads the IAM policies of doc/permissions.md, so that
// the tests that run each use of ddblock can check every DynamoDB action
// it sends against the policy the page gives for that use.
//
// The page names each policy with a comment line
//
//	<!-- policy: NAME -->
//
// followed (blank lines aside) by a fenced ```json block holding one IAM
// policy document. The parser is strict where a lax one would let the
// page drift from least privilege unnoticed: only Allow statements, only
// dynamodb: actions named in full (no wildcards), only table ARNs with
// no wildcard, and no key an IAM policy would not have. Anything else is
// an error naming the line of the page, so a broken policy fails the
// tests instead of being skipped.
package permdoc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

// ARNPrefix is how every resource on the page begins: the placeholders
// REGION and ACCOUNT stand for the reader's own, and the table's name
// follows.
const ARNPrefix = "arn:aws:dynamodb:REGION:ACCOUNT:table/"

// TableARN is the page's ARN of the table named (or standing as a
// placeholder) table.
func TableARN(table string) string { return ARNPrefix + table }

// Grant is one action allowed on one resource, such as
// {"dynamodb:GetItem", "arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"}.
type Grant struct {
	Action   string
	Resource string
}

// Policy is one policy of the page.
type Policy struct {
	// Name is the policy's name in its marker.
	Name string
	// Line is the marker's line on the page, counted from 1.
	Line int
	// Grants are the statements' actions, each on each of its
	// statement's resources, sorted, without repeats.
	Grants []Grant
}

// Allows reports whether the policy allows action on resource. IAM
// compares action names without regard to case, and ARNs with it.
func (p *Policy) Allows(action, resource string) bool {
	for _, g := range p.Grants {
		if strings.EqualFold(g.Action, action) && g.Resource == resource {
			return true
		}
	}
	return false
}

// Compare checks what a use sent against the policy: denied are the
// grants of sent that the policy does not allow (a user with the policy
// would meet AccessDenied), unused those the policy allows that are not
// in sent (more than the use needs, or a path its test did not run).
// Both are sorted.
func (p *Policy) Compare(sent []Grant) (denied, unused []Grant) {
	for _, g := range sent {
		if !p.Allows(g.Action, g.Resource) && !slices.Contains(denied, g) {
			denied = append(denied, g)
		}
	}
	for _, g := range p.Grants {
		if !slices.ContainsFunc(sent, func(s Grant) bool { return strings.EqualFold(s.Action, g.Action) && s.Resource == g.Resource }) {
			unused = append(unused, g)
		}
	}
	slices.SortFunc(denied, compareGrants)
	return denied, unused
}

func compareGrants(a, b Grant) int {
	if c := strings.Compare(a.Resource, b.Resource); c != 0 {
		return c
	}
	return strings.Compare(a.Action, b.Action)
}

var (
	// marker is a policy's marker line; name is lower case words with
	// hyphens, as the tests spell features.
	marker = regexp.MustCompile(`^<!--\s*policy:\s*([a-z0-9]+(?:-[a-z0-9]+)*)\s*-->$`)
	// action is a DynamoDB action named in full.
	action = regexp.MustCompile(`^dynamodb:[A-Za-z]+$`)
	// resource is a table ARN of the page, without wildcards or an
	// index: the lock table has no index, and a narrower ARN is the
	// point of the page.
	resource = regexp.MustCompile(`^` + regexp.QuoteMeta(ARNPrefix) + `[A-Za-z0-9_.-]+$`)
)

// ParseFile reads the page at path; see [Parse].
func ParseFile(path string) (map[string]*Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	policies, err := Parse(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return policies, nil
}

// Parse returns the policies of the page, by name. It fails on a marker
// not followed by a ```json block, on a comment line about a policy that
// is not a marker, on a name given twice, and on a policy that is not
// one this package accepts (see the package comment).
func Parse(page string) (map[string]*Policy, error) {
	lines := strings.Split(page, "\n")
	policies := map[string]*Policy{}
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(line, "<!--") || !strings.Contains(line, "policy") {
			continue // prose may quote a marker; a marker is a line of its own
		}
		m := marker.FindStringSubmatch(line)
		if m == nil {
			return nil, fmt.Errorf("line %d: %q looks like a policy marker but is not <!-- policy: NAME -->", i+1, line)
		}
		name, at := m[1], i+1
		if prev, dup := policies[name]; dup {
			return nil, fmt.Errorf("line %d: policy %q is named on line %d already", at, name, prev.Line)
		}
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		if j == len(lines) || strings.TrimSpace(lines[j]) != "```json" {
			return nil, fmt.Errorf("line %d: policy %q is not followed by a ```json block", at, name)
		}
		var body []string
		closed := false
		for j++; j < len(lines); j++ {
			if strings.TrimSpace(lines[j]) == "```" {
				closed = true
				break
			}
			body = append(body, lines[j])
		}
		if !closed {
			return nil, fmt.Errorf("line %d: the ```json block of policy %q is not closed", at, name)
		}
		grants, err := parsePolicy(strings.Join(body, "\n"))
		if err != nil {
			return nil, fmt.Errorf("line %d: policy %q: %w", at, name, err)
		}
		policies[name] = &Policy{Name: name, Line: at, Grants: grants}
		i = j
	}
	return policies, nil
}

// parsePolicy reads one policy document and returns what it allows.
func parsePolicy(doc string) ([]Grant, error) {
	var top map[string]json.RawMessage
	if err := strictUnmarshal(doc, &top); err != nil {
		return nil, err
	}
	if err := onlyKeys(top, "Version", "Statement"); err != nil {
		return nil, err
	}
	var version string
	if err := json.Unmarshal(top["Version"], &version); err != nil || version != "2012-10-17" {
		return nil, fmt.Errorf(`"Version" must be "2012-10-17", the current policy language`)
	}
	var statements []map[string]json.RawMessage
	if err := json.Unmarshal(top["Statement"], &statements); err != nil || len(statements) == 0 {
		return nil, fmt.Errorf(`"Statement" must be a non-empty array of statements`)
	}
	var grants []Grant
	for n, st := range statements {
		if err := onlyKeys(st, "Effect", "Action", "Resource", "Sid"); err != nil {
			return nil, fmt.Errorf("statement %d: %w", n+1, err)
		}
		if _, ok := st["Sid"]; ok {
			var sid string
			if err := json.Unmarshal(st["Sid"], &sid); err != nil {
				return nil, fmt.Errorf(`statement %d: "Sid" must be a string`, n+1)
			}
		}
		var effect string
		if err := json.Unmarshal(st["Effect"], &effect); err != nil || effect != "Allow" {
			// A Deny would need the tests to evaluate policies the way
			// IAM does; the page has no use for one.
			return nil, fmt.Errorf(`statement %d: "Effect" must be "Allow"`, n+1)
		}
		actions, err := stringOrList(st["Action"], action, "Action", "a dynamodb: action named in full, without wildcards")
		if err != nil {
			return nil, fmt.Errorf("statement %d: %w", n+1, err)
		}
		resources, err := stringOrList(st["Resource"], resource, "Resource", "a table ARN "+ARNPrefix+"NAME, without wildcards")
		if err != nil {
			return nil, fmt.Errorf("statement %d: %w", n+1, err)
		}
		for _, a := range actions {
			for _, r := range resources {
				grants = append(grants, Grant{Action: a, Resource: r})
			}
		}
	}
	slices.SortFunc(grants, compareGrants)
	return slices.Compact(grants), nil
}

// strictUnmarshal decodes exactly one JSON value, refusing trailing text.
func strictUnmarshal(doc string, v any) error {
	dec := json.NewDecoder(strings.NewReader(doc))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return fmt.Errorf("text after the policy's JSON object")
	}
	return nil
}

// onlyKeys checks that obj has every key of want but "Sid", and no other.
// The keys are compared exactly: encoding/json would match "statement"
// to "Statement", which IAM does not.
func onlyKeys(obj map[string]json.RawMessage, want ...string) error {
	for k := range obj {
		if !slices.Contains(want, k) {
			return fmt.Errorf("unexpected key %q (want %s)", k, strings.Join(want, ", "))
		}
	}
	for _, k := range want {
		if _, ok := obj[k]; !ok && k != "Sid" {
			return fmt.Errorf("missing key %q", k)
		}
	}
	return nil
}

// stringOrList reads an IAM field that holds one string or a list of
// them, each matching pattern.
func stringOrList(raw json.RawMessage, pattern *regexp.Regexp, field, what string) ([]string, error) {
	var list []string
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var one string
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, fmt.Errorf("%q: %w", field, err)
		}
		list = []string{one}
	} else if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("%q must be a string or an array of strings", field)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("%q is empty", field)
	}
	for _, s := range list {
		if !pattern.MatchString(s) {
			return nil, fmt.Errorf("%q has %q; want %s", field, s, what)
		}
	}
	return list, nil
}
