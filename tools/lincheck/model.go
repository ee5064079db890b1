package main

// The sequential specification of the key-value store, and the check of a history against it.

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// kvState is the state of one key: the model is partitioned by key, so a partition's state is a
// single register that may be absent. Comparable, so porcupine's default equality works.
type kvState struct {
	present bool
	value   string
}

// operationMetadata rides along with each porcupine operation so reports can name it.
type operationMetadata struct {
	index  int
	client int64
}

// kvModel is a map from keys to values, checked one key at a time. Every operation touches one
// key, so a history is linearizable if and only if each key's sub-history is (linearizability is
// local: Herlihy and Wing, 1990).
var kvModel = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return kvState{} },
	Step:      stepKV,
	Hash: func(state interface{}) uint64 {
		s := state.(kvState)
		hasher := fnv.New64a()
		if s.present {
			hasher.Write([]byte{1})
			hasher.Write([]byte(s.value))
		}
		return hasher.Sum64()
	},
	DescribeOperation: func(input, output interface{}) string {
		return describeOperation(input.(kvInput), output.(kvOutput))
	},
	DescribeState: func(state interface{}) string {
		return describeState(state.(kvState))
	},
	DescribeOperationMetadata: func(info interface{}) string {
		if info == nil {
			return ""
		}
		meta := info.(operationMetadata)
		return fmt.Sprintf("operation %d, client %d", meta.index, meta.client)
	},
}

// stepKV applies one operation to one key's state. It says whether the output the client saw is
// possible from that state, and returns the state after the operation. An operation whose outcome
// is unknown accepts any output: it is linearized where it took effect, or after every other
// operation if it never did (its return time is +infinity).
func stepKV(state, input, output interface{}) (bool, interface{}) {
	current := state.(kvState)
	in := input.(kvInput)
	out := output.(kvOutput)
	switch in.kind {
	case opGet:
		if out.unknown {
			return true, current
		}
		if out.found != current.present {
			return false, current
		}
		return !out.found || out.value == current.value, current
	case opPut:
		return true, kvState{present: true, value: in.value}
	case opDelete:
		if !out.unknown && out.existed != current.present {
			return false, current
		}
		return true, kvState{}
	case opCas:
		matches := in.expectedPresent == current.present &&
			(!in.expectedPresent || in.expected == current.value)
		if !out.unknown && out.swapped != matches {
			return false, current
		}
		if matches {
			return true, kvState{present: true, value: in.value}
		}
		return true, current
	}
	return false, current
}

// partitionByKey splits a history into one sub-history per key, in sorted key order (so
// partition i of a check's result belongs to the i-th key of sortedKeys), each in history order.
func partitionByKey(operations []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string][]porcupine.Operation)
	for _, op := range operations {
		key := op.Input.(kvInput).key
		byKey[key] = append(byKey[key], op)
	}
	keys := make([]string, 0, len(byKey))
	for key := range byKey {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	partitions := make([][]porcupine.Operation, 0, len(keys))
	for _, key := range keys {
		partitions = append(partitions, byKey[key])
	}
	return partitions
}

// toPorcupine converts validated operations. Client ids become dense (0, 1, ...) in ascending
// order of the ids in the file, because porcupine's visualization draws one lane per id up to the
// largest; the file's id stays in the metadata.
func toPorcupine(operations []operation) []porcupine.Operation {
	clientIds := make([]int64, 0)
	seen := make(map[int64]struct{})
	for i := range operations {
		if _, ok := seen[operations[i].client]; !ok {
			seen[operations[i].client] = struct{}{}
			clientIds = append(clientIds, operations[i].client)
		}
	}
	sort.Slice(clientIds, func(i, j int) bool { return clientIds[i] < clientIds[j] })
	dense := make(map[int64]int, len(clientIds))
	for i, id := range clientIds {
		dense[id] = i
	}
	converted := make([]porcupine.Operation, len(operations))
	for i := range operations {
		op := &operations[i]
		converted[i] = porcupine.Operation{
			ClientId: dense[op.client],
			Input:    op.input,
			Call:     op.invokeNs,
			Output:   op.output,
			Return:   op.returnNs,
			Metadata: operationMetadata{index: op.index, client: op.client},
		}
	}
	return converted
}

