package main

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/anishathalye/porcupine"
)

func TestStepFollowsTheSequentialSpecification(t *testing.T) {
	absent := kvState{}
	holdsA := kvState{present: true, value: "a"}
	cases := []struct {
		name   string
		state  kvState
		input  kvInput
		output kvOutput
		ok     bool
		after  kvState
	}{
		{"get of an absent key reads absent", absent, kvInput{kind: opGet}, kvOutput{}, true, absent},
		{"get of an absent key cannot read a value", absent, kvInput{kind: opGet},
			kvOutput{found: true, value: "a"}, false, absent},
		{"get reads the value held", holdsA, kvInput{kind: opGet}, kvOutput{found: true, value: "a"}, true, holdsA},
		{"get cannot read another value", holdsA, kvInput{kind: opGet},
			kvOutput{found: true, value: "b"}, false, holdsA},
		{"get of a present key cannot read absent", holdsA, kvInput{kind: opGet}, kvOutput{}, false, holdsA},
		{"put overwrites", holdsA, kvInput{kind: opPut, value: "b"}, kvOutput{}, true,
			kvState{present: true, value: "b"}},
		{"put creates", absent, kvInput{kind: opPut, value: "a"}, kvOutput{}, true, holdsA},
		{"delete of a present key says it existed", holdsA, kvInput{kind: opDelete},
			kvOutput{existed: true}, true, absent},
		{"delete of a present key cannot say it was absent", holdsA, kvInput{kind: opDelete},
			kvOutput{}, false, holdsA},
		{"delete of an absent key says it was absent", absent, kvInput{kind: opDelete}, kvOutput{}, true, absent},
		{"delete of an absent key cannot say it existed", absent, kvInput{kind: opDelete},
			kvOutput{existed: true}, false, absent},
		{"cas from the held value swaps", holdsA,
			kvInput{kind: opCas, expected: "a", expectedPresent: true, value: "b"},
			kvOutput{swapped: true}, true, kvState{present: true, value: "b"}},
		{"cas from the held value cannot fail", holdsA,
			kvInput{kind: opCas, expected: "a", expectedPresent: true, value: "b"},
			kvOutput{}, false, holdsA},
		{"cas from another value fails", holdsA,
			kvInput{kind: opCas, expected: "z", expectedPresent: true, value: "b"},
			kvOutput{}, true, holdsA},
		{"cas from absent swaps on an absent key", absent,
			kvInput{kind: opCas, value: "a"}, kvOutput{swapped: true}, true, holdsA},
		{"cas from absent fails on a present key", holdsA,
			kvInput{kind: opCas, value: "b"}, kvOutput{}, true, holdsA},
		{"cas from absent cannot swap on a present key", holdsA,
			kvInput{kind: opCas, value: "b"}, kvOutput{swapped: true}, false, holdsA},
		{"cas from a value fails on an absent key", absent,
			kvInput{kind: opCas, expected: "", expectedPresent: true, value: "b"}, kvOutput{}, true, absent},
		{"unknown put takes effect", absent, kvInput{kind: opPut, value: "a"},
			kvOutput{unknown: true}, true, holdsA},
		{"unknown delete takes effect", holdsA, kvInput{kind: opDelete}, kvOutput{unknown: true}, true, absent},
		{"unknown cas swaps when it matches", holdsA,
			kvInput{kind: opCas, expected: "a", expectedPresent: true, value: "b"},
			kvOutput{unknown: true}, true, kvState{present: true, value: "b"}},
		{"unknown cas changes nothing when it does not match", holdsA,
			kvInput{kind: opCas, expected: "z", expectedPresent: true, value: "b"},
			kvOutput{unknown: true}, true, holdsA},
	}
	for _, c := range cases {
		ok, after := stepKV(c.state, c.input, c.output)
		if ok != c.ok {
			t.Errorf("%s: step says %v, want %v", c.name, ok, c.ok)
			continue
		}
		if ok && after.(kvState) != c.after {
			t.Errorf("%s: state after is %+v, want %+v", c.name, after, c.after)
		}
	}
}

func TestPartitionByKeyKeepsHistoryOrderWithinAKey(t *testing.T) {
	operations := []porcupine.Operation{
		{Input: kvInput{kind: opPut, key: "b", value: "1"}, Output: kvOutput{}},
		{Input: kvInput{kind: opPut, key: "a", value: "2"}, Output: kvOutput{}},
		{Input: kvInput{kind: opPut, key: "b", value: "3"}, Output: kvOutput{}},
	}
	partitions := partitionByKey(operations)
	if len(partitions) != 2 {
		t.Fatalf("got %d partitions, want 2", len(partitions))
	}
	if key := partitions[0][0].Input.(kvInput).key; key != "a" {
		t.Errorf("first partition is key %q, want \"a\" (sorted order)", key)
	}
	if values := fmt.Sprintf("%s %s", partitions[1][0].Input.(kvInput).value,
		partitions[1][1].Input.(kvInput).value); values != "1 3" {
		t.Errorf("partition of \"b\" holds %s, want 1 3 in history order", values)
	}
}

