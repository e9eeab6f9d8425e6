package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ddblock/ddblock/internal/faultproxy"
)

// A permission AWS refuses ends every command at once with exit 77
// (EX_NOPERM), its message naming the refused action: run does not wait
// through it however long --wait is, and leader --watch does not watch on.
func TestRunAccessDenied(t *testing.T) {
	f, proxy := newProxiedFixture(t)
	f.env = append(f.env, "AWS_MAX_ATTEMPTS=1")
	check := func(what string, r result, took time.Duration, action string) {
		t.Helper()
		if r.code != exitNoPerm || !strings.Contains(r.stderr, "not authorized to perform: dynamodb:"+action) ||
			!strings.Contains(r.stderr, "ACCESS_DENIED") || strings.Contains(r.stderr, "trying again") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: want exit %d, one line naming dynamodb:%s and no retry: %v", what, exitNoPerm, action, r)
		}
		if took > 20*time.Second {
			t.Errorf("%s: took %v: a refusal must end it at once", what, took)
		}
	}

	fault := proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "PutItem"})
	start := time.Now()
	r := f.run("run", append(slices.Clone(timingFlags), "--wait", "1m", "job", "--", "true")...)
	check("run --wait 1m", r, time.Since(start), "PutItem")
	start = time.Now()
	r = f.run("run", append(slices.Clone(timingFlags), "--wait", "0", "job", "--", "true")...)
	check("run --wait 0", r, time.Since(start), "PutItem")
	fault.Remove()

	fault = proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "GetItem"})
	start = time.Now()
	r = f.run("get", "job")
	check("get", r, time.Since(start), "GetItem")
	start = time.Now()
	r = f.run("leader", "--watch", "--every", "100ms", "job")
	check("leader --watch", r, time.Since(start), "GetItem")
	fault.Remove()

	proxy.MustInject(faultproxy.Rule{Kind: faultproxy.AccessDenied, Op: "DescribeTable"})
	start = time.Now()
	r = f.run("create-table", "--if-not-exists", "--on-demand", "--poll-interval", "10ms")
	check("create-table", r, time.Since(start), "DescribeTable")
}
