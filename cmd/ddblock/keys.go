package main

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// DynamoDB's limits on key attribute values, in bytes of UTF-8. The
// library refuses the same keys when it acquires a lock (see
// TestKeyChecksAgreeWithLibrary); the CLI checks them for every command,
// since reads and deletes of such keys would otherwise reach DynamoDB and
// come back as confusing errors (a ValidationException that reads like a
// table with the wrong keys, or "no lock" for a key that cannot exist).
const (
	maxPartitionKeyBytes = 2048
	maxSortKeyBytes      = 1024
)

// lockKey checks a lock's key as given on the command line, the same way
// for every command and before anything is sent to DynamoDB, and returns
// the sort key to use: none on a partition-key-only table.
func (c *connFlags) lockKey(key, sortKey string) (string, error) {
	if err := checkKeyValue("KEY", key, maxPartitionKeyBytes); err != nil {
		return "", err
	}
	if c.pkOnly {
		if c.f.isSet("sort-key") {
			return "", usageError("--sort-key does not apply with --partition-key-only: the table has no sort key")
		}
		return "", nil
	}
	if err := checkKeyValue("--sort-key", sortKey, maxSortKeyBytes); err != nil {
		return "", err
	}
	return sortKey, nil
}

// checkKeyValue checks one key attribute value: not empty, valid UTF-8
// (DynamoDB strings are UTF-8), and within DynamoDB's size limit.
func checkKeyValue(what, v string, limit int) error {
	switch {
	case v == "":
		return usageError("%s must not be empty", what)
	case !utf8.ValidString(v):
		return usageError("%s %s is not valid UTF-8", what, strconv.Quote(v))
	case len(v) > limit:
		return usageError("%s is %d bytes, over DynamoDB's limit of %d", what, len(v), limit)
	}
	return nil
}

// lockName names a lock in messages: "key"/"sort key", or "key" alone on
// a partition-key-only table (the only case where the sort key is empty).
func lockName(pk, sk string) string {
	if sk == "" {
		return strconv.Quote(pk)
	}
	return fmt.Sprintf("%s/%s", strconv.Quote(pk), strconv.Quote(sk))
}