// A differential test, as etcd's raft does for quorum math: a deliberately simple, exhaustive
// linearizability check (every subset of the unknown-outcome writes may be dropped, every order
// of the rest that respects real time is tried, against a plain map) must agree with porcupine
// and the model on many small random histories, linearizable or not. It checks the model's
// semantics and the "return time +infinity" treatment of unknown outcomes together.
func TestCheckerAgreesWithExhaustiveSearchOnSmallHistories(t *testing.T) {
	random := rand.New(rand.NewSource(7))
	const histories = 3000
	verdicts := map[bool]int{}
	for round := 0; round < histories; round++ {
		operations := randomSmallHistory(random)
		parsed := &history{operations: operations, keys: len(sortedKeys(operations))}
		got := checkHistory(parsed, 0).result
		want := exhaustivelyLinearizable(operations)
		verdicts[want]++
		if (got == porcupine.Ok) != want {
			t.Fatalf("round %d: porcupine says %v, exhaustive search says linearizable=%v for:\n%s",
				round, got, want, describeOperations(operations))
		}
	}
	// The generator must produce both kinds, or the test proves little.
	if verdicts[true] < histories/10 || verdicts[false] < histories/10 {
		t.Fatalf("unbalanced test cases: %d linearizable, %d not", verdicts[true], verdicts[false])
	}
	t.Logf("%d linearizable and %d non-linearizable random histories agree", verdicts[true], verdicts[false])
}

func randomSmallHistory(random *rand.Rand) []operation {
	count := 1 + random.Intn(6)
	keys := []string{"x", "y"}
	values := []string{"a", "b"}
	operations := make([]operation, 0, count)
	for i := 0; i < count; i++ {
		invokeNs := int64(random.Intn(20))
		op := operation{
			index:    i,
			client:   int64(i),
			input:    kvInput{kind: opKind(random.Intn(4)), key: keys[random.Intn(len(keys))]},
			invokeNs: invokeNs,
			returnNs: invokeNs + int64(random.Intn(8)),
		}
		switch op.input.kind {
		case opPut:
			op.input.value = values[random.Intn(2)]
		case opCas:
			op.input.value = values[random.Intn(2)]
			op.input.expectedPresent = random.Intn(3) > 0
			if op.input.expectedPresent {
				op.input.expected = values[random.Intn(2)]
			}
		}
		if op.input.kind != opGet && random.Intn(5) == 0 {
			op.output.unknown = true
			op.returnNs = returnNsUnknown
		} else {
			switch op.input.kind {
			case opGet:
				op.output.found = random.Intn(3) > 0
				if op.output.found {
					op.output.value = values[random.Intn(2)]
				}
			case opDelete:
				op.output.existed = random.Intn(2) == 0
			case opCas:
				op.output.swapped = random.Intn(2) == 0
			}
		}
		operations = append(operations, op)
	}
	return operations
}

func exhaustivelyLinearizable(operations []operation) bool {
	var unknown []int
	for i := range operations {
		if operations[i].output.unknown {
			unknown = append(unknown, i)
		}
	}
	for dropped := 0; dropped < 1<<len(unknown); dropped++ {
		var kept []operation
		for i := range operations {
			drop := false
			for bit, index := range unknown {
				if index == i && dropped&(1<<bit) != 0 {
					drop = true
				}
			}
			if !drop {
				kept = append(kept, operations[i])
			}
		}
		if someOrderWorks(kept, make([]bool, len(kept)), map[string]string{}, 0) {
			return true
		}
	}
	return false
}

// someOrderWorks tries every next operation that no pending operation must precede in real time.
func someOrderWorks(operations []operation, done []bool, store map[string]string, doneCount int) bool {
	if doneCount == len(operations) {
		return true
	}
	for i := range operations {
		if done[i] {
			continue
		}
		mustWait := false
		for j := range operations {
			if !done[j] && j != i && operations[j].returnNs < operations[i].invokeNs {
				mustWait = true
			}
		}
		if mustWait {
			continue
		}
		next, ok := applyPlainly(store, operations[i])
		if !ok {
			continue
		}
		done[i] = true
		if someOrderWorks(operations, done, next, doneCount+1) {
			return true
		}
		done[i] = false
	}
	return false
}

// applyPlainly is the reference semantics on a Go map, written separately from stepKV.
func applyPlainly(store map[string]string, op operation) (map[string]string, bool) {
	next := make(map[string]string, len(store))
	for key, value := range store {
		next[key] = value
	}
	current, present := store[op.input.key]
	unknown := op.output.unknown
	switch op.input.kind {
	case opGet:
		if op.output.found != present || (present && op.output.value != current) {
			return nil, false
		}
	case opPut:
		next[op.input.key] = op.input.value
	case opDelete:
		if !unknown && op.output.existed != present {
			return nil, false
		}
		delete(next, op.input.key)
	case opCas:
		var swap bool
		if op.input.expectedPresent {
			swap = present && current == op.input.expected
		} else {
			swap = !present
		}
		if !unknown && op.output.swapped != swap {
			return nil, false
		}
		if swap {
			next[op.input.key] = op.input.value
		}
	}
	return next, true
}

func describeOperations(operations []operation) string {
	text := ""
	for _, op := range operations {
		text += fmt.Sprintf("  [%d, %s] %s\n", op.invokeNs, describeTime(op.returnNs),
			describeOperation(op.input, op.output))
	}
	return text
}
