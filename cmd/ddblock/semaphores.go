package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ddblock/ddblock"
	"github.com/ddblock/ddblock/internal/hooks"
)

// How ls, get and release show semaphores: a semaphore is one metadata
// item (its number of slots) and a lock item per held slot; ls shows it
// as one entry instead of unrelated items, and get and release explain
// its metadata item, which is not a lock.

// semaphoreEntry is a semaphore as ls shows it: its metadata, and its
// held slots from the same listing as the other locks.
type semaphoreEntry struct {
	info    *ddblock.SemaphoreInfo
	slots   []int
	locks   []*ddblock.LockInfo
	holders []holderJSON
}

// semaphoreJSON is a semaphore as `ls --json` lists it, beside the locks:
// key and sort_key are its metadata item's.
type semaphoreJSON struct {
	Key       string              `json:"key"`
	SortKey   string              `json:"sort_key"`
	Semaphore semaphoreDetailJSON `json:"semaphore"`
}

type semaphoreDetailJSON struct {
	Name string `json:"name"`
	// Slots is the number in force; Span, when above it, the number of
	// slots that may still be held from before a resize to fewer.
	Slots   int            `json:"slots"`
	Span    int            `json:"span,omitempty"`
	Resizes int            `json:"resizes"`
	Held    int            `json:"held"`
	Holders []slotLockJSON `json:"holders"`
	// Waiting is how many fair waiters wait in the semaphore's line;
	// absent when none does.
	Waiting int `json:"waiting,omitempty"`
}

// slotLockJSON is a held slot: its index, and its lock as ls lists locks.
type slotLockJSON struct {
	Slot int `json:"slot"`
	// AboveLimit is true for a slot at or above the number in force,
	// held from before a resize to fewer slots.
	AboveLimit bool `json:"above_limit,omitempty"`
	lockJSON
}

// groupSemaphores reads the table's semaphores (or, with only, the one
// named so) and takes their slots out of locks and holders.
func groupSemaphores(ctx context.Context, client *ddblock.Client, conn *connFlags, only string, locks []*ddblock.LockInfo,
	holders []holderJSON, stderr io.Writer) ([]*ddblock.LockInfo, []holderJSON, []*semaphoreEntry, error) {
	var infos []*ddblock.SemaphoreInfo
	if only != "" {
		info, err := client.GetSemaphore(ctx, only)
		switch {
		case errors.Is(err, ddblock.CodeLockNotFound):
		case errors.Is(err, ddblock.CodeInvalidItem):
			fmt.Fprintf(stderr, "ddblock ls: skipped a semaphore metadata item that is not valid: %s\n", oneLine(err.Error()))
		case err != nil:
			return nil, nil, nil, libError(err, conn.table)
		default:
			infos = append(infos, info)
		}
	} else {
		for info, err := range client.ListSemaphores(ctx) {
			if errors.Is(err, ddblock.CodeInvalidItem) {
				fmt.Fprintf(stderr, "ddblock ls: skipped a semaphore metadata item that is not valid: %s\n", oneLine(err.Error()))
				continue
			}
			if err != nil {
				return nil, nil, nil, libError(err, conn.table)
			}
			infos = append(infos, info)
		}
	}
	slices.SortFunc(infos, func(a, b *ddblock.SemaphoreInfo) int { return strings.Compare(a.Name, b.Name) })
	entries := make([]*semaphoreEntry, len(infos))
	for i, info := range infos {
		entries[i] = &semaphoreEntry{info: info}
	}
	var restLocks []*ddblock.LockInfo
	var restHolders []holderJSON
	for i, l := range locks {
		taken := false
		for _, e := range entries {
			if slot, ok := hooks.SemaphoreSlot(e.info, l.PartitionKey, l.SortKey); ok {
				e.slots = append(e.slots, slot)
				e.locks = append(e.locks, l)
				e.holders = append(e.holders, holders[i])
				taken = true
				break
			}
		}
		if !taken {
			restLocks = append(restLocks, l)
			restHolders = append(restHolders, holders[i])
		}
	}
	if only != "" && conn.pkOnly {
		// Without a sort key the slots have keys of their own
		// ("NAME#slot-I"), which a listing by the partition key NAME
		// does not find: GetSemaphore read them.
		now := time.Now()
		for _, e := range entries {
			for _, l := range e.info.Holders {
				slot, _ := hooks.SemaphoreSlot(e.info, l.PartitionKey, l.SortKey)
				e.slots = append(e.slots, slot)
				e.locks = append(e.locks, l)
				e.holders = append(e.holders, holderByStamp(l, now))
			}
		}
	}
	return restLocks, restHolders, entries, nil
}

// json is the entry as ls --json lists it.
func (e *semaphoreEntry) json(pkOnly bool) semaphoreJSON {
	key, sk := e.info.Name, "slots"
	if pkOnly {
		key, sk = e.info.Name+"#slots", ""
	}
	out := semaphoreJSON{Key: key, SortKey: sk, Semaphore: semaphoreDetailJSON{
		Name: e.info.Name, Slots: e.info.Slots, Resizes: e.info.Resizes, Held: len(e.locks), Holders: []slotLockJSON{}}}
	if e.info.Span > e.info.Slots {
		out.Semaphore.Span = e.info.Span
	}
	for i, l := range e.locks {
		out.Semaphore.Holders = append(out.Semaphore.Holders,
			slotLockJSON{Slot: e.slots[i], AboveLimit: e.slots[i] >= e.info.Slots, lockJSON: toJSON(l, e.holders[i])})
	}
	return out
}

