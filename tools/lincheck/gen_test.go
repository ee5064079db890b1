package main

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// generatedHistory generates a history and reads it back through the file format, as the command
// would.
func generatedHistory(t testing.TB, config generatorConfig, corrupt func([]wireOperation) int) (*history, int) {
	operations := generateHistory(config)
	corrupted := -1
	if corrupt != nil {
		corrupted = corrupt(operations)
	}
	var file bytes.Buffer
	if err := writeHistory(&file, "test", operations); err != nil {
		t.Fatal(err)
	}
	parsed, err := parseHistory(file.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return parsed, corrupted
}

func TestRandom100kOperationHistoryIsLinearizable(t *testing.T) {
	config := defaultGeneratorConfig() // 100,000 operations, 100 keys, 16 clients
	parsed, _ := generatedHistory(t, config, nil)
	if parsed.operationsInFile != config.operations || parsed.unknownWrites == 0 || parsed.unknownReadsDropped == 0 {
		t.Fatalf("generator gave %d operations, %d unknown writes, %d unknown reads: want %d and some of each",
			parsed.operationsInFile, parsed.unknownWrites, parsed.unknownReadsDropped, config.operations)
	}
	report := checkHistory(parsed, time.Minute)
	if report.result != porcupine.Ok {
		t.Fatalf("result %v, want Ok; failures: %+v", report.result, report.failures)
	}
	t.Logf("%d operations, %d keys, %d clients: linearizable, checked in %v",
		parsed.operationsInFile, parsed.keys, parsed.clients, report.elapsed)
}

// The deliberately corrupted history: one get in a 100,000-operation linearizable history is
// changed to return a value that was overwritten before the get was invoked. The checker must
// reject it and name the key and the get.
func TestCorruptedHistoryIsRejected(t *testing.T) {
	config := defaultGeneratorConfig()
	parsed, corrupted := generatedHistory(t, config, corruptOneRead)
	if corrupted < 0 {
		t.Fatal("found no read to corrupt")
	}
	report := checkHistory(parsed, time.Minute)
	if report.result != porcupine.Illegal {
		t.Fatalf("result %v, want Illegal", report.result)
	}
	if len(report.failures) != 1 {
		t.Fatalf("%d keys reported, want 1: %+v", len(report.failures), report.failures)
	}
	failure := report.failures[0]
	var corruptedKey string
	for _, op := range parsed.operations {
		if op.index == corrupted {
			corruptedKey = op.input.key
		}
	}
	if failure.key != corruptedKey {
		t.Errorf("key %q reported, want %q", failure.key, corruptedKey)
	}
	found := false
	for _, op := range failure.stuck {
		found = found || op.Metadata.(operationMetadata).index == corrupted
	}
	if !found {
		t.Errorf("operation %d is not among those that could not be linearized", corrupted)
	}
	t.Logf("corrupted operation %d on key %q rejected in %v (longest prefix %d of %d)",
		corrupted, failure.key, report.elapsed, len(failure.longestPrefix), failure.operations)
}

// corruptOneRead finds, past the middle of the history, a get G and two puts P1 (value a) and P2
// on G's key, all with known outcomes, such that P1 returned before P2 was invoked and P2 returned
// before G was invoked. Written values are unique, so no other write puts a back: a get that
// returns a is not linearizable. It makes G return a and says which operation it changed.
func corruptOneRead(operations []wireOperation) int {
	returned := func(op *wireOperation) (int64, bool) {
		var returnNs int64
		if isNull(op.ReturnNs) || json.Unmarshal(op.ReturnNs, &returnNs) != nil {
			return 0, false
		}
		return returnNs, true
	}
	for g := len(operations) / 2; g < len(operations); g++ {
		get := &operations[g]
		if *get.Op != "get" {
			continue
		}
		if _, ok := returned(get); !ok {
			continue
		}
		for p2 := range operations {
			second := &operations[p2]
			secondReturn, ok := returned(second)
			if *second.Op != "put" || *second.Key != *get.Key || !ok || secondReturn >= *get.InvokeNs {
				continue
			}
			for p1 := range operations {
				first := &operations[p1]
				firstReturn, ok := returned(first)
				if *first.Op != "put" || *first.Key != *get.Key || !ok || firstReturn >= *second.InvokeNs {
					continue
				}
				get.Result = mustMarshal(*first.Value)
				return g
			}
		}
	}
	return -1
}

// The generator itself must give a linearizable history for many seeds and shapes, and the
// corruption must be caught in each; small histories keep this quick. Few unknown outcomes per
// key: proving a violation costs time exponential in the unknown-outcome writes on the failing
// key (see the doc), so a crash-heavy single-key history would only time out.
func TestGeneratedHistoriesAcrossSeedsAndShapes(t *testing.T) {
	corruptedCount := 0
	for seed := int64(1); seed <= 20; seed++ {
		config := generatorConfig{operations: 3000, keys: 1 + int(seed%4), clients: 2 + int(seed%7),
			seed: seed, unknownPerMille: int(seed % 3)}
		parsed, _ := generatedHistory(t, config, nil)
		if result := checkHistory(parsed, time.Minute).result; result != porcupine.Ok {
			t.Fatalf("%+v: result %v, want Ok", config, result)
		}
		parsed, corrupted := generatedHistory(t, config, corruptOneRead)
		if corrupted < 0 {
			continue
		}
		corruptedCount++
		if result := checkHistory(parsed, time.Minute).result; result != porcupine.Illegal {
			t.Fatalf("%+v corrupted at %d: result %v, want Illegal", config, corrupted, result)
		}
	}
	if corruptedCount < 15 {
		t.Errorf("only %d of 20 histories had a read to corrupt", corruptedCount)
	}
}

func BenchmarkCheck100kOperations(b *testing.B) {
	parsed, _ := generatedHistory(b, defaultGeneratorConfig(), nil)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if result := checkHistory(parsed, 0).result; result != porcupine.Ok {
			b.Fatalf("result %v", result)
		}
	}
}

// Measures how long proving a violation takes as unknown-outcome writes pile up on the failing
// key (the table in docs/verification/linearizability.md). Minutes long, so it runs only when
// asked: LINCHECK_MEASURE=1 go test -run RejectionTime -v .
func TestRejectionTimeAgainstUnknownOutcomes(t *testing.T) {
	if os.Getenv("LINCHECK_MEASURE") == "" {
		t.Skip("set LINCHECK_MEASURE=1 to measure")
	}
	for _, unknownPerMille := range []int{0, 1, 2, 3, 4, 5, 6, 8} {
		for seed := int64(1); seed <= 2; seed++ {
			config := generatorConfig{operations: 3000, keys: 1, clients: 8, seed: seed,
				unknownPerMille: unknownPerMille}
			parsed, corrupted := generatedHistory(t, config, corruptOneRead)
			if corrupted < 0 {
				continue
			}
			var readInvokeNs int64
			for _, op := range parsed.operations {
				if op.index == corrupted {
					readInvokeNs = op.invokeNs
				}
			}
			unknownBefore := 0
			for _, op := range parsed.operations {
				if op.output.unknown && op.invokeNs < readInvokeNs {
					unknownBefore++
				}
			}
			report := checkHistory(parsed, 30*time.Second)
			t.Logf("%+v: %d unknown-outcome writes invoked before the corrupted read: %v in %v",
				config, unknownBefore, report.result, report.elapsed)
		}
	}
}
