package main

// The history file format ("mu-kv-history", version 1): parsing and validation.
// docs/verification/linearizability.md is the reference for the format; keep the two in step.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
)

const (
	historyFormat  = "mu-kv-history"
	historyVersion = 1

	// returnNsUnknown is the return time given to a write whose outcome is unknown: it may take
	// effect at any moment after its invocation, or never (linearized after everything else).
	returnNsUnknown = int64(math.MaxInt64)
)

// wireHistory is the top-level JSON object. Pointers and raw messages let validation tell a
// missing field from a null one.
type wireHistory struct {
	Format     *string           `json:"format"`
	Version    *int              `json:"version"`
	Source     string            `json:"source,omitempty"`
	Operations []json.RawMessage `json:"operations"`
}

// wireOperation is one element of "operations", exactly as written in the file.
type wireOperation struct {
	Client   *int64          `json:"client"`
	Op       *string         `json:"op"`
	Key      *string         `json:"key"`
	Value    *string         `json:"value,omitempty"`
	Expected json.RawMessage `json:"expected,omitempty"`
	InvokeNs *int64          `json:"invoke_ns"`
	// ReturnNs is null (not absent) when the outcome is unknown.
	ReturnNs json.RawMessage `json:"return_ns"`
	Result   json.RawMessage `json:"result,omitempty"`
}

type opKind uint8

const (
	opGet opKind = iota
	opPut
	opDelete
	opCas
)

func (kind opKind) String() string {
	switch kind {
	case opGet:
		return "get"
	case opPut:
		return "put"
	case opDelete:
		return "delete"
	case opCas:
		return "cas"
	}
	return "invalid"
}

func parseOpKind(name string) (opKind, bool) {
	switch name {
	case "get":
		return opGet, true
	case "put":
		return opPut, true
	case "delete":
		return opDelete, true
	case "cas":
		return opCas, true
	}
	return opGet, false
}

// kvInput is what a client asked for. Comparable, so porcupine can hold it as an interface value.
type kvInput struct {
	kind  opKind
	key   string
	value string // put: the value written; cas: the new value
	// cas only: expectedPresent false means "swap only if the key is absent".
	expected        string
	expectedPresent bool
}

// kvOutput is what the client was told. Exactly one of the result fields is meaningful, chosen by
// the operation's kind; none is when unknown is set.
type kvOutput struct {
	unknown bool
	found   bool   // get: the key was present
	value   string // get: the value read, when found
	existed bool   // delete: the key was present before the delete
	swapped bool   // cas: the swap happened
}

// operation is one validated operation of a history.
type operation struct {
	index    int   // position in the file's "operations" array, for reports
	client   int64 // client id as written in the file
	input    kvInput
	output   kvOutput
	invokeNs int64
	returnNs int64 // returnNsUnknown when the outcome is unknown
}

// history is a validated history, ready to check.
type history struct {
	source string
	// operations holds every operation that takes part in the check: reads with an unknown
	// outcome are left out (they constrain nothing).
	operations          []operation
	operationsInFile    int
	unknownWrites       int
	unknownReadsDropped int
	clients             int
	keys                int
}

// inputError is a problem with the history file; the command exits with status 2 on one.
type inputError struct {
	message string
}

func (err *inputError) Error() string { return err.message }

func inputErrorf(format string, args ...interface{}) error {
	return &inputError{message: fmt.Sprintf(format, args...)}
}

// readHistory reads and validates a whole history. Every error it returns is an *inputError.
func readHistory(reader io.Reader) (*history, error) {
	data, err := io.ReadAll(reader)
	if err != nil {
		return nil, inputErrorf("cannot read history: %v", err)
	}
	return parseHistory(data)
}

func parseHistory(data []byte) (*history, error) {
	var wire wireHistory
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&wire); err != nil {
		return nil, inputErrorf("malformed history JSON: %s", describeJSONError(data, err))
	}
	if _, err := decoder.Token(); err != io.EOF {
		return nil, inputErrorf("malformed history JSON: unexpected data after the top-level object")
	}
	if wire.Format == nil {
		return nil, inputErrorf("missing field \"format\" (want %q)", historyFormat)
	}
	if *wire.Format != historyFormat {
		return nil, inputErrorf("field \"format\" is %q, want %q", *wire.Format, historyFormat)
	}
	if wire.Version == nil {
		return nil, inputErrorf("missing field \"version\" (want %d)", historyVersion)
	}
	if *wire.Version != historyVersion {
		return nil, inputErrorf("unsupported version %d (this checker reads version %d)",
			*wire.Version, historyVersion)
	}
	if wire.Operations == nil {
		return nil, inputErrorf("missing field \"operations\" (an array; it may be empty)")
	}

	parsed := &history{source: wire.Source, operationsInFile: len(wire.Operations)}
	parsed.operations = make([]operation, 0, len(wire.Operations))
	clients := make(map[int64]struct{})
	keys := make(map[string]struct{})
	for index, raw := range wire.Operations {
		op, err := parseOperation(index, raw)
		if err != nil {
			return nil, err
		}
		clients[op.client] = struct{}{}
		keys[op.input.key] = struct{}{}
		if op.output.unknown {
			if op.input.kind == opGet {
				parsed.unknownReadsDropped++
				continue
			}
			parsed.unknownWrites++
		}
		parsed.operations = append(parsed.operations, op)
	}
	parsed.clients = len(clients)
	parsed.keys = len(keys)
	return parsed, nil
}