// slotsText is the SLOTS cell: the number in force, and while a shrink
// drains, the number that may still be held.
func slotsText(info *ddblock.SemaphoreInfo) string {
	if info.Span > info.Slots {
		return fmt.Sprintf("%d (resized from %d: draining)", info.Slots, info.Span)
	}
	return fmt.Sprint(info.Slots)
}

// printSemaphores writes ls's table of semaphores, one line each.
func printSemaphores(w io.Writer, entries []*semaphoreEntry) error {
	if len(entries) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SEMAPHORE\tSLOTS\tHELD\tHOLDERS")
	for _, e := range entries {
		var hs []string
		for i, l := range e.locks {
			h := fmt.Sprintf("slot-%d %s %s", e.slots[i], ownerText(l), e.holders[i].text())
			if e.slots[i] >= e.info.Slots {
				h += " [above the limit]"
			}
			hs = append(hs, h)
		}
		holders := "-"
		if len(hs) > 0 {
			holders = strings.Join(hs, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", cell(e.info.Name), slotsText(e.info), len(e.locks), holders)
	}
	return tw.Flush()
}

// semaphoreMetaName returns the semaphore whose metadata item is
// key/sortKey, when a read of it as a lock failed as not a lock item.
func semaphoreMetaName(client *ddblock.Client, err error, key, sortKey string) (string, bool) {
	if !errors.Is(err, ddblock.CodeInvalidItem) {
		return "", false
	}
	return hooks.SemaphoreNameOf(client, key, sortKey)
}

// getSemaphore is get on a semaphore's metadata item: it says so, with
// the semaphore's number of slots and holders.
func getSemaphore(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, name string, asJSON bool) error {
	info, err := client.GetSemaphore(ctx, name)
	if err != nil {
		return libError(err, conn.table)
	}
	e := &semaphoreEntry{info: info}
	now := time.Now()
	for _, l := range info.Holders {
		slot, _ := hooks.SemaphoreSlot(info, l.PartitionKey, l.SortKey)
		e.slots = append(e.slots, slot)
		e.locks = append(e.locks, l)
		e.holders = append(e.holders, holderByStamp(l, now))
	}
	j := e.json(conn.pkOnly)
	waiting, nWaiting := waitingText(ctx, client, conn, j.Key, j.SortKey)
	if asJSON {
		j.Semaphore.Waiting = nWaiting
		return writeJSON(env.stdout, j)
	}
	fmt.Fprintf(env.stdout, "this is the metadata item of semaphore %s (%d slots), not a lock: it holds the number of slots\n",
		cell(name), info.Slots)
	tw := tabwriter.NewWriter(env.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "semaphore\t%s\n", cell(name))
	fmt.Fprintf(tw, "slots\t%s\n", slotsText(info))
	fmt.Fprintf(tw, "resizes\t%d\n", info.Resizes)
	fmt.Fprintf(tw, "held\t%d\n", len(e.locks))
	for i, l := range e.locks {
		above := ""
		if e.slots[i] >= info.Slots {
			above = " [above the limit: held from before a resize, until its holder releases it]"
		}
		fmt.Fprintf(tw, "slot %d\t%s, holder %s, record version number %s%s\n", e.slots[i], ownerText(l), e.holders[i].text(),
			cell(l.RecordVersionNumber), above)
	}
	if waiting != "" {
		fmt.Fprintf(tw, "waiting in line\t%s\n", waiting)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(env.stdout, "change the number with: ddblock resize %s N; see a slot with: %s\n", cell(name), slotGetHint(conn, name))
	return nil
}

// slotGetHint is the get command that shows slot 0 of the semaphore.
func slotGetHint(conn *connFlags, name string) string {
	if conn.pkOnly {
		return "ddblock get " + cell(name+"#slot-0")
	}
	return "ddblock get --sort-key slot-0 " + cell(name)
}

// refuseSemaphoreRelease is release --force on a semaphore's metadata
// item: it is not a lock, and removing it would not free a slot.
func refuseSemaphoreRelease(ctx context.Context, env *environ, client *ddblock.Client, conn *connFlags, name string) error {
	info, err := client.GetSemaphore(ctx, name)
	if err != nil {
		return libError(err, conn.table)
	}
	slot := "--sort-key slot-I " + cell(name)
	if conn.pkOnly {
		slot = cell(name + "#slot-I")
	}
	return usageError("not removed: this is the metadata item of semaphore %s (%d slots, %d held), not a lock: it holds the "+
		"number of slots, and removing it frees no slot. To change the number: ddblock resize %s N. To free a stuck slot: "+
		"ddblock release --force %s (see ddblock ls --key %s)", cell(name), info.Slots, len(info.Holders), cell(name), slot, cell(name))
}
