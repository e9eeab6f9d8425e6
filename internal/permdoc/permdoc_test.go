package permdoc

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const page = `# Permissions

Some text.

<!-- policy: reader -->

` + "```json" + `
{
  "Version": "2012-10-17",
  "Statement": [
    {
      "Sid": "Read",
      "Effect": "Allow",
      "Action": ["dynamodb:GetItem", "dynamodb:Query"],
      "Resource": "arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"
    }
  ]
}
` + "```" + `

A json block without a marker is not a policy:

` + "```json" + `
{"anything": true}
` + "```" + `

<!-- policy: two-tables -->
` + "```json" + `
{
  "Version": "2012-10-17",
  "Statement": [
    {
      "Effect": "Allow",
      "Action": "dynamodb:ConditionCheckItem",
      "Resource": ["arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE", "arn:aws:dynamodb:REGION:ACCOUNT:table/DATA_TABLE"]
    },
    {
      "Effect": "Allow",
      "Action": ["dynamodb:PutItem", "dynamodb:ConditionCheckItem"],
      "Resource": "arn:aws:dynamodb:REGION:ACCOUNT:table/DATA_TABLE"
    }
  ]
}
` + "```" + `

Prose may quote a marker, <!-- policy: quoted -->, in a line of text.
`

func TestParse(t *testing.T) {
	got, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	table, data := TableARN("TABLE"), TableARN("DATA_TABLE")
	want := map[string]*Policy{
		"reader": {Name: "reader", Line: 5, Grants: []Grant{
			{"dynamodb:GetItem", table}, {"dynamodb:Query", table},
		}},
		"two-tables": {Name: "two-tables", Line: 27, Grants: []Grant{
			// Sorted by resource, then action; the repeat is gone.
			{"dynamodb:ConditionCheckItem", data}, {"dynamodb:PutItem", data},
			{"dynamodb:ConditionCheckItem", table},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("Parse (-want +got):\n%s", diff)
	}
	p := got["two-tables"]
	for _, c := range []struct {
		action, resource string
		allowed          bool
	}{
		{"dynamodb:PutItem", data, true},
		{"DynamoDB:putitem", data, true}, // IAM action names ignore case
		{"dynamodb:PutItem", table, false},
		{"dynamodb:PutItem", TableARN("table"), false}, // ARNs do not
		{"dynamodb:ConditionCheckItem", table, true},
		{"dynamodb:GetItem", table, false},
	} {
		if p.Allows(c.action, c.resource) != c.allowed {
			t.Errorf("Allows(%s, %s) = %v; want %v", c.action, c.resource, !c.allowed, c.allowed)
		}
	}
}

func TestCompare(t *testing.T) {
	policies, err := Parse(page)
	if err != nil {
		t.Fatal(err)
	}
	table := TableARN("TABLE")
	denied, unused := policies["reader"].Compare([]Grant{
		{"dynamodb:Scan", table},
		{"dynamodb:getitem", table}, // IAM action names ignore case
		{"dynamodb:Query", TableARN("other")},
		{"dynamodb:Scan", table},
	})
	if diff := cmp.Diff([]Grant{{"dynamodb:Scan", table}, {"dynamodb:Query", TableARN("other")}}, denied); diff != "" {
		t.Errorf("denied (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Grant{{"dynamodb:Query", table}}, unused); diff != "" {
		t.Errorf("unused (-want +got):\n%s", diff)
	}
}

// policy is a page with one policy whose statement is st.
func policy(st string) string {
	return "<!-- policy: p -->\n```json\n{\"Version\": \"2012-10-17\", \"Statement\": [" + st + "]}\n```\n"
}

const okStatement = `{"Effect": "Allow", "Action": "dynamodb:GetItem", "Resource": "arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"}`

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct {
		name, page, want string
	}{
		{"marker without block", "<!-- policy: p -->\n\nText.\n", "not followed by a ```json block"},
		{"marker before another language", "<!-- policy: p -->\n```yaml\nx: 1\n```\n", "not followed by a ```json block"},
		{"unclosed block", "<!-- policy: p -->\n```json\n{}\n", "not closed"},
		{"misspelt marker", "<!-- policy p -->\n```json\n{}\n```\n", "looks like a policy marker"},
		{"upper-case name", "<!-- policy: Plain -->\n```json\n{}\n```\n", "looks like a policy marker"},
		{"name twice", policy(okStatement) + policy(okStatement), `"p" is named on line 1 already`},
		{"not JSON", "<!-- policy: p -->\n```json\n{\"Version\": \n```\n", "not a JSON object"},
		{"two objects", "<!-- policy: p -->\n```json\n{\"Version\": \"2012-10-17\", \"Statement\": [" + okStatement + "]} {}\n```\n", "text after"},
		{"old version", strings.Replace(policy(okStatement), "2012-10-17", "2008-10-17", 1), `"Version" must be`},
		{"key in the wrong case", strings.Replace(policy(okStatement), `"Statement"`, `"statement"`, 1), `unexpected key "statement"`},
		{"no statement", "<!-- policy: p -->\n```json\n{\"Version\": \"2012-10-17\", \"Statement\": []}\n```\n", "non-empty array"},
		{"deny", policy(strings.Replace(okStatement, "Allow", "Deny", 1)), `"Effect" must be "Allow"`},
		{"condition", policy(strings.Replace(okStatement, `"Effect"`, `"Condition": {}, "Effect"`, 1)), `unexpected key "Condition"`},
		{"no resource", policy(`{"Effect": "Allow", "Action": "dynamodb:GetItem"}`), `missing key "Resource"`},
		{"action wildcard", policy(strings.Replace(okStatement, "dynamodb:GetItem", "dynamodb:Get*", 1)), "without wildcards"},
		{"every action", policy(strings.Replace(okStatement, "dynamodb:GetItem", "*", 1)), "without wildcards"},
		{"another service", policy(strings.Replace(okStatement, "dynamodb:GetItem", "kms:Decrypt", 1)), "dynamodb: action"},
		{"empty actions", policy(strings.Replace(okStatement, `"dynamodb:GetItem"`, `[]`, 1)), `"Action" is empty`},
		{"resource wildcard", policy(strings.Replace(okStatement, "table/TABLE", "table/*", 1)), "without wildcards"},
		{"index ARN", policy(strings.Replace(okStatement, "table/TABLE", "table/TABLE/index/byOwner", 1)), "table ARN"},
		{"real account", policy(strings.Replace(okStatement, "REGION:ACCOUNT", "us-east-1:123456789012", 1)), "table ARN"},
		{"resource not a string", policy(strings.Replace(okStatement, `"arn:aws:dynamodb:REGION:ACCOUNT:table/TABLE"`, `7`, 1)), "string or an array"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse(c.page)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse: %v; want an error containing %q", err, c.want)
			}
		})
	}
}

// The page itself parses, and has policies: the tests that check it
// against what ddblock sends fail on a missing policy, but this one says
// first when the page cannot be read at all.
func TestThePage(t *testing.T) {
	policies, err := ParseFile("../../doc/permissions.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(policies) == 0 {
		t.Fatal("doc/permissions.md has no policy")
	}
}