func parseOperation(index int, raw json.RawMessage) (operation, error) {
	fail := func(format string, args ...interface{}) (operation, error) {
		return operation{}, inputErrorf("operation %d: %s", index, fmt.Sprintf(format, args...))
	}
	var wire wireOperation
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&wire); err != nil {
		return fail("%s", describeJSONError(raw, err))
	}

	if wire.Client == nil {
		return fail("missing field \"client\"")
	}
	if *wire.Client < 0 {
		return fail("field \"client\" is %d, want a non-negative integer", *wire.Client)
	}
	if wire.Op == nil {
		return fail("missing field \"op\"")
	}
	kind, known := parseOpKind(*wire.Op)
	if !known {
		return fail("unknown op %q (want \"get\", \"put\", \"delete\" or \"cas\")", *wire.Op)
	}
	if wire.Key == nil {
		return fail("missing field \"key\"")
	}
	if wire.InvokeNs == nil {
		return fail("missing field \"invoke_ns\"")
	}
	if *wire.InvokeNs < 0 || *wire.InvokeNs >= returnNsUnknown {
		return fail("field \"invoke_ns\" is %d, want 0 <= invoke_ns < 2^63-1", *wire.InvokeNs)
	}
	if wire.ReturnNs == nil {
		return fail("missing field \"return_ns\" (write null when the outcome is unknown)")
	}

	op := operation{
		index:    index,
		client:   *wire.Client,
		input:    kvInput{kind: kind, key: *wire.Key},
		invokeNs: *wire.InvokeNs,
		returnNs: returnNsUnknown,
	}
	if isNull(wire.ReturnNs) {
		op.output.unknown = true
	} else {
		var returnNs int64
		if err := json.Unmarshal(wire.ReturnNs, &returnNs); err != nil {
			return fail("field \"return_ns\" is %s, want an integer or null", string(wire.ReturnNs))
		}
		if returnNs >= returnNsUnknown {
			return fail("field \"return_ns\" is %d, want less than 2^63-1", returnNs)
		}
		if returnNs < op.invokeNs {
			return fail("returns before it was invoked (return_ns %d < invoke_ns %d)",
				returnNs, op.invokeNs)
		}
		op.returnNs = returnNs
	}

	// The value: the new value of a put or cas; nothing else carries one.
	switch kind {
	case opPut, opCas:
		if wire.Value == nil {
			return fail("%s needs field \"value\" (a string)", kind)
		}
		op.input.value = *wire.Value
	default:
		if wire.Value != nil {
			return fail("%s takes no field \"value\"", kind)
		}
	}

	// The expected value: cas only, a string or null for "absent".
	if kind == opCas {
		if wire.Expected == nil {
			return fail("cas needs field \"expected\" (a string, or null for \"key absent\")")
		}
		if !isNull(wire.Expected) {
			if err := json.Unmarshal(wire.Expected, &op.input.expected); err != nil {
				return fail("field \"expected\" is %s, want a string or null", string(wire.Expected))
			}
			op.input.expectedPresent = true
		}
	} else if wire.Expected != nil {
		return fail("%s takes no field \"expected\"", kind)
	}

	// The result.
	if op.output.unknown {
		if wire.Result != nil && !isNull(wire.Result) {
			return fail("has a result but return_ns is null (unknown outcome); drop the result or " +
				"give the return time")
		}
		return op, nil
	}
	switch kind {
	case opGet:
		if wire.Result == nil {
			return fail("get needs field \"result\" (the value read, or null when the key was absent)")
		}
		if !isNull(wire.Result) {
			if err := json.Unmarshal(wire.Result, &op.output.value); err != nil {
				return fail("field \"result\" of a get is %s, want a string or null", string(wire.Result))
			}
			op.output.found = true
		}
	case opPut:
		if wire.Result != nil && !isNull(wire.Result) {
			return fail("field \"result\" of a put is %s, want null or no field", string(wire.Result))
		}
	case opDelete, opCas:
		meaning := "whether the key existed"
		target := &op.output.existed
		if kind == opCas {
			meaning = "whether the swap happened"
			target = &op.output.swapped
		}
		if wire.Result == nil || isNull(wire.Result) {
			return fail("%s needs field \"result\": true or false, %s", kind, meaning)
		}
		if err := json.Unmarshal(wire.Result, target); err != nil {
			return fail("field \"result\" of a %s is %s, want true or false (%s)",
				kind, string(wire.Result), meaning)
		}
	}
	return op, nil
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// describeJSONError turns a decoding error into a message with a line and column where the
// decoder gives an offset.
func describeJSONError(data []byte, err error) string {
	var syntaxError *json.SyntaxError
	if errors.As(err, &syntaxError) {
		line, column := lineColumn(data, syntaxError.Offset)
		return fmt.Sprintf("%v (line %d, column %d)", err, line, column)
	}
	var typeError *json.UnmarshalTypeError
	if errors.As(err, &typeError) {
		field := typeError.Field
		if field == "" {
			field = "top level"
		}
		return fmt.Sprintf("field %q holds a JSON %s, want %s", field, typeError.Value,
			describeGoType(typeError.Type.Kind().String()))
	}
	if err == io.EOF {
		return "empty input"
	}
	if err == io.ErrUnexpectedEOF {
		return "unexpected end of input"
	}
	// Unknown fields ("json: unknown field \"x\"") and the rest are clear as they are.
	return err.Error()
}

func describeGoType(kind string) string {
	switch kind {
	case "int", "int64":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct":
		return "an object"
	}
	return kind
}

func lineColumn(data []byte, offset int64) (int, int) {
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	line, column := 1, 1
	for _, b := range data[:offset] {
		if b == '\n' {
			line++
			column = 1
		} else {
			column++
		}
	}
	return line, column
}

// sortedKeys returns the distinct keys of the operations, sorted.
func sortedKeys(operations []operation) []string {
	seen := make(map[string]struct{})
	for i := range operations {
		seen[operations[i].input.key] = struct{}{}
	}
	keys := make([]string, 0, len(seen))
	for key := range seen {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
