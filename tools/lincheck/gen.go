package main

// A generator of random linearizable histories, for tests and for measuring the checker
// (`lincheck gen`). Clients run operations against one sequential map; each operation takes
// effect at one instant between its invocation and its return, so the history is linearizable
// by construction, with as many operations overlapping as there are clients.

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
)

type generatorConfig struct {
	operations int
	keys       int
	clients    int
	seed       int64
	// unknownPerMille is how often (per thousand operations) a client crashes with an operation
	// in flight: the operation's outcome is unknown (return_ns null), and it took effect or not
	// at random. The client comes back under a new id, as a recorder must do.
	unknownPerMille int
}

func defaultGeneratorConfig() generatorConfig {
	return generatorConfig{operations: 100000, keys: 100, clients: 16, seed: 1, unknownPerMille: 2}
}

type clientPhase uint8

const (
	phaseIdle    clientPhase = iota
	phaseInvoked             // invoked, not yet taken effect
	phaseApplied             // taken effect, not yet returned
)

type generatedClient struct {
	id      int64
	phase   clientPhase
	pending wireOperation
}

// generateHistory returns the operations of a random linearizable history, in the order they
// returned (crashed operations where they crashed).
func generateHistory(config generatorConfig) []wireOperation {
	random := rand.New(rand.NewSource(config.seed))
	store := make(map[string]string)
	clients := make([]generatedClient, config.clients)
	for i := range clients {
		clients[i].id = int64(i)
	}
	nextClientId := int64(config.clients)
	operations := make([]wireOperation, 0, config.operations)
	started := 0
	inFlight := 0
	timeNs := int64(1000)
	for started < config.operations || inFlight > 0 {
		timeNs += 1 + random.Int63n(20)
		client := &clients[random.Intn(len(clients))]
		switch client.phase {
		case phaseIdle:
			if started == config.operations {
				continue
			}
			client.pending = newRandomOperation(random, config, store, started, client.id, timeNs)
			client.phase = phaseInvoked
			started++
			inFlight++
		case phaseInvoked:
			if random.Intn(1000) < config.unknownPerMille {
				// Crashed before the operation took effect.
				operations = append(operations, crash(client, &nextClientId))
				inFlight--
				continue
			}
			applyOperation(store, &client.pending)
			client.phase = phaseApplied
		case phaseApplied:
			if random.Intn(1000) < config.unknownPerMille {
				// Crashed after the operation took effect, before the client heard.
				operations = append(operations, crash(client, &nextClientId))
				inFlight--
				continue
			}
			returnNs := timeNs
			client.pending.ReturnNs = mustMarshal(returnNs)
			operations = append(operations, client.pending)
			client.phase = phaseIdle
			inFlight--
		}
	}
	return operations
}

// crash ends the client's pending operation with an unknown outcome and gives the client a new id.
func crash(client *generatedClient, nextClientId *int64) wireOperation {
	op := client.pending
	op.ReturnNs = json.RawMessage("null")
	op.Result = nil
	client.id = *nextClientId
	*nextClientId++
	client.phase = phaseIdle
	return op
}

func newRandomOperation(random *rand.Rand, config generatorConfig, store map[string]string,
	sequence int, clientId int64, invokeNs int64) wireOperation {
	key := fmt.Sprintf("k%d", random.Intn(config.keys))
	// Every written value is unique, so a test can tell which write a read saw.
	value := fmt.Sprintf("v%d", sequence)
	op := wireOperation{Client: &clientId, Key: &key, InvokeNs: &invokeNs}
	roll := random.Intn(100)
	switch {
	case roll < 40:
		op.Op = stringPointer("get")
	case roll < 70:
		op.Op = stringPointer("put")
		op.Value = &value
	case roll < 80:
		op.Op = stringPointer("delete")
	default:
		op.Op = stringPointer("cas")
		op.Value = &value
		// Expect what the key holds now (it may change before the cas takes effect), absent,
		// or a value it never held.
		current, present := store[key]
		switch choice := random.Intn(10); {
		case choice < 6 && present:
			op.Expected = mustMarshal(current)
		case choice < 8:
			op.Expected = json.RawMessage("null")
		default:
			op.Expected = mustMarshal(fmt.Sprintf("never-%d", sequence))
		}
	}
	return op
}

// applyOperation runs the operation on the sequential store and records the result it returns.
func applyOperation(store map[string]string, op *wireOperation) {
	key := *op.Key
	current, present := store[key]
	switch *op.Op {
	case "get":
		if present {
			op.Result = mustMarshal(current)
		} else {
			op.Result = json.RawMessage("null")
		}
	case "put":
		store[key] = *op.Value
	case "delete":
		delete(store, key)
		op.Result = mustMarshal(present)
	case "cas":
		var expected *string
		if !isNull(op.Expected) {
			expected = new(string)
			if err := json.Unmarshal(op.Expected, expected); err != nil {
				panic(err) // the generator wrote it
			}
		}
		swapped := (expected == nil && !present) || (expected != nil && present && *expected == current)
		if swapped {
			store[key] = *op.Value
		}
		op.Result = mustMarshal(swapped)
	}
}

// writeHistory writes operations as a history file, one operation per line.
func writeHistory(writer io.Writer, source string, operations []wireOperation) error {
	header, err := json.Marshal(struct {
		Format  string `json:"format"`
		Version int    `json:"version"`
		Source  string `json:"source,omitempty"`
	}{historyFormat, historyVersion, source})
	if err != nil {
		return err
	}
	// Reopen the header object to append the operations array.
	if _, err := fmt.Fprintf(writer, "%s,\"operations\":[\n", header[:len(header)-1]); err != nil {
		return err
	}
	for i := range operations {
		line, err := json.Marshal(&operations[i])
		if err != nil {
			return err
		}
		separator := ",\n"
		if i == len(operations)-1 {
			separator = "\n"
		}
		if _, err := fmt.Fprintf(writer, "%s%s", line, separator); err != nil {
			return err
		}
	}
	_, err = io.WriteString(writer, "]}\n")
	return err
}

func mustMarshal(value interface{}) json.RawMessage {
	data, err := json.Marshal(value)
	if err != nil {
		panic(err) // only called with strings, booleans and integers
	}
	return data
}

func stringPointer(text string) *string { return &text }
