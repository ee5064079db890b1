// Command lincheck checks that a key-value client history is linearizable, with porcupine,
// partitioned by key. The history format and the model are described in
// docs/verification/linearizability.md.
//
//	lincheck [--timeout 30s] [--html out.html] [--quiet] history.json
//	lincheck gen [--ops N] [--keys K] [--clients C] [--seed S] [--unknown-per-mille U] > history.json
//
// Exit status: 0 linearizable, 1 not linearizable, 2 bad input or usage, 3 unknown (the check
// ran out of time).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

const (
	exitLinearizable    = 0
	exitNotLinearizable = 1
	exitBadInput        = 2
	exitUnknown         = 3

	// stuckOperationsShown bounds the operations listed per failing key.
	stuckOperationsShown = 8
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run is the whole command, apart from the process exit, so tests can call it.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "gen" {
		return runGenerate(args[1:], stdout, stderr)
	}
	return runCheck(args, stdin, stdout, stderr)
}

// parseInterspersed parses flags that may come before or after the positional arguments.
func parseInterspersed(flags *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := flags.Parse(args); err != nil {
			return nil, err
		}
		args = flags.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

func runCheck(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	flags := flag.NewFlagSet("lincheck", flag.ContinueOnError)
	flags.SetOutput(stderr)
	timeout := flags.Duration("timeout", 30*time.Second,
		"give up after this long and report \"unknown\" (0: no limit)")
	htmlPath := flags.String("html", "",
		"write porcupine's visualization of the history (and of the violation, if any) to this file")
	quiet := flags.Bool("quiet", false, "print only the summary line")
	flags.Usage = func() {
		fmt.Fprintf(stderr, "usage: lincheck [--timeout 30s] [--html out.html] [--quiet] HISTORY.json\n"+
			"       lincheck gen [flags] > HISTORY.json   (random linearizable history; gen -h)\n"+
			"Checks a mu-kv-history file for linearizability (HISTORY may be - for stdin).\n"+
			"Exit status: 0 linearizable, 1 not linearizable, 2 bad input, 3 unknown (timed out).\n")
		flags.PrintDefaults()
	}
	positional, err := parseInterspersed(flags, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitLinearizable
		}
		return exitBadInput
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "lincheck: want exactly one history file, got %d arguments\n", len(positional))
		flags.Usage()
		return exitBadInput
	}
	if *timeout < 0 {
		fmt.Fprintf(stderr, "lincheck: --timeout must not be negative\n")
		return exitBadInput
	}
	path := positional[0]

	var input io.Reader = stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "lincheck: %v\n", err)
			return exitBadInput
		}
		defer file.Close()
		input = file
	}
	parsed, err := readHistory(input)
	if err != nil {
		fmt.Fprintf(stderr, "lincheck: %s: bad history: %v\n", path, err)
		return exitBadInput
	}

	report := checkHistory(parsed, *timeout)
	fmt.Fprintln(stdout, summaryLine(path, parsed, report))
	if !*quiet {
		printFailures(stdout, report)
	}

	if *htmlPath != "" {
		if err := porcupine.VisualizePath(kvModel, report.info, *htmlPath); err != nil {
			fmt.Fprintf(stderr, "lincheck: cannot write the visualization: %v\n", err)
			return exitBadInput
		}
		if !*quiet {
			fmt.Fprintf(stdout, "visualization written to %s\n", *htmlPath)
		}
	}

	switch report.result {
	case porcupine.Ok:
		return exitLinearizable
	case porcupine.Illegal:
		return exitNotLinearizable
	}
	return exitUnknown
}