// keyFailure describes one key whose sub-history could not be linearized.
type keyFailure struct {
	key        string
	operations int
	// longestPrefix is the longest sequence of the key's operations porcupine could linearize
	// (as porcupine operations, in linearization order).
	longestPrefix []porcupine.Operation
	// stateAfterPrefix is the key's state after longestPrefix.
	stateAfterPrefix kvState
	// stuck are the key's operations outside longestPrefix, earliest return first.
	stuck []porcupine.Operation
	// maybeUnfinished is set when the check timed out, so this key may only be unfinished.
	maybeUnfinished bool
}

// checkReport is the outcome of checking a history.
type checkReport struct {
	result   porcupine.CheckResult
	elapsed  time.Duration
	keys     int
	failures []keyFailure
	info     porcupine.LinearizationInfo
	history  []porcupine.Operation
}

// checkHistory runs porcupine over the history, partitioned by key. A timeout of 0 means none.
func checkHistory(parsed *history, timeout time.Duration) checkReport {
	operations := toPorcupine(parsed.operations)
	start := time.Now()
	result, info := porcupine.CheckOperationsVerbose(kvModel, operations, timeout)
	elapsed := time.Since(start)
	report := checkReport{
		result:  result,
		elapsed: elapsed,
		keys:    parsed.keys,
		info:    info,
		history: operations,
	}
	if result != porcupine.Illegal {
		return report
	}
	// Porcupine reports one verdict for the whole history; find the keys behind it. A key's
	// sub-history is linearizable exactly when one of its partial linearizations covers it all.
	// When the check also ran into its timeout, a key may be incomplete only because its check
	// was cancelled: say so rather than guess.
	timedOut := timeout > 0 && elapsed >= timeout
	partitions := partitionByKey(operations)
	partials := info.PartialLinearizations()
	for p, partition := range partitions {
		longest := []int(nil)
		if p < len(partials) {
			for _, candidate := range partials[p] {
				if len(candidate) > len(longest) {
					longest = candidate
				}
			}
		}
		if len(longest) == len(partition) {
			continue
		}
		failure := keyFailure{
			key:             partition[0].Input.(kvInput).key,
			operations:      len(partition),
			maybeUnfinished: timedOut,
		}
		inPrefix := make([]bool, len(partition))
		var state interface{} = kvState{}
		for _, id := range longest {
			inPrefix[id] = true
			failure.longestPrefix = append(failure.longestPrefix, partition[id])
			_, state = stepKV(state, partition[id].Input, partition[id].Output)
		}
		failure.stateAfterPrefix = state.(kvState)
		for id, op := range partition {
			if !inPrefix[id] {
				failure.stuck = append(failure.stuck, op)
			}
		}
		sort.SliceStable(failure.stuck, func(i, j int) bool {
			return failure.stuck[i].Return < failure.stuck[j].Return
		})
		report.failures = append(report.failures, failure)
	}
	return report
}

// describeOperation renders an operation for reports and the visualization, for example
// `cas("k1", absent -> "v2") = swapped`.
func describeOperation(in kvInput, out kvOutput) string {
	var call string
	switch in.kind {
	case opGet:
		call = fmt.Sprintf("get(%s)", quote(in.key))
	case opPut:
		call = fmt.Sprintf("put(%s, %s)", quote(in.key), quote(in.value))
	case opDelete:
		call = fmt.Sprintf("delete(%s)", quote(in.key))
	case opCas:
		expected := "absent"
		if in.expectedPresent {
			expected = quote(in.expected)
		}
		call = fmt.Sprintf("cas(%s, %s -> %s)", quote(in.key), expected, quote(in.value))
	}
	if out.unknown {
		return call + " = unknown outcome"
	}
	switch in.kind {
	case opGet:
		if !out.found {
			return call + " = absent"
		}
		return call + " = " + quote(out.value)
	case opDelete:
		if out.existed {
			return call + " = existed"
		}
		return call + " = was absent"
	case opCas:
		if out.swapped {
			return call + " = swapped"
		}
		return call + " = not swapped"
	}
	return call
}

func describeState(state kvState) string {
	if !state.present {
		return "absent"
	}
	return quote(state.value)
}

// quote renders a key or value, shortened when long: reports are read by people.
func quote(text string) string {
	const limit = 40
	if len(text) > limit {
		return strconv.Quote(text[:limit]) + fmt.Sprintf("...(%d bytes)", len(text))
	}
	return strconv.Quote(text)
}

// describeTime renders a return time, which is +infinity for an unknown outcome.
func describeTime(ns int64) string {
	if ns == returnNsUnknown {
		return "never"
	}
	return strconv.FormatInt(ns, 10)
}
