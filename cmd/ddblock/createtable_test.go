package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// globalTableStub answers DescribeTable with an ACTIVE global table
// replicated with eventual consistency (MREC), and DescribeTimeToLive
// with TTL on the default attribute: what neither local server can
// serve. It records the operations asked for.
type globalTableStub struct {
	mu  sync.Mutex
	ops []string
}

func (s *globalTableStub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	var body any
	switch op {
	case "DescribeTable":
		body = map[string]any{"Table": map[string]any{
			"TableName":   "global_locks",
			"TableStatus": "ACTIVE",
			"KeySchema": []map[string]string{
				{"AttributeName": "lock_key", "KeyType": "HASH"},
				{"AttributeName": "sort_key", "KeyType": "RANGE"},
			},
			"AttributeDefinitions": []map[string]string{
				{"AttributeName": "lock_key", "AttributeType": "S"},
				{"AttributeName": "sort_key", "AttributeType": "S"},
			},
			"Replicas": []map[string]string{
				{"RegionName": "us-east-1", "ReplicaStatus": "ACTIVE"},
				{"RegionName": "eu-west-1", "ReplicaStatus": "ACTIVE"},
			},
			"MultiRegionConsistency": "EVENTUAL",
		}}
	case "DescribeTimeToLive":
		body = map[string]any{"TimeToLiveDescription": map[string]string{
			"TimeToLiveStatus": "ENABLED", "AttributeName": "expiry_time"}}
	default:
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"__type": "com.amazon.coral.validate#ValidationException", "message": "the stub does not do " + op})
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(body)
}

func (s *globalTableStub) asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ops...)
}

// ensure-table refuses a global table replicated with eventual
// consistency (exit 78, naming the flag that accepts it), and accepts it
// with --single-region-writes. The table is a stubbed DescribeTable
// answer: no local server has global tables.
func TestEnsureTableGlobalTable(t *testing.T) {
	stub := &globalTableStub{}
	srv := httptest.NewServer(stub)
	defer srv.Close()
	f := &fixture{t: t, table: "global_locks", endpoint: srv.URL, env: baseEnv()}

	r := f.run("ensure-table")
	if r.code != exitConfig || !strings.Contains(r.stderr, "multi-Region eventual consistency") ||
		!strings.Contains(r.stderr, "--single-region-writes") || strings.Contains(r.stderr, "WithSingleRegionWrites") {
		t.Errorf("ensure-table of an MREC global table: want exit %d naming --single-region-writes: %v", exitConfig, r)
	}
	if ops := stub.asked(); len(ops) == 0 || ops[0] != "DescribeTable" || strings.Contains(strings.Join(ops, " "), "Update") {
		t.Errorf("calls %v: want DescribeTable first, and nothing changed", ops)
	}

	r = f.run("ensure-table", "--single-region-writes")
	if r.code != 0 || !strings.Contains(r.stdout, "exists already") {
		t.Errorf("ensure-table --single-region-writes of an MREC global table: want exit 0: %v", r)
	}
}