func summaryLine(path string, parsed *history, report checkReport) string {
	var verdict string
	switch report.result {
	case porcupine.Ok:
		verdict = "linearizable"
	case porcupine.Illegal:
		verdict = fmt.Sprintf("NOT LINEARIZABLE (%d of %d keys)", len(report.failures), report.keys)
	default:
		verdict = "UNKNOWN (timed out; no violation found so far)"
	}
	var details []string
	if parsed.unknownWrites > 0 {
		details = append(details, plural(parsed.unknownWrites, "write")+" with unknown outcome")
	}
	if parsed.unknownReadsDropped > 0 {
		details = append(details, plural(parsed.unknownReadsDropped, "read")+" with unknown outcome dropped")
	}
	counts := plural(parsed.operationsInFile, "operation")
	if len(details) > 0 {
		counts += " (" + strings.Join(details, ", ") + ")"
	}
	source := ""
	if parsed.source != "" {
		source = fmt.Sprintf(" [%s]", parsed.source)
	}
	return fmt.Sprintf("lincheck: %s%s: %s, %s, %s: %s in %.3fs", path, source, counts,
		plural(parsed.keys, "key"), plural(parsed.clients, "client"), verdict, report.elapsed.Seconds())
}

func plural(count int, noun string) string {
	if count == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", count, noun)
}

func printFailures(out io.Writer, report checkReport) {
	for _, failure := range report.failures {
		note := ""
		if failure.maybeUnfinished {
			note = " (the check also timed out: this key may only be unfinished)"
		}
		fmt.Fprintf(out, "key %s: %s, longest linearizable prefix %d, state after it %s%s\n",
			quote(failure.key), plural(failure.operations, "operation"), len(failure.longestPrefix),
			describeState(failure.stateAfterPrefix), note)
		if n := len(failure.longestPrefix); n > 0 {
			last := failure.longestPrefix[n-1]
			fmt.Fprintf(out, "  last operation of that prefix: %s\n", describePorcupineOperation(last))
		}
		fmt.Fprintf(out, "  %s could not be linearized after it (earliest return first):\n",
			plural(len(failure.stuck), "operation"))
		for i, op := range failure.stuck {
			if i == stuckOperationsShown {
				fmt.Fprintf(out, "    ... and %d more\n", len(failure.stuck)-stuckOperationsShown)
				break
			}
			fmt.Fprintf(out, "    %s\n", describePorcupineOperation(op))
		}
	}
}

func describePorcupineOperation(op porcupine.Operation) string {
	meta := op.Metadata.(operationMetadata)
	return fmt.Sprintf("operation %d, client %d, [%d, %s]: %s", meta.index, meta.client,
		op.Call, describeTime(op.Return), describeOperation(op.Input.(kvInput), op.Output.(kvOutput)))
}

func runGenerate(args []string, stdout, stderr io.Writer) int {
	config := defaultGeneratorConfig()
	flags := flag.NewFlagSet("lincheck gen", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.IntVar(&config.operations, "ops", config.operations, "operations in the history")
	flags.IntVar(&config.keys, "keys", config.keys, "distinct keys")
	flags.IntVar(&config.clients, "clients", config.clients, "clients running at once")
	flags.Int64Var(&config.seed, "seed", config.seed, "random seed")
	flags.IntVar(&config.unknownPerMille, "unknown-per-mille", config.unknownPerMille,
		"per thousand operation steps, how often a client crashes with an operation in flight")
	flags.Usage = func() {
		fmt.Fprintf(stderr, "usage: lincheck gen [flags] > HISTORY.json\n"+
			"Writes a random linearizable mu-kv-history to stdout.\n")
		flags.PrintDefaults()
	}
	positional, err := parseInterspersed(flags, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitLinearizable
		}
		return exitBadInput
	}
	if len(positional) != 0 || config.operations < 0 || config.keys < 1 || config.clients < 1 ||
		config.unknownPerMille < 0 || config.unknownPerMille > 1000 {
		flags.Usage()
		return exitBadInput
	}
	source := fmt.Sprintf("lincheck gen --ops %d --keys %d --clients %d --seed %d --unknown-per-mille %d",
		config.operations, config.keys, config.clients, config.seed, config.unknownPerMille)
	if err := writeHistory(stdout, source, generateHistory(config)); err != nil {
		fmt.Fprintf(stderr, "lincheck gen: %v\n", err)
		return exitBadInput
	}
	return exitLinearizable
}
