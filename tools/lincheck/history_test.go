package main

import (
	"errors"
	"math/rand"
	"os"
	"strings"
	"testing"
)

// wrap puts operations into a history object.
func wrap(operations string) string {
	return `{"format":"mu-kv-history","version":1,"operations":[` + operations + `]}`
}

func TestParseRejectsBadInputWithAMessageNamingTheProblem(t *testing.T) {
	cases := []struct {
		name    string
		input   string
		message string
	}{
		{"empty input", ``, "empty input"},
		{"not JSON", `hello`, "malformed history JSON"},
		{"truncated", `{"format":"mu-kv-history","version":1,"operations":[`, "malformed history JSON"},
		{"trailing data", wrap(``) + `{}`, "unexpected data after the top-level object"},
		{"top level is an array", `[]`, "want an object"},
		{"missing format", `{"version":1,"operations":[]}`, `missing field "format"`},
		{"wrong format", `{"format":"jepsen","version":1,"operations":[]}`, `"format" is "jepsen"`},
		{"missing version", `{"format":"mu-kv-history","operations":[]}`, `missing field "version"`},
		{"future version", `{"format":"mu-kv-history","version":2,"operations":[]}`, "unsupported version 2"},
		{"version is a string", `{"format":"mu-kv-history","version":"1","operations":[]}`,
			`field "version" holds a JSON string, want an integer`},
		{"missing operations", `{"format":"mu-kv-history","version":1}`, `missing field "operations"`},
		{"null operations", `{"format":"mu-kv-history","version":1,"operations":null}`, `missing field "operations"`},
		{"unknown top-level field", `{"format":"mu-kv-history","version":1,"operations":[],"seed":3}`,
			`unknown field "seed"`},
		{"operation is not an object", wrap(`42`), "operation 0:"},
		{"unknown op", wrap(`{"client":0,"op":"incr","key":"k","invoke_ns":0,"return_ns":1}`),
			`operation 0: unknown op "incr"`},
		{"missing client", wrap(`{"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1}`),
			`missing field "client"`},
		{"negative client", wrap(`{"client":-1,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1}`),
			`"client" is -1`},
		{"missing op", wrap(`{"client":0,"key":"k","invoke_ns":0,"return_ns":1}`), `missing field "op"`},
		{"missing key", wrap(`{"client":0,"op":"get","invoke_ns":0,"return_ns":1,"result":null}`),
			`missing field "key"`},
		{"key is a number", wrap(`{"client":0,"op":"get","key":7,"invoke_ns":0,"return_ns":1,"result":null}`),
			`field "key" holds a JSON number, want a string`},
		{"missing invoke_ns", wrap(`{"client":0,"op":"put","key":"k","value":"v","return_ns":1}`),
			`missing field "invoke_ns"`},
		{"fractional invoke_ns", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":1.5,"return_ns":2}`),
			`"invoke_ns"`},
		{"negative invoke_ns", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":-5,"return_ns":2}`),
			`"invoke_ns" is -5`},
		{"missing return_ns", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0}`),
			`missing field "return_ns" (write null when the outcome is unknown)`},
		{"return_ns is a string", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":"1"}`),
			`"return_ns" is "1", want an integer or null`},
		{"return before invoke", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":9,"return_ns":3}`),
			"operation 0: returns before it was invoked (return_ns 3 < invoke_ns 9)"},
		{"return_ns at the unknown sentinel",
			wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":9223372036854775807}`),
			"want less than 2^63-1"},
		{"put without value", wrap(`{"client":0,"op":"put","key":"k","invoke_ns":0,"return_ns":1}`),
			`put needs field "value"`},
		{"get with value", wrap(`{"client":0,"op":"get","key":"k","value":"v","invoke_ns":0,"return_ns":1,"result":null}`),
			`get takes no field "value"`},
		{"cas without expected", wrap(`{"client":0,"op":"cas","key":"k","value":"v","invoke_ns":0,"return_ns":1,"result":true}`),
			`cas needs field "expected"`},
		{"cas expected is a number",
			wrap(`{"client":0,"op":"cas","key":"k","value":"v","expected":3,"invoke_ns":0,"return_ns":1,"result":true}`),
			`"expected" is 3, want a string or null`},
		{"put with expected", wrap(`{"client":0,"op":"put","key":"k","value":"v","expected":null,"invoke_ns":0,"return_ns":1}`),
			`put takes no field "expected"`},
		{"get without result", wrap(`{"client":0,"op":"get","key":"k","invoke_ns":0,"return_ns":1}`),
			`get needs field "result"`},
		{"get result is a boolean", wrap(`{"client":0,"op":"get","key":"k","invoke_ns":0,"return_ns":1,"result":true}`),
			`"result" of a get is true, want a string or null`},
		{"put with a result", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1,"result":"ok"}`),
			`"result" of a put is "ok"`},
		{"delete without result", wrap(`{"client":0,"op":"delete","key":"k","invoke_ns":0,"return_ns":1}`),
			`delete needs field "result": true or false, whether the key existed`},
		{"cas result is a string",
			wrap(`{"client":0,"op":"cas","key":"k","value":"v","expected":null,"invoke_ns":0,"return_ns":1,"result":"yes"}`),
			`"result" of a cas is "yes", want true or false (whether the swap happened)`},
		{"unknown outcome with a result",
			wrap(`{"client":0,"op":"cas","key":"k","value":"v","expected":null,"invoke_ns":0,"return_ns":null,"result":true}`),
			"has a result but return_ns is null"},
		{"misspelt field", wrap(`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1,"reslt":null}`),
			`operation 0: json: unknown field "reslt"`},
		{"error names the right operation", wrap(
			`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1},` +
				`{"client":0,"op":"put","key":"k","value":"v","invoke_ns":0,"return_ns":1},` +
				`{"client":0,"op":"get","key":"k","invoke_ns":5,"return_ns":1,"result":null}`),
			"operation 2: returns before it was invoked"},
	}
	for _, c := range cases {
		_, err := parseHistory([]byte(c.input))
		if err == nil {
			t.Errorf("%s: accepted, want an error containing %q", c.name, c.message)
			continue
		}
		var inputErr *inputError
		if !errors.As(err, &inputErr) {
			t.Errorf("%s: error %v is not an input error", c.name, err)
		}
		if !strings.Contains(err.Error(), c.message) {
			t.Errorf("%s: error %q does not contain %q", c.name, err.Error(), c.message)
		}
	}
}

func TestParseReadsEveryFieldAndDropsUnknownReads(t *testing.T) {
	parsed, err := parseHistory([]byte(`{"format":"mu-kv-history","version":1,"source":"test","operations":[
		{"client":7,"op":"cas","key":"k","expected":null,"value":"v","invoke_ns":10,"return_ns":10,"result":true},
		{"client":8,"op":"cas","key":"k","expected":"v","value":"w","invoke_ns":11,"return_ns":null},
		{"client":9,"op":"get","key":"j","invoke_ns":12,"return_ns":null},
		{"client":9,"op":"get","key":"k","invoke_ns":13,"return_ns":20,"result":"w"},
		{"client":9,"op":"delete","key":"k","invoke_ns":21,"return_ns":22,"result":true},
		{"client":9,"op":"put","key":"k","value":"","invoke_ns":23,"return_ns":24,"result":null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if parsed.source != "test" || parsed.operationsInFile != 6 || len(parsed.operations) != 5 ||
		parsed.unknownWrites != 1 || parsed.unknownReadsDropped != 1 || parsed.clients != 3 || parsed.keys != 2 {
		t.Fatalf("unexpected counts: %+v", parsed)
	}
	first := parsed.operations[0]
	if first.index != 0 || first.client != 7 || first.input != (kvInput{kind: opCas, key: "k", value: "v"}) ||
		first.output != (kvOutput{swapped: true}) || first.invokeNs != 10 || first.returnNs != 10 {
		t.Errorf("first operation parsed as %+v", first)
	}
	second := parsed.operations[1]
	if second.input != (kvInput{kind: opCas, key: "k", value: "w", expected: "v", expectedPresent: true}) ||
		!second.output.unknown || second.returnNs != returnNsUnknown {
		t.Errorf("unknown-outcome cas parsed as %+v", second)
	}
	third := parsed.operations[2]
	if third.index != 3 || third.output != (kvOutput{found: true, value: "w"}) {
		t.Errorf("get parsed as %+v (the unknown get before it must be dropped, keeping file indexes)", third)
	}
	if parsed.operations[3].output != (kvOutput{existed: true}) {
		t.Errorf("delete parsed as %+v", parsed.operations[3])
	}
	if put := parsed.operations[4]; put.input.value != "" || put.input.kind != opPut {
		t.Errorf("put of the empty string parsed as %+v", put)
	}
}

// Bad input must give an input error, never a panic: mutate a valid history at random bytes.
func TestParseNeverPanicsOnMutatedInput(t *testing.T) {
	valid, err := os.ReadFile("testdata/linearizable_unknown_outcome.json")
	if err != nil {
		t.Fatal(err)
	}
	random := rand.New(rand.NewSource(3))
	alphabet := []byte(`{}[]":,0123456789-.enulltruefalse kv\`)
	for round := 0; round < 20000; round++ {
		mutated := append([]byte(nil), valid...)
		for edits := 1 + random.Intn(4); edits > 0; edits-- {
			position := random.Intn(len(mutated))
			switch random.Intn(3) {
			case 0:
				mutated[position] = alphabet[random.Intn(len(alphabet))]
			case 1:
				mutated = append(mutated[:position], mutated[position+1:]...)
			case 2:
				mutated = mutated[:position]
			}
			if len(mutated) == 0 {
				break
			}
		}
		parseAndCheck(t, mutated)
	}
}

// parseAndCheck runs the whole pipeline; the deferred recover turns a panic into a test failure
// that shows the input.
func parseAndCheck(t *testing.T, data []byte) {
	defer func() {
		if recovered := recover(); recovered != nil {
			t.Fatalf("panic %v on input:\n%s", recovered, data)
		}
	}()
	parsed, err := parseHistory(data)
	if err != nil {
		var inputErr *inputError
		if !errors.As(err, &inputErr) {
			t.Fatalf("error %v is not an input error on input:\n%s", err, data)
		}
		return
	}
	checkHistory(parsed, 0)
}

func FuzzParseHistory(f *testing.F) {
	for _, name := range []string{"linearizable_sequential.json", "linearizable_unknown_outcome.json",
		"not_linearizable_cas.json", "bad_malformed.json"} {
		data, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		parseAndCheck(t, data)
	})
}
